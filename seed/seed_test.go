package seed

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/trainertest"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/trainer"
)

func TestMain(m *testing.M) {
	code := m.Run()
	trainertest.Cleanup()
	os.Exit(code)
}

// seedConfig is the tiny LANPO config with small budgets for seeding.
func seedConfig(t *testing.T) trainer.Config {
	t.Helper()
	// The tiny tokenizer is byte-level: 64 tokens are about 60 characters.
	return trainertest.LANPOConfig(t, "lanpo.summary_field_tokens=64", "lanpo.similarity_threshold=0", "rollout.max_new_tokens=16")
}

// TestSeedFilters: each filter on hand-made cases.
func TestSeedFilters(t *testing.T) {
	m, tk := trainertest.LoadWarm(t)
	cfg := seedConfig(t)
	p, _ := pool.New(cfg.LANPO.PoolConfig())
	f, err := feedback.NewBuilder(m, tk, cfg.FeedbackSettings(), p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewBuilder(cfg, tk)
	st := &state{Stats: map[string]*Stats{}}
	for _, k := range Skills {
		st.Stats[k] = &Stats{Target: 100}
	}
	var rejected bytes.Buffer
	s := &seeder{m: m, tk: tk, f: f, b: b, o: Options{Config: cfg, Rejected: &rejected}, st: st}
	pr := trainer.Problem{ID: "p", Problem: "What is 5 - 2?", Answer: "3"}
	var out []Example

	s.keepAnswers([]trainer.Problem{pr}, []attempt{{problem: 0, text: `\boxed{4}`}, {problem: 0, text: `\boxed{3}`, correct: true}}, &out)
	if len(out) != 1 || st.Stats[SkillAnswer].Rejected["wrong answer"] != 1 || !strings.Contains(out[0].Messages[len(out[0].Messages)-1].Content, `\boxed{3}`) {
		t.Fatalf("answers: kept %v, stats %+v", out, st.Stats[SkillAnswer])
	}

	att := &attempt{text: "5 - 2 = 3, so the answer is \\boxed{3}.", correct: true}
	good := pool.Summary{FlowOfThought: "Subtracted.", Principles: "Take the smaller number from the larger.", Pitfalls: "Adding instead."}
	for _, c := range []struct {
		sum  pool.Summary
		want string
	}{
		{pool.Summary{FlowOfThought: "x", Principles: "", Pitfalls: "y"}, "empty field"},
		{pool.Summary{FlowOfThought: "x", Principles: strings.Repeat("word ", 30), Pitfalls: "q"}, "field over its token budget"},
		{pool.Summary{FlowOfThought: "5 - 2 = 3, so the answer", Principles: "is \\boxed{3}.", Pitfalls: "5 - 2 = 3"}, "copies the attempt"},
		{good, ""},
	} {
		if got := s.checkSummary(c.sum, att.text); got != c.want {
			t.Errorf("summary %+v: %q, want %q", c.sum, got, c.want)
		}
	}
	s.keepSummary(pr, att, good, &out)
	if p.Entries() != 1 || out[len(out)-1].Skill != SkillSummarize {
		t.Fatalf("a good summary: pool %d entries, last example %+v", p.Entries(), out[len(out)-1])
	}
	if e := p.EntriesOf("p")[0]; strings.Contains(e.Summary.Principles, "3") {
		t.Fatalf("the pool's lesson keeps the gold answer: %q", e.Summary.Principles)
	}

	right, wrong := &attempt{text: "\\boxed{3}", correct: true}, &attempt{text: "\\boxed{9}"}
	n := len(out)
	if err := s.keepReflection(pr, wrong, wrong.text, "Let me redo: \\boxed{4}", false, &out); err != nil { // redo wrong
		t.Fatal(err)
	}
	if err := s.keepReflection(pr, right, right.text, "Checked: \\boxed{3}", false, &out); err != nil { // kept: right shown (0 vs 0)
		t.Fatal(err)
	}
	if err := s.keepReflection(pr, right, right.text, "Again \\boxed{3}", false, &out); err != nil { // balance: a second right before a wrong
		t.Fatal(err)
	}
	if err := s.keepReflection(pr, wrong, wrong.text, "Fixed: \\boxed{3}", false, &out); err != nil { // kept: wrong shown
		t.Fatal(err)
	}
	rs := st.Stats[SkillReflect]
	if len(out)-n != 2 || rs.Rejected["redo wrong"] != 1 || rs.Rejected["outcome balance"] != 1 || st.RightShown != 1 || st.WrongShown != 1 {
		t.Fatalf("reflections: kept %d, stats %+v, shown right %d wrong %d", len(out)-n, rs, st.RightShown, st.WrongShown)
	}
	if !strings.Contains(rejected.String(), `"reason":"redo wrong"`) || !strings.Contains(rejected.String(), `"reason":"wrong answer"`) {
		t.Fatalf("rejected candidates not written: %s", rejected.String())
	}
}

func seedOptions(t *testing.T, out string, problems []trainer.Problem) Options {
	return Options{Config: seedConfig(t), Problems: problems, Out: out, N: 40, K: 4, Batch: 4,
		Mix: map[string]float64{SkillAnswer: 1, SkillSummarize: 1, SkillReflect: 1, SkillAbstract: 1}}
}

// TestSeedEndToEndAndResume: a seed run with the warmed-up tiny model as
// its own teacher writes chats lanpo sft trains on, reports statistics, and
// a run stopped after one batch and resumed writes the same file, byte for
// byte.
func TestSeedEndToEndAndResume(t *testing.T) {
	m, tk := trainertest.LoadWarm(t)
	problems, err := trainer.LoadProblems(trainertest.LANPOData(), false)
	if err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(t.TempDir(), "seed.jsonl")
	stats, err := Run(m, tk, seedOptions(t, full, problems))
	if err != nil {
		t.Fatal(err)
	}
	exs, err := jsonl.Read[Example](full)
	if err != nil {
		t.Fatal(err)
	}
	kept, tried := 0, 0
	for _, k := range Skills {
		kept += stats[k].Kept
		tried += stats[k].Tried
	}
	for _, k := range Skills {
		t.Logf("%s: %+v", k, *stats[k])
	}
	if len(exs) != kept || stats[SkillAnswer].Kept == 0 || tried == kept {
		t.Fatalf("%d examples for %d kept; answers kept %d; tried %d", len(exs), kept, stats[SkillAnswer].Kept, tried)
	}

	part := filepath.Join(t.TempDir(), "seed.jsonl")
	o := seedOptions(t, part, problems)
	o.StopAfterBatches = 1
	if _, err := Run(m, tk, o); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(m, tk, seedOptions(t, part, problems)); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("a second start without --resume: %v", err)
	}
	o.StopAfterBatches, o.Resume = 0, true
	if _, err := Run(m, tk, o); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", ".state.json", ".pool.jsonl"} {
		a, _ := os.ReadFile(full + suffix)
		b, _ := os.ReadFile(part + suffix)
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Fatalf("seed%s differs after stopping and resuming", suffix)
		}
	}

	// The file is SFT data as it is.
	cfg, err := trainer.LoadConfig(trainertest.Path("configs/tiny-sft.yaml"), []string{"run_dir=" + filepath.Join(t.TempDir(), "sft"), "data.train=" + full,
		"data.eval=", "model=" + trainertest.WarmTiny(t), "total_steps=2", "sft.max_len=512"})
	if err != nil {
		t.Fatal(err)
	}
	if err := trainer.RunSFT(context.Background(), cfg, "", trainer.RunOptions{}); err != nil {
		t.Fatalf("lanpo sft on the seed file: %v", err)
	}
}

// TestSeedNeverShowsGold: with gold answers no model can write, no prompt
// of any candidate — kept or rejected — contains one: the builders never
// receive a gold answer, only the verifier does.
func TestSeedNeverShowsGold(t *testing.T) {
	m, tk := trainertest.LoadWarm(t)
	problems, _ := trainer.LoadProblems(trainertest.LANPOData(), false)
	for i := range problems {
		problems[i].Answer = "GOLD" + strings.Repeat("Q", i+1) + "X"
	}
	out := filepath.Join(t.TempDir(), "seed.jsonl")
	var rejected bytes.Buffer
	o := seedOptions(t, out, problems)
	o.Rejected = &rejected
	if _, err := Run(m, tk, o); err != nil {
		t.Fatal(err)
	}
	kept, _ := os.ReadFile(out)
	all := string(kept) + rejected.String()
	if !strings.Contains(all, "summarize") || !strings.Contains(all, "Here is an earlier attempt") {
		t.Fatal("no summarize or reflect prompt was built: the test shows nothing")
	}
	if strings.Contains(all, "GOLD") {
		t.Fatal("a gold answer reached a seed prompt")
	}
}
