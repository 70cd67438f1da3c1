package trainer

import (
	"slices"

	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
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

// consolidation is the update term (term.go) of LANPO with λ > 0. It
// reads the lanpo section, the problems' bare prompts, the rollout's
// temperature and the optimizer's learning rate.
type consolidation struct {
	v           termView
	cfg         feedback.Config
	temperature float64
	baseLR      float64 // optim.lr, which lanpo.consolidate_lr's schedule follows
}

func newConsolidation(v termView) *consolidation {
	return &consolidation{v: v, cfg: v.cfg.LANPO, temperature: v.cfg.Rollout.Temperature, baseLR: v.cfg.Optim.LR}
}

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
// (every round of the step, kept by the filter or not). A row's oldLogp holds the sampler's log-probs under the
// context it saw (the loss does not read them; the metrics do), its span
// the tokens of the diagnostic span.
func (c *consolidation) rows(_ int, kept, sampled []*rollout, _ rl.Phases) ([]*rollout, []*rollout, termRows, error) {
	var rows []*rollout
	tokens := 0
	for _, r := range sampled {
		if !r.Correct || r.Prompt.Mode == rl.ModeScratch || len(r.ids) == 0 {
			continue
		}
		rows = append(rows, &rollout{Rollout: r.Rollout, promptIDs: c.v.prompts[r.Prompt.Problem], ids: r.ids, appended: r.appended,
			oldLogp: slices.Clone(r.oldLogp), span: c.v.step.spanOf(r.Prompt.Problem, r.ids)})
		tokens += ownTokens(r) // a trajectory's tool outputs are inputs, as in the policy's rows
	}
	return kept, rows, termRows{rows: len(rows), tokens: tokens, extra: consExtra, joinPolicy: c.cfg.ConsolidatePerToken()}, nil
}

func (c *consolidation) policyScale() float64 { return 1 }

// consolidateGroup is the optimizer's moment group of consolidation's own
// steps (lanpo.consolidate_lr > 0).
const consolidateGroup = "consolidate"

// ownStep is the moment group and learning rate of consolidation's own
// optimizer step at the policy's learning rate lr (group 0: none — the
// term joins the policy's step): lanpo.consolidate_lr, scaled as optim's
// schedule scales optim.lr.
func (c *consolidation) ownStep(lr float64) (group int, termLR float64) {
	if c.cfg.ConsolidateLR <= 0 {
		return 0, 0
	}
	return 1, c.cfg.ConsolidateLR * lr / c.baseLR
}

func (c *consolidation) stepped() error { return nil }

func (c *consolidation) close() {}

// consolidationMetrics are consolidation's keys of the step's line
// (docs/metrics.md, "Consolidation"; TensorBoard: lanpo/KEY): the
// verified-correct feedback-aware responses trained as answers to the bare
// problem, their share of the update's response tokens, and their
// token-mean NLL under the bare prompt before the step's update. Then the
// same tokens under the context the sampler saw (its recorded log-probs)
// and the bare-minus-context gap: what the bare prompt has yet to learn of
// what the context gave. With a diagnostic span (RunOptions.Span; the
// demo's rule name): the NLL inside it and outside it, the gap inside it
// and its tokens. With log.update_diagnostics: the NLL after the step's
// optimizer step.
type consolidationMetrics struct {
	Consolidated              int     `json:"consolidated,omitempty"`
	ConsolidatedTokenFrac     float64 `json:"consolidated_token_frac,omitempty"`
	ConsolidateNLL            float64 `json:"consolidate_nll,omitempty"`
	ConsolidateNLLContext     float64 `json:"consolidate_nll_context,omitempty"`
	ConsolidateContextGap     float64 `json:"consolidate_context_gap,omitempty"`
	ConsolidateSpanTokens     int     `json:"consolidate_span_tokens,omitempty"`
	ConsolidateNLLSpan        float64 `json:"consolidate_nll_span,omitempty"`
	ConsolidateNLLRest        float64 `json:"consolidate_nll_rest,omitempty"`
	ConsolidateContextGapSpan float64 `json:"consolidate_context_gap_span,omitempty"`
	ConsolidateNLLAfter       float64 `json:"consolidate_nll_after,omitempty"`
	ConsolidateNLLSpanAfter   float64 `json:"consolidate_nll_span_after,omitempty"`
	ConsolidateNLLRestAfter   float64 `json:"consolidate_nll_rest_after,omitempty"`
}

func (c *consolidation) metrics(tot termRows, loss float64, extra []float64, policyTokens int) any {
	met := &consolidationMetrics{}
	if tot.rows == 0 {
		return met
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
	return met
}

// microBatch runs one micro-batch of consolidation rows, each token
// weighted by λ / (the step's distilled tokens on every rank), or with
// consolidate_norm token by λ times the weight update gave it with the
// policy's rows: forward, the weighted NLL, backward (gradients
// accumulate). It returns the loss it added (weighted by the global
// batch), its token slots and the extra sums (consBareNLL …).
func (c *consolidation) microBatch(mb []*rollout, first int, tot termRows) (microResult, error) {
	if !tot.joinPolicy {
		w := c.cfg.Consolidate / float64(tot.tokens)
		for _, x := range mb {
			x.weight = w
		}
	}
	return c.v.step.micro("consolidation micro-batch at response", mb, first, func(s *tensor.Scope, b *batch, r *microResult) (*ts.Tensor, *model.Checkpointed, error) {
		if tot.joinPolicy {
			b.weight = s.Keep(b.weight.MustMulScalar(s.Float(c.cfg.Consolidate), false))
		}
		lp, _, ckpt, err := c.v.step.logProbs(s, b, csrc.LogProbOptions{Temperature: c.temperature})
		if err != nil {
			return nil, nil, err
		}
		l := s.Keep(s.Keep(s.Keep(lp.MustMul(b.weight, false)).MustSum(b.weight.DType(), false)).MustNeg(false))
		r.extra = rowNLLs(b, mb, tensor.Float64s(lp)) // sync: once per micro-batch
		return l, ckpt, nil
	})
}

// rowNLLs are the consExtra sums of rows laid out in b, whose policy
// log-probs (bare prompt) are lp, flattened [B, T], over the tokens the
// rows' sampler drew (a trajectory's tool outputs left out).
func rowNLLs(b *batch, rows []*rollout, lp []float64) []float64 {
	out := make([]float64, consExtra)
	for i, x := range rows {
		own := sampledMask(len(x.ids), x.appended)
		for k, v := range b.gather(lp, i, len(x.ids)) {
			if own != nil && !own[k] {
				continue // a tool's output: no NLL (the sampler recorded none)
			}
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
	out := make([]float64, consExtra)
	err := csrc.NoGrad(func() error {
		for _, mb := range c.v.step.microBatches(rows) {
			var s tensor.Scope
			b := buildBatch(&s, c.v.m.Device, mb)
			lp, _, err := c.v.m.TokenLogProbs(&s, b.ids, b.pos, nil, b.targets, b.tmask, csrc.LogProbOptions{Temperature: c.temperature})
			if err != nil {
				s.Close()
				return err
			}
			for k, v := range rowNLLs(b, mb, tensor.Float64s(lp)) { // sync: once per micro-batch
				out[k] += v
			}
			s.Close()
			c.v.step.countTrained(mb)
		}
		return nil
	})
	return out, err
}

// metricsAfter puts measureAfter's sums over every rank into the step's
// metrics.
func (c *consolidation) metricsAfter(m any, tot termRows, after []float64) {
	met, ok := m.(*consolidationMetrics)
	if !ok || tot.rows == 0 {
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
