package csrc

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// naiveLogProb is the readable reference: full logits, log_softmax, gather;
// entropy = −Σ p log p. Masked rows are multiplied by 0.
func naiveLogProb(s *tensor.Scope, hidden, weight, targets, maskF *ts.Tensor, temperature float64) (logp, ent *ts.Tensor) {
	n := hidden.MustSize()[0]
	logits := s.Keep(hidden.MustMatmul(s.Keep(weight.MustT(false)), false))
	logits = s.Keep(logits.MustDivScalar(s.Float(temperature), false))
	lsm := s.Keep(logits.MustLogSoftmax(-1, logits.DType(), false))
	idx := s.Keep(targets.MustView([]int64{n, 1}, false))
	logp = s.Keep(s.Keep(lsm.MustGather(1, idx, false, false)).MustView([]int64{n}, false))
	plogp := s.Keep(s.Keep(lsm.MustExp(false)).MustMul(lsm, false))
	ent = s.Keep(s.Keep(plogp.MustSumDimIntlist([]int64{-1}, false, plogp.DType(), false)).MustNeg(false))
	if maskF != nil {
		logp = s.Keep(logp.MustMul(maskF, false))
		ent = s.Keep(ent.MustMul(maskF, false))
	}
	return logp, ent
}

type lpCase struct {
	name        string
	n, h, v     int64
	chunk       int64
	temperature float64
	mask        []bool
	entropy     bool
	emulateCUDA bool // fused through the CUDA path's algorithm, emulated on the CPU
	cuda        bool // fused on CUDA device 0 (the naive reference stays on the CPU)
}

type lpResult struct{ logp, ent, dh, dw []float64 }

// runLogProb computes values and the gradients of Σ gl·logp (+ Σ ge·H) with
// either implementation, from the same float64 data cast to dtype.
func runLogProb(t *testing.T, s *tensor.Scope, c lpCase, dtype gotch.DType, fused bool) lpResult {
	t.Helper()
	r := rand.New(rand.NewSource(c.n*1000 + c.v))
	hv, wv := randVals(r, int(c.n*c.h)), randVals(r, int(c.v*c.h))
	tg := make([]int64, c.n)
	for i := range tg {
		tg[i] = r.Int63n(c.v)
	}
	gl, ge := randVals(r, int(c.n)), randVals(r, int(c.n))
	// place puts the fused run's inputs on the GPU (as leaves) for c.cuda.
	place := func(x *ts.Tensor, grad bool) *ts.Tensor {
		if !c.cuda || !fused || x == nil {
			return x
		}
		y := s.Keep(s.Keep(x.MustDetach(false)).MustTo(gotch.CudaBuilder(0), false))
		if grad {
			y = s.Keep(y.MustSetRequiresGrad(true, false))
		}
		return y
	}
	hidden := place(tensorOf(t, s, hv, []int64{c.n, c.h}, dtype, true), true)
	weight := place(tensorOf(t, s, wv, []int64{c.v, c.h}, dtype, true), true)
	targets := place(s.Keep(ts.MustOfSlice(tg)), false)
	var mask, maskF *ts.Tensor
	if c.mask != nil {
		mf := make([]float64, c.n)
		for i, m := range c.mask {
			if m {
				mf[i] = 1
			}
		}
		maskF = tensorOf(t, s, mf, []int64{c.n}, gotch.Double, false)
		mask = place(s.Keep(maskF.MustTotype(gotch.Bool, false)), false)
	}
	var logp, ent *ts.Tensor
	if fused {
		var err error
		logp, ent, err = FusedLogProb(hidden, weight, targets, LogProbOptions{Temperature: c.temperature, Chunk: c.chunk, Mask: mask, Entropy: c.entropy, emulateCUDA: c.emulateCUDA})
		if err != nil {
			t.Fatal(err)
		}
		s.Keep(logp)
		if ent != nil {
			s.Keep(ent)
		}
	} else {
		h64 := s.Keep(hidden.MustTotype(gotch.Double, false))
		w64 := s.Keep(weight.MustTotype(gotch.Double, false))
		logp, ent = naiveLogProb(s, h64, w64, targets, maskF, c.temperature)
	}
	glT := place(tensorOf(t, s, gl, []int64{c.n}, logp.DType(), false), false)
	loss := s.Keep(s.Keep(logp.MustMul(glT, false)).MustSum(gotch.Double, false))
	res := lpResult{logp: tensor.Float64s(logp)}
	if c.entropy {
		geT := place(tensorOf(t, s, ge, []int64{c.n}, ent.DType(), false), false)
		loss = s.Keep(loss.MustAdd(s.Keep(s.Keep(ent.MustMul(geT, false)).MustSum(gotch.Double, false)), false))
		res.ent = tensor.Float64s(ent)
	}
	loss.MustBackward()
	res.dh = tensor.Float64s(s.Keep(hidden.MustGrad(false)))
	res.dw = tensor.Float64s(s.Keep(weight.MustGrad(false)))
	return res
}

