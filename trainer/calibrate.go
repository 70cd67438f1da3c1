package trainer

import (
	"fmt"
	"math/rand"
	"runtime"
	"sort"
	"time"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
)

// Calibrating the relevance filter: γ only means something relative to the
// scores a scorer gives related and unrelated problems. CalibrateRelevance
// scores pairs of real problems from the same subject and from different
// subjects with each scorer and reports, per threshold, how many of each
// kind pass (`lanpo bench relevance`).

// CalibrationProblem is a problem with a topic label (MATH's subject).
type CalibrationProblem struct {
	ID      string `json:"id"`
	Problem string `json:"problem"`
	Subject string `json:"subject"`
}

// CalibrationOptions say what to score.
type CalibrationOptions struct {
	Model            string   // HF model directory (the policy)
	DType            string   // "" float32 on CPU
	Scorers          []string // policy, bm25, embedding
	Problems         []CalibrationProblem
	Pairs            int // of each kind
	Seed             int64
	MaxContextTokens int
	Thresholds       []float64
}

// ScorerCalibration is one scorer's result.
type ScorerCalibration struct {
	Scorer    string          `json:"scorer"`
	MeanSame  float64         `json:"mean_same_subject"`
	MeanOther float64         `json:"mean_other_subject"`
	AUC       float64         `json:"auc"`  // P(a same-subject pair scores above an other-subject pair)
	Pass      []ThresholdPass `json:"pass"` // raw scores ≥ γ
	// QuantilePass is the pass rate on lanpo's default scale: each score's
	// quantile among the scores of random pairs (a reference set drawn apart
	// from the pairs evaluated).
	QuantilePass []ThresholdPass `json:"quantile_pass"`
	Seconds      float64         `json:"seconds"`
}

// ThresholdPass is the share of each kind of pair scoring ≥ Gamma.
type ThresholdPass struct {
	Gamma float64 `json:"gamma"`
	Same  float64 `json:"same_subject"`
	Other float64 `json:"other_subject"`
}

