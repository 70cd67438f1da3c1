package trainer

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rs/zerolog/log"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/optim"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/rl"
)

// GRPO as lanpo runs it, one step:
//
//  1. prompts: P problems from the data cursor, each rendered with the chat
//     template (the prompt ids are made once, when the data is loaded).
//  2. rollout: each prompt sampled G times by the rollout engine (no grad);
//     every sampled token's log-prob is recorded — that is π_old, since
//     sampler and trainer share the model code and kernels.
//  3. reward: decode, verify against the gold answer (reward/), plus an
//     optional format reward.
//  4. filter: with dynamic sampling (DAPO), groups whose rewards are all
//     equal are dropped and steps 1-3 repeat for more prompts; advantages
//     are group-normalized (GRPO) or mean-centred only (Dr. GRPO).
//  5. reference log-probs when β > 0 (the initial policy, frozen).
//  6. update: μ epochs; each is one optimizer step over the whole batch,
//     accumulated over micro-batches with token weights fixed for the
//     global batch, so the update does not depend on the micro-batch size.
//
// Deviations from the GRPO paper: one optimizer step per epoch over the
// whole batch (no mini-batches), π_old is the sampler's record instead of
// a second forward pass, and the loss aggregation is configurable.

// rollout is one sampled response and what the update needs of it; the
// embedded rl.Rollout is what an explorer sees of it.
type rollout struct {
	rl.Rollout
	promptIDs []int64   // the prompt the update conditions on
	ids       []int64   // generated ids
	oldLogp   []float64 // the sampler's record (float32) or the trainer's
	// behaviorLogp are the sampler's log-probs when oldLogp was recomputed
	// by the trainer — on another prompt than the sampler saw
	// (rl.Prompt.TrainIDs ≠ IDs) or on the same one
	// (algo.recompute_old_logp) — and the loss is importance-weighted.
	behaviorLogp []float64
	adv          float64
	refLogp      []float64
	tis          []float32 // truncated importance weight of each token (nil: 1)
	weight       float64   // loss weight of each of its tokens (TokenWeights)
}

// grpoRun holds a GRPO (or LANPO) run's long-lived objects.
type grpoRun struct {
	*session
	ref        *model.Model // nil when β = 0
	problems   []Problem
	prompts    [][]int64 // each problem's prompt ids
	eos        []int64
	explorer   Explorer // LANPO's feedback; nil for GRPO
	stepTokens struct{ prefilled, generated, trained int }
}

