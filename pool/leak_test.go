package pool

import (
	"fmt"
	"math"
	"math/rand"
	"regexp"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

type testProblem struct {
	ID, Problem, Answer, Subject string
}

// realProblems are 40 MATH train problems of each subject plus MATH's one
// duplicated problem (testdata/math_subset.jsonl).
func realProblems(t *testing.T) []testProblem {
	t.Helper()
	ps, err := jsonl.Read[testProblem]("testdata/math_subset.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// randomPool fills a pool with entries at random problems, random
// outcomes and rewards, and summaries that state each problem's gold
// answer (boxed and plain), as careless summaries would.
func randomPool(t *testing.T, rng *rand.Rand, problems []testProblem, n int) *Pool {
	p := newPool(t, DefaultConfig())
	for i := 0; i < n; i++ {
		pr := problems[rng.Intn(len(problems))]
		ok := rng.Intn(2) == 0
		e := Entry{ProblemID: pr.ID, Step: i / 8, Correct: ok, Reward: map[bool]float64{true: 1, false: 0}[ok],
			Attempt: fmt.Sprintf("attempt-%d: some work ... so the result is %d", i, rng.Intn(1000)),
			Summary: Summary{FlowOfThought: "I computed it.",
				Principles: fmt.Sprintf("Reduce to the key quantity; here it came to \\boxed{%s}.", pr.Answer),
				Pitfalls:   fmt.Sprintf("Do not stop before reaching %s, the final answer.", pr.Answer)}}
		p.Add(pr.Problem, e)
	}
	return p
}

// TestReflectionLeaksNothing: over random pools, flipping every entry's
// outcome and reward changes neither which attempt a reflection prompt
// shows nor one byte of it; the prompt holds the attempt's raw text and the
// template, never the gold answer or an outcome phrase.
func TestReflectionLeaksNothing(t *testing.T) {
	problems := realProblems(t)
	prompts := DefaultPrompts()
	for trial := 0; trial < 20; trial++ {
		rng := rand.New(rand.NewSource(int64(trial)))
		p := randomPool(t, rng, problems[:40], 300)
		flipped := randomPool(t, rand.New(rand.NewSource(int64(trial))), problems[:40], 300)
		for _, pr := range flipped.problems {
			for _, e := range pr.entries {
				e.Correct, e.Reward = !e.Correct, 1-e.Reward
			}
		}
		for _, pr := range problems[:40] {
			u := rng.Float64()
			a, ok := p.AttemptFor(pr.ID, u)
			b, ok2 := flipped.AttemptFor(pr.ID, u)
			if ok != ok2 {
				t.Fatal("availability depends on outcomes")
			}
			if !ok {
				continue
			}
			ctx := prompts.ReflectionContext(a)
			if ctx != prompts.ReflectionContext(b) {
				t.Fatalf("flipping outcomes changed the reflection prompt of %s", pr.ID)
			}
			if want := strings.ReplaceAll(prompts.Reflection, "{attempt}", a.Text); ctx != want {
				t.Fatalf("the prompt has more than the template and the attempt:\n%s", ctx)
			}
			for _, bad := range []string{prompts.OutcomeCorrect, prompts.OutcomeWrong, "correct", "wrong", "reward", "gold"} {
				if strings.Contains(strings.ToLower(ctx), strings.ToLower(bad)) && !strings.Contains(strings.ToLower(prompts.Reflection), strings.ToLower(bad)) {
					t.Fatalf("the reflection prompt says %q", bad)
				}
			}
			if strings.Contains(ctx, `\boxed{`+pr.Answer+`}`) || strings.Contains(ctx, "final answer") {
				t.Fatalf("the reflection prompt carries summary text:\n%s", ctx)
			}
		}
	}
}

// TestAttemptChoiceIgnoresOutcome: with 2 right and 6 wrong attempts, the
// chosen attempt is right 25% of the time (binomial, 20,000 draws, within
// 4.5 standard deviations); the failed-only variant never shows a right one.
func TestAttemptChoiceIgnoresOutcome(t *testing.T) {
	p := newPool(t, DefaultConfig())
	for i := 0; i < 8; i++ {
		p.Add("x", entry("p", i%4 == 1, fmt.Sprintf("a%d", i)))
	}
	right := map[string]bool{"a1": true, "a5": true}
	rng := rand.New(rand.NewSource(3))
	const n = 20000
	hits := 0
	for i := 0; i < n; i++ {
		a, _ := p.AttemptFor("p", rng.Float64())
		if right[a.Text] {
			hits++
		}
		if f, _ := p.FailedAttempt("p", rng.Float64()); right[f.Text] {
			t.Fatal("FailedAttempt showed a right attempt")
		}
	}
	sd := math.Sqrt(n * 0.25 * 0.75)
	if math.Abs(float64(hits)-n*0.25) > 4.5*sd {
		t.Fatalf("right attempts chosen %d of %d times, want about %d", hits, n, n/4)
	}
}

var tokenRE = regexp.MustCompile(`[A-Za-z0-9.]+`)

// TestAbstractionCarriesNoForeignAnswer: lessons of other problems, and the
// condense request built from them, contain no boxed answer, and a gold
// answer of the problem they come from only where the problem's own text
// has it too (then it tells nothing) and never where it is stated as the
// answer.
func TestAbstractionCarriesNoForeignAnswer(t *testing.T) {
	problems := realProblems(t)
	gold, text := map[string]string{}, map[string]string{}
	for _, pr := range problems {
		gold[pr.ID], text[pr.ID] = pr.Answer, pr.Problem
	}
	prompts := DefaultPrompts()
	kept := 0
	for trial := 0; trial < 10; trial++ {
		rng := rand.New(rand.NewSource(int64(100 + trial)))
		p := randomPool(t, rng, problems, 600)
		for _, q := range problems[:60] {
			var lessons []Lesson
			for _, c := range p.Candidates(q.ID, q.Problem, 4) {
				// lanpo.lesson_order recency and outcome, trial by trial
				lessons = append(lessons, p.Lessons(c.ProblemID, 3, gold[c.ProblemID], trial%2 == 1)...)
			}
			req := prompts.CondenseRequest(q.Problem, lessons)
			if strings.Contains(req, `\boxed`) {
				t.Fatalf("a boxed answer reached the condenser:\n%s", req)
			}
			for _, l := range lessons {
				a := strings.Trim(gold[l.ProblemID], "$ ")
				for _, field := range []string{l.Principles, l.Pitfalls} {
					if !hasToken(field, a) {
						continue
					}
					if !hasToken(text[l.ProblemID], a) {
						t.Fatalf("problem %s's answer %q is in its lesson: %s", l.ProblemID, a, field)
					}
					if strings.Contains(field, "reaching "+a+", the final answer") {
						t.Fatalf("problem %s's answer %q is stated in its lesson: %s", l.ProblemID, a, field)
					}
					kept++
				}
			}
		}
	}
	t.Logf("%d lesson fields kept a gold answer that their problem's text states itself", kept)
}

// hasToken reports whether tok stands in text as a token of its own.
func hasToken(text, tok string) bool { return len(tokenSpans(text, tok)) > 0 }

func TestStripAnswers(t *testing.T) {
	for _, c := range []struct{ name, in, problem, gold, want string }{
		{"boxed", `so \boxed{\frac{1}{2}} is it`, "", "", "so (answer omitted) is it"},
		{"nested boxes", `nested \boxed{\{1, 2\}} and \fbox{3}.`, "", "", "nested (answer omitted) and (answer omitted)."},
		{"unclosed box", `unclosed \boxed{12`, "", "", "unclosed (answer omitted)"},
		{"standalone, problem silent", "the answer 42 and 142 and 42.5 and x42", "", "42", "the answer (answer omitted) and 142 and 42.5 and x42"},
		{"inside other numbers", "3.42 then 42.", "", "42", "3.42 then (answer omitted)."},
		{"latex gold", `got $\frac{3}{4}$ here`, "", `\frac{3}{4}`, "got $(answer omitted)$ here"},
		{"no gold", "keep 7 apples", "", "", "keep 7 apples"},
		// From a real run (Qwen2.5-Coder-0.5B, MATH level 1): another
		// problem's gold 3 took list numbers; gold 10 took the problem's
		// own numbers.
		{"list numbering", "1. Identify the relation.\n2. Solve for x.\n3. Multiply the result by 9.", "What is 1+2?", "3",
			"1. Identify the relation.\n2. Solve for x.\n3. Multiply the result by 9."},
		{"list numbering, markup", "- 3) check the sign\n  3. again", "", "3", "- 3) check the sign\n  3. again"},
		{"number from the problem", "The first multiple of 10 in the range is 10 and the last is 100.",
			"How many multiples of 10 are between 9 and 101?", "10", "The first multiple of 10 in the range is 10 and the last is 100."},
		{"stated, though in the problem", "Count them: the answer is 10, as listed.", "How many multiples of 10 are between 9 and 101?", "10",
			"Count them: the answer is (answer omitted), as listed."},
		{"final line", "List the multiples of 10.\nSo there are 10.", "How many multiples of 10 are between 9 and 101?", "10",
			"List the multiples of 10.\nSo there are (answer omitted)."},
		{"answer colon", "Answer: $7$", "Add 3 and 4; 7 is prime.", "7", "Answer: $(answer omitted)$"},
		{"fraction, power, negative, minus", "1/3 and x^3 and -3, but x - 3", "", "3", "1/3 and x^3 and -3, but x - (answer omitted)"},
		{"thousands", "1,000 items; 1000 in all", "", "1000", "1,000 items; (answer omitted) in all"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := StripAnswers(c.in, c.problem, c.gold); got != c.want {
				t.Errorf("StripAnswers(%q, %q, %q) =\n %q\nwant\n %q", c.in, c.problem, c.gold, got, c.want)
			}
		})
	}
}

func TestCutAtHeader(t *testing.T) {
	hs := []string{"Principles:", "Pitfalls:"}
	for _, c := range []struct{ name, in, want string }{
		{"clean", "I set up the equation and solved it.", "I set up the equation and solved it."},
		// A real run's flow-of-thought field ran on into the next field.
		{"own words, next line", "I listed the multiples.\nPrinciples worth reusing on other problems: count the endpoints.", "I listed the multiples."},
		{"markup", "Tried factoring.\n**Pitfalls**: forgot a sign", "Tried factoring."},
		{"same line", "Tried factoring. Pitfalls: forgot a sign", "Tried factoring."},
		{"lower case mid-sentence stays", "The principles of counting apply here.", "The principles of counting apply here."},
		{"whole field is a header", "Principles: none", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := CutAtHeader(c.in, hs...); got != c.want {
				t.Errorf("CutAtHeader(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}
