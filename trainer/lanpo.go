package trainer

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/reward"
)

// LANPO (Language-And-Numerical Policy Optimization) as lanpo runs it. The
// update is GRPO's; LANPO changes what the model sees while exploring.
// This file owns the experience pool's use in the trainer:
//
//  1. prompts: each prompt is feedback-aware with probability p_t
//     (lanpo.feedback_ratio), drawn from (seed, step, prompt index). A
//     feedback-aware prompt is
//     - reflection, when the pool holds an earlier attempt at the problem:
//     that raw attempt, chosen without looking at its outcome, quoted in
//     the user message with a request to critique it and solve again;
//     - abstraction: BM25 finds other problems in the pool, the relevance
//     filter keeps those scoring ≥ γ, and the policy condenses their
//     principles and pitfalls (answers removed) into a short plan that the
//     solve prompt carries.
//     With no material the prompt is from scratch (counted as a fallback).
//     All G samples of a prompt share it.
//  2. rollout, reward, advantages, update: GRPO's (grpo_loop.go). With
//     lanpo.train_prompt: original, feedback-guided samples are trained as
//     answers to the bare problem with truncated importance weights.
//  3. pool: after the update, up to lanpo.summaries_per_group rollouts of
//     every sampled group (chosen without looking at outcomes) are stored
//     with the policy's three-field summary of each, in global group order.
//
// Deviations from the paper, which does not publish these: the prompts
// (pool/prompts.go), the relevance scorer behind γ (the policy's own 0-9
// rating by default), FIFO eviction, and summaries written after the update
// by the updated policy.

// Prompt modes.
const (
	modeScratch     = "scratch"
	modeReflection  = "reflection"
	modeAbstraction = "abstraction"
)

// lanpoRun is LANPO's part of a run.
type lanpoRun struct {
	g       *grpoRun
	cfg     LANPOConfig
	pool    *pool.Pool
	prompts pool.Prompts
	scorer  relevanceScorer
	gold    map[string]string // problem id → answer, to strip from lessons
	stopIDs []int64           // end auxiliary text: the stop ids and every special token
	met     LANPOMetrics      // the current step's
}

// newLANPO sets up the pool (from the resumed checkpoint, lanpo.initial_pool
// or empty), the prompts and the relevance scorer, and registers the pool
// with the checkpoints.
func newLANPO(g *grpoRun) (*lanpoRun, error) {
	cfg := g.cfg.LANPO
	l := &lanpoRun{g: g, cfg: cfg, prompts: pool.DefaultPrompts(), gold: map[string]string{}}
	for _, p := range g.problems {
		l.gold[p.ID] = p.Answer
	}
	l.stopIDs = append(append([]int64(nil), g.eos...), tokenizer.Int64s(g.tk.SpecialIDs())...)
	var err error
	if cfg.Prompts != "" {
		if l.prompts, err = pool.LoadPrompts(cfg.Prompts); err != nil {
			return nil, fmt.Errorf("config key lanpo.prompts: %w", err)
		}
	}
	switch from := g.resumedFrom; {
	case from != "":
		if l.pool, err = pool.Load(filepath.Join(from, pool.File), cfg.poolConfig()); err != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
	case cfg.InitialPool != "":
		if l.pool, err = pool.Load(cfg.InitialPool, cfg.poolConfig()); err != nil {
			return nil, fmt.Errorf("config key lanpo.initial_pool: %w", err)
		}
	default:
		if l.pool, err = pool.New(cfg.poolConfig()); err != nil {
			return nil, err
		}
	}
	if l.scorer, err = newScorer(l); err != nil {
		return nil, err
	}
	g.saveExtra = append(g.saveExtra, l.pool.Save)
	log.Info().Int("problems", l.pool.Problems()).Int("entries", l.pool.Entries()).Str("similarity", cfg.Similarity).
		Float64("p_t", cfg.FeedbackRatio).Msg("LANPO pool ready")
	return l, nil
}

