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
