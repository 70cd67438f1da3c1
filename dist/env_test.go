package dist

import (
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

func lookupFrom(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestFromEnv(t *testing.T) {
	torchrun := map[string]string{"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
		"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True",
		"TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_RUN_ID": "job7"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range torchrun {
			m[a] = b
		}
		if v == "<unset>" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	t.Run("torchrun", func(t *testing.T) {
		e, launched, err := fromLookup(lookupFrom(torchrun))
		want := Env{Rank: 5, LocalRank: 1, World: 8, LocalWorld: 4, NodeRank: 1, MasterAddr: "node0", MasterPort: 29500,
			AgentStore: true, RestartCount: 2, RunID: "job7"}
		if err != nil || !launched || e != want {
			t.Fatalf("got %+v %v %v", e, launched, err)
		}
		if e.StorePrefix() != "/worker/attempt_2" {
			t.Errorf("prefix %q", e.StorePrefix())
		}
	})
	t.Run("not launched", func(t *testing.T) {
		e, launched, err := fromLookup(lookupFrom(nil))
		if err != nil || launched || e.World != 1 || e.Rank != 0 || e.StorePrefix() != "" {
			t.Fatalf("got %+v %v %v", e, launched, err)
		}
	})
	t.Run("one machine, local values left out", func(t *testing.T) {
		e, _, err := fromLookup(lookupFrom(map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234"}))
		if err != nil || e.LocalRank != 1 || e.LocalWorld != 2 || e.NodeRank != 0 || e.AgentStore {
			t.Fatalf("got %+v %v", e, err)
		}
	})
	t.Run("world of one needs no master", func(t *testing.T) {
		e, launched, err := fromLookup(lookupFrom(map[string]string{"RANK": "0", "WORLD_SIZE": "1"}))
		if err != nil || !launched || e.World != 1 {
			t.Fatalf("got %+v %v", e, err)
		}
	})
	for _, tc := range []struct{ name, key, val, want string }{
		{"rank missing", "RANK", "<unset>", "RANK is not set"},
		{"rank not a number", "RANK", "five", `RANK="five": not an integer`},
		{"rank too large", "RANK", "8", "RANK=8: must be below WORLD_SIZE=8"},
		{"negative rank", "RANK", "-1", "RANK=-1: must be at least 0"},
		{"world zero", "WORLD_SIZE", "0", "WORLD_SIZE=0: must be at least 1"},
		{"local rank", "LOCAL_RANK", "4", "LOCAL_RANK=4: must be below LOCAL_WORLD_SIZE=4"},
		{"local world", "LOCAL_WORLD_SIZE", "16", "LOCAL_WORLD_SIZE=16: larger than WORLD_SIZE=8"},
		{"group rank", "GROUP_RANK", "x", `GROUP_RANK="x"`},
		{"no master addr", "MASTER_ADDR", "<unset>", "MASTER_ADDR is not set"},
		{"no master port", "MASTER_PORT", "<unset>", "MASTER_PORT is not set"},
		{"bad port", "MASTER_PORT", "70000", "MASTER_PORT=70000: not a TCP port"},
		{"agent store", "TORCHELASTIC_USE_AGENT_STORE", "yes", `TORCHELASTIC_USE_AGENT_STORE="yes"`},
		{"restart count", "TORCHELASTIC_RESTART_COUNT", "-2", "TORCHELASTIC_RESTART_COUNT=-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, launched, err := fromLookup(lookupFrom(with(tc.key, tc.val)))
			if err == nil || !launched || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSingle(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var s tensor.Scope
	defer s.Close()
	c := Single()
	if c.Rank() != 0 || c.Size() != 1 {
		t.Fatalf("rank %d size %d", c.Rank(), c.Size())
	}
	x := tensor.FromSlice(&s, []float32{1, 2, 3}, nil, gotch.CPU)
	if err := c.AllReduceSum(x); err != nil {
		t.Fatal(err)
	}
	if err := c.Broadcast(x, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(); err != nil {
		t.Fatal(err)
	}
	for name, op := range map[string]func(in, out *ts.Tensor) error{"reduce_scatter": c.ReduceScatterSum, "allgather": c.AllGather} {
		out := s.Keep(ts.MustZeros([]int64{3}, gotch.Float, gotch.CPU))
		if err := op(x, out); err != nil {
			t.Fatal(err)
		}
		if got := tensor.Float64s(out); tensor.MaxAbsDiff(got, []float64{1, 2, 3}) != 0 {
			t.Errorf("%s: %v", name, got)
		}
		bad := s.Keep(ts.MustZeros([]int64{4}, gotch.Float, gotch.CPU))
		if err := op(x, bad); err == nil || !strings.Contains(err.Error(), "output has 4 elements, input 3") {
			t.Errorf("%s into 4 elements: %v", name, err)
		}
	}
	if got := tensor.Float64s(x); tensor.MaxAbsDiff(got, []float64{1, 2, 3}) != 0 {
		t.Errorf("x changed: %v", got)
	}
	b := []byte("abc")
	all, err := c.AllGatherBytes(b)
	if err != nil || len(all) != 1 || string(all[0]) != "abc" {
		t.Fatalf("%q %v", all, err)
	}
	b[0] = 'x'
	if string(all[0]) != "abc" {
		t.Error("AllGatherBytes aliases its input")
	}
	fs, err := AllGatherFloat64s(c, []float64{1.5, -2})
	if err != nil || len(fs) != 1 || tensor.MaxAbsDiff(fs[0], []float64{1.5, -2}) != 0 {
		t.Errorf("AllGatherFloat64s: %v %v", fs, err)
	}
	if m, err := AllReduceMaxFloat64(c, math.Inf(-1)); err != nil || !math.IsInf(m, -1) {
		t.Errorf("max: %v %v", m, err)
	}
	if m, _ := AllReduceMaxFloat64(c, math.NaN()); !math.IsNaN(m) {
		t.Errorf("max of NaN: %v", m)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Init with a world of one is Single.
	if c, err := Init(Env{World: 1}, Options{}); err != nil || c.Size() != 1 {
		t.Errorf("Init of one: %v %v", c, err)
	}
}
