package eval

import (
	"github.com/lanpo-rl/lanpo/reward"
)

// PassAtK is the unbiased estimator of pass@k from n samples of which c are
// right (Chen et al. 2021, "Evaluating Large Language Models Trained on
// Code"): 1 − C(n−c, k) / C(n, k), computed as a product so large n does
// not overflow.
func PassAtK(n, c, k int) float64 {
	if k > n || k < 1 {
		panic("pass@k needs 1 ≤ k ≤ n")
	}
	if n-c < k {
		return 1
	}
	prod := 1.0
	for i := n - c + 1; i <= n; i++ {
		prod *= 1 - float64(k)/float64(i)
	}
	return 1 - prod
}

// powersOfTwo lists 1, 2, 4, … up to k.
func powersOfTwo(k int) []int {
	var out []int
	for p := 1; p <= k; p *= 2 {
		out = append(out, p)
	}
	return out
}

// vote is one sample's extracted answer and verdict.
type vote struct {
	answer  string // "" when nothing was extracted
	correct bool
}

// MajorityCorrect reports whether the majority answer among votes is right
// (maj@k): answers are grouped by mathematical equivalence (reward/), the
// largest group wins (ties: the group whose first answer came first), and
// its verdict is the group's. Samples without an answer do not vote; with
// no answer at all it is wrong.
func majorityCorrect(votes []vote) bool {
	type group struct {
		rep     string
		correct bool
		n       int
	}
	var groups []*group
	for _, v := range votes {
		if v.answer == "" {
			continue
		}
		var into *group
		for _, g := range groups {
			if g.rep == v.answer || reward.Equivalent(g.rep, v.answer, reward.Options{}) {
				into = g
				break
			}
		}
		if into == nil {
			into = &group{rep: v.answer, correct: v.correct}
			groups = append(groups, into)
		}
		into.n++
	}
	var best *group
	for _, g := range groups {
		if best == nil || g.n > best.n {
			best = g
		}
	}
	return best != nil && best.correct
}
