package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/fsutil"
)

// userCase is one way a user first runs a command: the arguments after
// `lanpo` (with {tiny}, {ws} and {repo} replaced: the tiny model, the
// workspace the command runs in, the repository), its stdin, and text its
// output (stdout and stderr) must show. sized says why a flag departs from what a user must
// give: "" when the case passes only that (required flags, a positional
// argument), else the reason (a default that would take minutes here,
// or one the tiny model's 1024-token context cannot hold).
type userCase struct {
	args  []string
	stdin string
	sized string
	want  string
}

// userCases are the cases of every command and subcommand, in the order
// they run: later ones read what earlier ones wrote (the LANPO run's pool).
// TestEveryCommandAsAUserRunsIt fails when a command has no case.
var userCases = []struct {
	command string
	cases   []userCase
}{
	{"version", []userCase{{args: []string{"version"}, want: "lanpo "}}},
	{"env", []userCase{{args: []string{"env"}, want: "libtorch "}}},
	{"verify", []userCase{{args: []string{"verify"}, stdin: `{"pred": "so $\\boxed{\\frac12}$", "gold": "0.5"}`, want: `"correct":true`}}},
	{"tokenize", []userCase{
		{args: []string{"tokenize", "--tokenizer", "{tiny}"}, stdin: `{"text": "What is 1 + 2?"}`, want: `{"ids":[`},
		{args: []string{"tokenize", "--tokenizer", "{tiny}", "--chat"}, stdin: `{"messages": [{"role": "user", "content": "1+1?"}]}`, want: `{"ids":[`},
	}},
	{"score", []userCase{{args: []string{"score", "--model", "{tiny}"}, stdin: `{"ids": [1, 2, 3]}`, want: `{"logprobs":[`}}},
	{"generate", []userCase{{args: []string{"generate", "--model", "{tiny}"}, stdin: `{"messages": [{"role": "user", "content": "What is 1 + 2?"}]}`, want: `"finish_reason"`}}},
	// A config naming only the model and the data: run_dir comes from the
	// file's name, total_steps is one pass over the data, sft.max_len the
	// model's context.
	{"sft", []userCase{{args: []string{"sft", "--config", "sft.yaml"}, want: "runs/sft/checkpoints/step-000008"}}},
	{"train", []userCase{
		{args: []string{"train", "--config", "grpo.yaml"}, sized: "rollout.max_new_tokens 32: the default 1024 and a prompt exceed the tiny model's 1024-token context",
			want: "runs/grpo/checkpoints/step-000001"},
		{args: []string{"train", "--config", "lanpo.yaml"}, sized: "rollout.max_new_tokens 32, as grpo.yaml", want: "runs/lanpo/checkpoints/step-000001"},
		{args: []string{"train", "--config", "grpo.yaml", "--dry-run"}, want: "total_steps: 1\n"},
		{args: []string{"train", "--config", "grpo.yaml", "--set", "lora.r=8", "--set", "run_dir=runs/lora"}, sized: "rollout.max_new_tokens 32, as grpo.yaml",
			want: "runs/lora/checkpoints/step-000001"},
	}},
	{"launch", []userCase{{args: []string{"launch", "--nproc-per-node", "2", "--", "train", "--config", "grpo.yaml", "--set", "run_dir=runs/launched"},
		sized: "rollout.max_new_tokens 32, as grpo.yaml", want: "runs/launched/checkpoints/step-000001"}}},
	{"pool", nil},
	{"pool stats", []userCase{{args: []string{"pool", "stats", "runs/lanpo"}, want: `"problems":8`}}},
	{"pool show", []userCase{{args: []string{"pool", "show", "--problem", "arith-1", "runs/lanpo"}, want: `"problem_id":"arith-1"`}}},
	{"pool query", []userCase{{args: []string{"pool", "query", "--text", "What is 7 + 5?", "runs/lanpo"}, want: `"bm25"`}}},
	// A GRPO run with its rollouts logged, then the pool they make.
	{"pool build", []userCase{
		{args: []string{"train", "--config", "grpo.yaml", "--set", "log.rollouts=true", "--set", "run_dir=runs/grpo-logged"},
			sized: "rollout.max_new_tokens 32, as grpo.yaml", want: "runs/grpo-logged/checkpoints/step-000001"},
		{args: []string{"pool", "build", "--config", "runs/grpo-logged/config.resolved.yaml", "--model", "runs/grpo-logged/checkpoints/step-000001",
			"--out", "grpo-pool.jsonl"}, want: `"entries":`}}},
	{"checkpoint", nil},
	{"checkpoint verify", []userCase{{args: []string{"checkpoint", "verify", "runs/lanpo"}, want: "step-000001: ok: "}}},
	{"eval", []userCase{{args: []string{"eval", "--model", "{tiny}", "--bench", "problems.jsonl", "--max-new-tokens", "32"},
		sized: "--max-new-tokens 32, as grpo.yaml", want: "results: runs/eval/tiny"},
		// A LoRA checkpoint as the model: its base from adapter_config.json.
		{args: []string{"eval", "--model", "runs/lora/checkpoints/step-000001", "--bench", "problems.jsonl", "--max-new-tokens", "32"},
			sized: "--max-new-tokens 32, as grpo.yaml", want: "results: runs/lora/eval/step-000001"},
		{args: []string{"eval", "--model", "{tiny}", "--adapter", "runs/lora/checkpoints/step-000001", "--bench", "problems.jsonl", "--max-new-tokens", "32",
			"--out", "runs/eval/adapter"}, sized: "--max-new-tokens 32, as grpo.yaml", want: "results: runs/eval/adapter"}}},
	{"export", []userCase{
		{args: []string{"export", "--merge", "runs/lora/checkpoints/step-000001", "merged"}, want: "merged: merged model"},
		{args: []string{"score", "--model", "merged"}, stdin: `{"ids": [1, 2, 3]}`, want: `{"logprobs":[`},
		{args: []string{"score", "--model", "{tiny}", "--adapter", "runs/lora/checkpoints/step-000001"}, stdin: `{"ids": [1, 2, 3]}`, want: `{"logprobs":[`},
		{args: []string{"generate", "--model", "runs/lora/checkpoints/step-000001"}, stdin: `{"prompt": "1+1="}`, want: `"finish_reason"`},
	}},
	{"seed", []userCase{{args: []string{"seed", "--model", "{tiny}", "--data", "problems.jsonl", "--out", "seed.jsonl", "--max-new-tokens", "32"},
		sized: "--max-new-tokens 32, as grpo.yaml", want: "statistics in seed.stats.json"}}},
	{"plan", []userCase{{args: []string{"plan", "--model", "{repo}/configs/models/qwen2.5-7b.json"}, want: "GiB"}}},
	{"demo", []userCase{{args: []string{"demo", "--fast", "--run-dir", "demo"}, sized: "--fast: the default demo takes 8 minutes", want: "report"}}},
	{"demo paired", []userCase{{args: []string{"demo", "paired", "--baseline", "grpo@demo", "--arm", "lanpo-consolidate@demo"}, want: "sign-flip p"}}},
	{"report", []userCase{{args: []string{"report", "runs/grpo"}, want: "report.html"}}},
	{"bench", nil},
	{"bench logprob", []userCase{{args: []string{"bench", "logprob", "--n", "64", "--hidden", "32", "--v", "256", "--reps", "1"},
		sized: "the Qwen2.5-0.5B shape (2048 × 896 × 151936) takes 30 s", want: "naive/fused"}}},
	{"bench grpo-step", []userCase{{args: []string{"bench", "grpo-step", "--shape", "{tiny}", "--steps", "1"},
		sized: "the tiny model's shape: a 0.5B step takes minutes", want: "peak memory"}}},
	{"bench forward", []userCase{{args: []string{"bench", "forward", "--shape", "{tiny}"}, sized: "the tiny model's shape", want: "tokens/s"}}},
	{"bench generate", []userCase{{args: []string{"bench", "generate", "--shape", "{tiny}"}, sized: "the tiny model's shape", want: "tokens/s"}}},
	{"bench tokenize", []userCase{{args: []string{"bench", "tokenize", "--tokenizer", "{tiny}", "--data", "problems.jsonl"}, want: "MB/s"}}},
	{"bench verify", []userCase{{args: []string{"bench", "verify", "--data", "verify.jsonl"}, want: "verifications/s"}}},
	{"bench relevance", []userCase{{args: []string{"bench", "relevance", "--data", "subjects.jsonl", "--model", "{tiny}"}, want: "same"}}},
	{"bench summaries", []userCase{{args: []string{"bench", "summaries", "--config", "lanpo.yaml", "--pool", "runs/lanpo/checkpoints/step-000001/pool.jsonl"},
		want: "one pass"}}},
	{"bench memory", []userCase{{args: []string{"bench", "memory", "--model", "{tiny}", "--rows", "1", "--seq", "32"},
		sized: "the tiny model, 1 × 32 tokens: the default shape takes 80 s", want: "activation checkpointing"}}},
	{"bench allreduce", []userCase{{args: []string{"bench", "allreduce", "--max-bytes", "4096"}, sized: "up to 4 KiB: the default 64 MiB messages take seconds each", want: "barrier"}}},
}

