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

// update runs the μ epochs of optimizer steps over the batch: the policy
// loss over rolls and, with an update term (term.go), the term's loss over
// its rows (tot: their totals over every rank) in the same steps.
func (g *grpoRun) update(rolls, rows []*rollout, tot termRows, met *StepMetrics) error {
	cfg := g.cfg
	// The loss is normalized over the global batch: every rank's share —
	// with the term's rows when they join the policy's normalization.
	norm := rolls
	if tot.joinPolicy {
		norm = append(slices.Clip(rolls), rows...)
	}
	lengths := make([]int, len(norm))
	masked := make([]bool, len(norm))
	for i, r := range norm {
		lengths[i] = len(r.ids)
		masked[i] = cfg.Algo.OverlongMask && r.Truncated
	}
	tokens, seqs := normalizer(lengths, masked)
	ntot, err := dist.SumFloats(g.comm, []float64{float64(tokens), float64(seqs)})
	if err != nil {
		return err
	}
	w, err := tokenWeights(lengths, masked, cfg.Algo.LossAggMode, cfg.Rollout.MaxNewTokens, int(ntot[0]), int(ntot[1]))
	if err != nil {
		return err
	}
	scale := 1.0
	if g.term != nil {
		scale = g.term.policyScale()
	}
	for i, r := range norm {
		r.weight = w[i] * scale
	}
	// The policy's statistics (entropy, clip fraction, KL, ratio) are
	// weighted sums: with the policy loss scaled, or a term's rows in the
	// normalization, rescale them to the policy's own tokens.
	statScale := 1.0
	if scale > 0 {
		statScale = 1 / scale
	}
	if tot.joinPolicy {
		var wPol, wAll float64
		for i := range norm {
			tw := w[i] * float64(lengths[i])
			wAll += tw
			if i < len(rolls) {
				wPol += tw
			}
		}
		ws, err := dist.SumFloats(g.comm, []float64{wPol, wAll})
		if err != nil {
			return err
		}
		if ws[0] > 0 && scale > 0 {
			statScale = ws[1] / (ws[0] * scale)
		}
	}
	policyTokens := int(ntot[0])
	if tot.joinPolicy {
		policyTokens -= tot.tokens
	}
	lr, err := optim.LR(g.state.Step, cfg.TotalSteps, cfg.Optim.WarmupSteps, cfg.Optim.LR, cfg.Optim.MinLRRatio, cfg.Optim.Schedule)
	if err != nil {
		return err
	}
	met.LR = lr
	lossCfg := PolicyLossConfig{ClipLow: cfg.Algo.ClipLow, ClipHigh: cfg.Algo.ClipHigh, Beta: cfg.Algo.KLBeta, KL: cfg.Algo.KLEstimator}
	for epoch := 0; epoch < cfg.Algo.Epochs; epoch++ {
		g.opt.ZeroGrad()
		var loss, ent, termLoss float64
		var st PolicyLossStats
		done := 0 // rollouts of earlier micro-batches, for messages
		padded, real := 0, 0
		mbs := g.microBatches(rolls)
		if scale == 0 {
			mbs = nil // the policy loss has no weight: nothing to run
		}
		tmbs := g.microBatches(rows)
		n, err := g.microBatchCount(len(mbs) + len(tmbs))
		if err != nil {
			return err
		}
		for i := len(mbs) + len(tmbs); i < n; i++ {
			// Fewer micro-batches here than on another rank: take part in
			// the collectives those backward passes issue.
			if err := g.opt.SkipBackward(); err != nil {
				return err
			}
		}
		for i, mb := range mbs {
			g.hb.microBatches(i, len(mbs)+len(tmbs))
			r, err := g.microBatch(mb, done, lossCfg, epoch == 0)
			if err != nil {
				return err
			}
			loss += r.loss
			ent += r.ent
			if epoch == 0 {
				met.LogpMismatch = math.Max(met.LogpMismatch, r.gap)
			}
			st.ClipFrac += r.stats.ClipFrac
			st.KL += r.stats.KL
			st.Ratio += r.stats.Ratio
			real += r.real
			padded += r.padded
			done += len(mb)
		}
		var grads *gradSplit
		if epoch == 0 && g.cfg.Log.UpdateDiagnostics && g.term != nil && g.comm.Size() == 1 {
			grads = g.snapshotGrads() // the policy's gradient alone, before the term's adds to it
		}
		done = 0
		extra := make([]float64, tot.extra)
		for i, mb := range tmbs {
			g.hb.microBatches(len(mbs)+i, len(mbs)+len(tmbs))
			r, err := g.term.microBatch(mb, done, tot)
			if err != nil {
				return err
			}
			termLoss += r.loss
			real += r.real
			padded += r.padded
			done += len(mb)
			for k, v := range r.extra {
				extra[k] += v
			}
		}
		if grads != nil {
			if err := grads.measure(g, met); err != nil {
				return err
			}
		}
		// Every rank's contributions are weighted by the global batch: sums.
		sums := append([]float64{loss, ent, st.ClipFrac, st.KL, st.Ratio, float64(real), float64(padded), termLoss}, extra...)
		summed, err := dist.SumFloats(g.comm, sums)
		if err != nil {
			return err
		}
		if g.term != nil && epoch == 0 {
			g.term.metrics(met, tot, summed[7], summed[8:], policyTokens)
		}
		summed[0] += summed[7]
		if epoch == 0 {
			if met.LogpMismatch, err = dist.MaxFloat(g.comm, met.LogpMismatch); err != nil {
				return err
			}
		}
		met.Loss = summed[0]
		met.Entropy, met.ClipFrac, met.KL, met.Ratio = summed[1]*statScale, summed[2]*statScale, summed[3]*statScale, summed[4]*statScale
		met.PaddingFrac = 1 - summed[5]/math.Max(summed[6], 1)
		if met.GradNorm, err = g.opt.Apply(lr, cfg.Optim.GradClip, met.Loss); err != nil {
			return err
		}
		if g.term != nil {
			if err := g.term.stepped(); err != nil {
				return err
			}
		}
	}
	return g.measureTermAfter(rows, tot, met)
}