// addContext decides, for each prompt of a round, whether it is
// feedback-aware and in which mode, and builds its context.
func (l *lanpoRun) addContext(t *phaseTimer, ps []*prompt) error {
	step := l.g.state.Step
	pt := l.cfg.feedbackRatio(step)
	l.met.PT = pt
	var abstraction []*prompt
	for _, p := range ps {
		l.met.Prompts++
		if l.draw(p.index, "feedback") >= pt {
			continue
		}
		p.feedback = true
		l.met.FeedbackAware++
		id := l.g.problems[p.problem].ID
		canReflect := *l.cfg.Modes.Reflection > 0 && l.hasAttempt(id)
		others := l.pool.Problems()
		if l.pool.Has(id) {
			others--
		}
		canAbstract := *l.cfg.Modes.Abstraction > 0 && others > 0
		switch l.pickMode(p.index, canReflect, canAbstract) {
		case modeReflection:
			if err := l.reflect(p); err != nil {
				return err
			}
		case modeAbstraction:
			abstraction = append(abstraction, p)
		default:
			l.met.Fallback++
		}
	}
	if len(abstraction) > 0 {
		return l.abstract(t, abstraction)
	}
	return nil
}

// pickMode draws a mode among the available ones by their weights.
func (l *lanpoRun) pickMode(index int, canReflect, canAbstract bool) string {
	var wr, wa float64
	if canReflect {
		wr = *l.cfg.Modes.Reflection
	}
	if canAbstract {
		wa = *l.cfg.Modes.Abstraction
	}
	if wr+wa == 0 {
		return modeScratch
	}
	if l.draw(index, "mode")*(wr+wa) < wr {
		return modeReflection
	}
	return modeAbstraction
}

func (l *lanpoRun) hasAttempt(id string) bool {
	if l.cfg.ReflectOn == reflectFailed {
		_, ok := l.pool.FailedAttempt(id, 0)
		return ok
	}
	return l.pool.Has(id)
}

// reflect gives p an earlier attempt at its problem to critique and redo.
// The attempt is an pool.Attempt (no outcome), chosen by a seeded draw.
func (l *lanpoRun) reflect(p *prompt) error {
	pr := l.g.problems[p.problem]
	u := l.draw(p.index, "attempt")
	a, _ := l.pool.AttemptFor(pr.ID, u)
	if l.cfg.ReflectOn == reflectFailed {
		a, _ = l.pool.FailedAttempt(pr.ID, u)
	}
	shown, _ := reward.ExtractResponse(a.Text, false)
	a.Text = l.modelText(a.Text)
	ctx := l.prompts.ReflectionContext(a)
	if !l.setContext(p, pr.Problem, ctx, modeReflection) {
		return nil
	}
	p.shown = shown
	return nil
}

// abstract retrieves related problems for each prompt, filters them by
// relevance, condenses their lessons into a plan with the policy, and puts
// the plan into the prompt.
func (l *lanpoRun) abstract(t *phaseTimer, ps []*prompt) error {
	t.enter("relevance")
	var pairs []relevancePair
	cands := make([][]pool.Candidate, len(ps))
	for i, p := range ps {
		pr := l.g.problems[p.problem]
		cands[i] = l.pool.Candidates(pr.ID, pr.Problem, l.cfg.RetrievalCandidates)
		for _, c := range cands[i] {
			pairs = append(pairs, relevancePair{query: pr.Problem, candidate: c.Text, bm25: c.Normalized})
		}
	}
	rel, err := l.scorer.score(pairs)
	if err != nil {
		return fmt.Errorf("relevance (lanpo.similarity %s): %w", l.cfg.Similarity, err)
	}
	t.enter("condense")
	var requests []string
	var waiting []*prompt
	var related [][]string // gold answers of each request's related problems
	k := 0
	for i, p := range ps {
		passed := pool.Relevant(cands[i], rel[k:k+len(cands[i])], l.cfg.SimilarityThreshold)
		k += len(cands[i])
		l.met.Candidates += len(cands[i])
		l.met.Passed += len(passed)
		for _, r := range rel[k-len(cands[i]) : k] {
			l.met.relevanceSum += r
		}
		sort.SliceStable(passed, func(a, b int) bool { return passed[a].Relevance > passed[b].Relevance })
		if len(passed) > l.cfg.MaxRelatedProblems {
			passed = passed[:l.cfg.MaxRelatedProblems]
		}
		var lessons []pool.Lesson
		var golds []string
		for _, c := range passed {
			for _, ls := range l.pool.Lessons(c.ProblemID, l.cfg.LessonsPerProblem, l.gold[c.ProblemID]) {
				ls.Principles, ls.Pitfalls = l.modelText(ls.Principles), l.modelText(ls.Pitfalls)
				lessons = append(lessons, ls)
			}
			golds = append(golds, l.gold[c.ProblemID])
		}
		if len(lessons) == 0 {
			l.met.FallbackNotRelevant++
			continue
		}
		req := l.prompts.CondenseRequest(l.g.problems[p.problem].Problem, lessons)
		for len(lessons) > 1 && l.tokens(req) > l.cfg.MaxContextTokens {
			lessons = lessons[:len(lessons)-1] // the least relevant go first
			req = l.prompts.CondenseRequest(l.g.problems[p.problem].Problem, lessons)
			l.met.ContextTruncated++
		}
		requests = append(requests, req)
		waiting = append(waiting, p)
		related = append(related, golds)
	}
	if len(requests) == 0 {
		return nil
	}
	prefixes := make([]string, len(requests))
	indexes := make([]int, len(requests))
	for i := range requests {
		prefixes[i] = l.prompts.PlanHeader + " "
		indexes[i] = waiting[i].index
	}
	plans, err := l.generate(requests, prefixes, indexes, l.cfg.PlanTokens, nil, "plan")
	if err != nil {
		return fmt.Errorf("condensing plans: %w", err)
	}
	for i, p := range waiting {
		// No foreign answers in the plan either: a condenser may copy one
		// from a lesson that slipped through in another form.
		plan := pool.StripAnswers(l.modelText(plans[i]), related[i]...)
		if plan == "" {
			l.met.FallbackNotRelevant++
			continue
		}
		l.setContext(p, l.g.problems[p.problem].Problem, l.prompts.AbstractionContext(plan), modeAbstraction)
	}
	return nil
}

