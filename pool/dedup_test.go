package pool

import (
	"math/rand"
	"sort"
	"strings"
	"testing"
)

// TestNearDuplicatesAreNeverRetrieved: the same problem under another id
// (MATH's own duplicate, and reformatted copies of real problems) is never
// a candidate for it, while different problems with the same words are.
func TestNearDuplicatesAreNeverRetrieved(t *testing.T) {
	problems := realProblems(t)
	p := newPool(t, DefaultConfig())
	for _, pr := range problems {
		p.Add(pr.Problem, entry(pr.ID, true, "x"))
	}
	byID := map[string]testProblem{}
	for _, pr := range problems {
		byID[pr.ID] = pr
	}
	// MATH: train/geometry/6032 is test/precalculus/24307.
	dup := byID["math_train-11996"]
	for _, c := range p.Candidates("math_train-3192", byID["math_train-3192"].Problem, 10) {
		if c.ProblemID == dup.ID {
			t.Fatalf("MATH's duplicate was retrieved for its twin (similarity %.3f)", Similarity(dup.Problem, byID["math_train-3192"].Problem))
		}
	}
	reformat := strings.NewReplacer(`\frac`, `\dfrac`, " ", "  ", "$", "$ ", "\n", " ")
	rng := rand.New(rand.NewSource(5))
	for i := 0; i < 100; i++ {
		pr := problems[rng.Intn(len(problems))]
		copyText := reformat.Replace(pr.Problem)
		if s := Similarity(pr.Problem, copyText); s < p.cfg.NearDuplicate {
			t.Fatalf("a reformatted copy has similarity %.3f < %.2f:\n%s\n%s", s, p.cfg.NearDuplicate, pr.Problem, copyText)
		}
		for _, c := range p.Candidates("copy-of-"+pr.ID, copyText, 10) {
			if c.ProblemID == pr.ID {
				t.Fatalf("%s was retrieved for its own reformatted copy", pr.ID)
			}
		}
	}
}

// TestSimilarityOnRealProblems: distinct real problems sit far below the
// near-duplicate threshold (the largest value among all pairs of the
// subset, the duplicate pair aside, is reported), so the threshold removes
// copies, not related problems.
func TestSimilarityOnRealProblems(t *testing.T) {
	problems := realProblems(t)
	sh := make([]map[uint64]struct{}, len(problems))
	for i, pr := range problems {
		sh[i] = shingles(pr.Problem)
	}
	var sims []float64
	for i := range problems {
		for j := i + 1; j < len(problems); j++ {
			if strings.TrimSpace(problems[i].Problem) == strings.TrimSpace(problems[j].Problem) {
				continue // MATH's duplicate (one copy ends in a newline)
			}
			sims = append(sims, jaccard(sh[i], sh[j]))
		}
	}
	sort.Float64s(sims)
	top := sims[len(sims)-1]
	t.Logf("%d pairs of distinct problems: median similarity %.3f, 99.9th percentile %.3f, max %.3f",
		len(sims), sims[len(sims)/2], sims[len(sims)*999/1000], top)
	if top >= DefaultConfig().NearDuplicate {
		t.Fatalf("two distinct problems have similarity %.3f ≥ the near-duplicate threshold", top)
	}
}

// TestBM25Calibration: normalized BM25 on real problem pairs — same
// subject vs random — at a range of thresholds. Same-subject pairs must
// score higher on average; the pass rates are logged (and reported in the
// notes): at γ = 0.9 normalized BM25 passes almost nothing, which is why it
// is the cheap mode and not the default relevance.
func TestBM25Calibration(t *testing.T) {
	problems := realProblems(t)
	p := newPool(t, DefaultConfig())
	for _, pr := range problems {
		p.Add(pr.Problem, entry(pr.ID, true, "x"))
	}
	subject := map[string]string{}
	for _, pr := range problems {
		subject[pr.ID] = pr.Subject
	}
	rng := rand.New(rand.NewSource(11))
	var same, random []float64
	for _, q := range problems {
		for _, c := range p.Candidates(q.ID, q.Problem, len(problems)) {
			if subject[c.ProblemID] == q.Subject {
				same = append(same, c.Normalized)
			}
			if rng.Intn(7) == 0 {
				random = append(random, c.Normalized)
			}
		}
	}
	mean := func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s / float64(len(x))
	}
	pass := func(x []float64, g float64) float64 {
		n := 0
		for _, v := range x {
			if v >= g {
				n++
			}
		}
		return float64(n) / float64(len(x))
	}
	for _, g := range []float64{0.1, 0.2, 0.3, 0.5, 0.9} {
		t.Logf("γ %.1f: same subject %.4f pass, random %.4f", g, pass(same, g), pass(random, g))
	}
	t.Logf("mean normalized BM25: same subject %.3f (%d pairs), random %.3f (%d pairs)", mean(same), len(same), mean(random), len(random))
	if mean(same) <= mean(random) {
		t.Fatal("same-subject pairs do not score higher than random ones")
	}
}
