package trainer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

// TestTrainingWithEvaluationTrainsTheSame: a GRPO run that evaluates after
// every step ends with the same weights as one that does not, and its
// metrics lines carry the eval/ keys.
func TestTrainingWithEvaluationTrainsTheSame(t *testing.T) {
	dir := t.TempDir()
	sft, err := LoadConfig("../configs/tiny-sft.yaml", []string{"run_dir=" + filepath.Join(dir, "sft"),
		"data.train=../configs/data/tiny-arith-sft.jsonl", "data.eval=", "total_steps=60", "checkpoint.every=0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := RunSFT(context.Background(), sft, "", RunOptions{}); err != nil {
		t.Fatal(err)
	}
	warm := filepath.Join(sft.RunDir, "checkpoints", "step-000060")
	run := func(name string, withEval bool) []byte {
		sets := []string{"run_dir=" + filepath.Join(dir, name), "model=" + warm, "total_steps=3", "data.train=../configs/data/tiny-arith.jsonl"}
		if withEval {
			sets = append(sets, "eval.every=1", "eval.bench=[../configs/data/tiny-arith-lanpo.jsonl]", "eval.k=2", "eval.temperature=1",
				"eval.max_new_tokens=8", "eval.modes=[zero-shot,self-correct]")
		}
		cfg, err := LoadConfig("../configs/tiny-grpo.yaml", sets)
		if err != nil {
			t.Fatal(err)
		}
		opts := RunOptions{}
		if withEval {
			if opts.Evaluate, err = TrainingEvaluator(cfg, true); err != nil {
				t.Fatal(err)
			}
		}
		if err := RunGRPO(context.Background(), cfg, "", opts); err != nil {
			t.Fatal(err)
		}
		w, _ := os.ReadFile(filepath.Join(cfg.RunDir, "checkpoints", "step-000003", "model.safetensors"))
		return w
	}
	without, with := run("without", false), run("with", true)
	initial, _ := os.ReadFile(filepath.Join(warm, "model.safetensors"))
	if bytes.Equal(without, initial) {
		t.Fatal("training did not move the weights: the test compares nothing")
	}
	if !bytes.Equal(without, with) {
		t.Fatal("evaluating during training changed the training")
	}
	rows, err := eval.ReadMetrics(filepath.Join(dir, "with", "metrics.jsonl"))
	if err != nil || len(rows) != 3 {
		t.Fatalf("%d metric rows, %v", len(rows), err)
	}
	for _, k := range []string{"eval/tiny-arith-lanpo/zero-shot/mean@k", "eval/tiny-arith-lanpo/self-correct/first_attempt", "eval/tiny-arith-lanpo/zero-shot/pass@2"} {
		if _, ok := rows[2][k].(float64); !ok {
			t.Fatalf("metrics lack %s: %v", k, rows[2])
		}
	}
	if err := eval.WriteReport(filepath.Join(dir, "with"), nil); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "with", "report.html"))
	if !strings.Contains(string(page), "evaluation: tiny-arith-lanpo") || !strings.Contains(string(page), "Evaluation: eval/step-000003") {
		t.Fatal("the run report lacks the evaluation curve or the last evaluation's table")
	}
}