// RunGRPO runs (or resumes) GRPO or LANPO training (algo.name) as cfg
// says. It returns ErrInterrupted after saving a checkpoint when ctx is
// cancelled.
func RunGRPO(ctx context.Context, cfg Config, resume string, opts RunOptions) error {
	s, err := openSession(cfg, resume, cfg.Algo.Name, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	g := &grpoRun{session: s}
	if g.problems, err = ReadProblems(cfg.Data.Train, cfg.Data); err != nil {
		return err
	}
	if err := chatData(&s.cfg.Data, g.problems); err != nil {
		return err
	}
	if err := g.renderPrompts(); err != nil {
		return err
	}
	if g.eos, err = s.m.EOSTokenIDs(); err != nil {
		return err
	}
	if cfg.Algo.KLBeta > 0 {
		o := cfg.LoadOptions()
		if cfg.Algo.RefDevice != "" {
			o.Device, _ = ParseDevice(cfg.Algo.RefDevice) // parsed at load
			o.DType = s.m.DType
			if err := CheckDevice(o.Device); err != nil {
				return fmt.Errorf("config key algo.ref_device: %w", err)
			}
		}
		if g.ref, err = model.Load(s.modelDir, o); err != nil {
			return fmt.Errorf("reference model: %w", err)
		}
		defer g.ref.Close()
	}
	var evalPool *pool.Pool
	if cfg.Algo.Name == AlgoLANPO {
		ex, err := feedback.NewExplorer(s.m, s.tk, s.cfg.FeedbackSettings(), feedback.Run{Problems: g.problems,
			SamplesPerPrompt: cfg.Rollout.SamplesPerPrompt, Comm: s.comm, ResumedFrom: s.resumedFrom})
		if err != nil {
			return err
		}
		g.explorer, evalPool = ex, ex.Pool()
		s.saveExtra = append(s.saveExtra, ex.Save)
	}
	return s.loop(ctx, g.step, evalPool)
}

// renderPrompts tokenizes every problem's prompt once and checks that the
// prompt and the generation budget fit the model's context, naming the
// file and line of the first that does not.
func (g *grpoRun) renderPrompts() error {
	maxPos := g.m.Config.MaxPositionEmbeddings
	g.prompts = make([][]int64, len(g.problems))
	for i, p := range g.problems {
		ids, err := g.cfg.PromptFormat().SolveIDs(g.tk, p.Problem)
		if err != nil {
			return fmt.Errorf("%s: problem %s: %w", p.Where, p.ID, err)
		}
		if maxPos > 0 && int64(len(ids)+g.cfg.Rollout.MaxNewTokens) > maxPos {
			return fmt.Errorf("%s: problem %s: its prompt of %d tokens + rollout.max_new_tokens %d exceed the model's max_position_embeddings %d",
				p.Where, p.ID, len(ids), g.cfg.Rollout.MaxNewTokens, maxPos)
		}
		g.prompts[i] = ids
	}
	return nil
}

// step runs one GRPO or LANPO step and returns its metrics (timings
// included).
func (g *grpoRun) step(t *phaseTimer) (StepMetrics, error) {
	var met StepMetrics
	g.stepTokens.prefilled, g.stepTokens.generated, g.stepTokens.trained = 0, 0, 0
	kept, sampled, stats, err := g.collect(t)
	if err != nil {
		return met, err
	}
	g.fillMetrics(&met, stats)
	if g.cfg.Log.Rollouts {
		if err := g.logRollouts(sampled); err != nil {
			return met, err
		}
	}
	if met.GroupsKept == 0 {
		met.Skipped = true
		log.Warn().Int("step", g.state.Step+1).Msg("no group with reward variance: update skipped")
	} else if err := g.train(t, kept, &met); err != nil {
		return met, err
	}
	if g.explorer != nil {
		seen := make([]*rl.Rollout, len(sampled))
		for i, r := range sampled {
			seen[i] = &r.Rollout
		}
		if met.Explorer, err = g.explorer.Observe(g.state.Step, seen, t); err != nil {
			return met, err
		}
		pre, gen := g.explorer.Tokens()
		g.stepTokens.prefilled += pre
		g.stepTokens.generated += gen
	}
	tok, err := dist.SumFloats(g.comm, []float64{float64(g.stepTokens.prefilled), float64(g.stepTokens.generated), float64(g.stepTokens.trained)})
	if err != nil {
		return met, err
	}
	met.PrefillTokens, met.GenTokens, met.TrainedTokens = int(tok[0]), int(tok[1]), int(tok[2])
	return met, nil
}

// train computes what the update needs besides the rollouts (π_old on the
// update's prompt when the sampler saw another, reference log-probs) and
// runs the update.
func (g *grpoRun) train(t *phaseTimer, kept []*rollout, met *StepMetrics) error {
	other, err := dist.AnyRank(g.comm, trainedOnOtherPrompts(kept))
	if err != nil {
		return err
	}
	if g.cfg.Algo.RecomputeOldLogp || other {
		t.Enter("old_logprobs")
		if err := g.recomputeOld(kept, met); err != nil {
			return err
		}
	}
	if g.ref != nil {
		t.Enter("ref_logprobs")
		if err := g.refLogprobs(kept); err != nil {
			return err
		}
	}
	t.Enter("update")
	return g.update(kept, met)
}

// collect runs rounds of prompts → rollout → reward → filter until P
// groups are kept (dynamic sampling drops zero-variance groups and draws
// more prompts, at most algo.max_resample extra rounds). Every rank draws
// the round's prompts alike and samples its share of them; it returns
// this rank's kept and sampled rollouts and the statistics of every
// rollout sampled on any rank, in global order.
func (g *grpoRun) collect(t *phaseTimer) (kept, sampled []*rollout, stats []rolloutStat, err error) {
	cfg := g.cfg
	P, G := cfg.Rollout.PromptsPerStep, cfg.Rollout.SamplesPerPrompt
	keptRolls := 0 // on every rank
	for round := 0; keptRolls/G < P && round <= cfg.Algo.MaxResample; round++ {
		t.Enter("prompts")
		idx := g.state.Cursor.Next(len(g.problems), P-keptRolls/G)
		lo, hi := dist.Share(len(idx), g.comm.Rank(), g.comm.Size())
		ps := make([]*rl.Prompt, 0, hi-lo)
		for i := lo; i < hi; i++ {
			k := idx[i]
			ps = append(ps, &rl.Prompt{Problem: k, Index: round*P + i, IDs: g.prompts[k], TrainIDs: g.prompts[k], Mode: rl.ModeScratch})
		}
		if g.explorer != nil {
			if err := g.explorer.AddContext(g.state.Step, ps, t); err != nil {
				return nil, nil, nil, err
			}
		}
		t.Enter("rollout")
		batch, err := g.rollout(ps)
		if err != nil {
			return nil, nil, nil, err
		}
		t.Enter("reward")
		g.score(batch)
		sampled = append(sampled, batch...)
		k := g.filterGroups(batch, round == cfg.Algo.MaxResample)
		kept = append(kept, k...)
		all, err := g.exchangeStats(batch, k)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("round %d: %w", round, err)
		}
		for _, st := range all {
			if st.Kept {
				keptRolls++
			}
		}
		stats = append(stats, all...)
	}
	return kept, sampled, stats, nil
}

