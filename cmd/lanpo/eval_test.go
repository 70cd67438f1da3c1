package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/tensorboard"
	"github.com/lanpo-rl/lanpo/trainer"
)

// TestEvalCLI: lanpo eval on the built-in model and a real benchmark file
// prints the table and writes samples and summary; bad input is named.
func TestEvalCLI(t *testing.T) {
	model := filepath.Join(t.TempDir(), "tiny")
	if err := trainer.WriteBuiltin("tiny", model, 1); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "eval")
	bench := "../../eval/testdata/gsm8k_mini.jsonl"
	got, err := runWithStdin(t, "", "--log-level", "error", "eval", "--model", model, "--bench", bench, "--limit", "2",
		"--max-new-tokens", "8", "--out", out, "--mode", "zero-shot", "--mode", "self-correct")
	if err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	for _, want := range []string{"mean@k", "pass@1", "gsm8k_mini", "zero-shot", "self-correct", "first 0.000 → after reflection"} {
		if !strings.Contains(got, want) {
			t.Fatalf("the table lacks %q:\n%s", want, got)
		}
	}
	for _, f := range []string{"samples.jsonl", "summary.json", "eval.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	// The summary's numbers went to OUT/tensorboard at step 0 (the model is
	// not a checkpoint), under the tags of in-training evaluations.
	sum, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var wrote []eval.Summary
	if err := json.Unmarshal(sum, &wrote); err != nil {
		t.Fatal(err)
	}
	checkEvalScalars(t, filepath.Join(out, "tensorboard"), 0, wrote)
	// A checkpoint's results join its run's TensorBoard at its step.
	run := t.TempDir()
	ckpt := filepath.Join(run, "checkpoints", "step-000007")
	if err := trainer.WriteBuiltin("tiny", ckpt, 1); err != nil {
		t.Fatal(err)
	}
	got, err = runWithStdin(t, "", "--log-level", "error", "eval", "--model", ckpt, "--bench", bench, "--limit", "1",
		"--max-new-tokens", "4", "--json")
	if err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(got), &wrote); err != nil {
		t.Fatal(err)
	}
	checkEvalScalars(t, filepath.Join(run, "tensorboard"), 7, wrote)
	// --decontaminate: a training file holding one benchmark problem reworded
	// and one unrelated problem drops that problem, and says so.
	mini, err := eval.LoadBenchmark("gsm8k_mini", bench, 2)
	if err != nil {
		t.Fatal(err)
	}
	twin := mini.Problems[0]
	training := filepath.Join(t.TempDir(), "train.jsonl")
	if err := jsonl.WriteFile(training, []map[string]string{
		{"id": "t-1", "problem": "Find the area of a circle of radius 3."},
		{"id": "t-2", "problem": "  " + strings.ReplaceAll(twin.Problem, " ", "  ") + "\n"},
	}); err != nil {
		t.Fatal(err)
	}
	clean := filepath.Join(t.TempDir(), "clean")
	got, err = runWithStdin(t, "", "--log-level", "error", "eval", "--model", model, "--bench", bench, "--limit", "2",
		"--max-new-tokens", "8", "--out", clean, "--decontaminate", training, "--json", "--tensorboard=false")
	if err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	var sums []eval.Summary
	if err := json.Unmarshal([]byte(got), &sums); err != nil || len(sums) != 1 || sums[0].N != 1 || sums[0].Decontaminated != 1 {
		t.Fatalf("summary %s (%v), want 1 problem left and 1 dropped", got, err)
	}
	dropped, err := jsonl.Read[eval.Contaminated](filepath.Join(clean, eval.DecontaminatedFile))
	if err != nil || len(dropped) != 1 || dropped[0].ID != twin.ID || dropped[0].TwinID != "t-2" || dropped[0].TwinFile != training || dropped[0].Similarity < 0.9 {
		t.Fatalf("%s: %+v (%v)", eval.DecontaminatedFile, dropped, err)
	}
	if _, err := os.Stat(filepath.Join(clean, "tensorboard")); !os.IsNotExist(err) {
		t.Fatalf("--tensorboard=false wrote events (%v)", err)
	}
	// --tools adds the tools mode beside zero-shot.
	got, err = runWithStdin(t, "", "--log-level", "error", "eval", "--model", model, "--bench", bench, "--limit", "1",
		"--max-new-tokens", "4", "--tools", "python", "--tool-format", "fenced", "--out", filepath.Join(t.TempDir(), "tools"), "--json", "--tensorboard=false")
	if err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(got), &sums); err != nil || len(sums) != 2 || sums[0].Mode != eval.ModeZeroShot || sums[1].Mode != eval.ModeTools || sums[1].ToolsMinusZero == nil {
		t.Fatalf("summary %s (%v), want zero-shot and tools rows", got, err)
	}
	noTok := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, _ := os.ReadFile(filepath.Join(model, f))
		os.WriteFile(filepath.Join(noTok, f), b, 0o644)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "--model", model, "--bench", "gsm9k"}, `--bench "gsm9k": not a benchmark name`},
		{[]string{"eval", "--model", model, "--bench", "aime24", "--data-dir", t.TempDir()}, "aime24.jsonl not found; looked in"},
		{[]string{"eval", "--model", noTok, "--bench", bench}, noTok + " has no usable tokenizer"},
		{[]string{"eval", "--model", filepath.Join(noTok, "missing"), "--bench", bench}, filepath.Join(noTok, "missing") + " has no config.json"},
		{[]string{"eval", "--model", model, "--bench", bench, "--k", "4"}, "greedy samples are all the same"},
		{[]string{"eval", "--model", model, "--bench", bench, "--mode", "retrieval"}, "--mode retrieval needs --pool"},
		{[]string{"eval", "--bench", bench}, "--model is required"},
		{[]string{"eval", "--model", model, "--bench", bench, "--mode", "tools"}, "tools needs eval.tools (lanpo eval: --tools)"},
		{[]string{"eval", "--model", model, "--bench", bench, "--tools", "calculator"}, `eval.tools: "calculator" is neither python nor a tool`},
		{[]string{"eval", "--model", model, "--bench", bench, "--decontaminate", "no-such.jsonl"}, "--decontaminate: stat no-such.jsonl"},
	} {
		if out, err := runWithStdin(t, "", append([]string{"--log-level", "error"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (%s), want %q", c.args, err, out, c.want)
		}
	}
}

// checkEvalScalars: dir holds one events file whose scalars at step are the
// summaries' numbers, tagged eval/BENCH/MODE/METRIC.
func checkEvalScalars(t *testing.T, dir string, step int64, sums []eval.Summary) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("%s: %d events files, want 1", dir, len(files))
	}
	got, err := tensorboard.ReadScalars(files[0])
	if err != nil {
		t.Fatal(err)
	}
	want := eval.Flatten(sums)
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d scalars, want %d: %+v", len(got), len(want), got)
	}
	for _, s := range got {
		v, ok := want[strings.TrimPrefix(s.Tag, "eval/")]
		if !ok || !strings.HasPrefix(s.Tag, "eval/") || s.Step != step || s.Value != float32(v) {
			t.Errorf("scalar %+v, want step %d and value %v", s, step, v)
		}
	}
}