func compareLogProb(t *testing.T, got, want lpResult, tolVal, tolGrad float64) {
	t.Helper()
	for _, c := range []struct {
		name string
		a, b []float64
		tol  float64
	}{{"logp", got.logp, want.logp, tolVal}, {"entropy", got.ent, want.ent, tolVal},
		{"dhidden", got.dh, want.dh, tolGrad}, {"dweight", got.dw, want.dw, tolGrad}} {
		if d := tensor.MaxAbsDiff(c.a, c.b); d > c.tol {
			t.Errorf("%s: max |fused − naive| = %g > %g", c.name, d, c.tol)
		}
	}
}

var lpCases = []lpCase{
	{name: "one chunk", n: 7, h: 5, v: 11, chunk: 100, temperature: 1},
	{name: "row per chunk", n: 7, h: 5, v: 11, chunk: 1, temperature: 1, entropy: true},
	{name: "chunk does not divide N", n: 7, h: 5, v: 11, chunk: 3, temperature: 1, entropy: true},
	{name: "temperature 0.7", n: 6, h: 4, v: 13, chunk: 4, temperature: 0.7, entropy: true},
	{name: "temperature 1.6", n: 6, h: 4, v: 13, chunk: 2, temperature: 1.6},
	{name: "masked rows", n: 8, h: 4, v: 9, chunk: 3, temperature: 1, entropy: true,
		mask: []bool{true, false, true, true, false, false, true, true}},
	{name: "all masked", n: 3, h: 4, v: 9, chunk: 2, temperature: 1, entropy: true, mask: []bool{false, false, false}},
	{name: "V spans column blocks", n: 5, h: 3, v: 8200, chunk: 2, temperature: 0.9, entropy: true},
	{name: "default chunk", n: 5, h: 3, v: 17, temperature: 1, entropy: true},
}

func TestFusedLogProbMatchesNaiveFP64(t *testing.T) {
	lockThread(t)
	for _, c := range lpCases {
		t.Run(c.name, func(t *testing.T) {
			s := newScope(t)
			want := runLogProb(t, s, c, gotch.Double, false)
			got := runLogProb(t, s, c, gotch.Double, true)
			if !c.entropy {
				want.ent = nil
			}
			compareLogProb(t, got, want, 1e-10, 1e-10)
			for i, m := range c.mask {
				if m {
					continue
				}
				if got.logp[i] != 0 || (c.entropy && got.ent[i] != 0) {
					t.Errorf("masked row %d: logp %g entropy %v, want 0", i, got.logp[i], got.ent)
				}
				for j := int64(0); j < c.h; j++ {
					if g := got.dh[int64(i)*c.h+j]; g != 0 {
						t.Errorf("masked row %d has gradient %g, want exactly 0", i, g)
					}
				}
			}
		})
	}
}

func TestFusedLogProbChunkIndependent(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	base := lpCase{n: 9, h: 6, v: 23, temperature: 0.8, entropy: true, mask: []bool{true, true, false, true, true, true, false, true, true}}
	var ref lpResult
	for i, chunk := range []int64{1, 2, 4, 5, 9, 64} {
		c := base
		c.chunk = chunk
		got := runLogProb(t, s, c, gotch.Double, true)
		if i == 0 {
			ref = got
			continue
		}
		compareLogProb(t, got, ref, 1e-12, 1e-12)
	}
}

