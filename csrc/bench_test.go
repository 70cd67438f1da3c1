package csrc

import (
	"math/rand"
	"testing"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// BenchmarkRMSNorm times csrc's RMSNorm forward+backward against the same
// math composed from gotch ops, both in this run, on a Qwen2.5-0.5B-sized
// activation (2048 tokens × 896, fp32). It reports composed/fused: above 1
// means the bridge op is faster.
func BenchmarkRMSNorm(b *testing.B) {
	lockThread(b)
	const n, h = 2048, 896
	r := rand.New(rand.NewSource(1))
	s := &tensor.Scope{}
	defer s.Close()
	mk := func(vals []float64, shape []int64) *ts.Tensor {
		x := s.Keep(ts.MustOfSlice(vals).MustView(shape, true))
		x = s.Keep(x.MustTotype(gotch.Float, false))
		return s.Keep(x.MustSetRequiresGrad(true, false))
	}
	x := mk(randVals(r, n*h), []int64{n, h})
	w := mk(randVals(r, h), []int64{h})
	run := func(fused bool) {
		step := &tensor.Scope{}
		var y *ts.Tensor
		if fused {
			var err error
			if y, err = RMSNorm(x, w, 1e-6); err != nil {
				b.Fatal(err)
			}
			step.Keep(y)
		} else {
			y = rmsNormComposed(step, x, w, 1e-6)
		}
		step.Keep(y.MustSum(gotch.Float, false)).MustBackward()
		step.Close()
	}
	timeIt := func(fused bool) time.Duration {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			run(fused)
		}
		return time.Since(start) // sync: CPU ops have finished when they return
	}
	run(true)
	run(false)
	b.ResetTimer()
	fused := timeIt(true)
	b.StopTimer()
	composed := timeIt(false)
	b.ReportMetric(float64(composed)/float64(fused), "composed/fused")
}

// BenchmarkFusedOps times each fused kernel of the forward against the
// ATen composition it replaces (fused_test.go's references), forward and
// backward, in this run, at a Qwen2.5-0.5B training shape (4 × 256 tokens,
// H 896, 14/2 heads of 64, I 4864, fp32). composed/fused above 1 means the
// kernel is faster.
func BenchmarkFusedOps(b *testing.B) {
	lockThread(b)
	const bt, tt, h, hq, hkv, d, inter = 4, 256, 896, 14, 2, 64, 4864
	r := rand.New(rand.NewSource(2))
	s := &tensor.Scope{}
	defer s.Close()
	mk := func(n int, shape []int64, grad bool) *ts.Tensor {
		x := s.Keep(s.Keep(ts.MustOfSlice(randVals(r, n)).MustView(shape, true)).MustTotype(gotch.Float, false))
		if grad {
			x = s.Keep(x.MustSetRequiresGrad(true, false))
		}
		return x
	}
	x, res, w := mk(bt*tt*h, []int64{bt, tt, h}, true), mk(bt*tt*h, []int64{bt, tt, h}, true), mk(h, []int64{h}, true)
	q, k, v := mk(bt*tt*hq*d, []int64{bt, tt, hq * d}, true), mk(bt*tt*hkv*d, []int64{bt, tt, hkv * d}, true), mk(bt*tt*hkv*d, []int64{bt, tt, hkv * d}, true)
	bq := mk(hq*d, []int64{hq * d}, true)
	g, u := mk(bt*tt*inter, []int64{bt, tt, inter}, true), mk(bt*tt*inter, []int64{bt, tt, inter}, true)
	cos, sin := ropeTables(s, tt, d)
	pv := make([]int64, bt*tt)
	for i := range pv {
		pv[i] = int64(i % tt)
	}
	pos := tensor.FromSlice(s, pv, []int64{bt, tt}, gotch.CPU)
	ops := []struct {
		name            string
		fused, composed func(*tensor.Scope) []*ts.Tensor
	}{
		{"add_rms_norm", func(st *tensor.Scope) []*ts.Tensor {
			y, hs, err := AddRMSNorm(x, res, w, 1e-6)
			if err != nil {
				b.Fatal(err)
			}
			return []*ts.Tensor{st.Keep(y), st.Keep(hs)}
		}, func(st *tensor.Scope) []*ts.Tensor {
			hs := st.Keep(x.MustAdd(res, false))
			return []*ts.Tensor{rmsNormComposed(st, hs, w, 1e-6), hs}
		}},
		{"rope", func(st *tensor.Scope) []*ts.Tensor {
			a, c, e, err := Rope(q, k, v, bq, nil, nil, cos, sin, pos, hq, hkv)
			if err != nil {
				b.Fatal(err)
			}
			return []*ts.Tensor{st.Keep(a), st.Keep(c), st.Keep(e)}
		}, func(st *tensor.Scope) []*ts.Tensor {
			return []*ts.Tensor{ropeComposed(st, q, bq, cos, sin, pos, hq, true), ropeComposed(st, k, nil, cos, sin, pos, hkv, true),
				ropeComposed(st, v, nil, cos, sin, pos, hkv, false)}
		}},
		{"swiglu", func(st *tensor.Scope) []*ts.Tensor {
			y, err := SwiGLU(g, u)
			if err != nil {
				b.Fatal(err)
			}
			return []*ts.Tensor{st.Keep(y)}
		}, func(st *tensor.Scope) []*ts.Tensor {
			return []*ts.Tensor{st.Keep(st.Keep(g.MustSilu(false)).MustMul(u, false))}
		}},
	}
	run := func(f func(*tensor.Scope) []*ts.Tensor) time.Duration {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			st := &tensor.Scope{}
			var loss *ts.Tensor
			for _, o := range f(st) {
				part := st.Keep(o.MustSum(gotch.Float, false))
				if loss == nil {
					loss = part
				} else {
					loss = st.Keep(loss.MustAdd(part, false))
				}
			}
			loss.MustBackward()
			st.Close()
		}
		return time.Since(start) // sync: CPU ops have finished when they return
	}
	for _, o := range ops {
		run(o.fused)
		run(o.composed)
		fused, composed := run(o.fused), run(o.composed)
		b.ReportMetric(float64(fused.Microseconds())/float64(b.N)/1000, "ms/"+o.name)
		b.ReportMetric(float64(composed)/float64(fused), "composed/fused-"+o.name)
	}
}
