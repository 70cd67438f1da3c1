package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/internal/disttest"
	"github.com/lanpo-rl/lanpo/model"
)

// Real multi-process data parallelism: `lanpo launch` starts ranks of this
// test binary acting as lanpo (LANPO_TEST_AS_CLI), which join a Gloo group
// over TCP and train the warmed tiny model.

const dpSteps = 6

func dpArgs(t *testing.T, run string, extra ...string) []string {
	return append([]string{"--log-level", "error", "train", "--config", "../../configs/tiny-grpo.yaml",
		"--set", "run_dir=" + run, "--set", "model=" + warmTiny(t),
		"--set", "data.train=../../configs/data/tiny-arith.jsonl", "--set", "total_steps=" + strconv.Itoa(dpSteps),
		"--set", "checkpoint.every=2", "--set", "checkpoint.keep=5"}, extra...)
}

func launchArgs(n int, args []string, flags ...string) []string {
	return append(append(append([]string{"launch", "--nproc-per-node", strconv.Itoa(n), "--grace", "5s"}, flags...), "--"), args...)
}

// f32Weights reads a checkpoint's float32 weights, by name.
func f32Weights(t *testing.T, ckpt string) map[string][]float32 {
	t.Helper()
	f, err := model.OpenSafetensors(filepath.Join(ckpt, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]float32{}
	for _, ti := range f.Tensors() {
		b, _, err := f.Bytes(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if string(ti.DType) != "F32" {
			t.Fatalf("%s: %s is %s, want F32", ckpt, ti.Name, ti.DType)
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		out[ti.Name] = v
	}
	return out
}

// maxDiff is the largest |a-b| over every weight.
func maxDiff(t *testing.T, a, b map[string][]float32) float64 {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d tensors against %d", len(a), len(b))
	}
	m := 0.0
	for name, x := range a {
		y, ok := b[name]
		if !ok || len(y) != len(x) {
			t.Fatalf("tensor %s missing or resized", name)
		}
		for i := range x {
			m = max(m, math.Abs(float64(x[i])-float64(y[i])))
		}
	}
	return m
}

type stepMetrics struct {
	Step       int     `json:"step"`
	Loss       float64 `json:"loss"`
	RewardMean float64 `json:"reward_mean"`
	Tokens     float64 `json:"tokens_generated"`
}

func readMetrics(t *testing.T, run string) []stepMetrics {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(run, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []stepMetrics
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m stepMetrics
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestDataParallelTraining: two ranks (ZeRO-2 over Gloo) take the same
// steps as one process — the same samples and rewards, the loss and the
// weights to float32 summation order —; a kill -9 of one rank stops the
// job with that rank named and leaves the last checkpoint whole; resuming
// it on two ranks ends bit for bit where an uninterrupted two-rank run
// ends.
func TestDataParallelTraining(t *testing.T) {
	gloo, _, why := dist.Available()
	disttest.Need(t, gloo, why)
	t.Setenv("LANPO_TEST_AS_CLI", "1")
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one"), filepath.Join(dir, "two")
	if out, err := runWithStdin(t, "", dpArgs(t, one)...); err != nil {
		t.Fatalf("one rank: %v: %s", err, out)
	}
	start := time.Now()
	if out, err := runApp(t, launchArgs(2, dpArgs(t, two, "--set", "dist.zero_stage=2"))...); err != nil {
		t.Fatalf("two ranks: %v: %s", err, out)
	}
	t.Logf("two ranks, %d steps: %.1f s", dpSteps, time.Since(start).Seconds())

	m1, m2 := readMetrics(t, one), readMetrics(t, two)
	if len(m1) != dpSteps || len(m2) != dpSteps {
		t.Fatalf("%d and %d metric lines (rank 0 alone writes them), want %d", len(m1), len(m2), dpSteps)
	}
	// Step 1 samples from the same weights with the same per-prompt
	// streams, so the batches are identical.
	if m1[0].RewardMean != m2[0].RewardMean || m1[0].Tokens != m2[0].Tokens {
		t.Errorf("step 1: one rank %+v, two ranks %+v: not the same samples", m1[0], m2[0])
	}
	if d := math.Abs(m1[0].Loss - m2[0].Loss); d > 1e-5*max(1, math.Abs(m1[0].Loss)) {
		t.Errorf("step 1 loss: one rank %g, two ranks %g", m1[0].Loss, m2[0].Loss)
	}
	w0 := f32Weights(t, warmTiny(t))
	w1 := f32Weights(t, filepath.Join(one, "checkpoints", "step-000002"))
	w2 := f32Weights(t, filepath.Join(two, "checkpoints", "step-000002"))
	const lr = 1e-3
	moved, apart := maxDiff(t, w0, w1), maxDiff(t, w1, w2)
	t.Logf("after 2 steps: weights moved by up to %.3g; one and two ranks differ by up to %.3g (lr %g)", moved, apart, lr)
	if moved < lr/2 {
		t.Fatalf("training moved the weights by only %g: the comparison says nothing", moved)
	}
	if apart > 0.05*lr {
		t.Errorf("two ranks end step 2 %g away from one rank (allowed: 5%% of lr)", apart)
	}

	// A rank killed, stopped or hung 3 steps in: without restarts the
	// launcher stops the job naming the rank and a later --resume auto
	// continues; with --max-restarts the launcher restarts it and the ranks
	// resume by themselves; a SIGSTOPped rank (alive, its sockets open, the
	// other rank waiting in a collective) is found by --hang-timeout. Each
	// ends bit for bit where the uninterrupted two-rank run ends.
	for _, tc := range []struct {
		name, run string
		sig       syscall.Signal
		flags     []string
		want      string // in the launcher's output (or, without restarts, its error)
	}{
		{"kill -9 of a rank, then resume", "killed", syscall.SIGKILL, nil, "rank 1 was killed"},
		{"kill -9 of a rank under --max-restarts", "restarted", syscall.SIGKILL, []string{"--max-restarts", "1"},
			"rank 1 was killed by signal 9 (SIGKILL); restart 1 of 1"},
		{"SIGSTOP of a rank under --hang-timeout", "stopped", syscall.SIGSTOP, []string{"--max-restarts", "1", "--hang-timeout", "3s"},
			"rank 1 looks hung"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := filepath.Join(dir, tc.run)
			done := make(chan error, 1)
			var out string
			go func() {
				var err error
				out, err = runApp(t, launchArgs(2, dpArgs(t, run, "--set", "dist.zero_stage=2"), tc.flags...)...)
				done <- err
			}()
			deadline := time.Now().Add(2 * time.Minute)
			for metricLines(run) < 3 {
				if time.Now().After(deadline) {
					t.Fatal("no 3 steps after 2 minutes")
				}
				time.Sleep(10 * time.Millisecond)
			}
			signalledAt := metricLines(run)
			syscall.Kill(rankPID(t, 1), tc.sig)
			var err error
			select {
			case err = <-done:
			case <-time.After(3 * time.Minute):
				t.Fatalf("the job did not end 3 minutes after rank 1 got signal %d", tc.sig)
			}
			t.Logf("signalled after %d steps; launch: %v\n%s", signalledAt, err, out)
			if tc.flags == nil {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("launch returned %v, want an error naming rank 1 and the signal: %s", err, out)
				}
				n := metricLines(run)
				if n >= dpSteps {
					t.Fatalf("the job finished all %d steps before the kill took effect", n)
				}
				last := fmt.Sprintf("step-%06d", 2*(n/2))
				if _, err := os.Stat(filepath.Join(run, "checkpoints", last, "manifest.json")); err != nil {
					t.Fatalf("after %d steps the last checkpoint %s is not whole: %v", n, last, err)
				}
				if out, err := runApp(t, launchArgs(2, dpArgs(t, run, "--set", "dist.zero_stage=2", "--resume", "auto"))...); err != nil {
					t.Fatalf("resume: %v: %s", err, out)
				}
			} else {
				if err != nil {
					t.Fatalf("launch %v: %v\n%s", tc.flags, err, out)
				}
				if !strings.Contains(out, tc.want) || !strings.Contains(out, "restart 1 of 1") || !strings.Contains(out, "launch: restart 1: rank 0 resumed at step") {
					t.Errorf("the launcher's output lacks %q and the restart:\n%s", tc.want, out)
				}
				if n := metricLines(run); n != dpSteps {
					t.Errorf("%d metric lines after the restart, want %d (no step lost or repeated)", n, dpSteps)
				}
			}
			final := fmt.Sprintf("step-%06d", dpSteps)
			a, _ := os.ReadFile(filepath.Join(two, "checkpoints", final, "model.safetensors"))
			b, err := os.ReadFile(filepath.Join(run, "checkpoints", final, "model.safetensors"))
			if err != nil || len(a) == 0 || !bytes.Equal(a, b) {
				t.Fatalf("the two-rank run ended with other weights than the uninterrupted one (%v)", err)
			}
		})
	}
}

// rankPID finds the child of this process that runs as rank r.
func rankPID(t *testing.T, r int) int {
	t.Helper()
	if pid := childRank(os.Getpid(), r); pid != 0 {
		return pid
	}
	t.Fatalf("no child process runs rank %d", r)
	return 0
}
