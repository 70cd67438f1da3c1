package eval

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/modeltest"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/reward"
)

// Set by main_test.go (package eval_test, which may import trainer; this
// package may not): the built-in model writer and the default config's
// feedback settings.
var (
	WriteBuiltin    func(name, dir string, seed int64) error
	DefaultFeedback func() feedback.Settings
)

// tinyModel writes the built-in tiny model and loads it with its tokenizer.
func tinyModel(t *testing.T) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := WriteBuiltin("tiny", dir, 1); err != nil {
		t.Fatal(err)
	}
	return modeltest.Load(t, dir)
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
	fs := DefaultFeedback()
	fs.LANPO.Similarity, fs.LANPO.SimilarityThreshold, fs.LANPO.MaxContextTokens = "bm25", 0, 64
	noFloor := 0.0 // every candidate passes: the test reads plans
	fs.LANPO.RelevanceFloor = &noFloor
	fs.LANPO.PlanTokens, fs.LANPO.AuxTemperature = 8, 1
	return Options{Benchmarks: []Benchmark{b}, Modes: []string{ModeZeroShot, ModeRetrieval, ModeSelfCorrect}, K: 2, Feedback: fs, Pool: p, Out: out, Batch: 2,
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
	if err := WriteReport(out, nil); err != nil {
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

// TestLongPromptsCheckedFirst: a benchmark with a problem whose prompt
// and the generation budget exceed the model's context is refused before
// the first forward pass (nothing written, the problem named); with
// SkipLongPrompts it is left out and counted. Before, the evaluation ran
// the problems before it and then stopped.
func TestLongPromptsCheckedFirst(t *testing.T) {
	m, tk := tinyModel(t) // max_position_embeddings 1024
	out := filepath.Join(t.TempDir(), "out")
	o := evalOptions(t, out, handPool(t))
	o.Batch = 1
	long := o.Benchmarks[0].Problems[0]
	long.ID, long.Problem = "long-one", strings.Repeat("What is 1 + 1? ", 200) // ≈ 1000 tokens of the byte-level vocabulary
	o.Benchmarks[0].Problems = append(o.Benchmarks[0].Problems[:3:3], long, o.Benchmarks[0].Problems[3])
	_, err := Run(m, tk, o)
	if err == nil || !strings.Contains(err.Error(), "gsm8k long-one") || !strings.Contains(err.Error(), "--skip-long-prompts") {
		t.Fatalf("err = %v, want a refusal naming gsm8k long-one", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, SamplesFile)); len(b) > 0 {
		t.Fatalf("the refused evaluation wrote samples:\n%s", b)
	}
	o.SkipLongPrompts = true
	sums, err := Run(m, tk, o)
	if err != nil {
		t.Fatal(err)
	}
	if sums[0].N != 4 || sums[0].SkippedLong != 1 {
		t.Fatalf("problems %d, skipped %d; want 4 and 1", sums[0].N, sums[0].SkippedLong)
	}
	var table bytes.Buffer
	PrintTable(&table, sums)
	if !strings.Contains(table.String(), "1 skipped: prompt longer than the context allows") {
		t.Errorf("the table does not say so:\n%s", table.String())
	}
}

// TestReferenceNLL: with Options.ReferenceNLL, a zero-shot problem that has
// a reference solution gets its log-likelihood after the prompt, equal to
// lanpo score's of prompt + solution (and inside a span, the span's
// tokens'), on its first sample's line only; the summary's reference_nll
// is the token mean over the problems that have one; off, nothing is
// scored.
func TestReferenceNLL(t *testing.T) {
	m, tk := tinyModel(t)
	o := evalOptions(t, "", nil)
	o.Modes = []string{ModeZeroShot}
	b := &o.Benchmarks[0]
	sols := []string{"She sells 16 - 3 - 4 = 9 eggs, so \\boxed{18}.", "", "It takes 2 + 1 = \\boxed{3} bolts."}
	for i, s := range sols {
		b.Problems[i].Solution = s
	}
	o.ReferenceNLL = true
	// The span: the text from the first digit to the first space after it.
	o.ReferenceSpan = func(_ string, text string) (int, int, bool) {
		lo := strings.IndexAny(text, "0123456789")
		if lo < 0 {
			return 0, 0, false
		}
		return lo, lo + strings.IndexByte(text[lo:], ' '), true
	}
	sums, err := Run(m, tk, o)
	if err != nil {
		t.Fatal(err)
	}
	lines := runLines(t, m, tk, o)
	var nll, n float64
	for _, p := range b.Problems {
		for _, l := range lines {
			if l.ProblemID != p.ID {
				continue
			}
			if p.Solution == "" || l.Sample > 0 {
				if l.RefTokens != 0 || l.RefLogp != 0 {
					t.Errorf("%s sample %d: reference scored (%d tokens) where none is wanted", p.ID, l.Sample, l.RefTokens)
				}
				continue
			}
			prompt, err := o.Feedback.Format.SolveIDs(tk, p.Problem)
			if err != nil {
				t.Fatal(err)
			}
			sol, _ := tk.Encode(p.Solution, false)
			lp, err := m.Score([][]int64{append(append([]int64(nil), prompt...), tokenizer.Int64s(sol)...)})
			if err != nil {
				t.Fatal(err)
			}
			want := 0.0
			for _, v := range lp[0][len(prompt)-1:] {
				want += float64(v)
			}
			if l.RefTokens != len(sol) || math.Abs(l.RefLogp-want) > 1e-4 {
				t.Errorf("%s: reference %v over %d tokens, want %v over %d", p.ID, l.RefLogp, l.RefTokens, want, len(sol))
			}
			if l.RefSpanTokens == 0 || l.RefSpanTokens >= l.RefTokens || l.RefSpanLogp < l.RefLogp {
				t.Errorf("%s: span %v over %d tokens of %d", p.ID, l.RefSpanLogp, l.RefSpanTokens, l.RefTokens)
			}
			nll, n = nll-l.RefLogp, n+float64(l.RefTokens)
		}
	}
	if n == 0 || math.Abs(sums[0].ReferenceNLL-nll/n) > 1e-9 || sums[0].ReferenceNLLSpan == 0 {
		t.Errorf("summary reference_nll %v (span %v), want %v", sums[0].ReferenceNLL, sums[0].ReferenceNLLSpan, nll/n)
	}
	if got := Flatten(sums)["gsm8k/zero-shot/reference_nll"]; got != sums[0].ReferenceNLL {
		t.Errorf("flattened reference_nll %v", got)
	}
	o.ReferenceNLL = false
	for _, l := range runLines(t, m, tk, o) {
		if l.RefTokens != 0 {
			t.Fatalf("ReferenceNLL off: %s scored", l.ProblemID)
		}
	}
}

// runLines runs an evaluation into a fresh directory and reads its lines.
func runLines(t *testing.T, m *model.Model, tk *tokenizer.Tokenizer, o Options) []SampleLine {
	t.Helper()
	o.Out = filepath.Join(t.TempDir(), "eval")
	if _, err := Run(m, tk, o); err != nil {
		t.Fatal(err)
	}
	lines, err := jsonl.Read[SampleLine](filepath.Join(o.Out, SamplesFile))
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestEvalLogsOneLine: an evaluation over several benchmarks and modes
// says so in one line — where no progress bar shows, one info line in the
// log with every benchmark and mode's mean@k (the batches at debug level);
// on a terminal, the bar's one line and no info line. Before, every batch
// logged an info line: lanpo train's in-run evaluations filled the demo's
// log with hundreds.
func TestEvalLogsOneLine(t *testing.T) {
	m, tk := tinyModel(t)
	o := evalOptions(t, "", nil)
	o.Modes, o.K, o.Batch = []string{ModeZeroShot, ModeSelfCorrect}, 1, 1
	o.Sampling.Temperature, o.Sampling.MaxNewTokens = 0, 4
	b := o.Benchmarks[0]
	b.Problems = b.Problems[:3]
	o.Benchmarks = nil
	for _, name := range []string{"first", "second", "third"} {
		b.Name = name
		o.Benchmarks = append(o.Benchmarks, b)
	}
	batches := len(o.Benchmarks) * len(o.Modes) * len(b.Problems)
	// capture runs the evaluation and returns its log's lines by level.
	capture := func(t *testing.T, o Options) map[string][]map[string]any {
		t.Helper()
		var buf bytes.Buffer
		was := log.Logger
		log.Logger = zerolog.New(&buf).Level(zerolog.DebugLevel)
		defer func() { log.Logger = was }()
		if _, err := Run(m, tk, o); err != nil {
			t.Fatal(err)
		}
		byLevel := map[string][]map[string]any{}
		for _, line := range strings.Split(buf.String(), "\n") {
			if line == "" {
				continue
			}
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			lv, _ := ev["level"].(string)
			byLevel[lv] = append(byLevel[lv], ev)
		}
		return byLevel
	}
	t.Run("log", func(t *testing.T) {
		for range 2 { // one line per evaluation, each time
			lines := capture(t, o)
			if n := len(lines["info"]); n != 1 {
				t.Fatalf("%d info lines, want 1: %v", n, lines["info"])
			}
			mean, _ := lines["info"][0]["mean@k"].(map[string]any)
			if len(mean) != len(o.Benchmarks)*len(o.Modes) || mean["second/self-correct"] == nil {
				t.Errorf("the info line's mean@k: %v, want every benchmark and mode", lines["info"][0])
			}
			if n := len(lines["debug"]); n != batches {
				t.Errorf("%d debug lines, want one per batch (%d)", n, batches)
			}
		}
	})
	t.Run("terminal", func(t *testing.T) {
		var term bytes.Buffer
		o := o
		o.Progress = &term
		lines := capture(t, o)
		if n := len(lines["info"]); n != 0 {
			t.Errorf("%d info lines under a progress bar, want 0: %v", n, lines["info"])
		}
		if n := strings.Count(term.String(), "\n"); n != 1 || !strings.HasPrefix(term.String(), "\reval [") {
			t.Errorf("the terminal shows %d lines, want the bar's 1: %q", n, term.String())
		}
	})
}

// TestEvalCode: a code benchmark beside a math one in one evaluation. The
// code problems (HumanEval's fields) put the response on a comment line
// after a function that passes, so a printable one-line response passes
// and one that breaks the line does not: the verdicts are the sandbox's, the prompt is the
// code template, and maj@k is left out for code.
func TestEvalCode(t *testing.T) {
	m, tk := tinyModel(t)
	o := evalOptions(t, "", nil)
	o.Modes = []string{ModeZeroShot}
	o.Sampling.MaxNewTokens = 1 // one random byte: printable (a comment), or not
	code, err := LoadBenchmark("code_mini", "testdata/code_mini.jsonl", 0)
	if err != nil || !code.Code || code.Problems[1].ID != "Mini/1" || !strings.HasPrefix(code.Problems[1].Problem, "def f():") {
		t.Fatalf("code benchmark: %+v, %v", code, err)
	}
	o.Benchmarks = append(o.Benchmarks, code)
	if _, err := Run(m, tk, o); err == nil || !strings.Contains(err.Error(), "code scorer") {
		t.Fatalf("a code benchmark without a code scorer: %v", err)
	}
	sb, err := reward.NewSandbox(reward.SandboxNamespaces, reward.DefaultCodeConfig())
	if err != nil {
		t.Fatal(err)
	}
	o.CodeScorer, o.CodePromptTemplate = reward.NewCode(sb, reward.OnErrorFail), "Write it:\n```\n{problem}\n```"
	lines := runLines(t, m, tk, o)
	passed, codeLines := 0, 0
	for _, l := range lines {
		if l.Bench != "code_mini" {
			if strings.Contains(l.Prompt, "Write it:") || l.Reason != "" {
				t.Fatalf("a math line with the code prompt or a code verdict: %+v", l)
			}
			continue
		}
		codeLines++
		printable := l.Response != "" && strings.IndexFunc(l.Response, func(r rune) bool { return r < ' ' || r > '~' }) < 0
		if !strings.Contains(l.Prompt, "Write it:") || l.Reason == "" || l.Correct != (l.Reason == "passed") || (printable && !l.Correct) {
			t.Fatalf("code line: %+v", l)
		}
		if l.Correct {
			passed++
		}
	}
	if codeLines != 4*o.K || passed == 0 {
		t.Fatalf("%d code lines, %d passed", codeLines, passed)
	}
	sums := Summarize(lines, o.K, o.Benchmarks, o.Modes, Contamination{})
	if !sums[1].Code || sums[1].MeanAtK != float64(passed)/float64(codeLines) {
		t.Fatalf("code summary %+v, want mean@k %d/%d", sums[1], passed, codeLines)
	}
	if _, ok := Flatten(sums)["code_mini/zero-shot/maj@k"]; ok {
		t.Fatal("maj@k reported for code")
	}
}