// rolloutStat is what every rank learns of every rollout of the step: what
// the metrics need.
type rolloutStat struct {
	Index   int     `json:"i"` // the prompt's global index in the step
	Sample  int     `json:"s"`
	Reward  float64 `json:"r"`
	Correct bool    `json:"c,omitempty"`
	Trunc   bool    `json:"t,omitempty"`
	Len     int     `json:"n"`
	Kept    bool    `json:"k,omitempty"`
}

// exchangeStats all-gathers the round's rollout statistics (kept: this
// rank's rollouts that survived the filter), sorted by global index.
func (g *grpoRun) exchangeStats(batch, kept []*rollout) ([]rolloutStat, error) {
	isKept := make(map[*rollout]bool, len(kept))
	for _, r := range kept {
		isKept[r] = true
	}
	mine := make([]rolloutStat, len(batch))
	for i, r := range batch {
		mine[i] = rolloutStat{Index: r.Prompt.Index, Sample: r.Sample, Reward: r.Reward, Correct: r.Correct, Trunc: r.Truncated,
			Len: len(r.ids), Kept: isKept[r]}
	}
	if g.comm.Size() == 1 {
		return mine, nil
	}
	return dist.GatherOrdered(g.comm, mine, func(r rolloutStat) (int, int) { return r.Index, r.Sample })
}

