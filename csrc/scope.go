package csrc

import (
	"math"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// scope frees the tensors a function made, in reverse order.
type scope struct{ ts []*ts.Tensor }

func (s *scope) keep(t *ts.Tensor) *ts.Tensor { s.ts = append(s.ts, t); return t }

func (s *scope) close() {
	for i := len(s.ts) - 1; i >= 0; i-- {
		s.ts[i].MustDrop()
	}
	s.ts = nil
}

// values copies a tensor's elements to the host as float64 (gotch's
// Float64Values leaks its conversion).
func values(s *scope, x *ts.Tensor) []float64 {
	d := s.keep(x.MustDetach(false))
	d = s.keep(d.MustTotype(gotch.Double, false))
	d = s.keep(d.MustTo(gotch.CPU, false))
	n := d.Numel()
	out := make([]float64, n)
	d.MustCopyData(out, n)
	return out
}

// maxAbsDiff is max |a[i] − b[i]|, +Inf when the lengths differ.
func maxAbsDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i]))
	}
	return m
}
