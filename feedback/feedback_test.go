package feedback

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
)

// TestReflectionShowsTheWholeAttempt: one rule decides what a reflection
// prompt shows of an earlier attempt, in training (from the pool) and in
// lanpo eval's self-correct mode (the first attempt, directly):
//   - an attempt up to rollout.max_new_tokens is shown whole, even when it
//     is longer than lanpo.max_context_tokens or than the pool's old
//     6,000-byte cap;
//   - a longer one keeps its beginning and its end around a marker, within
//     lanpo.max_attempt_tokens;
//   - the pool's stored copy gives the same prompt as the text itself;
//   - where the model's context leaves less room, less is shown, and the
//     prompt still leaves the generation budget.
func TestReflectionShowsTheWholeAttempt(t *testing.T) {
	m, tk := loadWarm(t)
	cfg := TinySettings(t, "rollout.max_new_tokens=300", "lanpo.max_context_tokens=32", "lanpo.max_attempt_tokens=0")
	if cfg.LANPO.MaxAttemptTokens != 300 {
		t.Fatalf("lanpo.max_attempt_tokens defaults to %d, want rollout.max_new_tokens", cfg.LANPO.MaxAttemptTokens)
	}
	p, err := pool.New(cfg.LANPO.PoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	F, err := NewBuilder(m, tk, cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	const problem = "What is 5 - 2?"
	shown := func(text string) string {
		t.Helper()
		ids, ok, err := F.Reflection(problem, text)
		if err != nil || !ok {
			t.Fatalf("reflection: ok %v, %v", ok, err)
		}
		return tk.Decode(tokenizer.Ints(ids), false)
	}
	tokens := func(s string) int {
		ids, err := tk.Encode(s, false)
		if err != nil {
			t.Fatal(err)
		}
		return len(ids)
	}
	// The tiny tokenizer is byte-level: keep within 300 tokens and past 32
	// (max_context_tokens).
	whole := "Start: x ≤ 3. " + strings.Repeat("step ", 40) + "End: \\boxed{3}"
	if n := tokens(whole); n <= 32 || n > 300 {
		t.Fatalf("the attempt has %d tokens; want (32, 300]", n)
	}
	got := shown(whole)
	if !strings.Contains(got, whole) {
		t.Fatalf("an attempt within rollout.max_new_tokens was not shown whole:\n%s", got)
	}
	p.Add(problem, pool.Entry{ProblemID: "p", Attempt: whole})
	a, _ := p.AttemptFor("p", 0)
	if shown(a.Text) != got {
		t.Fatal("the pool's copy of the attempt gives another prompt than the attempt itself")
	}

	long := "Start: x ≤ 3. " + strings.Repeat("more steps ", 60) + "End: \\boxed{3}"
	got = shown(long)
	if strings.Contains(got, long) || !strings.Contains(got, "Start: x ≤ 3.") || !strings.Contains(got, "End: \\boxed{3}") || !strings.Contains(got, "[…]") {
		t.Fatalf("a long attempt is not shown as beginning and end:\n%s", got)
	}
	if !utf8.ValidString(got) {
		t.Fatal("the shown attempt is not valid UTF-8")
	}

	// A model context that leaves 64 tokens for the attempt beside the
	// rest of the prompt and 300 to generate: the attempt shrinks, the
	// prompt still fits.
	empty, err := cfg.Format.SolveIDs(tk, pool.WithContext(problem, pool.DefaultPrompts().ReflectionContext(pool.Attempt{})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := int64(len(empty) + 300 + 64)
	old := m.Config.MaxPositionEmbeddings
	m.Config.MaxPositionEmbeddings = ctx
	defer func() { m.Config.MaxPositionEmbeddings = old }()
	ids, ok, err := F.Reflection(problem, whole)
	if err != nil || !ok {
		t.Fatalf("reflection in a small context: ok %v, %v", ok, err)
	}
	if int64(len(ids)+300) > ctx {
		t.Fatalf("the prompt (%d tokens) leaves no room for 300 new ones in %d", len(ids), ctx)
	}
	if text := tk.Decode(tokenizer.Ints(ids), false); strings.Contains(text, whole) || !strings.Contains(text, "[…]") {
		t.Fatalf("in a small context the attempt should be cut:\n%s", text)
	}
}

// TestSummaryFieldsStopAtTheNextHeader: a field that runs on into another
// field in the model's own words ends there (counted).
func TestSummaryFieldsStopAtTheNextHeader(t *testing.T) {
	m, tk := loadWarm(t)
	f, err := NewBuilder(m, tk, TinySettings(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	P := f.prompts
	headers := []string{"Flow of thought:", P.PrinciplesHeader, P.PitfallsHeader}
	got := f.cleanField("I listed the multiples of 10.\nPrinciples worth reusing on other problems: count both ends.", headers, 0)
	if got != "I listed the multiples of 10." || f.met.SummaryFieldsCut != 1 {
		t.Fatalf("flow field %q (cut %d)", got, f.met.SummaryFieldsCut)
	}
	if got := f.cleanField("Count both ends.", headers, 1); got != "Count both ends." || f.met.SummaryFieldsCut != 1 {
		t.Fatalf("clean field %q (cut %d)", got, f.met.SummaryFieldsCut)
	}
	// A field that starts over with its own header (a real run's principles).
	again := "2. The solution to this equation is x = 200.\n" + P.PrinciplesHeader + " 3. The solution to this equation is 200."
	if got := f.cleanField(again, headers, 1); got != "2. The solution to this equation is x = 200." || f.met.SummaryFieldsCut != 2 {
		t.Fatalf("field restarting itself %q (cut %d)", got, f.met.SummaryFieldsCut)
	}
}

// TestSummaryInOnePass: each attempt's summary prefills its prompt once
// (not once per field) and generates at most every field's budget plus the
// headers fed between them; the flow of thought is written only when the
// prompts ask for it, first.
func TestSummaryInOnePass(t *testing.T) {
	m, tk := loadWarm(t)
	cfg := TinySettings(t, "lanpo.aux_temperature=1", "lanpo.summary_field_tokens=6")
	for _, flow := range []string{"", "Flow of thought:"} {
		f, err := NewBuilder(m, tk, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.prompts.FlowHeader = flow
		headers := f.prompts.SummaryHeaders()
		problems, attempts := []string{"What is 2+3?", "What is 7-4?"}, []string{"2+3 = 5. \\boxed{5}", "7-4 is 2. \\boxed{2}"}
		want := 0
		for i := range problems {
			ids, err := tk.ChatIDs(AuxChat(f.prompts, f.prompts.SummarizeRequest(problems[i], attempts[i], i == 0)), tokenizer.ChatOptions{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			pre, _ := tk.Encode(headers[0], false)
			want += len(ids) + len(pre)
		}
		sums, err := f.summarize(problems, attempts, []bool{true, false}, []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		budget := 0
		for k, h := range headers {
			budget += 6
			if k > 0 {
				ids, _ := tk.Encode("\n"+h, false)
				budget += len(ids)
			}
		}
		if f.tokens.prefilled != want || f.tokens.generated > 2*budget || f.tokens.generated < 2*len(headers) {
			t.Fatalf("flow %q: prefilled %d tokens (want %d, each prompt once), generated %d (budget %d per summary)", flow, f.tokens.prefilled, want, f.tokens.generated, budget)
		}
		for _, s := range sums {
			if flow == "" && s.FlowOfThought != "" {
				t.Fatalf("flow of thought written without its header: %+v", s)
			}
			for _, field := range []string{s.FlowOfThought, s.Principles, s.Pitfalls} {
				for _, h := range headers {
					if strings.Contains(field, h) {
						t.Fatalf("a field holds the header %q: %+v", h, s)
					}
				}
			}
		}
	}
}

// TestSummaryOnePassMatchesFieldByField: greedy, the one-pass summary is
// the one written field by field (each field a separate generation that
// prefills the prompt and the fields before it), with the flow of thought
// and without, on random weights (fields ended by their budgets) and on the
// warmed tiny model (fields ended by a special token after one token).
func TestSummaryOnePassMatchesFieldByField(t *testing.T) {
	warmM, warmTk := loadWarm(t)
	dir := t.TempDir()
	if err := WriteBuiltin("tiny", dir, 3); err != nil {
		t.Fatal(err)
	}
	randM, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer randM.Close()
	randTk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := TinySettings(t, "lanpo.aux_temperature=0", "lanpo.summary_field_tokens=8")
	problems := []string{"What is 2+3?", "What is 7-4?", "Add 10 and 5."}
	attempts := []string{"2+3 = 5. \\boxed{5}", "7-4 is 2. \\boxed{2}", "10 + 5 = 15, so \\boxed{15}."}
	correct := []bool{true, false, true}
	for _, c := range []struct {
		name string
		m    *model.Model
		tk   *tokenizer.Tokenizer
	}{{"random", randM, randTk}, {"warm", warmM, warmTk}} {
		for _, flow := range []string{"", "Flow of thought:"} {
			f, err := NewBuilder(c.m, c.tk, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			f.prompts.FlowHeader = flow
			one, err := f.summarize(problems, attempts, correct, []int{0, 1, 2})
			if err != nil {
				t.Fatal(err)
			}
			by, err := f.summarizeByField(problems, attempts, correct, []int{0, 1, 2})
			if err != nil {
				t.Fatal(err)
			}
			filled := 0
			for i := range one {
				filled += 2 - one[i].Empty()
				if one[i] != by[i] {
					t.Errorf("%s, flow %q, attempt %d:\none pass   %+v\nby field   %+v", c.name, flow, i, one[i], by[i])
				}
			}
			if filled < len(one) {
				t.Fatalf("%s, flow %q: only %d lesson fields written: the comparison shows little (%+v)", c.name, flow, filled, one)
			}
		}
	}
}

// TestBenchSummaries: lanpo bench summaries' measurement writes the same
// summaries both ways (greedy) and counts the baseline's repeated prefills.
func TestBenchSummaries(t *testing.T) {
	path, _ := seededPool(t)
	cfg := TinySettings(t, "lanpo.aux_temperature=0", "lanpo.summary_field_tokens=8")
	m, tk := loadWarm(t)
	by, one, err := BenchSummariesFromPool(m, tk, cfg, path, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Summaries) != 5 || fmt.Sprint(by.Summaries) != fmt.Sprint(one.Summaries) {
		t.Fatalf("summaries differ:\n%+v\n%+v", by.Summaries, one.Summaries)
	}
	if by.Prefilled <= one.Prefilled || one.Seconds <= 0 {
		t.Fatalf("by field prefilled %d, one pass %d (%.3f s)", by.Prefilled, one.Prefilled, one.Seconds)
	}
	if _, _, err := BenchSummariesFromPool(m, tk, cfg, filepath.Join(t.TempDir(), "none.jsonl"), 5); err == nil {
		t.Fatal("a missing pool file was accepted")
	}
}

// TestRelevanceFloor: a candidate passes when its relevance on the quantile
// scale reaches γ and its raw score reaches lanpo.relevance_floor; with
// γ = 0 the floor alone decides, and a floor of 1 lets nothing through.
func TestRelevanceFloor(t *testing.T) {
	m, tk := loadWarm(t)
	decide := func(floor string) (pass, fail int) {
		t.Helper()
		_, cfg, res := seededAbstraction(t, m, tk, 1<<30, "lanpo.similarity=bm25", "lanpo.similarity_threshold=0", "lanpo.relevance_floor="+floor)
		for _, r := range res {
			for _, c := range r.candidates {
				if c.Passed != (c.Raw >= *cfg.LANPO.RelevanceFloor && c.Relevance >= 0) {
					t.Fatalf("floor %s: candidate %s raw %v passed %v", floor, c.ProblemID, c.Raw, c.Passed)
				}
				if c.Passed {
					pass++
				} else {
					fail++
				}
			}
			if r.ids != nil && len(r.lessons) == 0 {
				t.Fatal("an abstraction prompt without lessons")
			}
		}
		return pass, fail
	}
	if pass, fail := decide("0"); pass == 0 || fail != 0 {
		t.Fatalf("floor 0: %d passed, %d failed; want all to pass", pass, fail)
	}
	if pass, fail := decide("0.5"); pass == 0 || fail == 0 {
		t.Fatalf("floor 0.5: %d passed, %d failed; want both (the test decides nothing)", pass, fail)
	}
	if pass, _ := decide("1"); pass != 0 {
		t.Fatalf("floor 1: %d passed", pass)
	}
}

// TestRelevanceFilterBoundaries: γ and the floor are both inclusive, and
// each alone can reject.
func TestRelevanceFilterBoundaries(t *testing.T) {
	floor := 0.5
	f := &Builder{cfg: Config{SimilarityThreshold: 0.9, RelevanceFloor: &floor}}
	for _, c := range []struct {
		scaled, raw float64
		want        bool
	}{{0.95, 0.6, true}, {0.9, 0.5, true}, {0.89, 0.6, false}, {0.95, 0.49, false}, {0.89, 0.49, false}} {
		if got := f.passes(c.scaled, c.raw); got != c.want {
			t.Errorf("passes(scaled %v, raw %v) = %v, want %v", c.scaled, c.raw, got, c.want)
		}
	}
}

// TestEmbeddingCentre: centred on the fixed set of math problems
// (lanpo.embedding_centre: fixed), a pair's raw score is the same whatever
// else is scored with it — so relevance_floor means the same in any pool;
// centred on the texts scored together (batch), it moves with them.
func TestEmbeddingCentre(t *testing.T) {
	m, tk := loadWarm(t)
	if n := len(centreProblems()); n != 56 {
		t.Fatalf("%d centre problems, want 56 (8 per MATH subject)", n)
	}
	prefilled := 0
	env := scorerEnv{m: m, tk: tk, prompts: pool.DefaultPrompts(), maxContext: 256, prefilled: &prefilled}
	pair := relevancePair{query: "What is 5 - 2?", candidate: "What is 8 - 1?"} // the tiny model knows these
	alone := []relevancePair{pair}
	crowd := []relevancePair{pair}
	others := centreProblems()[:7]
	for i := range others {
		crowd = append(crowd, relevancePair{query: others[i], candidate: others[(i+1)%len(others)]})
	}
	scores := func(centre []string) (float64, float64) {
		t.Helper()
		env.centre = centre
		a, err := embeddingScorer{env}.score(alone)
		if err != nil {
			t.Fatal(err)
		}
		c, err := embeddingScorer{env}.score(crowd)
		if err != nil {
			t.Fatal(err)
		}
		return a[0], c[0]
	}
	a, c := scores(centreProblems())
	if math.Abs(a-c) > 1e-4 {
		t.Fatalf("fixed centre: the pair scores %v alone and %v among other problems", a, c)
	}
	before := prefilled
	a2, c2 := scores(nil)
	t.Logf("fixed centre: alone %.4f, in a crowd %.4f; batch centre: alone %.4f, in a crowd %.4f", a, c, a2, c2)
	if math.Abs(a2-c2) < 0.05 {
		t.Fatalf("batch centre: the pair scores %v alone and %v among other problems: the test decides nothing", a2, c2)
	}
	if prefilled-before >= before {
		t.Fatalf("the fixed centre prefilled no more than the batch centre (%d vs %d tokens)", before, prefilled-before)
	}

	cfg := TinySettings(t)
	if cfg.LANPO.EmbeddingCentre != centreFixed {
		t.Fatalf("default lanpo.embedding_centre %q", cfg.LANPO.EmbeddingCentre)
	}
	bad := cfg.LANPO
	bad.EmbeddingCentre = "pool"
	if err := bad.Validate(64); err == nil || !strings.Contains(err.Error(), "lanpo.embedding_centre") {
		t.Fatalf("a bad embedding_centre: %v", err)
	}
}
