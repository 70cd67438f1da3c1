package trainer

import (
	"math"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// Gradient diagnostics of log.update_diagnostics: how large the update
// term's gradient is beside the policy loss's, and whether they pull the
// same way. Under Adam the size of the summed gradient does not set the
// step (m/√v is scale-free), so what a term contributes is read from the
// direction: the cosine of the two gradients, and their norms' ratio.

// gradSplit holds the policy loss's gradient of the trainable parameters
// (a copy taken after the policy's micro-batches, before the term's).
type gradSplit struct {
	scope  tensor.Scope
	policy []*ts.Tensor // nil where a parameter has no gradient yet
}

// snapshotGrads copies the accumulated gradients: one more copy of the
// trainable parameters' gradients, which is why it is a diagnostic (and
// one process only: a data-parallel rank's gradient is its share until
// the optimizer reduces it).
func (g *grpoRun) snapshotGrads() *gradSplit {
	gs := &gradSplit{}
	for _, p := range g.m.TrainableParams() {
		gr := p.Tensor.MustGrad(false)
		if !gr.MustDefined() {
			gr.MustDrop()
			gs.policy = append(gs.policy, nil)
			continue
		}
		// A copy, not the gradient itself: the term's backward adds to it
		// in place.
		c := gs.scope.Keep(ts.MustZeros(gr.MustSize(), gr.DType(), gr.MustDevice())) // the gradient's own dtype: one more gradient's memory, no more
		c.Copy_(gr)
		gs.policy = append(gs.policy, c)
		gr.MustDrop()
	}
	return gs
}

// measure compares the snapshot with the gradients now accumulated: the
// policy's and the term's, the term's gradient their difference — or,
// with separate (the term's own optimizer step, its gradients
// accumulated from zero), the term's alone. It fills grad_norm_policy,
// grad_norm_term and grad_cosine_term_policy and frees the snapshot.
func (gs *gradSplit) measure(g *grpoRun, met *StepMetrics, separate bool) error {
	defer gs.scope.Close()
	var s tensor.Scope
	defer s.Close()
	var parts [3][]*ts.Tensor // scalars: policy·policy, term·term, policy·term per parameter
	for i, p := range g.m.TrainableParams() {
		// One parameter's float64 copies at a time (sumSquares' rule).
		var ps tensor.Scope
		add := func(k int, a, b *ts.Tensor) {
			if a != nil && b != nil {
				parts[k] = append(parts[k], s.Keep(ps.Keep(a.MustMul(b, false)).MustSum(gotch.Double, false)))
			}
		}
		gr := ps.Keep(p.Tensor.MustGrad(false))
		var total *ts.Tensor
		if gr.MustDefined() {
			total = ps.Keep(gr.MustTotype(gotch.Double, false))
		}
		pol := gs.policy[i]
		if pol != nil {
			pol = ps.Keep(pol.MustTotype(gotch.Double, false))
		}
		term := total
		if total != nil && pol != nil && !separate {
			term = ps.Keep(total.MustSub(pol, false))
		}
		add(0, pol, pol)
		add(1, term, term)
		add(2, pol, term)
		ps.Close()
	}
	var v [3]float64
	for k, ps := range parts {
		if len(ps) > 0 {
			v[k] = tensor.Float64s(s.Keep(s.Keep(ts.MustStack(ps, 0)).MustSum(gotch.Double, false)))[0] // sync: three reads, diagnostics
		}
	}
	met.GradNormPolicy, met.GradNormTerm = math.Sqrt(v[0]), math.Sqrt(v[1])
	if v[0] > 0 && v[1] > 0 {
		met.GradCosineTermPolicy = v[2] / math.Sqrt(v[0]*v[1])
	}
	return nil
}