// setContext renders the problem with a context block as p's solve prompt;
// it reports false (a fallback to scratch, counted) when the prompt would
// not fit the model's context with the generation budget.
func (l *lanpoRun) setContext(p *prompt, problem, context, mode string) bool {
	ids, err := l.g.solveIDs(pool.WithContext(problem, context))
	maxPos := l.g.m.Config.MaxPositionEmbeddings
	if err != nil || maxPos > 0 && int64(len(ids)+l.g.cfg.Rollout.MaxNewTokens) > maxPos {
		l.met.FallbackTooLong++
		return false
	}
	p.context = len(ids) - len(p.ids)
	p.ids, p.mode = ids, mode
	if l.cfg.TrainPrompt == trainSampled {
		p.trainIDs = ids
	}
	switch mode {
	case modeReflection:
		l.met.Reflection++
	case modeAbstraction:
		l.met.Abstraction++
	}
	l.met.contextSum += p.context
	l.met.ContextTokensMax = max(l.met.ContextTokensMax, p.context)
	return true
}

// modelText prepares text the model wrote for a prompt: added-token strings
// removed (counted), cut to lanpo.max_context_tokens.
func (l *lanpoRun) modelText(text string) string {
	text, n := l.g.tk.StripAddedTokens(text)
	l.met.SpecialRemoved += n
	text, cut := l.clip(text, l.cfg.MaxContextTokens)
	if cut {
		l.met.ContextTruncated++
	}
	return text
}

// write stores up to lanpo.summaries_per_group rollouts of every sampled
// group (dynamic sampling's dropped groups included) with the policy's
// summary of each, in global group order. Which rollouts are stored is a
// seeded draw that does not look at outcomes: storing failed attempts
// preferentially would make "the attempt shown is usually wrong" true.
func (l *lanpoRun) write(sampled []*rollout) error {
	G := l.g.cfg.Rollout.SamplesPerPrompt
	k := min(l.cfg.SummariesPerGroup, G)
	var chosen []*rollout
	for start := 0; start+G <= len(sampled) && k > 0; start += G {
		grp := sampled[start : start+G]
		rng := rand.New(rand.NewPCG(l.g.cfg.Seed, drawKey(l.g.state.Step, grp[0].prompt.index, "store")))
		for _, i := range rng.Perm(G)[:k] {
			chosen = append(chosen, grp[i])
		}
	}
	if len(chosen) == 0 {
		return nil
	}
	sums, err := l.summarize(chosen)
	if err != nil {
		return fmt.Errorf("summaries: %w", err)
	}
	for i, r := range chosen {
		pr := l.g.problems[r.problem]
		text, _ := l.g.tk.StripAddedTokens(r.text)
		e := pool.Entry{ProblemID: pr.ID, Step: l.g.state.Step + 1, Attempt: text, Summary: sums[i], Correct: r.correct,
			Reward: r.reward, Truncated: r.truncated, ResponseTokens: len(r.ids), Group: r.prompt.index, Sample: r.sample}
		l.met.SummaryEmptyFields += sums[i].Empty()
		l.met.PoolEvicted += l.pool.Add(pr.Problem, e)
		l.met.PoolAdded++
	}
	return nil
}

