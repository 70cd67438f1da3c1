package trainer

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/dist"
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
// (pool/prompts.go), the relevance scorer behind γ (centred embeddings of
// the policy by default, with γ a quantile against random pool pairs:
// docs/lanpo.md says why), FIFO eviction, and summaries written after the
// update by the updated policy.

// Prompt modes.
const (
	modeScratch     = "scratch"
	modeReflection  = "reflection"
	modeAbstraction = "abstraction"
)

// lanpoRun is LANPO's part of a training run: the feedback builder (with
// the pool) and the per-step draws, pool writes and metrics.
type lanpoRun struct {
	*feedback
	g *grpoRun
}

// newLANPO sets up the pool (from the resumed checkpoint, lanpo.initial_pool
// or empty) and the feedback builder, and registers the pool with the
// checkpoints.
func newLANPO(g *grpoRun) (*lanpoRun, error) {
	cfg := g.cfg.LANPO
	var p *pool.Pool
	var err error
	switch from := g.resumedFrom; {
	case from != "":
		if p, err = pool.Load(filepath.Join(from, pool.File), cfg.PoolConfig()); err != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
	case cfg.InitialPool != "":
		if p, err = pool.Load(cfg.InitialPool, cfg.PoolConfig()); err != nil {
			return nil, fmt.Errorf("config key lanpo.initial_pool: %w", err)
		}
	default:
		if p, err = pool.New(cfg.PoolConfig()); err != nil {
			return nil, err
		}
	}
	f, err := newFeedback(g.m, g.tk, g.cfg, p)
	if err != nil {
		return nil, err
	}
	f.gold = map[string]string{}
	for _, pr := range g.problems {
		f.gold[pr.ID] = pr.Answer
	}
	if g.comm.Size() > 1 {
		f.allItems = func(mine []abstractionItem) ([]abstractionItem, error) {
			type wire struct {
				ID, Problem string
				Index       int
			}
			w := make([]wire, len(mine))
			for i, it := range mine {
				w[i] = wire{it.id, it.problem, it.index}
			}
			all, err := dist.GatherOrdered(g.comm, w, func(x wire) (int, int) { return x.Index, 0 })
			out := make([]abstractionItem, len(all))
			for i, x := range all {
				out[i] = abstractionItem{id: x.ID, problem: x.Problem, index: x.Index}
			}
			return out, err
		}
	}
	g.saveExtra, g.session.pool = append(g.saveExtra, p.Save), p
	log.Info().Int("problems", p.Problems()).Int("entries", p.Entries()).Str("similarity", cfg.Similarity).
		Float64("p_t", cfg.FeedbackRatio).Msg("LANPO pool ready")
	return &lanpoRun{feedback: f, g: g}, nil
}

// draw is a uniform number in [0, 1) from (run seed, step, prompt index,
// purpose).
func (l *lanpoRun) draw(index int, purpose string) float64 {
	return rand.New(rand.NewPCG(l.g.cfg.Seed, drawKey(l.g.state.Step, index, purpose))).Float64()
}

