package feedback

import (
	"math"
	"testing"

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