// finish completes the step's metrics.
func (l *lanpoRun) finish(m *StepMetrics, sampled []*rollout) {
	lm := l.met
	var fb, fbRight, sc, scRight, refl, copied float64
	for _, r := range sampled {
		if r.prompt.mode == modeScratch {
			sc++
			if r.correct {
				scRight++
			}
			continue
		}
		fb++
		if r.correct {
			fbRight++
		}
		if r.prompt.mode == modeReflection && r.prompt.shown != "" {
			refl++
			if got, ok := reward.ExtractResponse(r.text, r.truncated); ok && reward.Equivalent(r.prompt.shown, got, reward.Options{}) {
				copied++
			}
		}
	}
	if fb > 0 {
		lm.AccuracyFeedback = fbRight / fb
	}
	if sc > 0 {
		lm.AccuracyScratch = scRight / sc
	}
	if refl > 0 {
		lm.ReflectionCopied = copied / refl
	}
	if n := lm.Reflection + lm.Abstraction; n > 0 {
		lm.ContextTokensMean = float64(lm.contextSum) / float64(n)
	}
	if lm.Candidates > 0 {
		lm.RelevanceMean = lm.relevanceSum / float64(lm.Candidates)
	}
	lm.PoolProblems, lm.PoolEntries, lm.PoolBytes = l.pool.Problems(), l.pool.Entries(), l.pool.Bytes()
	m.LANPOMetrics = &lm
	l.met = LANPOMetrics{}
}

// LANPOMetrics are a LANPO step's lines in metrics.jsonl.
type LANPOMetrics struct {
	PT                  float64 `json:"lanpo_p_t"`
	Prompts             int     `json:"lanpo_prompts"`
	FeedbackAware       int     `json:"lanpo_feedback_aware"` // drawn feedback-aware
	Reflection          int     `json:"lanpo_reflection"`
	Abstraction         int     `json:"lanpo_abstraction"`
	Fallback            int     `json:"lanpo_fallback_no_material"`  // feedback-aware, nothing in the pool for it
	FallbackNotRelevant int     `json:"lanpo_fallback_not_relevant"` // abstraction drawn, no candidate passed γ
	FallbackTooLong     int     `json:"lanpo_fallback_too_long"`     // the context did not fit the model's context
	AccuracyFeedback    float64 `json:"accuracy_feedback"`           // over rollouts from prompts with context
	AccuracyScratch     float64 `json:"accuracy_scratch"`
	ReflectionCopied    float64 `json:"reflection_copied_answer_frac"` // redo's answer equals the shown attempt's
	PoolProblems        int     `json:"pool_problems"`
	PoolEntries         int     `json:"pool_entries"`
	PoolBytes           int64   `json:"pool_bytes"`
	PoolAdded           int     `json:"pool_added"`
	PoolEvicted         int     `json:"pool_evicted"`
	Candidates          int     `json:"retrieval_candidates"`
	Passed              int     `json:"retrieval_passed"` // relevance ≥ γ
	RelevanceMean       float64 `json:"relevance_mean"`
	SummaryEmptyFields  int     `json:"summary_empty_fields"`
	ContextTokensMean   float64 `json:"context_tokens_mean"`
	ContextTokensMax    int     `json:"context_tokens_max"`
	ContextTruncated    int     `json:"context_truncated"` // texts cut to lanpo.max_context_tokens
	SpecialRemoved      int     `json:"special_tokens_removed"`
	// train_prompt: original
	ContextLogpGap float64 `json:"context_logp_gap,omitempty"` // mean log π(y|x,c) − log π(y|x) per token
	TISClipped     float64 `json:"tis_clipped_frac,omitempty"` // tokens whose importance weight hit tis_cap

	contextSum   int
	relevanceSum float64
}