// Reduced-precision inputs: statistics run in fp32, so the result is within
// fp32 rounding of an fp64 computation on the same (rounded) inputs, and the
// gradients within the input dtype's rounding.
func TestFusedLogProbLowPrecision(t *testing.T) {
	lockThread(t)
	c := lpCase{n: 12, h: 16, v: 300, chunk: 5, temperature: 0.9, entropy: true, mask: []bool{true, true, true, false, true, true, true, true, true, true, false, true}}
	for _, tc := range []struct {
		dtype           gotch.DType
		tolVal, tolGrad float64
	}{{gotch.Float, 2e-5, 1e-4}, {gotch.BFloat16, 2e-4, 0.15}} {
		s := newScope(t)
		want := runLogProb(t, s, c, tc.dtype, false) // naive in fp64 on the rounded inputs
		got := runLogProb(t, s, c, tc.dtype, true)
		t.Run(tc.dtype.String(), func(t *testing.T) { compareLogProb(t, got, want, tc.tolVal, tc.tolGrad) })
		s.Close()
	}
}

// dtypeTol is how close a fused result in a dtype must come to the fp64
// reference on the same rounded inputs.
type dtypeTol struct {
	dtype           gotch.DType
	tolVal, tolGrad float64
}

var kernelDTypes = []dtypeTol{{gotch.Float, 2e-5, 1e-4}, {gotch.BFloat16, 2e-4, 0.15}, {gotch.Half, 2e-4, 0.02}}

// wideVCase spans two backward tiles (2,048 columns each) and the forward
// kernel's 512 threads per row; no entropy term.
var wideVCase = lpCase{name: "V spans tiles", n: 3, h: 5, v: 4500, chunk: 2, temperature: 1.3}

// matchFP64 runs each case in each dtype through the fused op, with how
// set up (emulated or on the GPU), against the naive fp64 reference, and
// checks masked rows are exactly zero.
func matchFP64(t *testing.T, cases []lpCase, dtypes []dtypeTol, how func(*lpCase)) {
	for _, tc := range dtypes {
		for _, c := range cases {
			t.Run(tc.dtype.String()+"/"+c.name, func(t *testing.T) {
				s := newScope(t)
				want := runLogProb(t, s, c, tc.dtype, false)
				how(&c)
				got := runLogProb(t, s, c, tc.dtype, true)
				if !c.entropy {
					want.ent = nil
				}
				compareLogProb(t, got, want, tc.tolVal, tc.tolGrad)
				for i, m := range c.mask {
					if !m && (got.logp[i] != 0 || got.dh[int64(i)*c.h] != 0) {
						t.Errorf("masked row %d: logp %g, dhidden %g; want 0", i, got.logp[i], got.dh[int64(i)*c.h])
					}
				}
			})
		}
	}
}

// TestKernelPathEmulated runs the CUDA path's chunk loop, GEMM argument
// mapping (column-major cuBLAS calls), kernel arithmetic and reduction
// order, and the 16-bit dZ packed into the logits buffer's own rows, on the
// CPU (csrc/logprob_math.h is shared with the kernels). What it cannot
// check is the GPU itself: launches, warp shuffles, the barrier.
func TestKernelPathEmulated(t *testing.T) {
	lockThread(t)
	cases := []lpCase{
		{name: "one chunk", n: 5, h: 7, v: 37, chunk: 8, temperature: 1, entropy: true},
		{name: "chunks, mask, temperature", n: 9, h: 6, v: 53, chunk: 4, temperature: 0.7, entropy: true,
			mask: []bool{true, false, true, true, true, false, true, true, true}},
		wideVCase,
	}
	matchFP64(t, cases, kernelDTypes, func(c *lpCase) { c.emulateCUDA = true })
}

// TestFusedLogProbCUDA runs the op on a GPU against the fp64 CPU reference:
// the kernels for fp32/bf16/fp16, the ATen path for fp64. It needs a CUDA
// build (CUDA=1) and a device, and says so when it skips.
func TestFusedLogProbCUDA(t *testing.T) {
	lockThread(t)
	skipWithoutCUDA(t)
	dtypes := append([]dtypeTol{{gotch.Double, 1e-10, 1e-10}}, kernelDTypes...)
	matchFP64(t, append(lpCases, wideVCase), dtypes, func(c *lpCase) { c.cuda = true })
}

