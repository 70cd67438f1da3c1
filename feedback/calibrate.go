package feedback

import (
	"fmt"
	"math/rand"
	"runtime"
	"slices"
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
	Model    string   // HF model directory (the policy)
	DType    string   // "" float32 on CPU
	Scorers  []string // policy, bm25, embedding
	Problems []CalibrationProblem
	// Draw says how pairs are drawn: retrieval (as training draws
	// candidates: Pairs query problems, each with its Candidates BM25
	// candidates among the other problems, labelled same or other subject
	// — the rates then describe training's filter) or random (Pairs random
	// pairs of each kind).
	Draw             string
	Candidates       int
	Pairs            int
	Seed             int64
	MaxContextTokens int
	Thresholds       []float64
	// Gamma is the quantile γ at which CombinedPass applies each threshold
	// as lanpo.relevance_floor.
	Gamma float64
	// Centre is the embedding scorer's centre, as lanpo.embedding_centre
	// (fixed or batch; "": fixed).
	Centre string
	// Named are pairs of problem ids whose scores are reported one by one.
	Named [][2]string
}

// Pair draws.
const (
	DrawRetrieval = "retrieval"
	DrawRandom    = "random"
)

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
	// CombinedPass is the filter training applies: quantile ≥ Gamma and
	// raw ≥ each threshold (as lanpo.relevance_floor).
	CombinedPass []ThresholdPass `json:"combined_pass"`
	Named        []NamedScore    `json:"named,omitempty"`
	Same, Other  int             `json:"-"` // pairs of each kind
	Seconds      float64         `json:"seconds"`
}

// NamedScore is one named pair's scores.
type NamedScore struct {
	A, B     string
	Raw      float64 `json:"raw"`
	Quantile float64 `json:"quantile"`
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
	pc := pool.DefaultConfig()
	pc.MaxBytes = 0
	index, err := pool.New(pc)
	if err != nil {
		return nil, err
	}
	byID := map[string]CalibrationProblem{}
	for _, p := range o.Problems {
		index.Add(p.Problem, pool.Entry{ProblemID: p.ID})
		byID[p.ID] = p
	}
	var same, other [][2]CalibrationProblem
	switch o.Draw {
	case DrawRandom:
		same, other, err = calibrationPairs(o.Problems, o.Pairs, o.Seed)
	case DrawRetrieval, "":
		same, other, err = retrievalPairs(o.Problems, index, byID, o.Pairs, o.Candidates, o.Seed)
	default:
		err = fmt.Errorf("draw %q: want %s or %s", o.Draw, DrawRetrieval, DrawRandom)
	}
	if err != nil {
		return nil, err
	}
	reference, err := randomPairs(o.Problems, max(o.Pairs, 64), o.Seed+1)
	if err != nil {
		return nil, err
	}
	var named [][2]CalibrationProblem
	for _, n := range o.Named {
		a, okA := byID[n[0]]
		b, okB := byID[n[1]]
		if !okA || !okB {
			return nil, fmt.Errorf("named pair %s,%s: both ids must be in the data", n[0], n[1])
		}
		named = append(named, [2]CalibrationProblem{a, b})
	}
	pairs := make([]relevancePair, 0, len(same)+len(other))
	for _, pr := range slices.Concat(same, other, named, reference) {
		pairs = append(pairs, relevancePair{query: pr[0].Problem, candidate: pr[1].Problem, bm25: index.NormalizedBM25(pr[1].ID, pr[0].Problem)})
	}
	ns, no, nn := len(same), len(other), len(named)
	var env scorerEnv
	prefilled := 0
	env.prefilled, env.prompts, env.maxContext = &prefilled, pool.DefaultPrompts(), o.MaxContextTokens
	if env.centre, err = centreTexts(o.Centre); err != nil {
		return nil, fmt.Errorf("centre %w", err)
	}
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
		rs, ro, rn, ref := rel[:ns], rel[ns:ns+no], rel[ns+no:ns+no+nn], rel[ns+no+nn:]
		c := summarizeCalibration(name, rs, ro, o.Thresholds, time.Since(start))
		qSame, qOther := quantiles(rs, ref), quantiles(ro, ref)
		c.QuantilePass = summarizeCalibration(name, qSame, qOther, o.Thresholds, 0).Pass
		// The combined filter: a pair passes floor f when its quantile
		// reaches Gamma and its raw score f (zero out the others).
		for _, f := range o.Thresholds {
			gate := func(raw, q []float64) []float64 {
				out := make([]float64, len(raw))
				for i := range raw {
					if q[i] >= o.Gamma {
						out[i] = raw[i]
					} else {
						out[i] = -1
					}
				}
				return out
			}
			p := summarizeCalibration(name, gate(rs, qSame), gate(ro, qOther), []float64{f}, 0).Pass[0]
			c.CombinedPass = append(c.CombinedPass, p)
		}
		for i, n := range o.Named {
			c.Named = append(c.Named, NamedScore{A: n[0], B: n[1], Raw: rn[i], Quantile: quantiles(rn[i:i+1], ref)[0]})
		}
		c.Same, c.Other = ns, no
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

// retrievalPairs draws n query problems and pairs each with its k BM25
// candidates among the other problems (near-duplicates left out), as
// training's retrieval does, labelled by whether the subjects agree.
func retrievalPairs(ps []CalibrationProblem, index *pool.Pool, byID map[string]CalibrationProblem, n, k int, seed int64) (same, other [][2]CalibrationProblem, err error) {
	if k < 1 {
		return nil, nil, fmt.Errorf("candidates per query must be ≥ 1, got %d", k)
	}
	rng := rand.New(rand.NewSource(seed))
	for _, qi := range rng.Perm(len(ps))[:min(n, len(ps))] {
		q := ps[qi]
		if q.Subject == "" {
			return nil, nil, fmt.Errorf("problem %s has no subject: calibration needs topic labels", q.ID)
		}
		for _, c := range index.Candidates(q.ID, q.Problem, k) {
			b := byID[c.ProblemID]
			if b.Subject == q.Subject {
				same = append(same, [2]CalibrationProblem{q, b})
			} else {
				other = append(other, [2]CalibrationProblem{q, b})
			}
		}
	}
	if len(same) == 0 || len(other) == 0 {
		return nil, nil, fmt.Errorf("retrieval gave %d same-subject and %d other-subject candidates: draw more queries (--pairs)", len(same), len(other))
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
