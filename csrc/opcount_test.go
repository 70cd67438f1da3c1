package csrc

import (
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// TestCountOps: a composite operator counts as the kernels it runs, views
// and allocations apart, and an item() read is a sync.
func TestCountOps(t *testing.T) {
	lockThread(t)
	s := newScope(t)
	x := s.Keep(ts.MustOnes([]int64{4, 8}, gotch.Float, gotch.CPU))
	w := s.Keep(ts.MustOnes([]int64{3, 8}, gotch.Float, gotch.CPU))
	b := s.Keep(ts.MustOnes([]int64{3}, gotch.Float, gotch.CPU))
	c, err := CountOps(func() error {
		var ls tensor.Scope
		defer ls.Close()
		y := ls.Keep(ts.MustLinear(x, w, b))                         // composite: addmm (+ views)
		ls.Keep(y.MustTranspose(0, 1, false))                        // a view
		ls.Keep(y.MustAdd(y, false))                                 // one kernel
		ls.Keep(ts.MustEmpty([]int64{2}, gotch.Float, gotch.CPU))    // an allocation
		ls.Keep(y.MustSum(gotch.Float, false)).MustFloat64Value(nil) // a kernel and a sync (item)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(c)
	if c.ByName["aten::addmm"] != 1 || c.ByName["aten::add"] != 1 || c.ByName["aten::sum"] != 1 {
		t.Errorf("kernels %v, want addmm, add and sum once each", c.ByName)
	}
	if c.ByName["aten::linear"] != 0 || c.Composite < 1 {
		t.Errorf("linear counted as a kernel (%v) or no composite call (%d)", c.ByName, c.Composite)
	}
	if c.Views < 2 || c.Allocs < 1 || c.Syncs < 1 {
		t.Errorf("views %d, allocations %d, syncs %d: want ≥ 2, ≥ 1, ≥ 1", c.Views, c.Allocs, c.Syncs)
	}
	if _, err := CountOps(func() error { _, err := CountOps(func() error { return nil }); return err }); err == nil {
		t.Error("nested counting was accepted")
	}
}