// TestCUDAFusedLogProbUsesTorchBLASHandle: the op's GEMMs run on torch's
// cuBLAS handle for the current device and stream (so their workspace comes
// from torch's caching allocator), not on a private handle.
func TestCUDAFusedLogProbUsesTorchBLASHandle(t *testing.T) {
	lockThread(t)
	skipWithoutCUDA(t)
	s := newScope(t)
	dev := gotch.CudaBuilder(0)
	r := rand.New(rand.NewSource(5))
	hidden := s.Keep(tensorOf(t, s, randVals(r, 8*16), []int64{8, 16}, gotch.Float, false).MustTo(dev, false))
	weight := s.Keep(tensorOf(t, s, randVals(r, 40*16), []int64{40, 16}, gotch.Float, false).MustTo(dev, false))
	targets := s.Keep(ts.MustOfSlice([]int64{1, 9, 0, 4, 39, 2, 2, 7}).MustTo(dev, true))
	logp, _, err := FusedLogProb(hidden, weight, targets, LogProbOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Keep(logp)
	used, current, ok, err := logProbBLASHandles(0)
	if err != nil || !ok {
		t.Fatalf("handles: ok %v, err %v", ok, err)
	}
	if used == nil || used != current {
		t.Errorf("the fused op's last GEMM ran on cuBLAS handle %p, torch's current handle is %p", used, current)
	}
}

func TestFusedLogProbNoGradPath(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	r := rand.New(rand.NewSource(3))
	hidden := tensorOf(t, s, randVals(r, 4*3), []int64{4, 3}, gotch.Double, false)
	weight := tensorOf(t, s, randVals(r, 10*3), []int64{10, 3}, gotch.Double, false)
	targets := s.Keep(ts.MustOfSlice([]int64{1, 9, 0, 4}))
	logp, ent, err := FusedLogProb(hidden, weight, targets, LogProbOptions{Entropy: true, Chunk: 3})
	if err != nil {
		t.Fatal(err)
	}
	s.Keep(logp)
	s.Keep(ent)
	if rg, _ := logp.RequiresGrad(); rg {
		t.Error("inputs need no grad, yet the output requires grad")
	}
	wantLogp, wantEnt := naiveLogProb(s, hidden, weight, targets, nil, 1)
	if d := tensor.MaxAbsDiff(tensor.Float64s(logp), tensor.Float64s(wantLogp)); d > 1e-12 {
		t.Errorf("logp off by %g", d)
	}
	if d := tensor.MaxAbsDiff(tensor.Float64s(ent), tensor.Float64s(wantEnt)); d > 1e-12 {
		t.Errorf("entropy off by %g", d)
	}
}

func TestFusedLogProbRejectsBadInput(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	h := s.Keep(ts.MustOnes([]int64{4, 3}, gotch.Float, gotch.CPU))
	w := s.Keep(ts.MustOnes([]int64{10, 3}, gotch.Float, gotch.CPU))
	wBad := s.Keep(ts.MustOnes([]int64{10, 2}, gotch.Float, gotch.CPU))
	tg := s.Keep(ts.MustOfSlice([]int64{1, 2, 3, 4}))
	tgOut := s.Keep(ts.MustOfSlice([]int64{1, 2, 10, 4}))
	tgShort := s.Keep(ts.MustOfSlice([]int64{1, 2}))
	for _, c := range []struct {
		name          string
		h, w, targets *ts.Tensor
		opt           LogProbOptions
		want          string
	}{
		{"weight width", h, wBad, tg, LogProbOptions{}, "weight must be [V, 3]"},
		{"targets length", h, w, tgShort, LogProbOptions{}, "targets must be [4]"},
		{"target out of range", h, w, tgOut, LogProbOptions{}, "targets must lie in [0, 10), got [1, 10]"},
		{"temperature", h, w, tg, LogProbOptions{Temperature: -1}, "temperature must be > 0"},
		{"mask length", h, w, tg, LogProbOptions{Mask: tgShort}, "mask must be [4]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lp, _, err := FusedLogProb(c.h, c.w, c.targets, c.opt)
			if err == nil {
				lp.MustDrop()
				t.Fatalf("accepted; want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "csrc: fused_logprob: ") {
				t.Errorf("got %q, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestBenchLogProbReports(t *testing.T) {
	lockThread(t)
	for _, c := range []struct {
		grad bool
		topk int64
	}{{false, 0}, {true, 0}, {true, 20}} {
		grad := c.grad
		r, err := BenchLogProb(LogProbBench{N: 64, H: 16, V: 1000, Grad: grad, Chunk: 8, DType: gotch.Float, Device: gotch.CPU, Reps: 1, TopK: c.topk})
		if err != nil {
			t.Fatal(err)
		}
		if r.FusedMS <= 0 || r.NaiveMS <= 0 || r.SpeedRatio <= 0 || r.FusedTFLOPS <= 0 {
			t.Errorf("timings missing: %+v", r)
		}
		if r.MaxAbsErr > 1e-4 || (grad && r.MaxAbsGradErr > 1e-4) {
			t.Errorf("fused and naive disagree: %+v", r)
		}
		if r.Chunk != 8 || r.Device != "cpu" || r.DType != "float32" || r.TopK != c.topk {
			t.Errorf("config not echoed: %+v", r)
		}
	}
}

// TestFusedLogProbFrozenHead: with a head that takes no gradient (LoRA's
// frozen LM head) the backward gives the same input gradient and computes
// no weight gradient: no dW GEMM on the ATen path (no addmm), one [V, H]
// buffer fewer on the kernel path.
func TestFusedLogProbFrozenHead(t *testing.T) {
	lockThread(t)
	r := rand.New(rand.NewSource(5))
	hv, wv := randVals(r, 6*4), randVals(r, 29*4)
	for _, emulate := range []bool{false, true} {
		dtype := gotch.Double
		if emulate {
			dtype = gotch.Float
		}
		t.Run(fmt.Sprintf("emulate_cuda=%v", emulate), func(t *testing.T) {
			run := func(headGrad bool) ([]float64, bool, OpCount) {
				s := newScope(t)
				hidden := tensorOf(t, s, hv, []int64{6, 4}, dtype, true)
				weight := tensorOf(t, s, wv, []int64{29, 4}, dtype, headGrad)
				targets := s.Keep(ts.MustOfSlice([]int64{1, 28, 0, 4, 7, 3}))
				logp, _, err := FusedLogProb(hidden, weight, targets, LogProbOptions{Chunk: 4, emulateCUDA: emulate})
				if err != nil {
					t.Fatal(err)
				}
				s.Keep(logp)
				loss := s.Keep(logp.MustSum(dtype, false))
				c, err := CountOps(func() error { return Backward(loss, s.Keep(loss.MustOnesLike(false))) })
				if err != nil {
					t.Fatal(err)
				}
				wg := s.Keep(weight.MustGrad(false)).MustDefined()
				return tensor.Float64s(s.Keep(hidden.MustGrad(false))), wg, c
			}
			dhTrained, wgTrained, cTrained := run(true)
			dhFrozen, wgFrozen, cFrozen := run(false)
			if d := tensor.MaxAbsDiff(dhTrained, dhFrozen); d != 0 {
				t.Errorf("input gradient differs by %g with a frozen head", d)
			}
			if !wgTrained || wgFrozen {
				t.Errorf("weight gradient defined: trained %v, frozen %v", wgTrained, wgFrozen)
			}
			if !emulate && (cTrained.ByName["aten::addmm_"] == 0 || cFrozen.ByName["aten::addmm_"] != 0) {
				t.Errorf("dW GEMMs (addmm_): trained %d, frozen %d; want some, then none", cTrained.ByName["aten::addmm_"], cFrozen.ByName["aten::addmm_"])
			}
			if cFrozen.Allocs >= cTrained.Allocs {
				t.Errorf("allocations: frozen head %d, trained %d; want fewer (no [V, H] dW)", cFrozen.Allocs, cTrained.Allocs)
			}
		})
	}
}
