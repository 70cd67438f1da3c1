package csrc

import (
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// naiveLogSoftmax is the readable reference: the full [N, V] log-softmax of
// hidden·weightᵀ/T.
func naiveLogSoftmax(s *tensor.Scope, hidden, weight *ts.Tensor, temperature float64) *ts.Tensor {
	logits := s.Keep(s.Keep(hidden.MustMatmul(s.Keep(weight.MustT(false)), false)).MustDivScalar(s.Float(temperature), false))
	return s.Keep(logits.MustLogSoftmax(-1, logits.DType(), false))
}

// topValues is each row's k largest values, largest first.
func topValues(s *tensor.Scope, x *ts.Tensor, k int64) *ts.Tensor {
	vals, idx := x.MustTopk(k, 1, true, true, false)
	s.Keep(idx)
	return s.Keep(vals)
}

// TestFusedTopKLogProb: the K most likely tokens and their log-probs equal
// the full log-softmax's top K (fp64, several chunk sizes, a temperature, a
// mask), largest first, and masked rows are 0; bf16 inputs agree with the
// fp32 statistics of the same rounded values.
func TestFusedTopKLogProb(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	r := rand.New(rand.NewSource(11))
	const n, h, v, k = 7, 5, 43, 6
	hidden := tensorOf(t, s, randVals(r, n*h), []int64{n, h}, gotch.Double, false)
	weight := tensorOf(t, s, randVals(r, v*h), []int64{v, h}, gotch.Double, false)
	mask := []bool{true, true, false, true, true, false, true}
	for _, tc := range []struct {
		chunk int64
		temp  float64
		mask  bool
	}{{3, 1, false}, {64, 0.7, false}, {2, 1.3, true}} {
		lsm := naiveLogSoftmax(s, hidden, weight, tc.temp)
		want := tensor.Float64s(topValues(s, lsm, k))
		var opt VocabOptions
		opt.Chunk, opt.Temperature = tc.chunk, tc.temp
		if tc.mask {
			opt.Mask = s.Keep(ts.MustOfSlice(mask))
		}
		ids, logp, err := FusedTopKLogProb(hidden, weight, k, opt)
		if err != nil {
			t.Fatal(err)
		}
		s.Keep(ids)
		s.Keep(logp)
		got, gotIDs := tensor.Float64s(logp), tensor.Int64s(ids)
		all := tensor.Float64s(lsm)
		for row := 0; row < n; row++ {
			for j := 0; j < k; j++ {
				i := row*k + j
				if tc.mask && !mask[row] {
					if got[i] != 0 || gotIDs[i] != 0 {
						t.Fatalf("chunk %d: masked row %d gives %g (id %d)", tc.chunk, row, got[i], gotIDs[i])
					}
					continue
				}
				if d := math.Abs(got[i] - want[i]); d > 1e-12 {
					t.Fatalf("chunk %d T %g: row %d rank %d: %g, the full log-softmax's %g", tc.chunk, tc.temp, row, j, got[i], want[i])
				}
				if d := math.Abs(all[row*v+int(gotIDs[i])] - got[i]); d > 1e-12 {
					t.Fatalf("row %d rank %d: id %d does not carry its log-prob", row, j, gotIDs[i])
				}
			}
		}
	}
	// bf16 inputs: fp32 statistics of the bf16 values.
	hb, wb := s.Keep(hidden.MustTotype(gotch.BFloat16, false)), s.Keep(weight.MustTotype(gotch.BFloat16, false))
	_, lp16, err := FusedTopKLogProb(hb, wb, k, VocabOptions{Chunk: 4})
	if err != nil {
		t.Fatal(err)
	}
	s.Keep(lp16)
	ref := topValues(s, naiveLogSoftmax(s, s.Keep(hb.MustTotype(gotch.Float, false)), s.Keep(wb.MustTotype(gotch.Float, false)), 1), k)
	if d := tensor.MaxAbsDiff(tensor.Float64s(lp16), tensor.Float64s(ref)); d > 1e-5 || lp16.DType() != gotch.Float {
		t.Errorf("bf16: %v off by %g from fp32 statistics of the same values", lp16.DType(), d)
	}
	if _, _, err := FusedTopKLogProb(hidden, weight, v+1, VocabOptions{}); err == nil || !strings.Contains(err.Error(), "k must be in") {
		t.Errorf("k > V: %v", err)
	}
}

// TestFusedGatherLogProb: log-probs at given ids (repeats allowed) and the
// gradients of Σ g·logp with respect to hidden and weight equal the full
// log-softmax's through autograd (fp64, chunks, a temperature, a mask whose
// rows get zero gradient); a frozen weight gets no gradient and leaves the
// input's unchanged.
func TestFusedGatherLogProb(t *testing.T) {
	lockThread(t)
	r := rand.New(rand.NewSource(12))
	const n, h, v, k = 6, 4, 37, 5
	hv, wv, gv := randVals(r, n*h), randVals(r, v*h), randVals(r, n*k)
	idv := make([]int64, n*k)
	for i := range idv {
		idv[i] = r.Int63n(v)
	}
	idv[1] = idv[0] // a repeated id in a row
	mask := []bool{true, false, true, true, true, false}
	type out struct{ logp, dh, dw []float64 }
	run := func(fused bool, chunk int64, temp float64, masked, headGrad bool) out {
		s := newScope(t)
		hidden := tensorOf(t, s, hv, []int64{n, h}, gotch.Double, true)
		weight := tensorOf(t, s, wv, []int64{v, h}, gotch.Double, headGrad)
		ids := s.Keep(ts.MustOfSlice(idv).MustView([]int64{n, k}, true))
		g := tensorOf(t, s, gv, []int64{n, k}, gotch.Double, false)
		var lp *ts.Tensor
		if fused {
			opt := VocabOptions{Chunk: chunk, Temperature: temp}
			if masked {
				opt.Mask = s.Keep(ts.MustOfSlice(mask))
			}
			var err error
			if lp, err = FusedGatherLogProb(hidden, weight, ids, opt); err != nil {
				t.Fatal(err)
			}
			s.Keep(lp)
		} else {
			lp = s.Keep(naiveLogSoftmax(s, hidden, weight, temp).MustGather(1, ids, false, false))
			if masked {
				mf := make([]float64, n)
				for i, m := range mask {
					if m {
						mf[i] = 1
					}
				}
				lp = s.Keep(lp.MustMul(s.Keep(tensorOf(t, s, mf, []int64{n, 1}, gotch.Double, false)), false))
			}
		}
		loss := s.Keep(s.Keep(lp.MustMul(g, false)).MustSum(gotch.Double, false))
		if err := Backward(loss, s.Keep(loss.MustOnesLike(false))); err != nil {
			t.Fatal(err)
		}
		o := out{logp: tensor.Float64s(lp), dh: tensor.Float64s(s.Keep(hidden.MustGrad(false)))}
		if wg := s.Keep(weight.MustGrad(false)); wg.MustDefined() {
			o.dw = tensor.Float64s(wg)
		}
		return o
	}
	for _, tc := range []struct {
		chunk  int64
		temp   float64
		masked bool
	}{{2, 1, false}, {64, 0.8, false}, {4, 1.2, true}} {
		want, got := run(false, 0, tc.temp, tc.masked, true), run(true, tc.chunk, tc.temp, tc.masked, true)
		for _, c := range []struct {
			what   string
			g, w   []float64
			absTol float64
		}{{"log-probs", got.logp, want.logp, 1e-12}, {"d hidden", got.dh, want.dh, 1e-11}, {"d weight", got.dw, want.dw, 1e-11}} {
			if len(c.g) != len(c.w) || tensor.MaxAbsDiff(c.g, c.w) > c.absTol {
				t.Fatalf("chunk %d T %g mask %v: %s differ by %g", tc.chunk, tc.temp, tc.masked, c.what, tensor.MaxAbsDiff(c.g, c.w))
			}
		}
		if tc.masked {
			for row, m := range mask {
				if !m && slices.ContainsFunc(got.dh[row*h:(row+1)*h], func(x float64) bool { return x != 0 }) {
					t.Fatalf("masked row %d has a gradient", row)
				}
			}
		}
	}
	trained, frozen := run(true, 3, 1, false, true), run(true, 3, 1, false, false)
	if frozen.dw != nil || tensor.MaxAbsDiff(trained.dh, frozen.dh) != 0 {
		t.Errorf("frozen weight: gradient %v, input gradient off by %g", frozen.dw != nil, tensor.MaxAbsDiff(trained.dh, frozen.dh))
	}
	s := newScope(t)
	bad := s.Keep(ts.MustOfSlice([]int64{0, v}).MustView([]int64{1, 2}, true))
	x := tensorOf(t, s, hv[:h], []int64{1, h}, gotch.Double, false)
	w := tensorOf(t, s, wv, []int64{v, h}, gotch.Double, false)
	if _, err := FusedGatherLogProb(x, w, bad, VocabOptions{}); err == nil || !strings.Contains(err.Error(), "ids must lie in") {
		t.Errorf("an id out of range: %v", err)
	}
}

// TestFusedTopKAndGatherCUDA: on a GPU both ops give the CPU's values (fp32,
// bf16) and the gather's input gradient; the top-K ids agree. It needs a
// CUDA build (CUDA=1) and a device, and says so when it skips.
func TestFusedTopKAndGatherCUDA(t *testing.T) {
	lockThread(t)
	skipWithoutCUDA(t)
	r := rand.New(rand.NewSource(13))
	const n, h, v, k = 9, 16, 1000, 8
	hv, wv := randVals(r, n*h), randVals(r, v*h)
	for _, c := range []struct {
		dtype gotch.DType
		tol   float64
	}{{gotch.Float, 1e-4}, {gotch.BFloat16, 1e-3}} {
		run := func(dev gotch.Device) (ids []int64, top, gathered, dh []float64) {
			s := newScope(t)
			hidden := s.Keep(s.Keep(tensorOf(t, s, hv, []int64{n, h}, c.dtype, false).MustTo(dev, false)).MustSetRequiresGrad(true, false))
			weight := s.Keep(tensorOf(t, s, wv, []int64{v, h}, c.dtype, false).MustTo(dev, false))
			ti, tl, err := FusedTopKLogProb(hidden, weight, k, VocabOptions{Chunk: 4})
			if err != nil {
				t.Fatal(err)
			}
			s.Keep(ti)
			s.Keep(tl)
			lp, err := FusedGatherLogProb(hidden, weight, ti, VocabOptions{Chunk: 4})
			if err != nil {
				t.Fatal(err)
			}
			s.Keep(lp)
			loss := s.Keep(lp.MustSum(gotch.Float, false))
			if err := Backward(loss, s.Keep(loss.MustOnesLike(false))); err != nil {
				t.Fatal(err)
			}
			return tensor.Int64s(ti), tensor.Float64s(tl), tensor.Float64s(lp), tensor.Float64s(s.Keep(hidden.MustGrad(false)))
		}
		ci, ct, cg, cd := run(gotch.CPU)
		gi, gt, gg, gd := run(gotch.CudaIfAvailable())
		t.Logf("%v: top-K %g, gathered %g, d hidden %g from the CPU's", c.dtype, tensor.MaxAbsDiff(gt, ct), tensor.MaxAbsDiff(gg, cg), tensor.MaxAbsDiff(gd, cd))
		if !slices.Equal(gi, ci) {
			// In bf16 two near-equal logits may swap: then the gathered
			// values are at other tokens and not comparable.
			if c.dtype == gotch.Float {
				t.Errorf("%v: top-K ids differ from the CPU's", c.dtype)
			}
			continue
		}
		if tensor.MaxAbsDiff(gt, ct) > c.tol || tensor.MaxAbsDiff(gg, cg) > c.tol || tensor.MaxAbsDiff(gd, cd) > 10*c.tol {
			t.Errorf("%v: the GPU's values or gradient differ from the CPU's beyond %g", c.dtype, c.tol)
		}
	}
}
