package trainer

import (
	"math"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// withSpans marks every other response token of each row as in the
// diagnostic span (the first one in), and gives the rows sampler log-probs
// (oldLogp) of their own.
func withSpans(rows []rollout) []rollout {
	for i := range rows {
		r := &rows[i]
		r.span = make([]bool, len(r.ids))
		for k := range r.span {
			r.span[k] = k%2 == 0
		}
	}
	return rows
}

// TestConsolidationDiagnostics: the consolidation metrics are what an
// independent path computes — the rows' NLL inside and outside the span
// and after the optimizer step by lanpo score's forward, the context NLL
// from the sampler's log-probs — and the gradient split adds up: the
// policy's and the term's norms are those of the updates with either
// alone, and their cosine is what |p + t|² = |p|² + |t|² + 2 p·t gives.
func TestConsolidationDiagnostics(t *testing.T) {
	rolls, distill := madeUpRollouts(6, 3), withSpans(madeUpRollouts(5, 4))
	sets := []string{"lanpo.consolidate=0.5", "log.update_diagnostics=true", "optim.grad_clip=0"}
	both := consolidationUpdate(t, rolls, distill, sets...)
	m := both.met

	var ctx, ctxSpan, n, nSpan float64
	for _, r := range distill {
		for k, v := range r.oldLogp {
			ctx -= v
			n++
			if r.span[k] {
				ctxSpan -= v
				nSpan++
			}
		}
	}
	close := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	close("consolidate_nll_span", m.ConsolidateNLLSpan, both.span)
	close("consolidate_nll_rest", m.ConsolidateNLLRest, both.rest)
	close("consolidate_nll_context", m.ConsolidateNLLContext, ctx/n)
	close("consolidate_context_gap", m.ConsolidateContextGap, both.nll-ctx/n)
	close("consolidate_context_gap_span", m.ConsolidateContextGapSpan, both.span-ctxSpan/nSpan)
	close("consolidate_nll_after", m.ConsolidateNLLAfter, both.after)
	if m.ConsolidateSpanTokens != int(nSpan) {
		t.Errorf("consolidate_span_tokens %d, want %v", m.ConsolidateSpanTokens, nSpan)
	}
	if !(m.ConsolidateNLLAfter < m.ConsolidateNLL) {
		t.Errorf("NLL after the step %v, before %v: the step did not lower it", m.ConsolidateNLLAfter, m.ConsolidateNLL)
	}

	policy := consolidationUpdate(t, rolls, nil, sets...).met
	term := consolidationUpdate(t, nil, distill, sets...).met
	close("grad_norm_policy", m.GradNormPolicy, policy.GradNorm)
	close("grad_norm_term", m.GradNormTerm, term.GradNorm)
	p, q := policy.GradNorm, term.GradNorm
	close("grad_cosine_term_policy", m.GradCosineTermPolicy, (m.GradNorm*m.GradNorm-p*p-q*q)/(2*p*q))
	if term.GradNormPolicy != 0 || term.GradCosineTermPolicy != 0 || math.Abs(term.GradNormTerm-term.GradNorm) > 1e-9 {
		t.Errorf("consolidation alone: policy norm %v, cosine %v, term norm %v (grad_norm %v)", term.GradNormPolicy, term.GradCosineTermPolicy, term.GradNormTerm, term.GradNorm)
	}
	off := consolidationUpdate(t, rolls, distill, "lanpo.consolidate=0.5").met
	if off.ConsolidateNLLAfter != 0 || off.GradNormTerm != 0 || off.ConsolidateNLLSpan == 0 {
		t.Errorf("without log.update_diagnostics: after %v, term norm %v (want 0: not measured); span NLL %v (want it: no extra cost)",
			off.ConsolidateNLLAfter, off.GradNormTerm, off.ConsolidateNLLSpan)
	}
}

// TestConsolidationStepIsAnSFTStep: a step whose only loss is
// consolidation at λ 1 is one lanpo sft step on the same token ids — the
// prompt as context, the response as the assistant's tokens — with the
// same optimizer, whatever either's micro-batches: the same loss, gradient
// norm and weights. So what consolidation learns, or does not, in a run is
// what SFT on those answers at that learning rate would.
func TestConsolidationStepIsAnSFTStep(t *testing.T) {
	distill := madeUpRollouts(7, 5)
	sets := []string{"lanpo.consolidate=1", "optim.lr=0.003", "optim.grad_clip=0", "optim.weight_decay=0.1"}
	cons := consolidationUpdate(t, nil, distill, append(sets, "algo.micro_batch_size=3")...)

	var exs []example
	for _, r := range distill {
		ex := example{ids: append(append([]int64(nil), r.promptIDs...), r.ids...)}
		for range r.promptIDs {
			ex.loss = append(ex.loss, false)
		}
		for range r.ids {
			ex.loss = append(ex.loss, true)
		}
		exs = append(exs, ex)
	}
	cfg := tinyConfig(t, append([]string{"dtype=float64", "sft.micro_batch_size=7", "sft.grad_accum=1", "sft.max_tokens_per_micro_batch=20"}, sets...)...)
	s, err := openSession(cfg, "", "sft", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &sftRun{session: s, train: exs}
	met, err := r.step(newPhaseTimer())
	if err != nil {
		t.Fatal(err)
	}
	var w []float64
	for _, p := range s.m.Params() {
		w = append(w, tensor.Float64s(p.Tensor)...)
	}
	if math.Abs(met.Loss-cons.met.Loss) > 1e-12 || math.Abs(met.GradNorm-cons.met.GradNorm) > 1e-12 {
		t.Errorf("SFT step: loss %v, grad norm %v; consolidation step: %v, %v", met.Loss, met.GradNorm, cons.met.Loss, cons.met.GradNorm)
	}
	if d := maxAbsDiff(w, cons.w); d > 1e-12 {
		t.Errorf("weights after an SFT step and a consolidation step differ by %g", d)
	}
}
