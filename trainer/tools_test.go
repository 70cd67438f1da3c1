package trainer

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/sugarme/gotch"

	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/optim"
	"github.com/lanpo-rl/lanpo/tools"
	"github.com/lanpo-rl/lanpo/tools/toolstest"
)

// scriptedTools parks every sample once, after its third token, and
// appends scriptedAppend (toolstest.Scripted: at once, so deterministic).
func scriptedTools() *toolstest.Scripted {
	return &toolstest.Scripted{After: 3, Append: scriptedAppend, Record: tools.Trajectory{Turns: 1, Calls: 1, ToolSeconds: 0.5}}
}

var scriptedAppend = []int64{5, 6, 7}

// A GRPO run whose rollouts are multi-turn trajectories (a scripted tool
// appends ids after each sample's third token): it trains, its metrics
// count the calls and the appended share, the sampler's log-probs of the
// sampled tokens are the trainer's on the multi-turn sequences, and it
// resumes bit for bit.
func TestToolTrajectoriesTrainAndResume(t *testing.T) {
	toolsForTest = func() toolLoop { return scriptedTools() }
	defer func() { toolsForTest = nil }()
	straight, _ := runStraightAndResumed(t, []string{"model.safetensors", optim.TensorsFile, optim.MetaFile, stateFile}, "log.rollouts=true")
	for i, m := range stableMetrics(t, straight.RunDir) {
		calls, _ := m["tool_calls_mean"].(float64)
		share, _ := m["tool_appended_token_frac"].(float64)
		gap, _ := m["sampler_trainer_logp_max_abs_diff"].(float64)
		if gap > 1e-4 || math.IsNaN(gap) { // the sampler's record ≡ the trainer's, over the sampled tokens of multi-turn sequences
			t.Errorf("step %d: sampler/trainer log-prob gap %v on trajectories", i+1, m["sampler_trainer_logp_max_abs_diff"])
		}
		if calls <= 0 || share <= 0 || math.IsNaN(m["loss"].(float64)) {
			t.Errorf("step %d: tool_calls_mean %v, appended share %v, loss %v", i+1, m["tool_calls_mean"], m["tool_appended_token_frac"], m["loss"])
		}
	}
	n := 0
	eachRollout(t, straight.RunDir, 4, func(step int, l rolloutLine) {
		if l.Tokens > 3 {
			n++
			if l.ToolCalls != 1 || l.ToolTurns != 1 || l.AppendedTokens != len(scriptedAppend) {
				t.Errorf("step %d: a trajectory past its tool turn logged %d calls, %d turns, %d appended tokens", step, l.ToolCalls, l.ToolTurns, l.AppendedTokens)
			}
		}
	})
	if n == 0 {
		t.Fatal("no trajectory went past its tool turn")
	}
}

