package eval

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/trainer"
)

// tinyModel writes the built-in tiny model and loads it with its tokenizer.
func tinyModel(t *testing.T) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := trainer.WriteBuiltin("tiny", dir, 1); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, tk
}

// handPool is a pool of a few arithmetic problems with written lessons.
func handPool(t *testing.T) *pool.Pool {
	p, err := pool.New(pool.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range []string{"Natalia sold clips to 48 of her friends in April, and half as many in May.",
		"Weng earns $12 an hour for babysitting.", "Betty is saving money for a new wallet which costs $100."} {
		p.Add(text, pool.Entry{ProblemID: "train-" + string(rune('a'+i)), Attempt: "some work",
			Summary: pool.Summary{Principles: "Write down what each quantity is before combining them.", Pitfalls: "Halving the wrong number."}})
	}
	return p
}

func evalOptions(t *testing.T, out string, p *pool.Pool) Options {
	t.Helper()
	b, err := LoadBenchmark("gsm8k", "testdata/gsm8k_mini.jsonl", 5)
	if err != nil {
		t.Fatal(err)
	}
	cfg := trainer.DefaultConfig()
	cfg.LANPO.Similarity, cfg.LANPO.SimilarityThreshold, cfg.LANPO.MaxContextTokens = "bm25", 0, 64
	noFloor := 0.0 // every candidate passes: the test reads plans
	cfg.LANPO.RelevanceFloor = &noFloor
	cfg.LANPO.PlanTokens, cfg.LANPO.AuxTemperature = 8, 1
	return Options{Benchmarks: []Benchmark{b}, Modes: Modes, K: 2, Config: cfg, Pool: p, Out: out, Batch: 2,
		Sampling: model.SamplingParams{Temperature: 1, TopP: 1, MaxNewTokens: 12, Seed: 7}}
}

// TestEvalAllModes: the built-in model on five problems of a real benchmark
// file in all three modes: a row per mode, every sample written, retrieval
// prompts carrying plans, self-correct's second attempts showing the first.
func TestEvalAllModes(t *testing.T) {
	m, tk := tinyModel(t)
	out := filepath.Join(t.TempDir(), "eval")
	sums, err := Run(m, tk, evalOptions(t, out, handPool(t)))
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 3 || sums[0].N != 5 || sums[1].Mode != ModeRetrieval || len(sums[0].PassAtK) != 2 {
		t.Fatalf("summary %+v", sums)
	}
	if sums[1].WithContext == 0 {
		t.Fatal("no retrieval prompt carried a plan")
	}
	lines, err := jsonl.Read[SampleLine](filepath.Join(out, SamplesFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 5*2+5*2+5*2*2 {
		t.Fatalf("%d sample lines", len(lines))
	}
	for _, l := range lines {
		switch {
		case l.Mode == ModeRetrieval && l.Context && !strings.Contains(l.Prompt, "A plan drawn from related problems"):
			t.Fatalf("retrieval prompt without its plan: %s", l.Prompt)
		case l.Stage == "reflect" && !strings.Contains(l.Prompt, "<attempt>"):
			t.Fatalf("self-correct's second prompt does not show the attempt: %s", l.Prompt)
		case l.Mode == ModeZeroShot && strings.Contains(l.Prompt, "<attempt>"):
			t.Fatal("zero-shot prompt with an attempt")
		}
	}
	if err := WriteReport(out); err != nil {
		t.Fatal(err)
	}
	if page, _ := os.ReadFile(filepath.Join(out, "report.html")); !strings.Contains(string(page), "<th>pass@2</th>") || !strings.Contains(string(page), "first attempt") {
		t.Fatal("the report lacks the evaluation table")
	}
	var table strings.Builder
	PrintTable(&table, sums)
	if !strings.Contains(table.String(), "pass@2") || !strings.Contains(table.String(), "self-correct") {
		t.Fatalf("table:\n%s", table.String())
	}
}

// TestEvalResume: an evaluation killed after some batches (its last line
// half written) and resumed ends with the same samples and a byte-identical
// summary.json.
func TestEvalResume(t *testing.T) {
	m, tk := tinyModel(t)
	full := filepath.Join(t.TempDir(), "full")
	if _, err := Run(m, tk, evalOptions(t, full, handPool(t))); err != nil {
		t.Fatal(err)
	}
	samples, _ := os.ReadFile(filepath.Join(full, SamplesFile))
	cut := filepath.Join(t.TempDir(), "cut")
	os.MkdirAll(cut, 0o755)
	rec, _ := os.ReadFile(filepath.Join(full, recordFile))
	os.WriteFile(filepath.Join(cut, recordFile), rec, 0o644)
	lines := bytes.SplitAfter(samples, []byte("\n"))
	kept := append(bytes.Join(lines[:13], nil), lines[13][:len(lines[13])/2]...) // 13 whole lines, one cut short
	os.WriteFile(filepath.Join(cut, SamplesFile), kept, 0o644)
	o := evalOptions(t, cut, handPool(t))
	if _, err := Run(m, tk, o); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("a directory with results, without --resume: %v", err)
	}
	o.Resume = true
	if _, err := Run(m, tk, o); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{SummaryFile, SamplesFile} {
		a, _ := os.ReadFile(filepath.Join(full, f))
		b, _ := os.ReadFile(filepath.Join(cut, f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Fatalf("%s differs after resuming", f)
		}
	}
	o.K = 3
	if _, err := Run(m, tk, o); err == nil || !strings.Contains(err.Error(), `"k" differs`) && !strings.Contains(err.Error(), "k differs") {
		t.Fatalf("resuming with another k: %v", err)
	}
}

// TestTrainingWithEvaluationTrainsTheSame: a GRPO run that evaluates after
// every step ends with the same weights as one that does not, and its
// metrics lines carry the eval/ keys.
func TestTrainingWithEvaluationTrainsTheSame(t *testing.T) {
	dir := t.TempDir()
	sft, err := trainer.LoadConfig("../configs/tiny-sft.yaml", []string{"run_dir=" + filepath.Join(dir, "sft"),
		"data.train=../configs/data/tiny-arith-sft.jsonl", "data.eval=", "total_steps=60", "checkpoint.every=0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := trainer.RunSFT(context.Background(), sft, "", trainer.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	warm := filepath.Join(sft.RunDir, "checkpoints", "step-000060")
	run := func(name string, withEval bool) []byte {
		sets := []string{"run_dir=" + filepath.Join(dir, name), "model=" + warm, "total_steps=3", "data.train=../configs/data/tiny-arith.jsonl"}
		if withEval {
			sets = append(sets, "eval.every=1", "eval.bench=[../configs/data/tiny-arith-lanpo.jsonl]", "eval.k=2", "eval.temperature=1",
				"eval.max_new_tokens=8", "eval.modes=[zero-shot,self-correct]")
		}
		cfg, err := trainer.LoadConfig("../configs/tiny-grpo.yaml", sets)
		if err != nil {
			t.Fatal(err)
		}
		opts := trainer.RunOptions{}
		if withEval {
			if opts.Evaluate, err = TrainingEvaluator(cfg, true); err != nil {
				t.Fatal(err)
			}
		}
		if err := trainer.RunGRPO(context.Background(), cfg, "", opts); err != nil {
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
	rows, err := readMetrics(filepath.Join(dir, "with", "metrics.jsonl"))
	if err != nil || len(rows) != 3 {
		t.Fatalf("%d metric rows, %v", len(rows), err)
	}
	for _, k := range []string{"eval/tiny-arith-lanpo/zero-shot/mean@k", "eval/tiny-arith-lanpo/self-correct/first_attempt", "eval/tiny-arith-lanpo/zero-shot/pass@2"} {
		if _, ok := rows[2][k].(float64); !ok {
			t.Fatalf("metrics lack %s: %v", k, rows[2])
		}
	}
	if err := WriteReport(filepath.Join(dir, "with")); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "with", "report.html"))
	if !strings.Contains(string(page), "evaluation: tiny-arith-lanpo") || !strings.Contains(string(page), "Evaluation: eval/step-000003") {
		t.Fatal("the run report lacks the evaluation curve or the last evaluation's table")
	}
}
