package trainer

import (
	"fmt"
	"math"
	"slices"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/optim"
)

// microBatches splits the step's rollouts into the micro-batches every
// forward pass of the update runs over: algo.micro_batch_size rollouts
// each, or, with algo.max_tokens_per_micro_batch, rollouts packed by length
// under that many padded tokens (packByTokens). The loss does not depend on
// the split (token weights are fixed for the whole batch).
func (g *grpoRun) microBatches(rolls []*rollout) [][]*rollout {
	return splitMicroBatches(rolls, g.cfg.Algo.MicroBatchSize, g.cfg.Algo.MaxTokensPerMicroBatch,
		func(r *rollout) int { return len(r.promptIDs) + len(r.ids) })
}

// updatePlan is what the step's update fixes before its first epoch.
type updatePlan struct {
	lr      float64
	lossCfg PolicyLossConfig
	// scale multiplies the policy loss's token weights (the term's
	// policyScale); statScale rescales the policy's weighted statistics to
	// its own tokens.
	scale, statScale float64
	// policyTokens and policySeqs are the policy loss's own over every rank.
	policyTokens, policySeqs int
	// group and termLR: the term's own optimizer step (group > 0), or none.
	group  int
	termLR float64
}

// update runs the μ epochs of optimizer steps over the batch: the policy
// loss over rolls and, with an update term (term.go), the term's loss over
// its rows (tot: their totals over every rank) in the same steps.
func (g *grpoRun) update(rolls, rows []*rollout, tot termRows, met *StepMetrics) error {
	p, err := g.planUpdate(rolls, rows, tot)
	if err != nil {
		return err
	}
	met.LR = p.lr
	for epoch := 0; epoch < g.cfg.Algo.Epochs; epoch++ {
		if err := g.epoch(epoch, rolls, rows, tot, p, met); err != nil {
			return err
		}
	}
	return g.measureTermAfter(rows, tot, met)
}

// planUpdate sets every row's token weight — normalized over the global
// batch: every rank's share, with the term's rows when they join the
// policy's normalization — and fixes the step's learning rates and loss.
func (g *grpoRun) planUpdate(rolls, rows []*rollout, tot termRows) (p updatePlan, err error) {
	cfg := g.cfg
	norm := rolls
	if tot.joinPolicy {
		norm = append(slices.Clip(rolls), rows...)
	}
	lengths := make([]int, len(norm))
	masked := make([]bool, len(norm))
	for i, r := range norm {
		lengths[i] = ownTokens(r) // a trajectory's appended tool tokens carry no loss: they do not count
		masked[i] = cfg.Algo.OverlongMask && r.Truncated
	}
	tokens, seqs := normalizer(lengths, masked)
	ntot, err := dist.SumFloats(g.comm, []float64{float64(tokens), float64(seqs)})
	if err != nil {
		return p, err
	}
	w, err := tokenWeights(lengths, masked, cfg.Algo.LossAggMode, cfg.Rollout.MaxNewTokens, int(ntot[0]), int(ntot[1]))
	if err != nil {
		return p, err
	}
	p.scale = 1.0
	if g.term != nil {
		p.scale = g.term.policyScale()
	}
	for i, r := range norm {
		r.weight = w[i] * p.scale
	}
	if p.statScale, err = g.statScale(norm, len(rolls), w, lengths, p.scale, tot.joinPolicy); err != nil {
		return p, err
	}
	p.policyTokens, p.policySeqs = int(ntot[0]), int(ntot[1])
	if tot.joinPolicy {
		p.policyTokens -= tot.tokens
		p.policySeqs -= tot.rows
	}
	if p.lr, err = optim.LR(g.state.Step, cfg.TotalSteps, cfg.Optim.WarmupSteps, cfg.Optim.LR, cfg.Optim.MinLRRatio, cfg.Optim.Schedule); err != nil {
		return p, err
	}
	p.lossCfg = cfg.Algo.policyLossConfig()
	// The term joins the policy's optimizer step (group 0), or takes one
	// of its own after it with its own moments and learning rate
	// (consolidation with lanpo.consolidate_lr).
	if t, ok := g.term.(interface{ ownStep(float64) (int, float64) }); ok {
		p.group, p.termLR = t.ownStep(p.lr)
	}
	return p, nil
}

