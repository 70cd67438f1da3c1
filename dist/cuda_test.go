package dist

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/cudatest"
	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// TestCUDANCCLGroupOfOne joins a real NCCL process group of one rank on
// cuda:0 through Init's own path (Init itself returns Single() for a world
// of one), with the TCPStore served as torchrun's agent serves it. Two
// ranks cannot share one GPU under NCCL, so a one-GPU machine can only test
// world size 1; the collectives are then identities, which still checks
// that NCCL runs them on lanpo's tensors, that the results are there when
// the call returns (the current stream waits for NCCL: the out-of-place
// outputs start as zeros), in every dtype the trainer reduces, on a buffer
// larger than NCCL's chunks; that the group's device is the current one;
// that bad arguments are refused before NCCL sees them and leave the group
// usable; and AllGatherBytes, which Init's peer exchange already used.
func TestCUDANCCLGroupOfOne(t *testing.T) {
	dev := cudatest.Real(t)
	cudatest.NeedNCCL(t)
	c := joinGroupOfOne(t, dev)
	if cur, ok, err := csrc.CurrentCUDADevice(); err != nil || !ok || cur != dev.Value {
		t.Errorf("current CUDA device %d (supported %v, %v) after joining on cuda:%d", cur, ok, err, dev.Value)
	}
	checkGroupOfOne(t, c, dev, []gotch.DType{gotch.Float, gotch.BFloat16, gotch.Double, gotch.Int64})
}

// TestGlooGroupOfOne is TestCUDANCCLGroupOfOne's body over Gloo on the
// CPU: the same path into a real group, the same checks.
func TestGlooGroupOfOne(t *testing.T) {
	needDist(t)
	checkGroupOfOne(t, joinGroupOfOne(t, gotch.CPU), gotch.CPU, []gotch.DType{gotch.Float, gotch.Double, gotch.Int64})
}

// joinGroupOfOne joins a real group of one (nccl on a CUDA device, else
// gloo) through joinGroup, the store served apart as torchrun's agent
// does; the group and the store close at the test's end. It locks the
// test's goroutine to its thread for the rest of the test.
func joinGroupOfOne(t *testing.T, dev gotch.Device) Comm {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	store, err := csrc.ServeDistStore("127.0.0.1", 0, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	env := Env{World: 1, LocalWorld: 1, MasterAddr: "127.0.0.1", MasterPort: store.Port, AgentStore: true}
	c, err := joinGroup(env, Options{Device: dev, Timeout: time.Minute}) // backend "": nccl on CUDA, gloo on the CPU
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// checkGroupOfOne runs every collective of c, a group of one on dev, in
// each dtype, and the argument checks.
func checkGroupOfOne(t *testing.T, c Comm, dev gotch.Device, dtypes []gotch.DType) {
	t.Helper()
	var s tensor.Scope
	defer s.Close()
	const n = 1<<20 + 3
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = float64(i%200 - 100) // exact in every dtype
	}
	same := func(what string, x *ts.Tensor, want []float64) {
		t.Helper()
		if d := tensor.MaxAbsDiff(tensor.Float64s(x), want); d != 0 {
			t.Errorf("%s: off by %g", what, d)
		}
	}
	for _, dt := range dtypes {
		x := s.Keep(tensor.FromSlice(&s, vals, nil, dev).MustTotype(dt, false))
		if err := c.AllReduceSum(x); err != nil {
			t.Fatalf("allreduce %v: %v", dt, err)
		}
		same(fmt.Sprintf("allreduce %v", dt), x, vals)
		if err := c.Broadcast(x, 0); err != nil {
			t.Fatalf("broadcast %v: %v", dt, err)
		}
		same(fmt.Sprintf("broadcast %v", dt), x, vals)
		out := s.Keep(ts.MustZeros([]int64{n}, dt, dev))
		if err := c.AllGather(x, out); err != nil {
			t.Fatalf("allgather %v: %v", dt, err)
		}
		same(fmt.Sprintf("allgather %v", dt), out, vals)
		out = s.Keep(ts.MustZeros([]int64{n}, dt, dev))
		if err := c.ReduceScatterSum(x, out); err != nil {
			t.Fatalf("reduce_scatter %v: %v", dt, err)
		}
		same(fmt.Sprintf("reduce_scatter %v", dt), out, vals)
		same(fmt.Sprintf("reduce_scatter %v input", dt), x, vals)
	}
	if err := c.Barrier(); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{[]byte("rank 0 says hello"), {}} {
		all, err := c.AllGatherBytes(b)
		if err != nil || len(all) != 1 || string(all[0]) != string(b) {
			t.Errorf("AllGatherBytes(%q) = %q, %v", b, all, err)
		}
	}
	if m, err := AllReduceMaxFloat64(c, 2.5); err != nil || m != 2.5 {
		t.Errorf("AllReduceMaxFloat64 = %v, %v", m, err)
	}
	// Refused before the backend sees them; the group stays usable.
	x := tensor.FromSlice(&s, []float32{1, 2, 3, 4}, nil, dev)
	type refused struct {
		err  error
		want string
	}
	cases := []refused{
		{c.AllGather(x, s.Keep(ts.MustZeros([]int64{5}, gotch.Float, dev))), "output has 5 elements, want 4"},
		{c.ReduceScatterSum(x, s.Keep(ts.MustZeros([]int64{4}, gotch.Double, dev))), "input is"},
	}
	if dev.IsCuda() {
		host := tensor.FromSlice(&s, []float32{1, 2, 3, 4}, nil, gotch.CPU)
		cases = append(cases, refused{c.AllReduceSum(host), "the group's tensors on"})
	}
	for _, tc := range cases {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", tc.err, tc.want)
		}
	}
	if err := c.AllReduceSum(x); err != nil {
		t.Errorf("after refused calls: %v", err)
	}
	same("allreduce after refused calls", x, []float64{1, 2, 3, 4})
}