// With rollout.tool_lockstep, tools whose answers arrive late, each
// after a delay of its own, still give a run that resumes bit for bit;
// the key reaches the engine's turns, and needs tools. (That the schedule
// follows the answers' timing without lockstep, moving log-probs' low
// bits, is the engine's test: TestLockstepIgnoresAnswerTiming.)
func TestToolLockstepResumesExactly(t *testing.T) {
	toolsForTest = func() toolLoop {
		s := scriptedTools()
		s.Late, s.Lockstep = true, true
		return s
	}
	defer func() { toolsForTest = nil }()
	straight, _ := runStraightAndResumed(t, []string{"model.safetensors", optim.TensorsFile, optim.MetaFile, stateFile})
	if metricSum(t, straight.RunDir, "tool_calls_mean") == 0 {
		t.Fatal("no tool calls: the test shows nothing")
	}
	cfg := tinyConfig(t, "tools=[{name: python}]", "rollout.tool_lockstep=true")
	tk, err := tokenizer.Load(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ToolLoop(cfg, cfg.Tools, tk, []int64{2})
	if err != nil {
		t.Fatal(err)
	}
	if turns, err := l.Start(context.Background(), 1); err != nil || !turns.Lockstep {
		t.Fatalf("rollout.tool_lockstep did not reach the engine's turns (%v)", err)
	}
	if _, err := LoadConfig("../configs/tiny-grpo.yaml", []string{"rollout.tool_lockstep=true"}); err == nil || !strings.Contains(err.Error(), "tool_lockstep") {
		t.Errorf("rollout.tool_lockstep without tools: %v, want an error naming it", err)
	}
}

// The appended tokens of a trajectory are inputs, never targets: in every
// policy loss (PPO, GSPO, CISPO, with KL) the loss is finite although the
// sampler's log-probs there are NaN, and its gradient with respect to the
// log-probs is zero at every appended position and not at the sampled
// ones.
func TestAppendedTokensGetNoGradient(t *testing.T) {
	lockThread(t)
	nan := math.NaN()
	r := &rollout{promptIDs: []int64{1, 2, 3}, ids: []int64{4, 5, 6, 7, 8, 9, 10}, adv: 1, weight: 1,
		oldLogp:  []float64{-1, -2, nan, nan, -1.5, nan, -0.5},
		refLogp:  []float64{-1.1, -2.1, nan, nan, -1.4, nan, -0.6},
		tis:      []float32{1, 1, float32(nan), float32(nan), 1, float32(nan), 1},
		appended: [][2]int{{2, 4}, {5, 6}}}
	plain := &rollout{promptIDs: []int64{1, 2}, ids: []int64{4, 5, 6}, adv: -1, weight: 1, oldLogp: []float64{-1, -1, -1}, refLogp: []float64{-1, -1, -1}}
	for _, kind := range []string{LossPPO, LossGSPO, LossCISPO} {
		var s tensor.Scope
		b := buildBatch(&s, gotch.CPU, []*rollout{r, plain})
		vals := make([]float64, 2*b.t)
		for i := range vals {
			vals[i] = -0.3 - 0.01*float64(i)
		}
		lp := tensor.FromSlice(&s, vals, []int64{2, b.t}, gotch.CPU)
		lp.MustRequiresGrad_(true)
		lo, hi, err := ClipDefaults(kind)
		if err != nil {
			t.Fatal(err)
		}
		loss, _, err := PolicyLoss(&s, PolicyLossInput{Logp: lp, OldLogp: b.old, RefLogp: b.ref, Adv: b.adv, Weight: b.weight, TIS: b.tis, Mask: b.tmaskF},
			PolicyLossConfig{Kind: kind, ClipLow: lo, ClipHigh: hi, Beta: 0.1, KL: KLK3})
		if err != nil {
			t.Fatal(err)
		}
		if l := tensor.Float64s(loss)[0]; math.IsNaN(l) || math.IsInf(l, 0) {
			t.Fatalf("%s: loss %v", kind, l)
		}
		loss.MustBackward()
		g := tensor.Float64s(s.Keep(lp.MustGrad(false)))
		for k := range r.ids {
			at := b.starts[0] + k
			appended := (k >= 2 && k < 4) || k == 5
			if appended != (g[at] == 0) {
				t.Errorf("%s: token %d (appended %v) has gradient %g", kind, k, appended, g[at])
			}
		}
		s.Close()
	}
}

// The tools: section loads, is declared in the prompt's system turn, and
// its errors name the key; the rollout's tool keys need tools.
func TestToolsConfig(t *testing.T) {
	cfg := tinyConfig(t, `tools=[{name: python}, {name: lookup, description: Look up., command: [cat], parameters: {type: object, properties: {word: {type: string}}, required: [word]}}]`, "rollout.max_turns=2")
	if err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	f := cfg.PromptFormat()
	if len(f.Tools) != 2 {
		t.Fatalf("declarations %s", f.Tools)
	}
	s, err := tokenizer.Load(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := f.SolveIDs(s, "What is 2+3?")
	if err != nil {
		t.Fatal(err)
	}
	if text := s.Decode(tokenizer.Ints(ids), false); !strings.Contains(text, `"name": "lookup"`) || !strings.Contains(text, "<tools>") {
		t.Errorf("the prompt does not declare the tools: %q", text)
	}
	if fs := cfg.FeedbackSettings(); fs.Format.Tools != nil {
		t.Error("the feedback settings (eval, seed) declare tools nobody answers")
	}
	for sets, key := range map[string]string{
		`tools=[{name: python}]|rollout.tool_format=xml`:                                           "rollout.tool_format",
		`tools=[{name: x, command: [cat], parameters: {type: object}}]|rollout.tool_format=fenced`: "rollout.tool_format",
		`tools=[{name: lookup, command: [cat]}]`:                                                   "tools[0].parameters",
		"rollout.max_turns=3":                                                                      "rollout.max_turns",
		`tools=[{name: python}]|rollout.tool_sandbox=docker`:                                       "rollout.tool_sandbox",
	} {
		_, err := LoadConfig("../configs/tiny-grpo.yaml", strings.Split(sets, "|"))
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming %s", sets, err, key)
		}
	}
}

// configs/tools-grpo.yaml loads as written: the python tool declared, its
// 64 problems readable.
func TestToolsConfigFile(t *testing.T) {
	cfg, err := LoadConfig("../configs/tools-grpo.yaml", []string{"data.train=../configs/data/math-train-int64.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tools) != 1 || cfg.Tools[0].Name != "python" || len(cfg.PromptFormat().Tools) != 1 || cfg.Rollout.MaxTurns != 3 {
		t.Fatalf("tools %+v, max_turns %d", cfg.Tools, cfg.Rollout.MaxTurns)
	}
	ps, err := ReadProblems(cfg.Data.Train, cfg.Data)
	if err != nil || len(ps) != 64 {
		t.Fatalf("%d problems, %v", len(ps), err)
	}
}

// Tool trajectories through the paths that recompute, reweight or
// distill per token: π_old recomputed by the trainer
// (algo.recompute_old_logp), LANPO training on the original prompt
// (importance-weighted), LANPO's consolidation, SDPO's teacher (where
// the sampler's NaN log-probs at a tool's output would reach the loss or
// the metrics) and Critique-GRPO's refinements (themselves trajectories):
// the runs end, their metrics are finite, and no weight is computed on a
// tool's output.
func TestToolTrajectoriesRecomputeAndReweight(t *testing.T) {
	toolsForTest = func() toolLoop { return scriptedTools() }
	defer func() { toolsForTest = nil }()
	pool, _ := seededPool(t)
	for name, cfg := range map[string]Config{
		"recompute_old_logp": tinyConfig(t, "total_steps=2", "algo.recompute_old_logp=true"),
		"sdpo":               tinyConfig(t, "total_steps=2", "algo.name=sdpo", "sdpo.lambda=0.5", "sdpo.teacher_context=blind"),
		"critique-grpo":      tinyConfig(t, "total_steps=2", "algo.name=critique-grpo", "critique.source=outcome"),
		"lanpo original":     lanpoConfig(t, "total_steps=2", "lanpo.train_prompt=original"),
		"lanpo consolidate": lanpoConfig(t, "total_steps=3", "lanpo.consolidate=1", "lanpo.initial_pool="+pool, "lanpo.feedback_ratio=0.5",
			"lanpo.similarity_threshold=0", "rollout.samples_per_prompt=8"),
	} {
		runGRPO(t, cfg, "")
		consolidated := 0.0
		for i, m := range stableMetrics(t, cfg.RunDir) {
			if m["tool_calls_mean"] == nil {
				t.Errorf("%s step %d: no tool calls", name, i+1)
			}
			if c, ok := m["consolidated"].(float64); ok {
				consolidated += c
				if nll, _ := m["consolidate_nll"].(float64); nll <= 0 {
					t.Errorf("%s step %d: consolidate_nll %v", name, i+1, m["consolidate_nll"])
				}
			}
			for k, v := range m {
				if x, ok := v.(float64); ok && (math.IsNaN(x) || math.IsInf(x, 0)) {
					t.Errorf("%s step %d: %s = %v", name, i+1, k, x)
				}
			}
		}
		if name == "critique-grpo" && (metricSum(t, cfg.RunDir, "critique_refinements") == 0 || metricSum(t, cfg.RunDir, "critique_tool_calls") == 0) {
			t.Errorf("%s: %v refinements trained, %v tool calls in them: want both", name, metricSum(t, cfg.RunDir, "critique_refinements"), metricSum(t, cfg.RunDir, "critique_tool_calls"))
		}
		if name == "sdpo" && metricSum(t, cfg.RunDir, "sdpo_rows") == 0 {
			t.Errorf("%s: no trajectory distilled: the case tests nothing", name)
		}
		if name == "lanpo consolidate" && consolidated == 0 {
			t.Errorf("%s: no trajectory consolidated: the case tests nothing", name)
		}
	}
}