// CalibrateRelevance draws the pairs (near-duplicates left out) and scores
// them with each scorer.
func CalibrateRelevance(o CalibrationOptions) ([]ScorerCalibration, error) {
	runtime.LockOSThread() // torch work on one thread (CONTRIBUTING.md, Threads)
	defer runtime.UnlockOSThread()
	same, other, err := calibrationPairs(o.Problems, o.Pairs, o.Seed)
	if err != nil {
		return nil, err
	}
	reference, err := randomPairs(o.Problems, o.Pairs, o.Seed+1)
	if err != nil {
		return nil, err
	}
	pc := pool.DefaultConfig()
	pc.MaxBytes = 0
	index, err := pool.New(pc)
	if err != nil {
		return nil, err
	}
	for _, p := range o.Problems {
		index.Add(p.Problem, pool.Entry{ProblemID: p.ID})
	}
	pairs := make([]relevancePair, 0, len(same)+len(other))
	for _, pr := range append(append(append([][2]CalibrationProblem(nil), same...), other...), reference...) {
		pairs = append(pairs, relevancePair{query: pr[0].Problem, candidate: pr[1].Problem, bm25: index.NormalizedBM25(pr[1].ID, pr[0].Problem)})
	}
	var env scorerEnv
	prefilled := 0
	env.prefilled, env.prompts, env.maxContext = &prefilled, pool.DefaultPrompts(), o.MaxContextTokens
	for _, name := range o.Scorers {
		if name != simBM25 && env.m == nil {
			opts := model.LoadOptions{}
			if o.DType != "" {
				if opts.DType, err = csrc.ParseDType(o.DType); err != nil {
					return nil, err
				}
			}
			if env.m, err = model.Load(o.Model, opts); err != nil {
				return nil, err
			}
			defer env.m.Close()
			if env.tk, err = tokenizer.Load(o.Model); err != nil {
				return nil, err
			}
		}
	}
	var out []ScorerCalibration
	for _, name := range o.Scorers {
		sc, err := scorerNamed(name, env)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		rel, err := sc.score(pairs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		c := summarizeCalibration(name, rel[:len(same)], rel[len(same):len(same)+len(other)], o.Thresholds, time.Since(start))
		ref := rel[len(same)+len(other):]
		qs := summarizeCalibration(name, quantiles(rel[:len(same)], ref), quantiles(rel[len(same):len(same)+len(other)], ref), o.Thresholds, 0)
		c.QuantilePass = qs.Pass
		out = append(out, c)
	}
	return out, nil
}

// calibrationPairs draws n pairs of distinct problems of the same subject
// and n of different subjects.
func calibrationPairs(ps []CalibrationProblem, n int, seed int64) (same, other [][2]CalibrationProblem, err error) {
	bySubject := map[string][]CalibrationProblem{}
	var subjects []string
	for _, p := range ps {
		if p.Subject == "" {
			return nil, nil, fmt.Errorf("problem %s has no subject: calibration needs topic labels", p.ID)
		}
		if bySubject[p.Subject] == nil {
			subjects = append(subjects, p.Subject)
		}
		bySubject[p.Subject] = append(bySubject[p.Subject], p)
	}
	sort.Strings(subjects)
	if len(subjects) < 2 {
		return nil, nil, fmt.Errorf("calibration needs problems of at least two subjects, got %v", subjects)
	}
	rng := rand.New(rand.NewSource(seed))
	distinct := func(a, b CalibrationProblem) bool {
		return a.ID != b.ID && pool.Similarity(a.Problem, b.Problem) < pool.DefaultConfig().NearDuplicate
	}
	for tries := 0; len(same) < n && tries < 100*n; tries++ {
		group := bySubject[ps[rng.Intn(len(ps))].Subject] // subjects weighted by size
		a, b := group[rng.Intn(len(group))], group[rng.Intn(len(group))]
		if distinct(a, b) {
			same = append(same, [2]CalibrationProblem{a, b})
		}
	}
	for tries := 0; len(other) < n && tries < 100*n; tries++ {
		a, b := ps[rng.Intn(len(ps))], ps[rng.Intn(len(ps))]
		if a.Subject != b.Subject && distinct(a, b) {
			other = append(other, [2]CalibrationProblem{a, b})
		}
	}
	if len(same) < n || len(other) < n {
		return nil, nil, fmt.Errorf("could draw only %d same-subject and %d other-subject pairs of %d", len(same), len(other), n)
	}
	return same, other, nil
}

// randomPairs draws n pairs of distinct, not near-duplicate problems,
// whatever their subjects: the reference for the quantile scale.
func randomPairs(ps []CalibrationProblem, n int, seed int64) ([][2]CalibrationProblem, error) {
	rng := rand.New(rand.NewSource(seed))
	var out [][2]CalibrationProblem
	for tries := 0; len(out) < n && tries < 100*n; tries++ {
		a, b := ps[rng.Intn(len(ps))], ps[rng.Intn(len(ps))]
		if a.ID != b.ID && pool.Similarity(a.Problem, b.Problem) < pool.DefaultConfig().NearDuplicate {
			out = append(out, [2]CalibrationProblem{a, b})
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("could draw only %d random pairs of %d", len(out), n)
	}
	return out, nil
}

func summarizeCalibration(name string, same, other []float64, gammas []float64, took time.Duration) ScorerCalibration {
	mean := func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s / float64(len(x))
	}
	pass := func(x []float64, g float64) float64 {
		k := 0
		for _, v := range x {
			if v >= g {
				k++
			}
		}
		return float64(k) / float64(len(x))
	}
	var auc float64
	for _, a := range same {
		for _, b := range other {
			switch {
			case a > b:
				auc++
			case a == b:
				auc += 0.5
			}
		}
	}
	c := ScorerCalibration{Scorer: name, MeanSame: mean(same), MeanOther: mean(other), AUC: auc / float64(len(same)*len(other)), Seconds: took.Seconds()}
	for _, g := range gammas {
		c.Pass = append(c.Pass, ThresholdPass{Gamma: g, Same: pass(same, g), Other: pass(other, g)})
	}
	return c
}