// statScale rescales the policy's statistics (entropy, clip fraction, KL,
// ratio: weighted sums) to the policy's own tokens, when its loss is
// scaled or a term's rows share its normalization (norm: the policy's
// nPolicy rows, then the term's).
func (g *grpoRun) statScale(norm []*rollout, nPolicy int, w []float64, lengths []int, scale float64, joined bool) (float64, error) {
	out := 1.0
	if scale > 0 {
		out = 1 / scale
	}
	if !joined {
		return out, nil
	}
	var wPol, wAll float64
	for i := range norm {
		tw := w[i] * float64(lengths[i])
		wAll += tw
		if i < nPolicy {
			wPol += tw
		}
	}
	ws, err := dist.SumFloats(g.comm, []float64{wPol, wAll})
	if err != nil {
		return 0, err
	}
	if ws[0] > 0 && scale > 0 {
		out = ws[1] / (ws[0] * scale)
	}
	return out, nil
}

// epoch is one optimizer step over the batch: the policy's micro-batches,
// the term's in the same step (or in a step of its own after it), the
// sums over every rank into met.
func (g *grpoRun) epoch(epoch int, rolls, rows []*rollout, tot termRows, p updatePlan, met *StepMetrics) error {
	cfg := g.cfg
	g.opt.ZeroGrad()
	mbs := g.microBatches(rolls)
	if p.scale == 0 {
		mbs = nil // the policy loss has no weight: nothing to run
	}
	tmbs := g.microBatches(rows)
	joint := tmbs // the term's micro-batches in the policy's step
	if p.group > 0 {
		joint = nil
	}
	if err := g.padBackwards(len(mbs) + len(joint)); err != nil {
		return err
	}
	pol, err := g.policyPass(mbs, len(mbs)+len(tmbs), p.lossCfg, epoch == 0)
	if err != nil {
		return err
	}
	var grads *gradSplit
	if epoch == 0 && cfg.Log.UpdateDiagnostics && g.term != nil && g.comm.Size() == 1 {
		grads = g.snapshotGrads() // the policy's gradient alone, before the term's adds to it
	}
	term, err := g.termPass(joint, len(mbs), len(mbs)+len(tmbs), tot)
	if err != nil {
		return err
	}
	// Every rank's contributions are weighted by the global batch: sums.
	sums := []float64{pol.loss, pol.ent, pol.stats.ClipFrac, pol.stats.KL, pol.stats.Ratio, float64(pol.real + term.real), float64(pol.padded + term.padded), term.loss}
	summed, err := dist.SumFloats(g.comm, append(sums, term.extra...))
	if err != nil {
		return err
	}
	if epoch == 0 {
		if met.LogpMismatch, err = dist.MaxFloat(g.comm, pol.gap); err != nil {
			return err
		}
	}
	met.Loss = summed[0] + summed[7]
	ss := p.statScale
	met.Entropy, met.ClipFrac, met.KL, met.Ratio = summed[1]*ss, summed[2]*ss, summed[3]*ss, summed[4]*ss
	met.PaddingFrac = 1 - summed[5]/math.Max(summed[6], 1)
	if p.group == 0 && grads != nil {
		if err := grads.measure(g, met, false); err != nil {
			return err
		}
	}
	// With a step of its own for the term and no policy row on any rank
	// (dynamic sampling dropped every group), there is nothing for the
	// policy's step to apply: Adam would move the weights on its
	// momentum alone.
	if p.group == 0 || p.policySeqs > 0 {
		if met.GradNorm, err = g.opt.Apply(p.lr, cfg.Optim.GradClip, met.Loss); err != nil {
			return err
		}
	}
	if p.group > 0 && tot.rows > 0 {
		// The term's own step, over the weights the policy's just moved.
		if summed, err = g.ownTermStep(tmbs, len(mbs), tot, p.group, p.termLR, grads, met); err != nil {
			return err
		}
		met.Loss += summed[7]
	}
	if g.term == nil {
		return nil
	}
	if epoch == 0 {
		met.Term = g.term.metrics(tot, summed[7], summed[8:], p.policyTokens)
	}
	return g.term.stepped()
}

// padBackwards issues, when this rank has fewer than the most micro-batches
// any rank has in one optimizer step (mine), the collectives the missing
// backward passes would have (Optimizer.SkipBackward), so every rank
// issues the same ones.
func (g *grpoRun) padBackwards(mine int) error {
	n, err := g.microBatchCount(mine)
	if err != nil {
		return err
	}
	for i := mine; i < n; i++ {
		if err := g.opt.SkipBackward(); err != nil {
			return err
		}
	}
	return nil
}

