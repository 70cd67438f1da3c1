package feedback

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/rl"
)

// LANPO (Language-And-Numerical Policy Optimization) as lanpo runs it. The
// update is GRPO's; LANPO changes what the model sees while exploring. The
// GRPO loop calls it through its Explorer interface (trainer/explorer.go);
// this file is LANPO's side of that seam and owns the experience pool's use
// in training:
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
//  2. rollout, reward, advantages, update: GRPO's (package trainer). With
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

// Explorer is LANPO's side of a training run: the feedback builder with
// the run's pool, the per-step draws, the pool writes and the metrics.
type Explorer struct {
	*Builder // its step is the step being run (0-based)
	run      Run
}

// Run is what the explorer knows of the training run besides Settings.
type Run struct {
	Problems         []rl.Problem // rl.Prompt.Problem indexes them
	SamplesPerPrompt int          // G: rollouts of a group are consecutive
	Comm             dist.Comm
	ResumedFrom      string // the checkpoint the run resumed from ("": none)
	// Oracle, when set, writes the abstraction plans in place of retrieval,
	// the relevance filter and the condenser (an upper bound on what good
	// context can do; lanpo demo's lanpo-oracle arm). Not for data
	// parallelism; its state is not in checkpoints.
	Oracle Oracle
}

// Oracle knows what a plan should say. It sees every rollout of a step
// after the update (Observe, in sampling order) and answers a training
// problem's plan once it has one (Plan).
type Oracle interface {
	Plan(problemID string) (plan string, ok bool)
	Observe(problemID string, correct bool)
}

