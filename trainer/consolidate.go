package trainer

import (
	"slices"
	"strings"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/rl"
)

// Consolidation (lanpo.consolidate = λ > 0): a response the verifier
// accepted that was sampled with feedback in context is also trained as
// the answer to the bare problem, with a token-mean negative log-likelihood
// over every such response of the step, λ·NLL added to the policy loss
// (consolidate_norm token: each token weighted λ times a policy token's).
// What feedback helped find then moves the policy without the feedback,
// where the policy loss cannot: a group whose feedback-aware samples are all
// correct has no advantage, and with train_prompt: original the truncated
// importance weights damp exactly the tokens feedback made likely. The NLL
// runs over micro-batches of its own after the policy's, in the same
// optimizer step (gradients accumulate); λ = 0 makes none of it. It is an
// update term (term.go).
//
// What it reports besides its loss (docs/metrics.md, "Consolidation"): the
// rows' NLL under the bare prompt and under the context the sampler saw
// (its recorded log-probs: no extra forward), their gap, and — where the
// run has a diagnostic span (RunOptions.Span: the demo's rule name) — both
// inside the span and outside it; with log.update_diagnostics also the NLL
// after the optimizer step.

// consolidation is the update term (term.go) of LANPO with λ > 0.
type consolidation struct{ g *grpoRun }

// The extra sums a consolidation micro-batch returns (microResult.extra),
// over its rows' response tokens, first epoch only.
const (
	consBareNLL    = iota // Σ −log π(y|x), every token (bare prompt)
	consSpanNLL           // the same over the span's tokens
	consSpanTokens        // tokens in the span
	consCtxNLL            // Σ −log μ(y|x,c): the sampler's record under its context
	consCtxSpanNLL        // the same over the span's tokens
	consExtra             // how many
)

// rows returns this rank's consolidation rows among its sampled rollouts
// (every round of the step, kept by the filter or not) and their totals
// over every rank. A row's oldLogp holds the sampler's log-probs under the
// context it saw (the loss does not read them; the metrics do), its span
// the tokens of the diagnostic span.
func (c *consolidation) rows(_ int, kept, sampled []*rollout, _ rl.Phases) ([]*rollout, []*rollout, termRows, error) {
	var rows []*rollout
	tokens := 0
	for _, r := range sampled {
		if !r.Correct || r.Prompt.Mode == rl.ModeScratch || len(r.ids) == 0 {
			continue
		}
		rows = append(rows, &rollout{Rollout: r.Rollout, promptIDs: c.g.prompts[r.Prompt.Problem], ids: r.ids,
			oldLogp: slices.Clone(r.oldLogp), span: c.g.spanOf(r.Prompt.Problem, r.ids)})
		tokens += len(r.ids)
	}
	tot, err := dist.SumFloats(c.g.comm, []float64{float64(len(rows)), float64(tokens)})
	if err != nil {
		return nil, nil, termRows{}, err
	}
	return kept, rows, termRows{rows: int(tot[0]), tokens: int(tot[1]), extra: consExtra, joinPolicy: c.g.cfg.LANPO.ConsolidatePerToken()}, nil
}

// spanOf marks the response tokens ids of problem k inside the run's
// diagnostic span (nil: no span function, or no span in this response).
func (g *grpoRun) spanOf(k int, ids []int64) []bool {
	if g.span == nil {
		return nil
	}
	pieces := g.tk.Pieces(tokenizer.Ints(ids), true)
	lo, hi, ok := g.span(g.problems[k].ID, strings.Join(pieces, ""))
	if !ok {
		return nil
	}
	return rl.InSpan(pieces, lo, hi)
}

func (c *consolidation) policyScale() float64 { return 1 }

// consolidateGroup is the optimizer's moment group of consolidation's own
// steps (lanpo.consolidate_lr > 0).
const consolidateGroup = "consolidate"

// momentGroups are the optimizer's moment groups beside the default one
// for a run of kind: consolidation's, when it takes steps of its own.
func (c Config) momentGroups(kind string) []string {
	if kind != "sft" && c.Algo.Name == AlgoLANPO && c.LANPO.Consolidate > 0 && c.LANPO.ConsolidateLR > 0 {
		return []string{consolidateGroup}
	}
	return nil
}

// ownStep is the moment group and learning rate of consolidation's own
// optimizer step at the policy's learning rate lr (group 0: none — the
// term joins the policy's step): lanpo.consolidate_lr, scaled as optim's
// schedule scales optim.lr.
func (c *consolidation) ownStep(lr float64) (group int, termLR float64) {
	cfg := c.g.cfg
	if cfg.LANPO.ConsolidateLR <= 0 {
		return 0, 0
	}
	return 1, cfg.LANPO.ConsolidateLR * lr / cfg.Optim.LR
}

func (c *consolidation) stepped() error { return nil }

