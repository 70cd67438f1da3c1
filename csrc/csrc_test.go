package csrc

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// rmsNormComposed is the readable reference: HF's Qwen2RMSNorm written with
// gotch ops (statistics in x's dtype here, which is fp64 in the test).
func rmsNormComposed(s *tensor.Scope, x, w *ts.Tensor, eps float64) *ts.Tensor {
	sq := s.Keep(x.MustPowTensorScalar(s.Float(2), false))
	ms := s.Keep(sq.MustMeanDim([]int64{-1}, true, x.DType(), false))
	r := s.Keep(ms.MustAddScalar(s.Float(eps), false).MustRsqrt(true))
	n := s.Keep(x.MustMul(r, false))
	return s.Keep(n.MustMul(w, false))
}

// rmsForwardBackward returns y and the gradients of Σ y·g for x and w.
func rmsForwardBackward(t *testing.T, s *tensor.Scope, f func(x, w *ts.Tensor) *ts.Tensor, xv, wv, gv []float64, shape []int64, dtype gotch.DType) (y, dx, dw []float64) {
	t.Helper()
	h := shape[len(shape)-1]
	x := tensorOf(t, s, xv, shape, dtype, true)
	w := tensorOf(t, s, wv, []int64{h}, dtype, true)
	g := tensorOf(t, s, gv, shape, dtype, false)
	out := f(x, w)
	loss := s.Keep(s.Keep(out.MustMul(g, false)).MustSum(gotch.Double, false))
	loss.MustBackward()
	return tensor.Float64s(out), tensor.Float64s(s.Keep(x.MustGrad(false))), tensor.Float64s(s.Keep(w.MustGrad(false)))
}

func TestRMSNormMatchesComposition(t *testing.T) {
	lockThread(t)
	const eps = 1e-6
	for _, shape := range [][]int64{{7}, {3, 8}, {2, 5, 16}} {
		s := newScope(t)
		r := rand.New(rand.NewSource(int64(len(shape))))
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		h := int(shape[len(shape)-1])
		xv, wv, gv := randVals(r, n), randVals(r, h), randVals(r, n)
		fused := func(x, w *ts.Tensor) *ts.Tensor {
			y, err := RMSNorm(x, w, eps)
			if err != nil {
				t.Fatal(err)
			}
			return s.Keep(y)
		}
		composed := func(x, w *ts.Tensor) *ts.Tensor { return rmsNormComposed(s, x, w, eps) }
		y1, dx1, dw1 := rmsForwardBackward(t, s, fused, xv, wv, gv, shape, gotch.Double)
		y2, dx2, dw2 := rmsForwardBackward(t, s, composed, xv, wv, gv, shape, gotch.Double)
		for _, c := range []struct {
			name string
			a, b []float64
		}{{"y", y1, y2}, {"dx", dx1, dx2}, {"dweight", dw1, dw2}} {
			if d := tensor.MaxAbsDiff(c.a, c.b); d > 1e-10 {
				t.Errorf("shape %v: %s differs from the composition by %g (fp64, limit 1e-10)", shape, c.name, d)
			}
		}
		// fp32 and bf16 inputs: statistics in fp32, so the result stays
		// within the input dtype's rounding of the fp64 reference.
		for _, c := range []struct {
			dtype gotch.DType
			tol   float64
		}{{gotch.Float, 1e-5}, {gotch.BFloat16, 0.05}} {
			y, dx, dw := rmsForwardBackward(t, s, fused, xv, wv, gv, shape, c.dtype)
			if d := tensor.MaxAbsDiff(y, y2); d > c.tol*4 {
				t.Errorf("shape %v %v: y off by %g", shape, c.dtype, d)
			}
			if d := tensor.MaxAbsDiff(dx, dx2); d > c.tol*16 {
				t.Errorf("shape %v %v: dx off by %g", shape, c.dtype, d)
			}
			if d := tensor.MaxAbsDiff(dw, dw2); d > c.tol*float64(n) {
				t.Errorf("shape %v %v: dweight off by %g", shape, c.dtype, d)
			}
		}
		s.Close()
	}
}

func TestRMSNormErrorsComeBackAsGoErrors(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	x := s.Keep(ts.MustOnes([]int64{2, 4}, gotch.Float, gotch.CPU))
	w := s.Keep(ts.MustOnes([]int64{3}, gotch.Float, gotch.CPU))
	y, err := RMSNorm(x, w, 1e-6)
	if err == nil {
		y.MustDrop()
		t.Fatal("RMSNorm accepted a weight of the wrong size")
	}
	for _, want := range []string{"rms_norm", "weight must have shape [4]", "[3]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "Exception raised from") {
		t.Errorf("error carries a C++ backtrace: %q", err)
	}
	if _, err := RMSNorm(x, x, -1); err == nil {
		t.Error("RMSNorm accepted a 2-D weight")
	}
}

func TestCppExceptionsBecomeGoErrors(t *testing.T) {
	lockThread(t)
	for kind, want := range map[int]string{
		0: "selftest: c10::Error from TORCH_CHECK",
		1: "selftest: std::runtime_error",
		2: "unknown C++ exception",
	} {
		err := selftestThrow(kind)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "csrc: selftest_throw: ") {
			t.Errorf("kind %d: got %v, want an error containing %q", kind, err, want)
		}
	}
	if err := selftestThrow(99); err != nil {
		t.Errorf("no exception thrown but got %v", err)
	}
}

func TestBuildInfo(t *testing.T) {
	lockThread(t)
	info, err := BuildInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.TorchVersion == "" || info.TorchVersion != info.PreparedVersion {
		t.Errorf("headers say libtorch %q, preparation says %q", info.TorchVersion, info.PreparedVersion)
	}
	if info.Threads < 1 {
		t.Errorf("threads = %d", info.Threads)
	}
	if strings.HasPrefix(info.TorchVersion, "2.1.") && len(info.UnavailableOps) != 0 {
		t.Errorf("libtorch %s should need no stubs, got %d", info.TorchVersion, len(info.UnavailableOps))
	}
}