// TestTrainingEvaluationCheckedAtStart: an eval.bench problem whose prompt
// and eval.max_new_tokens exceed the model's context stops the run before
// its first step (it used to stop it at the first evaluation, after the
// steps before it); eval.skip_long_prompts leaves it out instead.
func TestTrainingEvaluationCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	bench := filepath.Join(dir, "bench.jsonl")
	long := strings.Repeat("What is 1 + 1? ", 200) // ≈ 1000 tokens: over the tiny model's 1024 with 64 new
	if err := os.WriteFile(bench, []byte(`{"id": "short", "problem": "What is 1 + 2?", "answer": "3"}`+"\n"+
		`{"id": "long", "problem": "`+long+`", "answer": "2"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, sets ...string) (Config, error) {
		cfg := tinyConfig(t, append([]string{"run_dir=" + filepath.Join(dir, name), "total_steps=2", "eval.every=2", "eval.bench=[" + bench + "]",
			"eval.max_new_tokens=64"}, sets...)...)
		ev, err := TrainingEvaluator(cfg, true)
		if err != nil {
			t.Fatal(err)
		}
		return cfg, RunGRPO(context.Background(), cfg, "", RunOptions{Evaluate: ev})
	}
	cfg, err := run("refused")
	var ce ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "bench long") || !strings.Contains(err.Error(), "eval.bench") {
		t.Fatalf("err = %v, want a config error naming the problem", err)
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.RunDir, metricsFile)); len(b) > 0 {
		t.Fatalf("the refused run trained:\n%s", b)
	}
	cfg, err = run("skipped", "eval.skip_long_prompts=true")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := eval.ReadMetrics(filepath.Join(cfg.RunDir, metricsFile))
	if err != nil || len(rows) != 2 {
		t.Fatalf("%d metric rows, %v", len(rows), err)
	}
}

// TestTrainingEvaluationWithTools: eval.tools adds the tools mode to the
// training-time evaluator (as lanpo eval --tools does): its prompts declare
// the tools, and metrics.jsonl carries its calls and its paired difference
// with zero-shot. eval.modes naming tools without eval.tools, and an
// eval.tools name that is neither python nor a declared tool, are refused
// before the run, naming the key.
func TestTrainingEvaluationWithTools(t *testing.T) {
	lookup := `tools=[{name: lookup, description: Look up., command: [cat], parameters: {type: object, properties: {word: {type: string}}}}]`
	cfg := tinyConfig(t, lookup, "total_steps=1", "eval.every=1", "eval.bench=[../configs/data/tiny-arith-lanpo.jsonl]", "eval.limit=2",
		"eval.max_new_tokens=8", "eval.tools=[lookup]")
	if want := []string{eval.ModeZeroShot, eval.ModeTools}; !slices.Equal(cfg.Eval.Modes, want) {
		t.Fatalf("eval.modes %v, want %v", cfg.Eval.Modes, want)
	}
	ev, err := TrainingEvaluator(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := RunGRPO(context.Background(), cfg, "", RunOptions{Evaluate: ev}); err != nil {
		t.Fatal(err)
	}
	rows, err := eval.ReadMetrics(filepath.Join(cfg.RunDir, metricsFile))
	if err != nil || len(rows) != 1 {
		t.Fatalf("%d metric rows, %v", len(rows), err)
	}
	for _, k := range []string{"eval/tiny-arith-lanpo/tools/mean@k", "eval/tiny-arith-lanpo/tools/tool_calls_mean",
		"eval/tiny-arith-lanpo/tools/tools_minus_zero_shot", "eval/tiny-arith-lanpo/zero-shot/mean@k"} {
		if _, ok := rows[0][k].(float64); !ok {
			t.Errorf("metrics lack %s: %v", k, rows[0])
		}
	}
	lines, err := jsonl.Read[eval.SampleLine](filepath.Join(cfg.RunDir, "eval", "step-000001", eval.SamplesFile))
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]int{}
	for _, l := range lines {
		modes[l.Mode]++
		if declares := strings.Contains(l.Prompt, `"name": "lookup"`); declares != (l.Mode == eval.ModeTools) {
			t.Errorf("%s prompt declares the tool: %v", l.Mode, declares)
		}
	}
	if modes[eval.ModeTools] == 0 || modes[eval.ModeTools] != modes[eval.ModeZeroShot] {
		t.Fatalf("samples per mode %v", modes)
	}
	// A code benchmark with eval.tools is refused before the run (its tests
	// are not given to tools), not at the first evaluation.
	code := tinyConfig(t, "eval.every=1", "eval.bench=[../configs/data/humaneval-heldout.jsonl]", "eval.limit=1", "eval.tools=[python]")
	if _, err := TrainingEvaluator(code, true); err == nil || !strings.Contains(err.Error(), "eval.tools") {
		t.Errorf("eval.tools with a code benchmark: %v, want an error naming eval.tools", err)
	}
	for sets, key := range map[string]string{
		"eval.modes=[zero-shot,tools]": "eval.modes",
		"eval.tools=[calculator]":      "eval.tools",
	} {
		if _, err := LoadConfig("../configs/tiny-grpo.yaml", []string{sets}); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming %s", sets, err, key)
		}
	}
}
