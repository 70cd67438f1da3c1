package trainer

import (
	"math"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/tensor"
	"github.com/lanpo-rl/lanpo/optim"
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
	close("consolidate_nll_span", consMet(m).ConsolidateNLLSpan, both.span)
	close("consolidate_nll_rest", consMet(m).ConsolidateNLLRest, both.rest)
	close("consolidate_nll_context", consMet(m).ConsolidateNLLContext, ctx/n)
	close("consolidate_context_gap", consMet(m).ConsolidateContextGap, both.nll-ctx/n)
	close("consolidate_context_gap_span", consMet(m).ConsolidateContextGapSpan, both.span-ctxSpan/nSpan)
	close("consolidate_nll_after", consMet(m).ConsolidateNLLAfter, both.after)
	if consMet(m).ConsolidateSpanTokens != int(nSpan) {
		t.Errorf("consolidate_span_tokens %d, want %v", consMet(m).ConsolidateSpanTokens, nSpan)
	}
	if !(consMet(m).ConsolidateNLLAfter < consMet(m).ConsolidateNLL) {
		t.Errorf("NLL after the step %v, before %v: the step did not lower it", consMet(m).ConsolidateNLLAfter, consMet(m).ConsolidateNLL)
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
	if consMet(off).ConsolidateNLLAfter != 0 || off.GradNormTerm != 0 || consMet(off).ConsolidateNLLSpan == 0 {
		t.Errorf("without log.update_diagnostics: after %v, term norm %v (want 0: not measured); span NLL %v (want it: no extra cost)",
			consMet(off).ConsolidateNLLAfter, off.GradNormTerm, consMet(off).ConsolidateNLLSpan)
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

	cfg := tinyConfig(t, append([]string{"dtype=float64"}, sets...)...)
	s, err := openSession(cfg, "", "sft", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	met := sftStep(t, s, distill, 0.003)
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

// sftStep runs one lanpo sft step of s's model on the rows as SFT
// examples (prompt as context, response as the assistant's tokens) with a
// fresh optimizer at learning rate lr, and returns its metrics.
func sftStep(t *testing.T, s *session, rows []rollout, lr float64) StepMetrics {
	t.Helper()
	var exs []example
	for _, r := range rows {
		ex := example{ids: append(append([]int64(nil), r.promptIDs...), r.ids...)}
		for range r.promptIDs {
			ex.loss = append(ex.loss, false)
		}
		for range r.ids {
			ex.loss = append(ex.loss, true)
		}
		exs = append(exs, ex)
	}
	o := s.cfg.Optim
	opt, err := optim.NewOptimizer(s.m.TrainableParams(), optim.Hyper{Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay}, nil, 0, 1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	s.opt.Close()
	s.opt = opt
	s.cfg.Optim.LR = lr
	s.cfg.SFT = SFTConfig{MicroBatchSize: len(exs), GradAccum: 1}
	s.state.Step = 0
	met, err := (&sftRun{session: s, train: exs}).step(newPhaseTimer())
	if err != nil {
		t.Fatal(err)
	}
	return met
}

// TestConsolidationOwnStep: with lanpo.consolidate_lr, an update is the
// policy's optimizer step, then consolidation's own at that learning rate
// with moments of its own — the weights a policy-only update followed by a
// lanpo sft step on the consolidation rows with a fresh optimizer give. Its
// rate and norm are reported; with no rows it takes no step (Adam would
// move the weights on its momentum alone).
func TestConsolidationOwnStep(t *testing.T) {
	rolls, distill := madeUpRollouts(6, 3), withSpans(madeUpRollouts(5, 4))
	sets := []string{"algo.name=lanpo", "lanpo.consolidate=1", "lanpo.consolidate_lr=0.01", "optim.weight_decay=0.1", "log.update_diagnostics=true"}
	own := consolidationUpdate(t, rolls, distill, sets...)
	if own.met.TermLR == 0 || own.met.TermGradNorm == 0 || consMet(own.met).ConsolidateNLL == 0 || own.met.GradNormTerm == 0 {
		t.Fatalf("own step: term_lr %v, term_grad_norm %v, consolidate_nll %v, grad_norm_term %v",
			own.met.TermLR, own.met.TermGradNorm, consMet(own.met).ConsolidateNLL, own.met.GradNormTerm)
	}
	if math.Abs(own.met.GradNormTerm-own.met.TermGradNorm) > 1e-9 {
		t.Errorf("grad_norm_term %v, the own step's norm %v", own.met.GradNormTerm, own.met.TermGradNorm)
	}

	// The reference: the policy's step alone, then an SFT step.
	cfg := tinyConfig(t, "dtype=float64", "rollout.temperature=1", "lanpo.consolidate=1", "optim.weight_decay=0.1")
	s, err := openSession(cfg, "", "grpo", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &grpoRun{session: s}
	ptrs := make([]*rollout, len(rolls))
	for i := range rolls {
		r := rolls[i]
		ptrs[i] = &r
	}
	var met StepMetrics
	if err := g.update(ptrs, nil, termRows{}, &met); err != nil {
		t.Fatal(err)
	}
	if math.Abs(met.GradNorm-own.met.GradNorm) > 1e-12 {
		t.Errorf("the policy's step: grad norm %v, alone %v", own.met.GradNorm, met.GradNorm)
	}
	lr, _ := optim.LR(0, cfg.TotalSteps, cfg.Optim.WarmupSteps, 0.01, cfg.Optim.MinLRRatio, cfg.Optim.Schedule)
	if math.Abs(own.met.TermLR-lr) > 1e-15 {
		t.Errorf("term_lr %v, want lanpo.consolidate_lr on optim's schedule, %v", own.met.TermLR, lr)
	}
	sft := sftStep(t, s, distill, 0.01)
	var w []float64
	for _, p := range s.m.Params() {
		w = append(w, tensor.Float64s(p.Tensor)...)
	}
	if math.Abs(sft.GradNorm-own.met.TermGradNorm) > 1e-12 {
		t.Errorf("the own step's norm %v, the SFT step's %v", own.met.TermGradNorm, sft.GradNorm)
	}
	if d := maxAbsDiff(w, own.w); d > 1e-12 {
		t.Errorf("policy step + own consolidation step vs policy step + SFT step: weights differ by %g", d)
	}
	joint := consolidationUpdate(t, rolls, distill, "lanpo.consolidate=1", "optim.weight_decay=0.1")
	if d := maxAbsDiff(joint.w, own.w); d < 1e-6 {
		t.Errorf("the own step trained what the joint step does (%g)", d)
	}

	none := consolidationUpdate(t, rolls, nil, sets...)
	if d := maxAbsDiff(none.w, w); d == 0 || none.met.TermGradNorm != 0 {
		t.Errorf("no consolidation rows: an own step ran (norm %v)", none.met.TermGradNorm)
	}
}

// TestConsolidationPerToken: with lanpo.consolidate_norm token the
// consolidated tokens join the policy loss's token mean, each weighted λ:
// over P policy and D consolidated tokens the loss is the policy's
// token-mean loss times P/(P+D) plus λ·NLL·D/(P+D), and the policy's
// statistics stay its own.
func TestConsolidationPerToken(t *testing.T) {
	rolls, distill := madeUpRollouts(6, 3), madeUpRollouts(5, 4)
	const lambda = 4.0
	var P, D float64
	for _, r := range rolls {
		P += float64(len(r.ids))
	}
	for _, r := range distill {
		D += float64(len(r.ids))
	}
	sets := []string{"lanpo.consolidate=4", "lanpo.consolidate_norm=token"}
	policy := consolidationUpdate(t, rolls, nil, sets...)
	both := consolidationUpdate(t, rolls, distill, sets...)
	want := policy.met.Loss*P/(P+D) + lambda*both.nll*D/(P+D)
	if math.Abs(both.met.Loss-want) > 1e-8*math.Abs(want) || math.Abs(consMet(both.met).ConsolidateNLL-both.nll) > 1e-6*both.nll {
		t.Errorf("loss %v, want %v; consolidate_nll %v, want %v", both.met.Loss, want, consMet(both.met).ConsolidateNLL, both.nll)
	}
	if math.Abs(both.met.ClipFrac-policy.met.ClipFrac) > 1e-9 || math.Abs(both.met.Ratio-policy.met.Ratio) > 1e-9 {
		t.Errorf("policy statistics moved: clip %v / %v, ratio %v / %v", both.met.ClipFrac, policy.met.ClipFrac, both.met.Ratio, policy.met.Ratio)
	}
	step := consolidationUpdate(t, rolls, distill, "lanpo.consolidate=4")
	if d := maxAbsDiff(step.w, both.w); d < 1e-8 {
		t.Errorf("token and step normalization trained the same weights (%g)", d)
	}
	if _, err := LoadConfig("../configs/tiny-lanpo.yaml", []string{"lanpo.consolidate=1", "lanpo.consolidate_norm=token", "lanpo.consolidate_lr=1e-3"}); err == nil || !strings.Contains(err.Error(), "consolidate_norm") {
		t.Errorf("token normalization with a step of its own: %v", err)
	}
}
