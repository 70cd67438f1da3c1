package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/eval"
	"github.com/lanpo-rl/lanpo/internal/syncbuf"
)

// The chaos test: a 2-rank LANPO run of the tiny model under
// `lanpo launch --max-restarts 20 --hang-timeout 5s` while a driver injects
// seeded faults — SIGKILL or SIGTERM to a rank in a chosen phase (rollout,
// update, pool: the summaries, checkpoint), one SIGSTOP left in place (a
// hung rank), one flipped byte in the newest checkpoint followed by a
// SIGKILL — must end with the same weights, optimizer state, pool, trainer
// state (data cursor) and metrics as an uninterrupted run, bit for bit.
//
// The driver proves where each fault landed: it stops the chosen rank
// (SIGSTOP), reads the phase the rank last reported to the launcher
// (dist.ProgressFile: written on the rank's own thread as a phase begins),
// and only then delivers the fault; a rank that moved on is let go and
// caught again.
//
// make test runs the short case (4 faults, one of each kind); make chaos
// runs LANPO_CHAOS=full: 12 faults, every kind and every phase at least
// once (LANPO_CHAOS_SEED picks another draw; the fault log is written to
// LANPO_CHAOS_LOG when set).

type fault struct {
	Kind  string `json:"kind"` // kill, term, stop, corrupt
	Phase string `json:"phase"`
	// what happened
	Rank  int    `json:"rank"`
	Step  int    `json:"step"`
	Seen  string `json:"phase_seen"` // the phase the stopped rank had reported
	File  string `json:"file,omitempty"`
	After string `json:"after"` // time since the chaotic run began
}

func chaosPlan(full bool, rng *rand.Rand) []fault {
	if !full {
		return []fault{{Kind: "kill", Phase: "rollout"}, {Kind: "term", Phase: "update"}, {Kind: "stop", Phase: "rollout"},
			{Kind: "corrupt", Phase: "pool"}}
	}
	var plan []fault
	for _, k := range []string{"kill", "term"} {
		for _, p := range []string{"rollout", "update", "pool", "checkpoint"} {
			plan = append(plan, fault{Kind: k, Phase: p})
		}
	}
	phases := []string{"rollout", "update", "pool", "checkpoint"}
	plan = append(plan, fault{Kind: "stop", Phase: phases[rng.Intn(4)]}, fault{Kind: "corrupt", Phase: phases[rng.Intn(3)]},
		fault{Kind: []string{"kill", "term"}[rng.Intn(2)], Phase: phases[rng.Intn(4)]},
		fault{Kind: []string{"kill", "term"}[rng.Intn(2)], Phase: phases[rng.Intn(4)]})
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	return plan
}