// policyPass runs the policy loss's micro-batches (forward, loss,
// backward) and sums their results; of is the epoch's micro-batches, for
// the heartbeat; withGap asks for the sampler/trainer log-prob gap.
func (g *grpoRun) policyPass(mbs [][]*rollout, of int, lossCfg PolicyLossConfig, withGap bool) (sum microResult, err error) {
	done := 0 // rollouts of earlier micro-batches, for messages
	for i, mb := range mbs {
		g.hb.microBatches(i, of)
		r, err := g.microBatch(mb, done, lossCfg, withGap)
		if err != nil {
			return sum, err
		}
		sum.loss += r.loss
		sum.ent += r.ent
		sum.gap = math.Max(sum.gap, r.gap)
		sum.stats.ClipFrac += r.stats.ClipFrac
		sum.stats.KL += r.stats.KL
		sum.stats.Ratio += r.stats.Ratio
		sum.real += r.real
		sum.padded += r.padded
		done += len(mb)
	}
	return sum, nil
}

// termPass runs the update term's micro-batches (after from others of the
// epoch's of) and sums their results, extra sums included (tot.extra of
// them).
func (g *grpoRun) termPass(tmbs [][]*rollout, from, of int, tot termRows) (sum microResult, err error) {
	sum.extra = make([]float64, tot.extra)
	done := 0
	for i, mb := range tmbs {
		g.hb.microBatches(from+i, of)
		r, err := g.term.microBatch(mb, done, tot)
		if err != nil {
			return sum, err
		}
		sum.loss += r.loss
		sum.real += r.real
		sum.padded += r.padded
		done += len(mb)
		for k, v := range r.extra {
			sum.extra[k] += v
		}
	}
	return sum, nil
}

// ownTermStep is the term's optimizer step of its own: its micro-batches'
// gradients alone, applied with moment group group at learning rate lr.
// It returns its sums over every rank as update's are laid out (the loss
// at 7, the extra sums from 8) and puts the step's norm into
// term_grad_norm (and, with grads, the gradient diagnostics).
func (g *grpoRun) ownTermStep(tmbs [][]*rollout, from int, tot termRows, group int, lr float64, grads *gradSplit, met *StepMetrics) ([]float64, error) {
	g.opt.ZeroGrad()
	if err := g.padBackwards(len(tmbs)); err != nil {
		return nil, err
	}
	term, err := g.termPass(tmbs, from, from+len(tmbs), tot)
	if err != nil {
		return nil, err
	}
	sums := append([]float64{0, 0, 0, 0, 0, float64(term.real), float64(term.padded), term.loss}, term.extra...)
	summed, err := dist.SumFloats(g.comm, sums)
	if err != nil {
		return nil, err
	}
	if grads != nil {
		if err := grads.measure(g, met, true); err != nil {
			return nil, err
		}
	}
	met.TermLR = lr
	if met.TermGradNorm, err = g.opt.ApplyGroup(group, lr, g.cfg.Optim.GradClip, summed[7]); err != nil {
		return nil, fmt.Errorf("%s's own optimizer step: %w", consolidateGroup, err)
	}
	return summed, nil
}

// measureTermAfter is log.update_diagnostics' look at a term's rows after
// the step's last optimizer step, for a term that has one (consolidation:
// its rows' NLL under the bare prompt, then and before).
func (g *grpoRun) measureTermAfter(rows []*rollout, tot termRows, met *StepMetrics) error {
	t, ok := g.term.(interface {
		measureAfter([]*rollout) ([]float64, error)
		metricsAfter(any, termRows, []float64)
	})
	if !ok || !g.cfg.Log.UpdateDiagnostics || tot.rows == 0 {
		return nil
	}
	mine, err := t.measureAfter(rows)
	if err != nil {
		return fmt.Errorf("log.update_diagnostics: %w", err)
	}
	after, err := dist.SumFloats(g.comm, mine)
	if err != nil {
		return err
	}
	t.metricsAfter(met.Term, tot, after)
	return nil
}