// rollout samples G responses to each prompt, each prompt's randomness
// keyed by its index in the step.
func (g *grpoRun) rollout(ps []*rl.Prompt) ([]*rollout, error) {
	cfg := g.cfg
	reqs := make([]model.Request, len(ps))
	streams := make([]int, len(ps))
	problems := make([]int, len(ps))
	for i, p := range ps {
		reqs[i] = model.Request{PromptIDs: p.IDs, Samples: cfg.Rollout.SamplesPerPrompt}
		streams[i], problems[i] = p.Index, p.Problem
		g.stepTokens.prefilled += len(p.IDs) // once per prompt: the engine shares the prefix across the group
	}
	sp := model.SamplingParams{Temperature: cfg.Rollout.Temperature, TopP: cfg.Rollout.TopP, TopK: cfg.Rollout.TopK,
		MaxNewTokens: cfg.Rollout.MaxNewTokens, StopIDs: g.eos, Seed: rl.StepSeed(cfg.Seed, g.state.Step)}
	var res []model.Sample
	err := csrc.NoGrad(func() (err error) {
		res, err = g.m.GenerateAt(reqs, streams, sp, cfg.Rollout.GenerateOptions())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("problems %s: %w", g.problemIDs(problems), err)
	}
	batch := make([]*rollout, len(res))
	for i, r := range res {
		p := ps[r.Prompt]
		batch[i] = &rollout{Rollout: rl.Rollout{Prompt: p, Sample: r.Index, Tokens: len(r.IDs), Truncated: r.FinishReason == "length",
			Text: g.tk.Decode(tokenizer.Ints(r.IDs), true)}, promptIDs: p.IDs, ids: r.IDs, oldLogp: widen(r.Logprobs)}
		g.stepTokens.generated += len(r.IDs)
	}
	return batch, nil
}

// problemIDs lists the ids of some problems for an error message.
func (g *grpoRun) problemIDs(idx []int) string {
	var ids []string
	for i, k := range idx {
		if i == 8 {
			ids = append(ids, fmt.Sprintf("… (%d in all)", len(idx)))
			break
		}
		ids = append(ids, g.problems[k].ID)
	}
	return strings.Join(ids, ", ")
}

// score sets each rollout's verdict and reward: 1 for a verified answer
// (a truncated response needs an explicit one), plus algo.format_reward
// when the answer is in a complete \boxed{}.
func (g *grpoRun) score(batch []*rollout) {
	pairs := make([]reward.Pair, len(batch))
	for i, r := range batch {
		pairs[i] = reward.Pair{Response: r.Text, Gold: g.problems[r.Prompt.Problem].Answer, Truncated: r.Truncated}
	}
	verdicts := reward.VerifyBatch(pairs, 0, reward.Options{}) // on all cores: pure Go
	for i, r := range batch {
		r.Correct = verdicts[i].Correct
		r.Reward = 0
		if r.Correct {
			r.Reward = 1
		}
		if w := g.cfg.Algo.FormatReward; w > 0 && reward.HasBoxedAnswer(r.Text, r.Truncated) {
			r.Reward += w
		}
	}
}

// filterGroups computes advantages group by group (G consecutive rollouts)
// and returns the groups to train on. With dynamic sampling a group whose
// rewards are all equal is dropped (it has no gradient), except in the
// last round, which keeps what it gets.
func (g *grpoRun) filterGroups(batch []*rollout, lastRound bool) []*rollout {
	G := g.cfg.Rollout.SamplesPerPrompt
	var kept []*rollout
	for start := 0; start < len(batch); start += G {
		grp := batch[start : start+G]
		rs := groupRewards(grp)
		if g.cfg.Algo.DynamicSampling && allEqual(rs) && !lastRound {
			continue
		}
		adv := Advantages([][]float64{rs}, g.cfg.Algo.AdvNoStd, 1e-6)[0]
		for i, r := range grp {
			r.adv = adv[i]
		}
		kept = append(kept, grp...)
	}
	return kept
}

func groupRewards(grp []*rollout) []float64 {
	rs := make([]float64, len(grp))
	for i, r := range grp {
		rs[i] = r.Reward
	}
	return rs
}

// fillMetrics describes what the policy did — every rollout sampled on
// any rank, before dynamic sampling's filter — and, under *_kept names,
// the batch the update trained on. stats are in global order.
func (g *grpoRun) fillMetrics(m *StepMetrics, stats []rolloutStat) {
	G := g.cfg.Rollout.SamplesPerPrompt
	var sum, sq, correct, lenSum, trunc float64
	var keptN, keptSum, keptCorrect float64
	maxLen := 0
	for _, r := range stats {
		sum += r.Reward
		sq += r.Reward * r.Reward
		if r.Correct {
			correct++
		}
		lenSum += float64(r.Len)
		maxLen = max(maxLen, r.Len)
		if r.Trunc {
			trunc++
		}
		m.Tokens += r.Len
		if r.Kept {
			keptN++
			keptSum += r.Reward
			if r.Correct {
				keptCorrect++
			}
		}
	}
	if n := float64(len(stats)); n > 0 {
		m.RewardMean = sum / n
		m.RewardStd = math.Sqrt(math.Max(0, sq/n-m.RewardMean*m.RewardMean))
		m.Accuracy = correct / n
		m.RespLenMean, m.RespLenMax, m.TruncRatio = lenSum/n, maxLen, trunc/n
	}
	zero := 0
	for start := 0; start+G <= len(stats); start += G {
		rs := make([]float64, G)
		for i := range rs {
			rs[i] = stats[start+i].Reward
		}
		if allEqual(rs) {
			zero++
		}
	}
	m.ZeroVarFrac = float64(zero) / float64(max(len(stats)/G, 1))
	m.GroupsKept = int(keptN) / G
	m.GroupsDropped = (len(stats) - int(keptN)) / G
	if keptN > 0 {
		m.RewardMeanKept, m.AccuracyKept = keptSum/keptN, keptCorrect/keptN
	}
}

func widen(xs []float32) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

// refLogprobs computes log π_ref of every response token (no grad).
func (g *grpoRun) refLogprobs(rolls []*rollout) error {
	err := g.logprobs(g.ref, rolls, func(r *rollout, lp []float64) { r.refLogp = lp })
	if err != nil {
		return fmt.Errorf("reference log-probs: %w", err)
	}
	return nil
}

// logprobs computes, with no grad, the log-probs under m of every response
// token of rolls given each rollout's promptIDs, micro-batch by
// micro-batch, and hands each rollout's to set.
func (g *grpoRun) logprobs(m *model.Model, rolls []*rollout, set func(*rollout, []float64)) error {
	return csrc.NoGrad(func() error {
		for _, mb := range g.microBatches(rolls) {
			var s tensor.Scope
			b := buildBatch(&s, m.Device, mb)
			lp, _, err := m.TokenLogProbs(&s, b.ids, b.pos, b.mask, b.targets, b.tmask, csrc.LogProbOptions{Temperature: g.cfg.Rollout.Temperature})
			if err != nil {
				s.Close()
				return err
			}
			vals := tensor.Float64s(lp) // sync: one read per micro-batch
			for i, r := range mb {
				set(r, b.gather(vals, i, len(r.ids)))
				g.stepTokens.trained += len(r.promptIDs) + len(r.ids)
			}
			s.Close()
		}
		return nil
	})
}

// recomputeOld takes π_old from the trainer for the rollouts that need
// it, keeping the sampler's record as the behaviour policy μ, and weights
// each token's loss by the truncated importance weight min(π_old(y_t) /
// μ(y_t), cap) (detached): an approximate correction — per token, not the
// product over the prefix, and biased by the truncation, which bounds the
// variance that rare tokens would otherwise add.
//
// Rollouts sampled from a context prompt and trained as answers to another
// (rl.Prompt.TrainIDs ≠ IDs: lanpo.train_prompt original) need it always:
// μ saw the context, π_old is on the bare prompt (cap: the prompt's
// TISCap, lanpo.tis_cap; metrics context_logp_gap, tis_clipped_frac). With
// algo.recompute_old_logp every other rollout gets it too, μ and π_old on
// the same prompt differing only by the sampler's numerics (cap
// algo.tis_cap; metrics sampler_logp_gap_mean/max, sampler_tis_clipped_frac).
func (g *grpoRun) recomputeOld(rolls []*rollout, met *StepMetrics) error {
	var todo []*rollout
	for _, r := range rolls {
		if g.cfg.Algo.RecomputeOldLogp || otherPrompt(r) {
			r.behaviorLogp, r.promptIDs = r.oldLogp, r.Prompt.TrainIDs
			todo = append(todo, r)
		}
	}
	if err := g.logprobs(g.m, todo, func(r *rollout, lp []float64) { r.oldLogp = lp }); err != nil {
		return fmt.Errorf("π_old from the trainer: %w", err)
	}
	type tally struct {
		gap, gapMax     float64
		tokens, clipped int
	}
	var ctx, same tally
	for _, r := range todo {
		c, tl := g.cfg.Algo.TISCap, &same
		if otherPrompt(r) {
			c, tl = r.Prompt.TISCap, &ctx
		}
		r.tis = make([]float32, len(r.ids))
		for k := range r.ids {
			logRatio := r.oldLogp[k] - r.behaviorLogp[k]
			if tl == &ctx {
				tl.gap -= logRatio // log μ(y|x,c) − log π_old(y|x)
			} else {
				tl.gap += math.Abs(logRatio)
				tl.gapMax = math.Max(tl.gapMax, math.Abs(logRatio))
			}
			w := math.Exp(math.Min(logRatio, 30))
			if w > c {
				w = c
				tl.clipped++
			}
			r.tis[k] = float32(w)
			tl.tokens++
		}
	}
	// Over every rank's rollouts.
	tot, err := dist.SumFloats(g.comm, []float64{ctx.gap, float64(ctx.tokens), float64(ctx.clipped), same.gap, float64(same.tokens), float64(same.clipped)})
	if err != nil {
		return err
	}
	if same.gapMax, err = dist.MaxFloat(g.comm, same.gapMax); err != nil {
		return err
	}
	if tot[1] > 0 {
		met.ContextLogpGap, met.ContextTISClip = tot[0]/tot[1], tot[2]/tot[1]
	}
	if tot[4] > 0 {
		met.SamplerGapMean, met.SamplerGapMax, met.TISClipped = tot[3]/tot[4], same.gapMax, tot[5]/tot[4]
	}
	return nil
}

// otherPrompt reports whether r is trained as an answer to another prompt
// than it was sampled from.
func otherPrompt(r *rollout) bool { return !slices.Equal(r.Prompt.TrainIDs, r.Prompt.IDs) }

// trainedOnOtherPrompts reports whether any rollout of rolls is trained on
// another prompt than it was sampled from.
func trainedOnOtherPrompts(rolls []*rollout) bool {
	for _, r := range rolls {
		if otherPrompt(r) {
			return true
		}
	}
	return false
}

// microBatches splits the step's rollouts into the micro-batches every
// forward pass of the update runs over: algo.micro_batch_size rollouts
// each, or, with algo.max_tokens_per_micro_batch, rollouts packed by length
// under that many padded tokens (packByTokens). The loss does not depend on
// the split (token weights are fixed for the whole batch).
func (g *grpoRun) microBatches(rolls []*rollout) [][]*rollout {
	budget := g.cfg.Algo.MaxTokensPerMicroBatch
	if budget <= 0 {
		return slices.Collect(slices.Chunk(rolls, g.cfg.Algo.MicroBatchSize))
	}
	lengths := make([]int, len(rolls))
	for i, r := range rolls {
		lengths[i] = len(r.promptIDs) + len(r.ids)
	}
	var out [][]*rollout
	for _, idx := range packByTokens(lengths, budget) {
		mb := make([]*rollout, len(idx))
		for j, i := range idx {
			mb[j] = rolls[i]
		}
		out = append(out, mb)
	}
	return out
}

// update runs the μ epochs of optimizer steps over the batch.
func (g *grpoRun) update(rolls []*rollout, met *StepMetrics) error {
	cfg := g.cfg
	lengths := make([]int, len(rolls))
	masked := make([]bool, len(rolls))
	for i, r := range rolls {
		lengths[i] = len(r.ids)
		masked[i] = cfg.Algo.OverlongMask && r.Truncated
	}
	// The loss is normalized over the global batch: every rank's share.
	tokens, seqs := normalizer(lengths, masked)
	tot, err := dist.SumFloats(g.comm, []float64{float64(tokens), float64(seqs)})
	if err != nil {
		return err
	}
	w, err := tokenWeights(lengths, masked, cfg.Algo.LossAggMode, cfg.Rollout.MaxNewTokens, int(tot[0]), int(tot[1]))
	if err != nil {
		return err
	}
	for i, r := range rolls {
		r.weight = w[i]
	}
	lr, err := optim.LR(g.state.Step, cfg.TotalSteps, cfg.Optim.WarmupSteps, cfg.Optim.LR, cfg.Optim.MinLRRatio, cfg.Optim.Schedule)
	if err != nil {
		return err
	}
	met.LR = lr
	lossCfg := PolicyLossConfig{ClipLow: cfg.Algo.ClipLow, ClipHigh: cfg.Algo.ClipHigh, Beta: cfg.Algo.KLBeta, KL: cfg.Algo.KLEstimator}
	for epoch := 0; epoch < cfg.Algo.Epochs; epoch++ {
		g.opt.ZeroGrad()
		var loss, ent float64
		var st PolicyLossStats
		done := 0 // rollouts of earlier micro-batches, for messages
		padded, real := 0, 0
		mbs := g.microBatches(rolls)
		n, err := g.microBatchCount(len(mbs))
		if err != nil {
			return err
		}
		for i := len(mbs); i < n; i++ {
			// Fewer micro-batches here than on another rank: take part in
			// the collectives those backward passes issue.
			if err := g.opt.SkipBackward(); err != nil {
				return err
			}
		}
		for _, mb := range mbs {
			var s tensor.Scope
			b := buildBatch(&s, g.m.Device, mb)
			padded += len(mb) * int(b.t)
			for _, r := range mb {
				real += len(r.promptIDs) + len(r.ids)
				g.stepTokens.trained += len(r.promptIDs) + len(r.ids)
			}
			// An out-of-memory error lands in one of these: say which knob to turn.
			where := func(err error) error {
				return fmt.Errorf("micro-batch at rollout %d (%d×%d tokens; algo.micro_batch_size %d, algo.max_tokens_per_micro_batch %d): %w",
					done, len(mb), b.t, cfg.Algo.MicroBatchSize, cfg.Algo.MaxTokensPerMicroBatch, err)
			}
			lp, entropy, ckpt, err := g.logProbsForUpdate(&s, b, csrc.LogProbOptions{Temperature: cfg.Rollout.Temperature, Entropy: true})
			if err != nil {
				s.Close()
				return where(err)
			}
			in := PolicyLossInput{Logp: lp, OldLogp: b.old, RefLogp: b.ref, Adv: b.adv, Weight: b.weight, TIS: b.tis}
			l, mst, err := PolicyLoss(&s, in, lossCfg)
			if err != nil {
				s.Close()
				return err
			}
			if err := model.Backward(l, ckpt, g.opt.LayerDone); err != nil {
				s.Close()
				return where(err)
			}
			// sync: loss, entropy and the sampler/trainer gap, once per micro-batch.
			loss += tensor.Float64s(l)[0]
			ent += tensor.Float64s(s.Keep(s.Keep(entropy.MustMul(b.weight, false)).MustSum(gotch.Double, false)))[0]
			if epoch == 0 {
				gap := s.Keep(s.Keep(s.Keep(lp.MustSub(b.old, false)).MustAbs(false)).MustMul(b.tmaskF, false))
				met.LogpMismatch = math.Max(met.LogpMismatch, tensor.Float64s(s.Keep(gap.MustMax(false)))[0])
			}
			st.ClipFrac += mst.ClipFrac
			st.KL += mst.KL
			st.Ratio += mst.Ratio
			s.Close()
			done += len(mb)
		}
		// Every rank's contributions are weighted by the global batch: sums.
		tot, err := dist.SumFloats(g.comm, []float64{loss, ent, st.ClipFrac, st.KL, st.Ratio, float64(real), float64(padded)})
		if err != nil {
			return err
		}
		if epoch == 0 {
			if met.LogpMismatch, err = dist.MaxFloat(g.comm, met.LogpMismatch); err != nil {
				return err
			}
		}
		met.Loss, met.Entropy, met.ClipFrac, met.KL, met.Ratio = tot[0], tot[1], tot[2], tot[3], tot[4]
		met.PaddingFrac = 1 - tot[5]/math.Max(tot[6], 1)
		if met.GradNorm, err = g.opt.Apply(lr, cfg.Optim.GradClip, met.Loss); err != nil {
			return err
		}
	}
	return nil
}

// microBatchCount is the most micro-batches any rank has this step: a
// rank with fewer issues the missing backward passes' collectives
// (Optimizer.SkipBackward) so every rank issues the same ones.
func (s *session) microBatchCount(mine int) (int, error) {
	if s.comm.Size() == 1 {
		return mine, nil
	}
	m, err := dist.MaxFloat(s.comm, float64(mine))
	return int(m), err
}

// logProbsForUpdate is the policy's log-probs of a micro-batch for the
// update, with activation checkpointing when train.activation_checkpointing
// (then the returned Checkpointed finishes the backward).
func (g *grpoRun) logProbsForUpdate(s *tensor.Scope, b *batch, opt csrc.LogProbOptions) (lp, ent *ts.Tensor, c *model.Checkpointed, err error) {
	return g.m.TokenLogProbsMaybeCheckpointed(g.cfg.Train.ActivationCheckpointing, s, b.ids, b.pos, b.mask, b.targets, b.tmask, opt)
}

func allEqual(x []float64) bool {
	for _, v := range x[1:] {
		if v != x[0] {
			return false
		}
	}
	return true
}
