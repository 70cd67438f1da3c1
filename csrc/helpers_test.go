package csrc

import (
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// All torch work in a test binary happens on the main test goroutine of
// each test, locked to its OS thread: gotch's error slot and grad mode are
// thread-local.
func lockThread(t testing.TB) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

func newScope(t *testing.T) *tensor.Scope {
	s := &tensor.Scope{}
	t.Cleanup(s.Close)
	return s
}

func randVals(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = r.NormFloat64()
	}
	return v
}

func tensorOf(t *testing.T, s *tensor.Scope, vals []float64, shape []int64, dtype gotch.DType, grad bool) *ts.Tensor {
	t.Helper()
	x := s.Keep(ts.MustOfSlice(vals).MustView(shape, true))
	if dtype != gotch.Double {
		x = s.Keep(x.MustTotype(dtype, false))
	}
	if grad {
		x = s.Keep(x.MustSetRequiresGrad(true, false))
	}
	return x
}

// rssBytes is the resident set size; the test skips where /proc is missing.
func rssBytes(t *testing.T) int64 {
	t.Helper()
	n, err := tensor.RSSBytes()
	if err != nil {
		t.Skipf("no RSS on this system: %v", err)
	}
	return n
}

// skipWithoutCUDA skips a GPU test on a build without CUDA or a machine
// without a device. (csrc's own tests cannot use internal/cudatest, which
// imports csrc; LANPO_REQUIRE_CUDA=1 makes the skip a failure there and
// here alike.)
func skipWithoutCUDA(t *testing.T) {
	t.Helper()
	info, err := BuildInfo()
	if err != nil {
		t.Fatal(err)
	}
	if !info.BuiltWithCUDA || !info.CUDAAvailable {
		msg := fmt.Sprintf("no CUDA here (built with CUDA %v, device available %v)", info.BuiltWithCUDA, info.CUDAAvailable)
		if os.Getenv("LANPO_REQUIRE_CUDA") == "1" {
			t.Fatal(msg + ", and LANPO_REQUIRE_CUDA=1")
		}
		t.Skip(msg)
	}
}
