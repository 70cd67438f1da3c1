package trainer

import (
	"fmt"
	"math"
	"slices"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
)

// refLogprobs computes log π_ref of every response token (no grad).
func (g *grpoRun) refLogprobs(rolls []*rollout) error {
	ref := g.ref
	if ref == nil { // LoRA: the policy itself, adapters off or initial
		ref = g.m
		defer g.m.UseAdapters(g.refAdapters)()
	}
	err := g.logprobs(ref, rolls, func(r *rollout, lp []float64) { r.refLogp = lp })
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
			lp, _, err := m.TokenLogProbs(&s, b.ids, b.pos, nil, b.targets, b.tmask, csrc.LogProbOptions{Temperature: g.cfg.Rollout.Temperature})
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
		wSum            float64
		below           [2]int // weights below 0.1, below 0.5
	}
	var ctx, same tally
	for _, r := range todo {
		c, tl := g.cfg.Algo.TISCap, &same
		if otherPrompt(r) {
			c, tl = r.Prompt.TISCap, &ctx
		}
		r.tis = make([]float32, len(r.ids))
		own := sampledMask(len(r.ids), r.appended)
		for k := range r.ids {
			if own != nil && !own[k] {
				r.tis[k] = 1 // a tool's output: no target, no weight (batch.go), out of the tallies
				continue
			}
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
			tl.wSum += w
			if w < 0.1 {
				tl.below[0]++
			}
			if w < 0.5 {
				tl.below[1]++
			}
		}
	}
	// Over every rank's rollouts.
	tot, err := dist.SumFloats(g.comm, []float64{ctx.gap, float64(ctx.tokens), float64(ctx.clipped), same.gap, float64(same.tokens), float64(same.clipped),
		ctx.wSum, float64(ctx.below[0]), float64(ctx.below[1])})
	if err != nil {
		return err
	}
	if same.gapMax, err = dist.MaxFloat(g.comm, same.gapMax); err != nil {
		return err
	}
	if tot[1] > 0 {
		met.ContextLogpGap, met.ContextTISClip = tot[0]/tot[1], tot[2]/tot[1]
		met.ContextTISMean, met.ContextTISBelow01, met.ContextTISBelow05 = tot[6]/tot[1], tot[7]/tot[1], tot[8]/tot[1]
	}
	if tot[4] > 0 {
		met.SamplerGapMean, met.SamplerGapMax, met.TISClipped = tot[3]/tot[4], same.gapMax, tot[5]/tot[4]
	}
	return nil
}

// otherPrompt reports whether r is trained as an answer to another prompt
// than it was sampled from.
func otherPrompt(r *rollout) bool { return !slices.Equal(r.Prompt.TrainIDs, r.Prompt.IDs) }
