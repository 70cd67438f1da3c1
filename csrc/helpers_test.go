package csrc

import (
	"math"
	"math/rand"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// All torch work in a test binary happens on the main test goroutine of
// each test, locked to its OS thread: gotch's error slot and grad mode are
// thread-local.
func lockThread(t testing.TB) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

// scope collects tensors made in a test and frees them at its end, so no
// test relies on gotch finalizers.
type scope struct{ ts []*ts.Tensor }

func (s *scope) keep(t *ts.Tensor) *ts.Tensor { s.ts = append(s.ts, t); return t }
func (s *scope) close() {
	for i := len(s.ts) - 1; i >= 0; i-- {
		s.ts[i].MustDrop()
	}
	s.ts = nil
}

func newScope(t *testing.T) *scope {
	s := &scope{}
	t.Cleanup(s.close)
	return s
}

func randVals(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = r.NormFloat64()
	}
	return v
}

func tensorOf(t *testing.T, s *scope, vals []float64, shape []int64, dtype gotch.DType, grad bool) *ts.Tensor {
	t.Helper()
	x := s.keep(ts.MustOfSlice(vals).MustView(shape, true))
	if dtype != gotch.Double {
		x = s.keep(x.MustTotype(dtype, false))
	}
	if grad {
		x = s.keep(x.MustSetRequiresGrad(true, false))
	}
	return x
}

// values copies a tensor's elements out as float64 (without gotch's
// Float64Values, which leaks its conversion).
func values(s *scope, x *ts.Tensor) []float64 {
	d := s.keep(x.MustDetach(false))
	d = s.keep(d.MustTotype(gotch.Double, false))
	n := d.Numel()
	out := make([]float64, n)
	d.MustCopyData(out, n)
	return out
}

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

// rssBytes reads the resident set size from /proc/self/statm.
func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm on this system: %v", err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("parse statm %q: %v", b, err)
	}
	return pages * int64(os.Getpagesize())
}