func (c *consolidation) metrics(met *StepMetrics, tot termRows, loss float64, extra []float64, policyTokens int) {
	if tot.rows == 0 {
		return
	}
	met.Consolidated = tot.rows
	met.ConsolidatedTokenFrac = float64(tot.tokens) / float64(tot.tokens+policyTokens)
	n := float64(tot.tokens)
	met.ConsolidateNLL = extra[consBareNLL] / n
	met.ConsolidateNLLContext = extra[consCtxNLL] / n
	met.ConsolidateContextGap = extra[consBareNLL]/n - met.ConsolidateNLLContext
	if span := extra[consSpanTokens]; span > 0 {
		met.ConsolidateSpanTokens = int(span)
		met.ConsolidateNLLSpan = extra[consSpanNLL] / span
		met.ConsolidateContextGapSpan = met.ConsolidateNLLSpan - extra[consCtxSpanNLL]/span
		if rest := n - span; rest > 0 {
			met.ConsolidateNLLRest = (extra[consBareNLL] - extra[consSpanNLL]) / rest
		}
	}
}

// microBatch runs one micro-batch of consolidation rows, each token
// weighted by λ / (the step's distilled tokens on every rank), or with
// consolidate_norm token by λ times the weight update gave it with the
// policy's rows: forward, the weighted NLL, backward (gradients
// accumulate). It returns the loss it added (weighted by the global
// batch), its token slots and the extra sums (consBareNLL …).
func (c *consolidation) microBatch(mb []*rollout, first int, tot termRows) (r microResult, err error) {
	g := c.g
	cfg := g.cfg
	var s tensor.Scope
	defer s.Close()
	if !tot.joinPolicy {
		w := cfg.LANPO.Consolidate / float64(tot.tokens)
		for _, x := range mb {
			x.weight = w
		}
	}
	b := buildBatch(&s, g.m.Device, mb)
	if tot.joinPolicy {
		b.weight = s.Keep(b.weight.MustMulScalar(s.Float(cfg.LANPO.Consolidate), false))
	}
	r.real, r.padded = g.countTrained(mb), len(mb)*int(b.t)
	where := func(err error) error {
		return g.microBatchErr("consolidation micro-batch at response", first, len(mb), b.t, err)
	}
	lp, _, ckpt, err := g.logProbsForUpdate(&s, b, csrc.LogProbOptions{Temperature: cfg.Rollout.Temperature})
	if err != nil {
		return r, where(err)
	}
	l := s.Keep(s.Keep(s.Keep(lp.MustMul(b.weight, false)).MustSum(b.weight.DType(), false)).MustNeg(false))
	r.extra = rowNLLs(b, mb, tensor.Float64s(lp)) // sync: once per micro-batch
	if err := model.Backward(l, ckpt, g.opt.LayerDone); err != nil {
		return r, where(err)
	}
	r.loss = tensor.Float64s(l)[0] // sync: once per micro-batch
	return r, nil
}

// rowNLLs are the consExtra sums of rows laid out in b, whose policy
// log-probs (bare prompt) are lp, flattened [B, T].
func rowNLLs(b *batch, rows []*rollout, lp []float64) []float64 {
	out := make([]float64, consExtra)
	for i, x := range rows {
		for k, v := range b.gather(lp, i, len(x.ids)) {
			out[consBareNLL] -= v
			out[consCtxNLL] -= x.oldLogp[k]
			if x.span != nil && x.span[k] {
				out[consSpanNLL] -= v
				out[consCtxSpanNLL] -= x.oldLogp[k]
				out[consSpanTokens]++
			}
		}
	}
	return out
}

// measureAfter is log.update_diagnostics' second look at the rows, after
// the optimizer step: their bare-prompt NLL sums (consBareNLL, consSpanNLL,
// consSpanTokens; the context ones stay 0), no grad, this rank's rows.
func (c *consolidation) measureAfter(rows []*rollout) ([]float64, error) {
	g := c.g
	out := make([]float64, consExtra)
	err := csrc.NoGrad(func() error {
		for _, mb := range g.microBatches(rows) {
			var s tensor.Scope
			b := buildBatch(&s, g.m.Device, mb)
			lp, _, err := g.m.TokenLogProbs(&s, b.ids, b.pos, nil, b.targets, b.tmask, csrc.LogProbOptions{Temperature: g.cfg.Rollout.Temperature})
			if err != nil {
				s.Close()
				return err
			}
			for k, v := range rowNLLs(b, mb, tensor.Float64s(lp)) { // sync: once per micro-batch
				out[k] += v
			}
			s.Close()
			g.countTrained(mb)
		}
		return nil
	})
	return out, err
}

// metricsAfter puts measureAfter's sums over every rank into the step's
// metrics.
func (c *consolidation) metricsAfter(met *StepMetrics, tot termRows, after []float64) {
	if tot.rows == 0 {
		return
	}
	n := float64(tot.tokens)
	met.ConsolidateNLLAfter = after[consBareNLL] / n
	if span := after[consSpanTokens]; span > 0 {
		met.ConsolidateNLLSpanAfter = after[consSpanNLL] / span
		if rest := n - span; rest > 0 {
			met.ConsolidateNLLRestAfter = (after[consBareNLL] - after[consSpanNLL]) / rest
		}
	}
}
