package feedback

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/rl"
)

// abstractionItem is one problem to build an abstraction prompt for.
type abstractionItem struct {
	id, problem string // id "" for a problem outside the pool's training set
	index       int    // keys the condenser's random stream
}

// abstractionResult is one item's abstraction prompt (ids nil where nothing
// relevant was found or the prompt did not fit), with the plan, the
// lessons it was condensed from and every candidate with its relevance.
type abstractionResult struct {
	ids        []int64
	plan       string
	lessons    []pool.Lesson
	candidates []scoredCandidate
}

// scoredCandidate is a retrieval candidate with its relevance on the
// scorer's own scale (Raw; Relevance is on lanpo.similarity_scale) and
// the filter's decision.
type scoredCandidate struct {
	pool.Candidate
	Raw    float64
	Passed bool
}

// passes is the relevance filter: the relevance on lanpo.similarity_scale
// reaches γ, and the scorer's raw value reaches lanpo.relevance_floor — an
// absolute meaning of "related": the quantile scale alone compares
// retrieval's best candidates with random pairs, so something passes for
// almost every problem, related or not.
func (f *Builder) passes(scaled, raw float64) bool {
	return scaled >= f.cfg.SimilarityThreshold && raw >= *f.cfg.RelevanceFloor
}

// abstraction retrieves other problems for each item, keeps those whose
// relevance passes γ, has the model condense their lessons into a plan and
// renders the problem with it (fallbacks counted).
func (f *Builder) abstraction(ph rl.Phases, items []abstractionItem) (res []abstractionResult, err error) {
	ph.Enter("relevance")
	cands, raws, rel, err := f.candidateRelevance(items)
	if err != nil {
		return nil, err
	}
	ph.Enter("condense")
	res = make([]abstractionResult, len(items))
	var requests, prefixes []string
	var waiting, indexes []int
	var related [][]string // gold answers of each request's related problems (when known)
	for i, it := range items {
		scores := rel[i]
		var passed []pool.Candidate
		for j, c := range cands[i] {
			c.Relevance = scores[j]
			sc := scoredCandidate{Candidate: c, Raw: raws[i][j], Passed: f.passes(scores[j], raws[i][j])}
			res[i].candidates = append(res[i].candidates, sc)
			if sc.Passed {
				passed = append(passed, c)
			}
		}
		f.met.Candidates += len(cands[i])
		f.met.Passed += len(passed)
		for j, r := range scores {
			f.met.relevanceSum += r
			f.met.rawRelevanceSum += raws[i][j]
		}
		sort.SliceStable(passed, func(a, b int) bool { return passed[a].Relevance > passed[b].Relevance })
		passed = passed[:min(len(passed), f.cfg.MaxRelatedProblems)]
		var lessons []pool.Lesson
		var golds []string
		for _, c := range passed {
			for _, ls := range relatedLessons(f.pool, c.ProblemID, f.gold[c.ProblemID], f.cfg) {
				ls.Principles, ls.Pitfalls = f.modelText(ls.Principles), f.modelText(ls.Pitfalls)
				lessons = append(lessons, ls)
			}
			if g := f.gold[c.ProblemID]; g != "" {
				golds = append(golds, g)
			}
		}
		if len(lessons) == 0 {
			f.met.FallbackNotRelevant++
			continue
		}
		if f.cfg.Context == contextLessons {
			if err := f.lessonsPrompt(&res[i], it.problem, lessons); err != nil {
				return nil, err
			}
			continue
		}
		lessons, req := f.fitLessons(lessons, func(ls []pool.Lesson) string { return f.prompts.CondenseRequest(it.problem, ls) })
		requests, prefixes = append(requests, req), append(prefixes, f.prompts.PlanHeader+" ")
		waiting, indexes, related = append(waiting, i), append(indexes, it.index), append(related, golds)
		res[i].lessons = lessons
	}
	if len(requests) == 0 {
		return res, nil
	}
	plans, err := f.generate(requests, prefixes, indexes, f.cfg.PlanTokens, nil, "plan")
	if err != nil {
		return nil, fmt.Errorf("condensing plans: %w", err)
	}
	for j, i := range waiting {
		// No foreign answers in the plan either: a condenser may copy one
		// from a lesson in a form the lesson's stripping did not catch.
		plan := pool.StripForeign(f.modelText(plans[j]), items[i].problem, f.cfg.Code, related[j]...)
		if plan == "" {
			f.met.FallbackNotRelevant++
			continue
		}
		if got, ok, err := f.withContext(items[i].problem, f.prompts.AbstractionContext(plan)); err != nil {
			return nil, err
		} else if ok {
			res[i].ids, res[i].plan = got, plan
		}
	}
	return res, nil
}

