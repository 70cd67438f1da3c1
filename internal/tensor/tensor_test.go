package tensor

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

func TestScopeFreesAllButReleased(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	live := len(ts.ExistingTensors)
	var s Scope
	a := s.Keep(ts.MustOnes([]int64{2}, gotch.Float, gotch.CPU))
	b := s.Keep(a.MustMulScalar(s.Float(3), false))
	s.Keep(b.MustAdd(a, false))
	kept := s.Release(b)
	s.Close()
	if n := len(ts.ExistingTensors); n != live+1 {
		t.Errorf("live tensors %d after Close, want %d (only the released one)", n, live+1)
	}
	if got := Float64s(kept); len(got) != 2 || got[0] != 3 || got[1] != 3 {
		t.Errorf("released tensor holds %v", got)
	}
	kept.MustDrop()
	if n := len(ts.ExistingTensors); n != live {
		t.Errorf("live tensors %d, want %d", n, live)
	}
}

func TestMaxAbsDiff(t *testing.T) {
	if d := MaxAbsDiff([]float64{1, 2, 3}, []float64{1, 2.5, 2}); d != 1 {
		t.Errorf("got %g, want 1", d)
	}
	if d := MaxAbsDiff([]float64{1}, []float64{1, 2}); !math.IsInf(d, 1) {
		t.Errorf("lengths differ: got %g, want +Inf", d)
	}
}

func TestRSSBytes(t *testing.T) {
	n, err := RSSBytes()
	if err != nil {
		t.Skipf("no /proc on this system: %v", err)
	}
	if n < 1<<20 {
		t.Errorf("RSS %d bytes is implausibly small", n)
	}
}

func TestFromSliceTypes(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var s Scope
	defer s.Close()
	for _, c := range []struct {
		data any
		want []float64
	}{
		{[]int64{1, -2, 3, 4}, []float64{1, -2, 3, 4}},
		{[]float64{0.5, -1.25, 3, 1e-300}, []float64{0.5, -1.25, 3, 1e-300}},
		{[]float32{0.5, -1.25, 3, 7}, []float64{0.5, -1.25, 3, 7}},
		{[]int32{9, 8, 7, 6}, []float64{9, 8, 7, 6}},
		{[]bool{true, false, false, true}, []float64{1, 0, 0, 1}},
	} {
		shape := []int64{2, 2}
		x := FromSlice(&s, c.data, shape, gotch.CPU)
		got := Float64s(x)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Fatalf("%T: %v, want %v", c.data, got, c.want)
		}
		if fmt.Sprint(x.MustSize()) != "[2 2]" {
			t.Fatalf("%T: shape %v", c.data, x.MustSize())
		}
	}
	if n := FromSlice(&s, []int64{}, nil, gotch.CPU).Numel(); n != 0 {
		t.Fatalf("empty slice: %d elements", n)
	}
}

// A scalar from Scope.Float must survive garbage collection until the
// scope closes, however unreachable the caller's variable is.
func TestScopeKeepsScalarsAlive(t *testing.T) {
	var collected atomic.Bool
	s := &Scope{}
	sc := s.Float(1.5)
	// Replace gotch's freeing finalizer with one that only reports.
	runtime.SetFinalizer(sc, nil)
	runtime.SetFinalizer(sc, func(*ts.Scalar) { collected.Store(true) })
	sc = nil
	for i := 0; i < 3; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if collected.Load() {
		t.Fatal("a scope's scalar was collected before Close")
	}
	s.Close()
	for i := 0; i < 100 && !collected.Load(); i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if !collected.Load() {
		t.Fatal("the scalar was never collected after Close: the test cannot tell kept from lost")
	}
}