// microResult is one micro-batch's part of an epoch's sums.
type microResult struct {
	loss, ent    float64 // weighted by the global batch
	stats        PolicyLossStats
	gap          float64   // max |log π − log π_old| over its tokens (withGap)
	real, padded int       // its tokens, and its token slots with padding
	extra        []float64 // an update term's sums for its metrics (termRows.extra of them)
}

// microBatch runs one micro-batch of the policy loss (forward, loss,
// backward: gradients accumulate); first is the number of rollouts of
// earlier micro-batches (for messages), withGap asks for the
// sampler/trainer log-prob gap.
func (g *grpoRun) microBatch(mb []*rollout, first int, lossCfg PolicyLossConfig, withGap bool) (microResult, error) {
	return g.micro("micro-batch at rollout", mb, first, func(s *tensor.Scope, b *batch, r *microResult) (*ts.Tensor, *model.Checkpointed, error) {
		lp, entropy, ckpt, err := g.logProbs(s, b, csrc.LogProbOptions{Temperature: g.cfg.Rollout.Temperature, Entropy: true})
		if err != nil {
			return nil, nil, err
		}
		in := PolicyLossInput{Logp: lp, OldLogp: b.old, RefLogp: b.ref, Adv: b.adv, Weight: b.weight, TIS: b.tis, Mask: b.tmaskF}
		l, mst, err := PolicyLoss(s, in, lossCfg)
		if err != nil {
			return nil, nil, err
		}
		// sync: entropy and the sampler/trainer gap, once per micro-batch.
		r.ent = tensor.Float64s(s.Keep(s.Keep(entropy.MustMul(b.weight, false)).MustSum(gotch.Double, false)))[0]
		if withGap {
			gap := s.Keep(s.Keep(s.Keep(lp.MustSub(b.old, false)).MustAbs(false)).MustMul(b.tmaskF, false))
			r.gap = tensor.Float64s(s.Keep(gap.MustMax(false)))[0]
		}
		r.stats = mst
		return l, ckpt, nil
	})
}

// micro runs one micro-batch of the update — the policy's or a term's —
// in a scope of its own: its batch, loss (the forward in it), backward
// (gradients accumulate) and the loss read back (sync), with its tokens
// counted as trained and an error naming the micro-batch (what, from its
// first row).
func (g *grpoRun) micro(what string, mb []*rollout, first int, loss lossFunc) (r microResult, err error) {
	var s tensor.Scope
	defer s.Close()
	b := buildBatch(&s, g.m.Device, mb)
	r.real, r.padded = g.countTrained(mb), len(mb)*int(b.t)
	err = func() (err error) {
		defer tensor.Recover("loss", &err)
		l, ckpt, err := loss(&s, b, &r)
		if err != nil {
			return err
		}
		if err := model.Backward(l, ckpt, g.opt.LayerDone); err != nil {
			return err
		}
		r.loss = tensor.Float64s(l)[0] // sync: once per micro-batch
		return nil
	}()
	if err != nil {
		return r, g.microBatchErr(what, first, len(mb), b.t, err)
	}
	return r, nil
}

// countTrained adds a micro-batch's tokens to the step's trained tokens and
// returns them.
func (g *grpoRun) countTrained(mb []*rollout) (n int) {
	for _, x := range mb {
		n += len(x.promptIDs) + len(x.ids)
	}
	g.stepTokens.trained += n
	return n
}

// microBatchErr says which micro-batch an error struck (what, from its
// first row) and, since out-of-memory errors land there, which knob to turn.
func (g *grpoRun) microBatchErr(what string, first, rows int, t int64, err error) error {
	return fmt.Errorf("%s %d (%d×%d tokens; algo.micro_batch_size %d, algo.max_tokens_per_micro_batch %d): %w",
		what, first, rows, t, g.cfg.Algo.MicroBatchSize, g.cfg.Algo.MaxTokensPerMicroBatch, err)
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

// logProbs is the policy's log-probs of a micro-batch for the update,
// with activation checkpointing when train.activation_checkpointing (then
// the returned Checkpointed finishes the backward).
func (g *grpoRun) logProbs(s *tensor.Scope, b *batch, opt csrc.LogProbOptions) (lp, ent *ts.Tensor, c *model.Checkpointed, err error) {
	return g.m.TokenLogProbsMaybeCheckpointed(g.cfg.Train.ActivationCheckpointing, s, b.ids, b.pos, nil, b.targets, b.tmask, opt)
}