// fitLessons renders the lessons, dropping the least relevant (the last)
// while the text exceeds lanpo.max_context_tokens and more than one is
// left; each drop is counted.
func (f *Builder) fitLessons(lessons []pool.Lesson, render func([]pool.Lesson) string) ([]pool.Lesson, string) {
	text := render(lessons)
	for len(lessons) > 1 && f.tokenCount(text) > f.cfg.MaxContextTokens {
		lessons = lessons[:len(lessons)-1]
		text = render(lessons)
		f.met.ContextTruncated++
	}
	return lessons, text
}

// lessonsPrompt gives the solver the lessons themselves (lanpo.context:
// lessons), the least relevant dropped while they exceed
// lanpo.max_context_tokens; Plan holds the context block.
func (f *Builder) lessonsPrompt(r *abstractionResult, problem string, lessons []pool.Lesson) error {
	lessons, ctx := f.fitLessons(lessons, f.prompts.LessonsContext)
	r.lessons = lessons
	ids, ok, err := f.withContext(problem, ctx)
	if err != nil || !ok {
		return err
	}
	r.ids, r.plan = ids, ctx
	return nil
}

// candidateRelevance retrieves each item's candidates and scores them: the
// items of this call, or with allItems the global set of every rank's
// items (the scores of this call's items are returned).
func (f *Builder) candidateRelevance(items []abstractionItem) (cands [][]pool.Candidate, raws, scaled [][]float64, err error) {
	scored, mine := items, make([]int, len(items)) // mine[i]: items[i]'s place in scored
	for i := range mine {
		mine[i] = i
	}
	if f.allItems != nil {
		if scored, err = f.allItems(items); err != nil {
			return nil, nil, nil, fmt.Errorf("relevance: gathering every rank's problems: %w", err)
		}
		at := map[int]int{}
		for j, it := range scored {
			at[it.index] = j
		}
		for i, it := range items {
			mine[i] = at[it.index]
		}
	}
	var pairs []relevancePair
	all := make([][]pool.Candidate, len(scored))
	first := make([]int, len(scored)+1) // scored[j]'s pairs are pairs[first[j]:first[j+1]]
	for j, it := range scored {
		all[j] = f.pool.Candidates(it.id, it.problem, f.cfg.RetrievalCandidates)
		for _, c := range all[j] {
			pairs = append(pairs, relevancePair{query: it.problem, candidate: c.Text, bm25: c.Normalized})
		}
		first[j+1] = len(pairs)
	}
	raw, rel, err := f.relevance(pairs)
	if err != nil {
		return nil, nil, nil, err
	}
	cands, raws, scaled = make([][]pool.Candidate, len(items)), make([][]float64, len(items)), make([][]float64, len(items))
	for i, j := range mine {
		cands[i], raws[i], scaled[i] = all[j], raw[first[j]:first[j+1]], rel[first[j]:first[j+1]]
	}
	return cands, raws, scaled, nil
}

// relevance scores the pairs with the configured scorer, on the configured
// scale: raw, or the quantile of each score among the scores of random
// pairs of pool problems (reference pairs drawn from the seed and step, and
// scored by the same scorer at the same time, since the policy changes).
// It returns the scorer's raw values and the values on the scale.
func (f *Builder) relevance(pairs []relevancePair) (raw, scaled []float64, err error) {
	if len(pairs) == 0 {
		return nil, nil, nil
	}
	ref := f.referencePairs()
	all, err := f.scorer.score(append(append([]relevancePair(nil), pairs...), ref...))
	if err != nil {
		return nil, nil, fmt.Errorf("relevance (lanpo.similarity %s): %w", f.cfg.Similarity, err)
	}
	raw, refScores := all[:len(pairs)], all[len(pairs):]
	if f.cfg.SimilarityScale == scaleRaw {
		return raw, raw, nil
	}
	return raw, quantiles(raw, refScores), nil
}

