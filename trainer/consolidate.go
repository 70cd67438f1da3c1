package trainer

import (
	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/rl"
)

// Consolidation (lanpo.consolidate = λ > 0): a response the verifier
// accepted that was sampled with feedback in context is also trained as
// the answer to the bare problem, with a token-mean negative log-likelihood
// over every such response of the step, λ·NLL added to the policy loss.
// What feedback helped find then moves the policy without the feedback,
// where the policy loss cannot: a group whose feedback-aware samples are all
// correct has no advantage, and with train_prompt: original the truncated
// importance weights damp exactly the tokens feedback made likely. The NLL
// runs over micro-batches of its own after the policy's, in the same
// optimizer step (gradients accumulate); λ = 0 makes none of it. It is an
// update term (term.go).

// consolidation is the update term (term.go) of LANPO with λ > 0.
type consolidation struct{ g *grpoRun }

// rows returns this rank's consolidation rows among its sampled rollouts
// (every round of the step, kept by the filter or not) and their totals
// over every rank.
func (c *consolidation) rows(_ int, kept, sampled []*rollout, _ rl.Phases) ([]*rollout, []*rollout, termRows, error) {
	var rows []*rollout
	tokens := 0
	for _, r := range sampled {
		if !r.Correct || r.Prompt.Mode == rl.ModeScratch || len(r.ids) == 0 {
			continue
		}
		rows = append(rows, &rollout{Rollout: r.Rollout, promptIDs: c.g.prompts[r.Prompt.Problem], ids: r.ids,
			oldLogp: make([]float64, len(r.ids))})
		tokens += len(r.ids)
	}
	tot, err := dist.SumFloats(c.g.comm, []float64{float64(len(rows)), float64(tokens)})
	if err != nil {
		return nil, nil, termRows{}, err
	}
	return kept, rows, termRows{rows: int(tot[0]), tokens: int(tot[1])}, nil
}

func (c *consolidation) policyScale() float64 { return 1 }

func (c *consolidation) stepped() error { return nil }

func (c *consolidation) metrics(met *StepMetrics, tot termRows, loss float64, policyTokens int) {
	if tot.rows == 0 {
		return
	}
	met.Consolidated = tot.rows
	met.ConsolidatedTokenFrac = float64(tot.tokens) / float64(tot.tokens+policyTokens)
	met.ConsolidateNLL = loss / c.g.cfg.LANPO.Consolidate
}

// microBatch runs one micro-batch of consolidation rows, each token
// weighted by λ / (the step's distilled tokens on every rank): forward, the
// weighted NLL, backward (gradients accumulate). It returns the loss it
// added (weighted by the global batch) and its token slots.
func (c *consolidation) microBatch(mb []*rollout, first int, tot termRows) (r microResult, err error) {
	g := c.g
	cfg := g.cfg
	var s tensor.Scope
	defer s.Close()
	w := cfg.LANPO.Consolidate / float64(tot.tokens)
	for _, x := range mb {
		x.weight = w
	}
	b := buildBatch(&s, g.m.Device, mb)
	r.real, r.padded = g.countTrained(mb), len(mb)*int(b.t)
	where := func(err error) error {
		return g.microBatchErr("consolidation micro-batch at response", first, len(mb), b.t, err)
	}
	lp, _, ckpt, err := g.logProbsForUpdate(&s, b, csrc.LogProbOptions{Temperature: cfg.Rollout.Temperature})
	if err != nil {
		return r, where(err)
	}
	l := s.Keep(s.Keep(s.Keep(lp.MustMul(b.weight, false)).MustSum(b.weight.DType(), false)).MustNeg(false))
	if err := model.Backward(l, ckpt, g.opt.LayerDone); err != nil {
		return r, where(err)
	}
	r.loss = tensor.Float64s(l)[0] // sync: once per micro-batch
	return r, nil
}