// commandPaths lists every command and subcommand of the app ("pool
// stats"), help commands left out.
func commandPaths(cmds []*cli.Command, prefix string) []string {
	var out []string
	for _, c := range cmds {
		if c.Name == "help" {
			continue
		}
		p := strings.TrimSpace(prefix + " " + c.Name)
		out = append(out, p)
		out = append(out, commandPaths(c.Subcommands, p)...)
	}
	return out
}

// userWorkspace is a directory with what a user brings: a small Hugging
// Face model with its tokenizer, problems, chats, a few answers to verify,
// problems with a subject, and configs naming only the model and data.
func userWorkspace(t *testing.T) (ws, tiny string) {
	t.Helper()
	ws = t.TempDir()
	tiny = copyWarmTiny(t, ws)
	problems, err := os.ReadFile("../../configs/data/tiny-arith-lanpo.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	chats, err := os.ReadFile("../../configs/data/tiny-arith-sft.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var subjects strings.Builder
	for i, line := range strings.Split(strings.TrimSpace(string(problems)), "\n") {
		fmt.Fprintf(&subjects, "%s, \"subject\": %q}\n", strings.TrimSuffix(line, "}"), []string{"Algebra", "Geometry"}[i%2])
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("problems.jsonl", string(problems))
	write("chats.jsonl", strings.Join(strings.SplitN(string(chats), "\n", 33)[:32], "\n")+"\n")
	write("subjects.jsonl", subjects.String())
	write("verify.jsonl", `{"pred": "\\boxed{2}", "gold": "2"}`+"\n"+`{"pred": "so x = 3", "gold": "4"}`+"\n")
	write("sft.yaml", "model: tiny\ndata:\n  train: chats.jsonl\n")
	const budget = "rollout:\n  max_new_tokens: 32  # the tiny model's context is 1024 tokens\n"
	write("grpo.yaml", "model: tiny\ndata:\n  train: problems.jsonl\n"+budget)
	write("lanpo.yaml", "model: tiny\ndata:\n  train: problems.jsonl\nalgo:\n  name: lanpo\n"+budget)
	return ws, tiny
}

// copyWarmTiny copies the warmed tiny model's Hugging Face files (not its
// trainer state) into ws/tiny, a model directory as a user has one.
func copyWarmTiny(t *testing.T, ws string) string {
	t.Helper()
	tiny := filepath.Join(ws, "tiny")
	if err := os.MkdirAll(tiny, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		if err := fsutil.CopyFile(filepath.Join(warmTiny(t), f), filepath.Join(tiny, f)); err != nil {
			t.Fatal(err)
		}
	}
	return tiny
}

// runAsUser runs lanpo (this test binary as the command: TestMain) in dir
// with args and stdin, as a user's shell would, and returns its stdout,
// stderr and exit status.
func runAsUser(t *testing.T, dir, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LANPO_TEST_AS_CLI=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestEveryCommandAsAUserRunsIt walks the command tree: every command and
// subcommand must have a case in userCases (a new command without one
// fails here), its --help must print, and each case runs the command as
// its own process in a workspace of tiny stand-ins, with only what a user
// must give (sizes said in the case), and must exit 0 doing real work.
// Commands the README and docs show are run as shown by TestDocExamples.
func TestEveryCommandAsAUserRunsIt(t *testing.T) {
	paths := commandPaths(newApp().Commands, "")
	var listed []string
	for _, uc := range userCases {
		listed = append(listed, uc.command)
	}
	for _, p := range paths {
		if !slices.Contains(listed, p) {
			t.Errorf("lanpo %s has no case in userCases: add the way a user first runs it", p)
		}
	}
	for _, p := range listed {
		if !slices.Contains(paths, p) {
			t.Errorf("userCases lists %q, which is no lanpo command", p)
		}
	}
	if t.Failed() {
		return
	}
	ws, tiny := userWorkspace(t)
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	expand := strings.NewReplacer("{tiny}", tiny, "{ws}", ws, "{repo}", repo)
	for _, uc := range userCases {
		t.Run(strings.ReplaceAll(uc.command, " ", "_"), func(t *testing.T) {
			out, stderr, code := runAsUser(t, ws, "", append(strings.Fields(uc.command), "--help")...)
			if code != 0 || !strings.Contains(out, "USAGE:") {
				t.Fatalf("lanpo %s --help: exit %d\n%s%s", uc.command, code, out, stderr)
			}
			for _, c := range uc.cases {
				args := make([]string, len(c.args))
				for i, a := range c.args {
					args[i] = expand.Replace(a)
				}
				start := time.Now()
				out, stderr, code := runAsUser(t, ws, c.stdin, args...)
				t.Logf("lanpo %s: exit %d, %.1f s", strings.Join(c.args, " "), code, time.Since(start).Seconds())
				if code != 0 {
					t.Fatalf("lanpo %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, stderr)
				}
				if !strings.Contains(out+stderr, c.want) {
					t.Fatalf("lanpo %s: the output lacks %q\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), c.want, out, stderr)
				}
			}
		})
	}
}