func TestChaos(t *testing.T) {
	full := os.Getenv("LANPO_CHAOS") == "full"
	seed := int64(1)
	if s := os.Getenv("LANPO_CHAOS_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	rng := rand.New(rand.NewSource(seed))
	plan := chaosPlan(full, rng)
	steps := 2*len(plan) + 4
	dir := t.TempDir()
	args := func(run string) []string {
		return []string{"--log-level", "warn", "train", "--config", "../../configs/tiny-lanpo.yaml",
			"--set", "run_dir=" + run, "--set", "model=" + warmTiny(t), "--set", "total_steps=" + strconv.Itoa(steps),
			"--set", "data.train=../../configs/data/tiny-arith-lanpo.jsonl", "--set", "checkpoint.every=1", "--set", "checkpoint.keep=3",
			"--set", "log.phase_every=0"}
	}
	start := func(run, progress string, flags ...string) (*exec.Cmd, *syncbuf.Buffer) {
		cmd := exec.Command(os.Args[0], append(append(append([]string{"launch", "--nproc-per-node", "2", "--grace", "5s"}, flags...), "--"), args(run)...)...)
		cmd.Env = append(os.Environ(), "LANPO_TEST_AS_CLI=1", dist.ProgressDirVar+"="+progress)
		out := &syncbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out
	}
	// The uninterrupted run.
	ref := filepath.Join(dir, "straight")
	cmd, out := start(ref, filepath.Join(dir, "progress-straight"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the uninterrupted run: %v\n%s", err, out)
	}
	// The chaotic run.
	run, progress := filepath.Join(dir, "chaos"), filepath.Join(dir, "progress")
	began := time.Now()
	cmd, out = start(run, progress, "--max-restarts", "20", "--hang-timeout", "5s")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	}()
	var log []fault
	for i, f := range plan {
		if err := inject(t, &f, cmd.Process.Pid, run, progress, rng, exited, 90*time.Second); err != nil {
			t.Fatalf("fault %d (%s in %s): %v\nfaults so far: %+v\n%s", i+1, f.Kind, f.Phase, err, log, out)
		}
		f.After = time.Since(began).Round(time.Millisecond).String()
		log = append(log, f)
		t.Logf("fault %d: %s of rank %d in %s at step %d (the stopped rank had reported %q)%s", i+1, f.Kind, f.Rank, f.Phase, f.Step, f.Seen,
			map[bool]string{true: ", corrupting " + f.File, false: ""}[f.File != ""])
		// Wait for the restart this fault causes before the next one.
		deadline := time.Now().Add(60 * time.Second)
		for strings.Count(out.String(), "; restart ") < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("no restart a minute after fault %d:\n%s", i+1, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the chaotic run: %v\n%s", err, out)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the chaotic run did not end 3 minutes after the last fault:\n%s", out)
	}
	if p := os.Getenv("LANPO_CHAOS_LOG"); p != "" {
		js, _ := json.MarshalIndent(log, "", "  ")
		os.WriteFile(p, js, 0o644)
	}
	// Every kind, and for full runs every phase, at least once.
	kinds, phases := map[string]bool{}, map[string]bool{}
	for _, f := range log {
		kinds[f.Kind] = true
		if f.Kind == "kill" || f.Kind == "term" {
			phases[f.Phase] = true
		}
		if f.Seen != f.Phase {
			t.Errorf("fault %+v landed in %q, not the phase it was meant for", f, f.Seen)
		}
	}
	if len(kinds) != 4 || full && (len(log) < 10 || len(phases) != 4) {
		t.Errorf("faults: %d, kinds %v, phases %v", len(log), kinds, phases)
	}
	// The corrupted checkpoint was set aside with its reason, not loaded.
	if aside, _ := filepath.Glob(filepath.Join(run, "set-aside", "*", "checkpoints", "step-*.corrupt.txt")); len(aside) != 1 {
		t.Errorf("set aside as corrupt: %v, want the one checkpoint the driver corrupted", aside)
	}
	t.Logf("%d faults over %d steps in %s; launcher:\n%s", len(log), steps, time.Since(began).Round(time.Second), launcherLines(out.String()))
	final := fmt.Sprintf("step-%06d", steps)
	for _, f := range []string{"model.safetensors", "optimizer.safetensors", "optimizer.json", "trainer_state.json", "pool.jsonl"} {
		a, err := os.ReadFile(filepath.Join(ref, "checkpoints", final, f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(run, "checkpoints", final, f))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from the uninterrupted run's (%v)", f, err)
		}
	}
	if ma, mb := stableMetrics(t, ref), stableMetrics(t, run); len(ma) != steps || !reflect.DeepEqual(ma, mb) {
		t.Errorf("metrics differ (%d and %d lines):\n%v\n%v", len(ma), len(mb), ma, mb)
	}
}

// launcherLines are the launcher's own lines of its output.
func launcherLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "launch: ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// inject waits until a rank reports f.Phase, stops it, checks the phase it
// reported, and delivers f; it fills in f's rank, step and seen phase.
func inject(t *testing.T, f *fault, launcher int, run, progress string, rng *rand.Rand, exited <-chan error, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("the run ended (%v) before the fault", err)
		default:
		}
		all := readReports(progress)
		var in []int
		for r, p := range all {
			if p.Phase == f.Phase {
				in = append(in, r)
			}
		}
		if len(in) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		r := in[rng.Intn(len(in))]
		pid := childRank(launcher, r)
		if pid == 0 {
			continue
		}
		syscall.Kill(pid, syscall.SIGSTOP)
		waitStopped(pid)
		now := readReports(progress)[r]
		if now.Phase != f.Phase {
			syscall.Kill(pid, syscall.SIGCONT) // it moved on: catch it next time
			continue
		}
		f.Rank, f.Step, f.Seen = r, now.Step, now.Phase
		switch f.Kind {
		case "kill":
			syscall.Kill(pid, syscall.SIGKILL)
		case "term":
			syscall.Kill(pid, syscall.SIGTERM)
			syscall.Kill(pid, syscall.SIGCONT)
		case "stop": // left stopped: the launcher's hang detection ends it
		case "corrupt":
			ckpts, _ := filepath.Glob(filepath.Join(run, "checkpoints", "step-*", "manifest.json"))
			if len(ckpts) < 2 {
				// The resume falls back to the previous checkpoint; without
				// one it stops the job (exit 2) rather than start over.
				syscall.Kill(pid, syscall.SIGCONT)
				continue
			}
			newest := filepath.Dir(ckpts[len(ckpts)-1])
			f.File = filepath.Join(filepath.Base(newest), "optimizer.safetensors")
			path := filepath.Join(newest, "optimizer.safetensors")
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0x10
			if err := os.WriteFile(path, b, 0o644); err != nil {
				return err
			}
			syscall.Kill(pid, syscall.SIGKILL) // the restart must resume past the corrupt checkpoint
		}
		return nil
	}
	return fmt.Errorf("no rank reported %q within %s", f.Phase, within)
}

func readReports(dir string) map[int]dist.Progress {
	out := map[int]dist.Progress{}
	files, _ := filepath.Glob(filepath.Join(dir, "rank-*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var p dist.Progress
		if json.Unmarshal(b, &p) == nil {
			out[p.Rank] = p
		}
	}
	return out
}

// childRank is the pid of the process parent started to run rank r (its
// environment has RANK=r), or 0.
func childRank(parent, r int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so split after ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) || f[0] == "Z" {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		for _, kv := range bytes.Split(env, []byte{0}) {
			if string(kv) == "RANK="+strconv.Itoa(r) {
				return pid
			}
		}
	}
	return 0
}

// waitStopped waits (briefly) until the kernel shows pid stopped.
func waitStopped(pid int) {
	for i := 0; i < 200; i++ {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && (f[0] == "T" || f[0] == "t") {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// stableMetrics reads a run's metrics.jsonl without its timing fields.
func stableMetrics(t *testing.T, runDir string) []map[string]any {
	t.Helper()
	rows, err := eval.ReadMetrics(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rows {
		delete(m, "seconds")
		delete(m, "tokens_per_s")
	}
	return rows
}
