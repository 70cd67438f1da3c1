package main

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/internal/disttest"
	"github.com/lanpo-rl/lanpo/plan"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/dist"
)

// `lanpo launch` runs this test binary as the ranks; LANPO_TEST_AS_CLI
// makes each child act as the lanpo command (TestMain).
func TestLaunchCommand(t *testing.T) {
	t.Setenv("LANPO_TEST_AS_CLI", "1")
	t.Run("runs the command on every rank", func(t *testing.T) {
		out, err := runApp(t, "launch", "--nproc-per-node", "2", "--", "version")
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, want := range []string{"[rank 0] lanpo dev\n", "[rank 1] lanpo dev\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in %q", want, out)
			}
		}
	})
	t.Run("a failing rank fails the launch", func(t *testing.T) {
		out, err := runApp(t, "launch", "--nproc-per-node", "2", "--", "--log-format", "json", "nosuchcommand")
		var ec cli.ExitCoder
		if !errors.As(err, &ec) || ec.ExitCode() == 0 || !strings.Contains(err.Error(), "launch: rank ") ||
			!strings.Contains(err.Error(), "exited with status") {
			t.Fatalf("got %v: %s", err, out)
		}
	})
	t.Run("more ranks than cores", func(t *testing.T) {
		_, err := runApp(t, "launch", "--nproc-per-node", "1000", "--", "version")
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--oversubscribe") {
			t.Fatalf("1000 ranks: %v", err)
		}
	})
	t.Run("no command", func(t *testing.T) {
		_, err := runApp(t, "launch", "--nproc-per-node", "2")
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "no command") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestBenchAllreduce(t *testing.T) {
	gloo, _, why := dist.Available()
	disttest.Need(t, gloo, why)
	t.Setenv("LANPO_TEST_AS_CLI", "1")
	out, err := runApp(t, "bench", "allreduce", "--max-bytes", "1024", "--json")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var r dist.AllReduceBench
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if r.World != 2 || len(r.Sizes) != 5 || r.Sizes[0].Bytes != 4 || r.Sizes[4].Bytes != 1024 || r.BarrierUS <= 0 {
		t.Fatalf("report %+v", r)
	}
	for _, s := range r.Sizes {
		if s.LatencyUS <= 0 || s.BusBW <= 0 || s.CopyBW <= 0 || s.Ratio <= 0 {
			t.Errorf("size %d: %+v", s.Bytes, s)
		}
	}
}

// ZeRO measured, not assumed: on each of 2 ranks ZeRO-1 holds half of
// plain AdamW's state and peaks lower over a whole update; ZeRO-2, whose
// checkpointed backward reduce-scatters each layer's gradients as it
// completes them, peaks lower still.
func TestBenchMemoryZero(t *testing.T) {
	gloo, _, why := dist.Available()
	disttest.Need(t, gloo, why)
	t.Setenv("LANPO_TEST_AS_CLI", "1")
	out, err := runApp(t, "launch", "--nproc-per-node", "2", "--", "bench", "memory", "--zero", "--rows", "1", "--seq", "64", "--vocab", "4096", "--json")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var r struct{ Ranks []plan.ZeroMemory }
	line := strings.TrimPrefix(strings.TrimSpace(out), "[rank 0] ")
	if err := json.Unmarshal([]byte(line), &r); err != nil || len(r.Ranks) != 6 {
		t.Fatalf("%q: %v", out, err)
	}
	for rank := 0; rank < 2; rank++ {
		plain, z1, z2 := r.Ranks[3*rank], r.Ranks[3*rank+1], r.Ranks[3*rank+2]
		t.Logf("rank %d: peak MiB plain %.1f, ZeRO-1 %.1f, ZeRO-2 %.1f", rank, float64(plain.Peak)/(1<<20), float64(z1.Peak)/(1<<20), float64(z2.Peak)/(1<<20))
		if plain.Rank != rank || z2.Mode != "ZeRO-2 per layer" || 2*z1.State != plain.State {
			t.Errorf("rank %d: %+v %+v", rank, plain, z1)
		}
		if !(z2.Peak < z1.Peak && z1.Peak < plain.Peak) {
			t.Errorf("rank %d: peaks plain %d, ZeRO-1 %d, ZeRO-2 %d: sharding did not lower them in turn", rank, plain.Peak, z1.Peak, z2.Peak)
		}
	}
}

// TestLaunchBuiltinModel: the README's first multi-process example — two
// ranks on configs/tiny-grpo.yaml, whose built-in model is written into
// run_dir — runs (rank 0 writes run_dir's files, the other waits).
func TestLaunchBuiltinModel(t *testing.T) {
	gloo, _, why := dist.Available()
	disttest.Need(t, gloo, why)
	t.Setenv("LANPO_TEST_AS_CLI", "1")
	run := filepath.Join(t.TempDir(), "run")
	out, err := runApp(t, launchArgs(2, []string{"--log-level", "error", "train", "--config", "../../configs/tiny-grpo.yaml",
		"--set", "run_dir=" + run, "--set", "data.train=../../configs/data/tiny-arith.jsonl", "--set", "total_steps=1"})...)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if n := metricLines(run); n != 1 {
		t.Fatalf("%d metric lines, want 1: %s", n, out)
	}
}