// referencePairs draws lanpo.reference_pairs random pairs of distinct pool
// problems that are not near-duplicates (none for the raw scale).
func (f *Builder) referencePairs() []relevancePair {
	n := f.pool.Problems()
	if f.cfg.SimilarityScale != scaleQuantile || n < 2 {
		return nil
	}
	rng := rand.New(rand.NewPCG(f.seed, rl.DrawKey(f.step, rl.StreamReferencePairs, "reference-pairs")))
	var out []relevancePair
	for tries := 0; len(out) < f.cfg.ReferencePairs && tries < 4*f.cfg.ReferencePairs; tries++ {
		i, j := rng.IntN(n), rng.IntN(n)
		if i == j {
			continue
		}
		_, qa := f.pool.ProblemAt(i)
		idb, qb := f.pool.ProblemAt(j)
		if pool.Similarity(qa, qb) >= f.cfg.NearDuplicate {
			continue
		}
		out = append(out, relevancePair{query: qa, candidate: qb, bm25: f.pool.NormalizedBM25(idb, qa)})
	}
	return out
}

// quantiles maps each score to the share of reference scores below it
// (ties count half); with no reference, nothing passes.
func quantiles(scores, ref []float64) []float64 {
	out := make([]float64, len(scores))
	if len(ref) == 0 {
		return out
	}
	sorted := append([]float64(nil), ref...)
	sort.Float64s(sorted)
	for i, s := range scores {
		below := sort.SearchFloat64s(sorted, s)
		equal := sort.SearchFloat64s(sorted, math.Nextafter(s, math.Inf(1))) - below
		out[i] = (float64(below) + 0.5*float64(equal)) / float64(len(sorted))
	}
	return out
}

// Abstraction is each problem's prompt with a plan condensed from related
// pool problems (retrieval, the γ filter and the condenser, as in
// training); nil where nothing passed γ or the prompt did not fit.
// indexes key the condenser's random streams.
func (f *Builder) Abstraction(problems []string, indexes []int) ([][]int64, error) {
	if f.pool == nil {
		return nil, fmt.Errorf("abstraction needs a pool")
	}
	plans, err := f.Plans(make([]string, len(problems)), problems, indexes)
	if err != nil {
		return nil, err
	}
	ids := make([][]int64, len(plans))
	for i, p := range plans {
		ids[i] = p.IDs
	}
	return ids, nil
}

// Plan is an abstraction prompt and what it was built from.
type Plan struct {
	IDs     []int64 // the solve prompt with the plan (nil: nothing relevant, or it did not fit)
	Text    string
	Lessons []pool.Lesson
}

// Plans builds each problem's abstraction prompt from related pool
// problems, as training does: ids are the problems' pool ids (their own
// entries are not retrieved; "" for a problem outside the pool), indexes
// key the condenser's random streams.
func (f *Builder) Plans(ids, problems []string, indexes []int) ([]Plan, error) {
	items := make([]abstractionItem, len(problems))
	for i, p := range problems {
		items[i] = abstractionItem{id: ids[i], problem: p, index: indexes[i]}
	}
	res, err := f.abstraction(noPhases{}, items)
	if err != nil {
		return nil, err
	}
	out := make([]Plan, len(res))
	for i, r := range res {
		out[i] = Plan{IDs: r.ids, Text: r.plan, Lessons: r.lessons}
	}
	return out, nil
}

// relatedLessons are the lessons abstraction reads of a related problem:
// lanpo.lessons_per_problem of its pool entries, in lanpo.lesson_order. In
// a code run their code goes here too where the pool did not strip it
// (its own Config.Code off: lanpo eval loads its retrieval pool with the
// default pool config).
func relatedLessons(p *pool.Pool, problemID, gold string, cfg Config) []pool.Lesson {
	lessons := p.Lessons(problemID, cfg.LessonsPerProblem, gold, cfg.LessonOrder == orderOutcome)
	if cfg.Code && !p.Config().Code {
		for i, l := range lessons {
			lessons[i].Principles, lessons[i].Pitfalls = pool.StripCode(l.Principles), pool.StripCode(l.Pitfalls)
		}
	}
	return lessons
}