// addContext decides, for each prompt of a round, whether it is
// feedback-aware and in which mode, and builds its context.
func (l *lanpoRun) addContext(t *phaseTimer, ps []*prompt) error {
	l.step = l.g.state.Step
	pt := l.cfg.feedbackRatio(l.step)
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
	if len(abstraction) == 0 && l.allItems == nil {
		return nil // with allItems, every rank takes part in scoring the global set
	}
	items := make([]abstractionItem, len(abstraction))
	for i, p := range abstraction {
		pr := l.g.problems[p.problem]
		items[i] = abstractionItem{id: pr.ID, problem: pr.Problem, index: p.index}
	}
	res, err := l.abstraction(t, items)
	if err != nil {
		return err
	}
	for i, p := range abstraction {
		for _, c := range res[i].candidates {
			p.related = append(p.related, relatedProblem{ProblemID: c.ProblemID, Relevance: c.Relevance, Raw: c.Raw, Passed: c.Passed})
		}
		if res[i].ids != nil {
			l.use(p, res[i].ids, modeAbstraction)
		}
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
// The attempt is a pool.Attempt (no outcome), chosen by a seeded draw.
func (l *lanpoRun) reflect(p *prompt) error {
	pr := l.g.problems[p.problem]
	u := l.draw(p.index, "attempt")
	a, _ := l.pool.AttemptFor(pr.ID, u)
	if l.cfg.ReflectOn == reflectFailed {
		a, _ = l.pool.FailedAttempt(pr.ID, u)
	}
	shown, _ := reward.ExtractResponse(a.Text, false)
	ids, _, ok, err := l.reflection(pr.Problem, a)
	if err != nil || !ok {
		return err
	}
	l.use(p, ids, modeReflection)
	p.shown = shown
	return nil
}

// use makes ids (a prompt with context) p's prompt.
func (l *lanpoRun) use(p *prompt, ids []int64, mode string) {
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
}

// write stores up to lanpo.summaries_per_group rollouts of every sampled
// group (dynamic sampling's dropped groups included) with the policy's
// summary of each, in global group order. Which rollouts are stored is a
// seeded draw that does not look at outcomes: storing failed attempts
// preferentially would make "the attempt shown is usually wrong" true.
// The problem's gold answer is stripped from the principles and pitfalls
// as they enter the pool, so lessons never carry it, whoever reads the
// pool (lanpo eval does not know the training answers).
func (l *lanpoRun) write(sampled []*rollout) error {
	G := l.g.cfg.Rollout.SamplesPerPrompt
	k := min(l.cfg.SummariesPerGroup, G)
	// newEntry is one stored rollout, sent to every rank.
	type newEntry struct {
		Problem int        `json:"problem"`
		Order   int        `json:"order"` // position in its group's draw
		Entry   pool.Entry `json:"entry"`
	}
	var chosen []*rollout
	var order []int
	for start := 0; start+G <= len(sampled) && k > 0; start += G {
		grp := sampled[start : start+G]
		rng := rand.New(rand.NewPCG(l.g.cfg.Seed, drawKey(l.g.state.Step, grp[0].prompt.index, "store")))
		for j, i := range rng.Perm(G)[:k] {
			chosen = append(chosen, grp[i])
			order = append(order, j)
		}
	}
	var mine []newEntry
	if len(chosen) > 0 {
		problems, attempts := make([]string, len(chosen)), make([]string, len(chosen))
		correct, indexes := make([]bool, len(chosen)), make([]int, len(chosen))
		for i, r := range chosen {
			problems[i], attempts[i], correct[i] = l.g.problems[r.problem].Problem, r.text, r.correct
			indexes[i] = r.prompt.index*G + r.sample
		}
		l.step = l.g.state.Step
		sums, err := l.summarize(problems, attempts, correct, indexes)
		if err != nil {
			return fmt.Errorf("summaries: %w", err)
		}
		for i, r := range chosen {
			pr := l.g.problems[r.problem]
			text, _ := l.tk.StripAddedTokens(r.text)
			sum := sums[i]
			sum.Principles, sum.Pitfalls = pool.StripAnswers(sum.Principles, pr.Problem, pr.Answer), pool.StripAnswers(sum.Pitfalls, pr.Problem, pr.Answer)
			mine = append(mine, newEntry{Problem: r.problem, Order: order[i], Entry: pool.Entry{ProblemID: pr.ID, Step: l.g.state.Step + 1,
				Attempt: text, Summary: sum, Correct: r.correct, Reward: r.reward, Truncated: r.truncated, ResponseTokens: len(r.ids),
				Group: r.prompt.index, Sample: r.sample}})
		}
	}
	// Every rank adds every rank's entries in global group order, so the
	// pool is the same on every rank and for any world size.
	all := mine
	if l.g.comm.Size() > 1 {
		var err error
		if all, err = dist.GatherOrdered(l.g.comm, mine, func(e newEntry) (int, int) { return e.Entry.Group, e.Order }); err != nil {
			return fmt.Errorf("pool entries: %w", err)
		}
	}
	for _, ne := range all {
		l.met.SummaryEmptyFields += ne.Entry.Summary.Empty()
		l.met.PoolEvicted += l.pool.Add(l.g.problems[ne.Problem].Problem, ne.Entry)
		l.met.PoolAdded++
	}
	return nil
}

// finish completes the step's metrics (global over the ranks: stats are
// every rank's rollouts, and the counters each rank kept of its own
// prompts are summed) and resets the counters.
func (l *lanpoRun) finish(m *StepMetrics, stats []rolloutStat) error {
	lm := l.met
	loc := []float64{float64(lm.Prompts), float64(lm.FeedbackAware), float64(lm.Reflection), float64(lm.Abstraction), float64(lm.Fallback),
		float64(lm.FallbackNotRelevant), float64(lm.FallbackTooLong), float64(lm.Candidates), float64(lm.Passed), lm.relevanceSum,
		lm.rawRelevanceSum, float64(lm.contextSum), float64(lm.ContextTruncated), float64(lm.SpecialRemoved),
		float64(lm.SummaryFieldsCut), float64(lm.AttemptsCut)}
	tot, err := dist.SumFloats(l.g.comm, loc)
	if err != nil {
		return err
	}
	ctxMax, err := dist.MaxFloat(l.g.comm, float64(lm.ContextTokensMax))
	if err != nil {
		return err
	}
	lm.Prompts, lm.FeedbackAware, lm.Reflection, lm.Abstraction, lm.Fallback = int(tot[0]), int(tot[1]), int(tot[2]), int(tot[3]), int(tot[4])
	lm.FallbackNotRelevant, lm.FallbackTooLong, lm.Candidates, lm.Passed = int(tot[5]), int(tot[6]), int(tot[7]), int(tot[8])
	lm.relevanceSum, lm.rawRelevanceSum, lm.contextSum, lm.ContextTruncated, lm.SpecialRemoved = tot[9], tot[10], int(tot[11]), int(tot[12]), int(tot[13])
	lm.SummaryFieldsCut, lm.AttemptsCut = int(tot[14]), int(tot[15])
	lm.ContextTokensMax = int(ctxMax)
	var fb, fbRight, sc, scRight, refl, copied float64
	for _, r := range stats {
		if r.Mode == modeScratch {
			sc++
			if r.Correct {
				scRight++
			}
			continue
		}
		fb++
		if r.Correct {
			fbRight++
		}
		if r.Shown {
			refl++
			if r.Copied {
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
		lm.RawRelevanceMean = lm.rawRelevanceSum / float64(lm.Candidates)
	}
	lm.PoolProblems, lm.PoolEntries, lm.PoolBytes = l.pool.Problems(), l.pool.Entries(), l.pool.Bytes()
	m.LANPOMetrics = &lm
	l.met = LANPOMetrics{}
	return nil
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
	Passed              int     `json:"retrieval_passed"`   // relevance ≥ γ
	RelevanceMean       float64 `json:"relevance_mean"`     // on lanpo.similarity_scale
	RawRelevanceMean    float64 `json:"relevance_raw_mean"` // the scorer's own values
	SummaryEmptyFields  int     `json:"summary_empty_fields"`
	SummaryFieldsCut    int     `json:"summary_fields_cut"`      // fields ended where the model began another field in its own words
	AttemptsCut         int     `json:"reflection_attempts_cut"` // reflected attempts shown as beginning + end (lanpo.max_attempt_tokens or the context)
	ContextTokensMean   float64 `json:"context_tokens_mean"`
	ContextTokensMax    int     `json:"context_tokens_max"`
	ContextTruncated    int     `json:"context_truncated"` // plans, lessons and summarizer inputs cut to lanpo.max_context_tokens
	SpecialRemoved      int     `json:"special_tokens_removed"`
	// train_prompt: original
	ContextLogpGap float64 `json:"context_logp_gap,omitempty"` // mean log π(y|x,c) − log π(y|x) per token
	TISClipped     float64 `json:"tis_clipped_frac,omitempty"` // tokens whose importance weight hit tis_cap

	contextSum      int
	relevanceSum    float64
	rawRelevanceSum float64
}
