package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/reward"
)

// rewardProgram is the reward.command of the test program
// (testdata/reward_contains.py), with its arguments.
func rewardProgram(t *testing.T, args ...string) string {
	t.Helper()
	script, err := filepath.Abs("testdata/reward_contains.py")
	if err != nil {
		t.Fatal(err)
	}
	return "reward.command=[" + strings.Join(append([]string{"python3", script}, args...), ", ") + "]"
}

// eachRollout calls fn with every line of a run's rollouts logs, steps 1
// to steps.
func eachRollout(t *testing.T, runDir string, steps int, fn func(step int, l rolloutLine)) {
	t.Helper()
	for step := 1; step <= steps; step++ {
		f, err := os.Open(filepath.Join(runDir, "rollouts", checkpointName(step)+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l rolloutLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			fn(step, l)
		}
		f.Close()
	}
}

// TestCommandRewardTrains: with reward.kind command the program's rewards
// are the rollouts' (every rollout's reward, verdict and reason in the
// rollouts log are the program's), and a run resumes bit for bit.
func TestCommandRewardTrains(t *testing.T) {
	sets := []string{"reward.kind=command", rewardProgram(t), "log.rollouts=true"}
	straight, _ := runStraightAndResumed(t, []string{"model.safetensors", stateFile}, sets...)
	problems, err := ReadProblems(straight.Data.Train, straight.Data)
	if err != nil {
		t.Fatal(err)
	}
	answer := map[string]string{}
	for _, p := range problems {
		answer[p.ID] = p.Answer
	}
	rolls, rewarded := 0, 0
	eachRollout(t, straight.RunDir, 4, func(step int, l rolloutLine) {
		want := strings.Contains(l.Response, answer[l.ProblemID])
		if l.Correct != want || (l.Reward == 1) != want || !strings.HasSuffix(l.Reason, answer[l.ProblemID]) {
			t.Fatalf("step %d, %s: reward %v correct %v reason %q for %q (answer %s)", step, l.ProblemID, l.Reward, l.Correct, l.Reason, l.Response, answer[l.ProblemID])
		}
		rolls++
		if want {
			rewarded++
		}
	})
	if rolls == 0 || rewarded == 0 || rewarded == rolls {
		t.Fatalf("%d of %d rollouts rewarded: the test sees no variance", rewarded, rolls)
	}
}

// TestCommandRewardFailures: a program that fails every batch stops the
// step with its error (reward.on_error fail), and under on_error zero a
// step where every reward failed stops the run too.
func TestCommandRewardFailures(t *testing.T) {
	for _, c := range []struct{ onError, want string }{
		{"fail", "told to fail"},
		{"zero", "every one of"},
	} {
		cfg := tinyConfig(t, "reward.kind=command", rewardProgram(t, "fail"), "reward.on_error="+c.onError, "total_steps=1")
		err := RunGRPO(context.Background(), cfg, "", RunOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "reward") {
			t.Errorf("on_error %s: %v, want an error with %q", c.onError, err, c.want)
		}
	}
	// Under on_error zero a failed batch scores 0 and is counted; the run
	// goes on.
	cfg := tinyConfig(t, "reward.kind=command", rewardProgram(t, "failodd"), "reward.on_error=zero", "reward.batch_size=4", "total_steps=1")
	runGRPO(t, cfg, "")
	m := stableMetrics(t, cfg.RunDir)
	if n := cfg.Rollout.PromptsPerStep * cfg.Rollout.SamplesPerPrompt; len(m) != 1 || m[0]["reward_errors"] != float64(n/2) {
		t.Errorf("every other batch of 4 failing: metrics %v, want reward_errors %d", m, n/2)
	}
	// The math verifier's bonus has no meaning for a user's reward.
	if _, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"reward.kind=command", rewardProgram(t), "algo.format_reward=0.1"}); err == nil || !strings.Contains(err.Error(), "algo.format_reward") {
		t.Errorf("format_reward with a command reward: %v", err)
	}
}

// TestCodeRewardTrains: with reward.kind code each rollout is run in the
// sandbox against its problem's tests (the rollouts log shows the
// sandbox's verdicts), and a run resumes bit for bit — verdicts depend on
// the program, not on the machine's load. The problems put the response
// on a comment line after a function that passes: a one-line response
// passes, one that spills onto the next line mostly does not compile.
func TestCodeRewardTrains(t *testing.T) {
	if _, err := reward.NewSandbox(reward.SandboxNamespaces, reward.DefaultCodeConfig()); err != nil {
		t.Fatalf("the code reward's sandbox: %v", err)
	}
	sets := []string{"reward.kind=code", "data.train=testdata/code_arith.jsonl", "log.rollouts=true", "rollout.max_new_tokens=24"}
	straight, _ := runStraightAndResumed(t, []string{"model.safetensors", stateFile}, sets...)
	rolls, passed := 0, 0
	eachRollout(t, straight.RunDir, 4, func(step int, l rolloutLine) {
		oneLine := !strings.Contains(l.Response, "\n")
		if l.Correct != (l.Reward == 1) || (oneLine && !l.Correct) || l.Reason == "" {
			t.Fatalf("step %d, %s: reward %v correct %v reason %q for %q", step, l.ProblemID, l.Reward, l.Correct, l.Reason, l.Response)
		}
		rolls++
		if l.Correct {
			passed++
		}
	})
	t.Logf("%d of %d rollouts passed", passed, rolls)
	if rolls == 0 || passed == 0 || passed == rolls {
		t.Fatalf("%d of %d rollouts passed: the test sees no variance", passed, rolls)
	}
}

// TestCodeConfigs: configs/code-*.yaml load as written, as code runs with
// the code prompt and LANPO's code prompts.
func TestCodeConfigs(t *testing.T) {
	for _, f := range []string{"../configs/code-grpo.yaml", "../configs/code-lanpo.yaml"} {
		cfg, err := LoadConfig(f, []string{"data.train=../configs/data/humaneval-train.jsonl", "eval.bench=[../configs/data/humaneval-heldout.jsonl]"})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := cfg.Resolve(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if cfg.Reward.Kind != reward.KindCode || cfg.Data.PromptTemplate != CodePromptTemplate || !cfg.LANPO.Code {
			t.Errorf("%s: reward %q, template %q, lanpo code %v", f, cfg.Reward.Kind, cfg.Data.PromptTemplate, cfg.LANPO.Code)
		}
		ps, err := ReadProblems(cfg.Data.Train, cfg.Data)
		if err != nil || len(ps) != 100 {
			t.Fatalf("%s: %d problems, %v", f, len(ps), err)
		}
		if _, err := reward.CodeTask(ps[0].Record, "    return []\n"); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
