package csrc

import (
	"strings"
	"testing"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/disttest"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// A world of one over Gloo runs every collective of dist.cpp in one process
// (the multi-rank tests are in package dist), and reaches its own checks.
func TestDistGroupOfOne(t *testing.T) {
	gloo, _, why := DistSupport()
	disttest.Need(t, gloo, why)
	lockThread(t)
	s := newScope(t)
	store, err := ServeDistStore("127.0.0.1", 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if store.Port <= 0 {
		t.Fatalf("store port %d", store.Port)
	}
	// A second server on the same port is what rank 0 meets under
	// torchrun's agent store when it tries to serve.
	if _, err := ServeDistStore("127.0.0.1", store.Port, time.Second); err == nil || !strings.Contains(err.Error(), "store_serve: ") {
		t.Errorf("a second store on port %d: %v", store.Port, err)
	}
	g, err := NewDistGroup(DistConfig{Backend: "gloo", Host: "127.0.0.1", Port: store.Port, Rank: 0, Size: 1,
		Prefix: "/worker/attempt_0", BindHost: "127.0.0.1", Timeout: 10 * time.Second, Device: gotch.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	x := tensorOf(t, s, []float64{1, 2, 3, 4}, []int64{4}, gotch.Float, false)
	out := s.Keep(ts.MustZeros([]int64{4}, gotch.Float, gotch.CPU))
	for name, err := range map[string]error{
		"allreduce":      g.AllReduceSum(x),
		"broadcast":      g.Broadcast(x, 0),
		"allgather":      g.AllGather(x, out),
		"reduce_scatter": g.ReduceScatterSum(x, out),
		"barrier":        g.Barrier(),
	} {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := tensor.Float64s(out); tensor.MaxAbsDiff(got, []float64{1, 2, 3, 4}) != 0 {
		t.Errorf("out = %v", got)
	}
	// dist.cpp's own checks, which package dist normally makes first.
	strided := s.Keep(tensorOf(t, s, []float64{1, 2, 3, 4}, []int64{2, 2}, gotch.Float, false).MustT(false))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{g.AllReduceSum(strided), "allreduce: tensor must be contiguous"},
		{g.Broadcast(x, 1), "broadcast: root 1 is not a rank of a group of 1"},
		{g.AllGather(x, s.Keep(ts.MustZeros([]int64{3}, gotch.Float, gotch.CPU))), "allgather: output has 3 elements, want world size 1 × 4"},
		{g.ReduceScatterSum(x, s.Keep(ts.MustZeros([]int64{4}, gotch.Double, gotch.CPU))), "reduce_scatter: input is Float, output Double"},
	} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want) {
			t.Errorf("got %v, want %q", tc.err, tc.want)
		}
	}
	if _, err := NewDistGroup(DistConfig{Backend: "mpi", Host: "127.0.0.1", Port: store.Port, Size: 1}); err == nil ||
		err.Error() != `init: unknown backend "mpi" (want gloo or nccl)` {
		t.Errorf("unknown backend: %v", err)
	}
}