// NewExplorer sets up the pool (from the resumed checkpoint,
// lanpo.initial_pool or empty) and the feedback builder for a run.
func NewExplorer(m *model.Model, tk *tokenizer.Tokenizer, s Settings, run Run) (*Explorer, error) {
	cfg := s.LANPO
	if run.Oracle != nil && run.Comm != nil && run.Comm.Size() > 1 {
		return nil, fmt.Errorf("an oracle's plans need one process: it sees only its own rank's rollouts (%d ranks)", run.Comm.Size())
	}
	var p *pool.Pool
	var err error
	switch {
	case run.ResumedFrom != "":
		if p, err = pool.Load(filepath.Join(run.ResumedFrom, pool.File), cfg.PoolConfig()); err != nil {
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
	f, err := NewBuilder(m, tk, s, p)
	if err != nil {
		return nil, err
	}
	f.gold = map[string]string{}
	for _, pr := range run.Problems {
		f.gold[pr.ID] = pr.Answer
	}
	if comm := run.Comm; comm.Size() > 1 {
		f.allItems = func(mine []abstractionItem) ([]abstractionItem, error) {
			type wire struct {
				ID, Problem string
				Index       int
			}
			w := make([]wire, len(mine))
			for i, it := range mine {
				w[i] = wire{it.id, it.problem, it.index}
			}
			all, err := dist.GatherOrdered(comm, w, func(x wire) (int, int) { return x.Index, 0 })
			out := make([]abstractionItem, len(all))
			for i, x := range all {
				out[i] = abstractionItem{id: x.ID, problem: x.Problem, index: x.Index}
			}
			return out, err
		}
	}
	log.Info().Int("problems", p.Problems()).Int("entries", p.Entries()).Str("similarity", cfg.Similarity).
		Float64("p_t", cfg.FeedbackRatio).Msg("LANPO pool ready")
	return &Explorer{Builder: f, run: run}, nil
}

// Save writes the pool into a checkpoint directory.
func (l *Explorer) Save(dir string) error { return l.pool.Save(dir) }

// Tokens returns the tokens LANPO's auxiliary work prefilled and generated
// since the last call.
func (l *Explorer) Tokens() (prefilled, generated int) {
	prefilled, generated = l.tokens.prefilled, l.tokens.generated
	l.tokens.prefilled, l.tokens.generated = 0, 0
	return prefilled, generated
}

// draw is a uniform number in [0, 1) from (run seed, step, prompt index,
// purpose).
func (l *Explorer) draw(index int, purpose string) float64 {
	return rand.New(rand.NewPCG(l.seed, rl.DrawKey(l.step, index, purpose))).Float64()
}

// AddContext decides, for each prompt of a round of step (this rank's
// share), whether it is feedback-aware and in which mode, and builds its
// context. Every rank calls it each round.
func (l *Explorer) AddContext(step int, ps []*rl.Prompt, ph rl.Phases) error {
	l.step = step
	pt := l.cfg.feedbackRatio(l.step)
	l.met.PT = pt
	var abstraction []*rl.Prompt
	for _, p := range ps {
		l.met.Prompts++
		if l.draw(p.Index, "feedback") >= pt {
			continue
		}
		p.Feedback = true
		l.met.FeedbackAware++
		id := l.run.Problems[p.Problem].ID
		canReflect := *l.cfg.Modes.Reflection > 0 && l.hasAttempt(id)
		others := l.pool.Problems()
		if l.pool.Has(id) {
			others--
		}
		canAbstract := *l.cfg.Modes.Abstraction > 0 && (others > 0 || l.run.Oracle != nil)
		switch l.pickMode(p.Index, canReflect, canAbstract) {
		case rl.ModeReflection:
			if err := l.reflect(p); err != nil {
				return err
			}
		case rl.ModeAbstraction:
			abstraction = append(abstraction, p)
		default:
			l.met.Fallback++
		}
	}
	if l.run.Oracle != nil {
		return l.oraclePlans(abstraction)
	}
	if len(abstraction) == 0 && l.allItems == nil {
		return nil // with allItems, every rank takes part in scoring the global set
	}
	items := make([]abstractionItem, len(abstraction))
	for i, p := range abstraction {
		pr := l.run.Problems[p.Problem]
		items[i] = abstractionItem{id: pr.ID, problem: pr.Problem, index: p.Index}
	}
	res, err := l.abstraction(ph, items)
	if err != nil {
		return err
	}
	for i, p := range abstraction {
		for _, c := range res[i].candidates {
			p.Related = append(p.Related, rl.Related{ProblemID: c.ProblemID, Relevance: c.Relevance, Raw: c.Raw, Passed: c.Passed})
		}
		if res[i].ids != nil {
			l.use(p, res[i].ids, rl.ModeAbstraction)
			for _, ls := range res[i].lessons {
				p.Lessons = append(p.Lessons, strings.TrimSpace(ls.Principles+" "+ls.Pitfalls))
			}
		}
	}
	return nil
}

// oraclePlans gives each abstraction prompt the oracle's plan, or leaves
// it from scratch (a fallback, counted) while the oracle has none.
func (l *Explorer) oraclePlans(ps []*rl.Prompt) error {
	for _, p := range ps {
		pr := l.run.Problems[p.Problem]
		plan, ok := l.run.Oracle.Plan(pr.ID)
		if !ok {
			l.met.FallbackNotRelevant++
			continue
		}
		ids, ok, err := l.withContext(pr.Problem, l.prompts.AbstractionContext(plan))
		if err != nil {
			return err
		}
		if ok {
			l.use(p, ids, rl.ModeAbstraction)
		}
	}
	return nil
}

// pickMode draws a mode among the available ones by their weights.
func (l *Explorer) pickMode(index int, canReflect, canAbstract bool) string {
	var wr, wa float64
	if canReflect {
		wr = *l.cfg.Modes.Reflection
	}
	if canAbstract {
		wa = *l.cfg.Modes.Abstraction
	}
	if wr+wa == 0 {
		return rl.ModeScratch
	}
	if l.draw(index, "mode")*(wr+wa) < wr {
		return rl.ModeReflection
	}
	return rl.ModeAbstraction
}

func (l *Explorer) hasAttempt(id string) bool {
	if l.cfg.ReflectOn == reflectFailed {
		_, ok := l.pool.FailedAttempt(id, 0)
		return ok
	}
	return l.pool.Has(id)
}

// reflect gives p an earlier attempt at its problem to critique and redo.
// The attempt is a pool.Attempt (no outcome), chosen by a seeded draw.
func (l *Explorer) reflect(p *rl.Prompt) error {
	pr := l.run.Problems[p.Problem]
	u := l.draw(p.Index, "attempt")
	a, _ := l.pool.AttemptFor(pr.ID, u)
	if l.cfg.ReflectOn == reflectFailed {
		a, _ = l.pool.FailedAttempt(pr.ID, u)
	}
	shown, _ := reward.ExtractResponse(a.Text, false)
	ids, _, ok, err := l.reflection(pr.Problem, a)
	if err != nil || !ok {
		return err
	}
	l.use(p, ids, rl.ModeReflection)
	p.Shown = shown
	return nil
}

// use makes ids (a prompt with context) p's prompt. With train_prompt
// sampled the update conditions on it too; with original on the bare
// prompt, weighted by importance ratios capped at lanpo.tis_cap.
func (l *Explorer) use(p *rl.Prompt, ids []int64, mode string) {
	p.Context = len(ids) - len(p.IDs)
	p.IDs, p.Mode = ids, mode
	if l.cfg.TrainPrompt == trainSampled {
		p.TrainIDs = ids
	} else {
		p.TISCap = l.cfg.TISCap
	}
	switch mode {
	case rl.ModeReflection:
		l.met.Reflection++
	case rl.ModeAbstraction:
		l.met.Abstraction++
	}
	l.met.contextSum += p.Context
	l.met.ContextTokensMax = max(l.met.ContextTokensMax, p.Context)
}

// write stores up to lanpo.summaries_per_group rollouts of every sampled
// group (dynamic sampling's dropped groups included) with the policy's
// summary of each, in global group order. Which rollouts are stored is a
// seeded draw that does not look at outcomes: storing failed attempts
// preferentially would make "the attempt shown is usually wrong" true.
// The problem's gold answer (and in a code run its code, pool.StripCode)
// is stripped from the principles and pitfalls as they enter the pool, so
// lessons never carry it, whoever reads the
// pool (lanpo eval does not know the training answers).
func (l *Explorer) write(sampled []*rl.Rollout) error {
	G := l.run.SamplesPerPrompt
	k := min(l.cfg.SummariesPerGroup, G)
	// newEntry is one stored rollout, sent to every rank.
	type newEntry struct {
		Problem int        `json:"problem"`
		Order   int        `json:"order"` // position in its group's draw
		Entry   pool.Entry `json:"entry"`
	}
	var chosen []*rl.Rollout
	var order []int
	for start := 0; start+G <= len(sampled) && k > 0; start += G {
		grp := sampled[start : start+G]
		rng := rand.New(rand.NewPCG(l.seed, rl.DrawKey(l.step, grp[0].Prompt.Index, "store")))
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
			problems[i], attempts[i], correct[i] = l.run.Problems[r.Prompt.Problem].Problem, r.Text, r.Correct
			indexes[i] = r.Prompt.Index*G + r.Sample
		}
		sums, err := l.summarize(problems, attempts, correct, indexes)
		if err != nil {
			return fmt.Errorf("summaries: %w", err)
		}
		for i, r := range chosen {
			pr := l.run.Problems[r.Prompt.Problem]
			text, _ := l.tk.StripAddedTokens(r.Text)
			sum := sums[i]
			sum.Principles, sum.Pitfalls = pool.StripForeign(sum.Principles, pr.Problem, l.cfg.Code, pr.Answer), pool.StripForeign(sum.Pitfalls, pr.Problem, l.cfg.Code, pr.Answer)
			mine = append(mine, newEntry{Problem: r.Prompt.Problem, Order: order[i], Entry: pool.Entry{ProblemID: pr.ID, Step: l.step + 1,
				Attempt: text, Summary: sum, Correct: r.Correct, Reward: r.Reward, Truncated: r.Truncated, ResponseTokens: r.Tokens,
				Group: r.Prompt.Index, Sample: r.Sample}})
		}
	}
	// Every rank adds every rank's entries in global group order, so the
	// pool is the same on every rank and for any world size.
	all := mine
	if l.run.Comm.Size() > 1 {
		var err error
		if all, err = dist.GatherOrdered(l.run.Comm, mine, func(e newEntry) (int, int) { return e.Entry.Group, e.Order }); err != nil {
			return fmt.Errorf("pool entries: %w", err)
		}
	}
	for _, ne := range all {
		l.met.SummaryEmptyFields += ne.Entry.Summary.Empty()
		l.met.PoolEvicted += l.pool.Add(l.run.Problems[ne.Problem].Problem, ne.Entry)
		l.met.PoolAdded++
	}
	return nil
}

// Observe sees every rollout this rank sampled in step, after the update:
// it stores some in the pool (write) and returns the step's metrics, global
// over the ranks (the counters each rank kept of its own prompts and
// rollouts are summed), and resets the counters.
func (l *Explorer) Observe(step int, sampled []*rl.Rollout, ph rl.Phases) (any, error) {
	l.step = step
	if o := l.run.Oracle; o != nil {
		for _, r := range sampled {
			o.Observe(l.run.Problems[r.Prompt.Problem].ID, r.Correct)
		}
	}
	ph.Enter("pool")
	if err := l.write(sampled); err != nil {
		return nil, err
	}
	// Accuracy by prompt kind, and how often a redo copied the answer of
	// the attempt it was shown.
	var fb, fbRight, sc, scRight, refl, copied int
	for _, r := range sampled {
		if r.Prompt.Mode == rl.ModeScratch {
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
		if r.Prompt.Mode == rl.ModeReflection && r.Prompt.Shown != "" {
			refl++
			if got, ok := reward.ExtractResponse(r.Text, r.Truncated); ok && reward.Equivalent(r.Prompt.Shown, got, reward.Options{}) {
				copied++
			}
		}
	}
	// Groups per prompt kind with no reward variance (no gradient), and
	// those all right (saturated): what a plan that states the answer does
	// to the update.
	var fbGroups, fbZero, fbAll, scGroups, scZero, scAll int
	G := l.run.SamplesPerPrompt
	for start := 0; start+G <= len(sampled); start += G {
		grp := sampled[start : start+G]
		same, all := true, true
		for _, r := range grp {
			same = same && r.Reward == grp[0].Reward
			all = all && r.Correct
		}
		groups, zero, right := &fbGroups, &fbZero, &fbAll
		if grp[0].Prompt.Mode == rl.ModeScratch {
			groups, zero, right = &scGroups, &scZero, &scAll
		}
		*groups++
		if same {
			*zero++
		}
		if all {
			*right++
		}
	}
	lm := l.met
	loc := []float64{float64(lm.Prompts), float64(lm.FeedbackAware), float64(lm.Reflection), float64(lm.Abstraction), float64(lm.Fallback),
		float64(lm.FallbackNotRelevant), float64(lm.FallbackTooLong), float64(lm.Candidates), float64(lm.Passed), lm.relevanceSum,
		lm.rawRelevanceSum, float64(lm.contextSum), float64(lm.ContextTruncated), float64(lm.SpecialRemoved),
		float64(lm.SummaryFieldsCut), float64(lm.AttemptsCut), float64(fb), float64(fbRight), float64(sc), float64(scRight), float64(refl), float64(copied),
		float64(fbGroups), float64(fbZero), float64(fbAll), float64(scGroups), float64(scZero), float64(scAll)}
	tot, err := dist.SumFloats(l.run.Comm, loc)
	if err != nil {
		return nil, err
	}
	ctxMax, err := dist.MaxFloat(l.run.Comm, float64(lm.ContextTokensMax))
	if err != nil {
		return nil, err
	}
	lm.Prompts, lm.FeedbackAware, lm.Reflection, lm.Abstraction, lm.Fallback = int(tot[0]), int(tot[1]), int(tot[2]), int(tot[3]), int(tot[4])
	lm.FallbackNotRelevant, lm.FallbackTooLong, lm.Candidates, lm.Passed = int(tot[5]), int(tot[6]), int(tot[7]), int(tot[8])
	lm.relevanceSum, lm.rawRelevanceSum, lm.contextSum, lm.ContextTruncated, lm.SpecialRemoved = tot[9], tot[10], int(tot[11]), int(tot[12]), int(tot[13])
	lm.SummaryFieldsCut, lm.AttemptsCut = int(tot[14]), int(tot[15])
	lm.ContextTokensMax = int(ctxMax)
	fbN, fbRightN, scN, scRightN, reflN, copiedN := tot[16], tot[17], tot[18], tot[19], tot[20], tot[21]
	if fbN > 0 {
		lm.AccuracyFeedback = fbRightN / fbN
	}
	if scN > 0 {
		lm.AccuracyScratch = scRightN / scN
	}
	if reflN > 0 {
		lm.ReflectionCopied = copiedN / reflN
	}
	if g := tot[22]; g > 0 {
		lm.ZeroVarFeedback, lm.AllCorrectFeedback = tot[23]/g, tot[24]/g
	}
	if g := tot[25]; g > 0 {
		lm.ZeroVarScratch, lm.AllCorrectScratch = tot[26]/g, tot[27]/g
	}
	if n := lm.Reflection + lm.Abstraction; n > 0 {
		lm.ContextTokensMean = float64(lm.contextSum) / float64(n)
	}
	if lm.Candidates > 0 {
		lm.RelevanceMean = lm.relevanceSum / float64(lm.Candidates)
		lm.RawRelevanceMean = lm.rawRelevanceSum / float64(lm.Candidates)
	}
	lm.PoolProblems, lm.PoolEntries, lm.PoolBytes = l.pool.Problems(), l.pool.Entries(), l.pool.Bytes()
	l.met = Metrics{}
	return &lm, nil
}
