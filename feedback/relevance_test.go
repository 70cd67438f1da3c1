package feedback

import (
	"math"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
)

func TestExpectedDigitAndCentredCosine(t *testing.T) {
	lp := make([]float64, 10)
	for d := range lp {
		lp[d] = -100
	}
	lp[9] = 0
	if e := expectedDigit(lp); e < 8.99 {
		t.Fatalf("all mass on 9: %v", e)
	}
	for d := range lp {
		lp[d] = -2.3
	}
	if e := expectedDigit(lp); e != 4.5 {
		t.Fatalf("uniform: %v", e)
	}
	// A shared offset makes raw cosines near 1; centring removes it.
	vs := [][]float32{{100, 1, 0}, {100, 0, 1}, {100, -1, 0}, {100, 0, -1}}
	c := centre(vs, meanOf(vs))
	if raw := cosine([]float64{100, 1, 0}, []float64{100, 0, 1}); raw < 0.99 {
		t.Fatalf("raw cosine %v", raw)
	}
	if got := cosine(c[0], c[1]); got > 1e-9 || got < -1e-9 {
		t.Fatalf("centred orthogonal vectors: cosine %v", got)
	}
	if got := cosine(c[0], c[2]); got > -0.999 {
		t.Fatalf("centred opposite vectors: cosine %v", got)
	}
}

func TestQuantiles(t *testing.T) {
	ref := []float64{0.1, 0.2, 0.2, 0.3, 0.9}
	got := quantiles([]float64{0.05, 0.2, 0.25, 0.95, 0.9}, ref)
	want := []float64{0, 0.2 + 0.2, 0.6, 1, 0.8 + 0.1} // below + half the ties, over 5
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("quantiles %v, want %v", got, want)
		}
	}
	if q := quantiles([]float64{0.5}, nil); q[0] != 0 {
		t.Fatalf("no reference: %v passes", q)
	}
}

// lanpo.lesson_order reaches the lessons abstraction reads: recency gives
// a related problem's newest entries, outcome its solved ones first.
func TestLessonOrderReachesAbstraction(t *testing.T) {
	p, err := pool.New(pool.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p.Add("What is 7 zorp 3?", pool.Entry{ProblemID: "z1", Step: 1, Correct: true, Summary: pool.Summary{Principles: "zorp is aab."}})
	p.Add("What is 7 zorp 3?", pool.Entry{ProblemID: "z1", Step: 2, Summary: pool.Summary{Principles: "zorp is not ba."}})
	cfg := Default()
	cfg.LessonsPerProblem = 1
	for order, want := range map[string]string{"": "zorp is not ba.", orderRecency: "zorp is not ba.", orderOutcome: "zorp is aab."} {
		cfg.LessonOrder = order
		if order == "" {
			cfg.Resolve(16)
		}
		got := relatedLessons(p, "z1", "", cfg)
		if len(got) != 1 || got[0].Principles != want {
			t.Errorf("lesson_order %q: %+v, want %q", order, got, want)
		}
	}
}

// TestLessonsContext: with lanpo.context: lessons an abstraction prompt
// shows the solver the related problems' lessons themselves, with the
// which-apply instruction, and no plan is generated (the condenser's token
// count stays 0); with plan (the default) the condenser writes one.
func TestLessonsContext(t *testing.T) {
	m, tk := loadWarm(t)
	for _, context := range []string{"plan", "lessons"} {
		f, _, res := seededAbstraction(t, m, tk, 4, "lanpo.similarity=bm25", "lanpo.similarity_threshold=0", "lanpo.relevance_floor=0", "lanpo.context="+context)
		_, _, generated := f.Counters()
		made := 0
		for i, r := range res {
			if r.ids == nil {
				continue
			}
			made++
			prompt := tk.Decode(tokenizer.Ints(r.ids), false)
			if context == "lessons" {
				want := f.prompts.LessonsContext(r.lessons)
				if r.plan != want || !strings.Contains(prompt, want) || !strings.Contains(prompt, "First work out which of them apply") {
					t.Fatalf("item %d: the prompt does not carry its lessons:\n%s", i, prompt)
				}
				if !strings.Contains(prompt, "Principle: "+r.lessons[0].Principles) {
					t.Fatalf("item %d: the first lesson's principle is not shown:\n%s", i, prompt)
				}
			} else if !strings.Contains(prompt, f.prompts.AbstractionContext(r.plan)) {
				t.Fatalf("item %d: the plan prompt lacks its plan:\n%s", i, prompt)
			}
		}
		if made == 0 {
			t.Fatalf("context %s: no abstraction prompt made", context)
		}
		if (context == "lessons") != (generated == 0) {
			t.Fatalf("context %s: the condenser generated %d tokens", context, generated)
		}
	}
	cfg := Default()
	cfg.Context = "summary"
	if err := cfg.Validate(16); err == nil || !strings.Contains(err.Error(), "lanpo.context") {
		t.Fatalf("lanpo.context summary: %v", err)
	}
}