// measureTermAfter is log.update_diagnostics' look at a term's rows after
// the step's last optimizer step, for a term that has one (consolidation:
// its rows' NLL under the bare prompt, then and before).
func (g *grpoRun) measureTermAfter(rows []*rollout, tot termRows, met *StepMetrics) error {
	t, ok := g.term.(interface {
		measureAfter([]*rollout) ([]float64, error)
		metricsAfter(*StepMetrics, termRows, []float64)
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
	t.metricsAfter(met, tot, after)
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

// microBatch runs one micro-batch's forward, loss and backward (gradients
// accumulate); first is the number of rollouts of earlier micro-batches
// (for messages), withGap asks for the sampler/trainer log-prob gap.
func (g *grpoRun) microBatch(mb []*rollout, first int, lossCfg PolicyLossConfig, withGap bool) (r microResult, err error) {
	cfg := g.cfg
	var s tensor.Scope
	defer s.Close()
	b := buildBatch(&s, g.m.Device, mb)
	r.real, r.padded = g.countTrained(mb), len(mb)*int(b.t)
	where := func(err error) error { return g.microBatchErr("micro-batch at rollout", first, len(mb), b.t, err) }
	lp, entropy, ckpt, err := g.logProbsForUpdate(&s, b, csrc.LogProbOptions{Temperature: cfg.Rollout.Temperature, Entropy: true})
	if err != nil {
		return r, where(err)
	}
	in := PolicyLossInput{Logp: lp, OldLogp: b.old, RefLogp: b.ref, Adv: b.adv, Weight: b.weight, TIS: b.tis}
	l, mst, err := PolicyLoss(&s, in, lossCfg)
	if err != nil {
		return r, err
	}
	if err := model.Backward(l, ckpt, g.opt.LayerDone); err != nil {
		return r, where(err)
	}
	// sync: loss, entropy and the sampler/trainer gap, once per micro-batch.
	r.loss = tensor.Float64s(l)[0]
	r.ent = tensor.Float64s(s.Keep(s.Keep(entropy.MustMul(b.weight, false)).MustSum(gotch.Double, false)))[0]
	if withGap {
		gap := s.Keep(s.Keep(s.Keep(lp.MustSub(b.old, false)).MustAbs(false)).MustMul(b.tmaskF, false))
		r.gap = tensor.Float64s(s.Keep(gap.MustMax(false)))[0]
	}
	r.stats = mst
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

// logProbsForUpdate is the policy's log-probs of a micro-batch for the
// update, with activation checkpointing when train.activation_checkpointing
// (then the returned Checkpointed finishes the backward).
func (g *grpoRun) logProbsForUpdate(s *tensor.Scope, b *batch, opt csrc.LogProbOptions) (lp, ent *ts.Tensor, c *model.Checkpointed, err error) {
	return g.m.TokenLogProbsMaybeCheckpointed(g.cfg.Train.ActivationCheckpointing, s, b.ids, b.pos, nil, b.targets, b.tmask, opt)
}
