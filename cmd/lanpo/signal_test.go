package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain lets a test run this binary as the lanpo command in a child
// process (LANPO_TEST_AS_CLI=1), so signals can be sent to a real run.
func TestMain(m *testing.M) {
	if os.Getenv("LANPO_TEST_AS_CLI") == "1" {
		main()
		os.Exit(0)
	}
	code := m.Run()
	if warm.dir != "" {
		os.RemoveAll(warm.dir)
	}
	os.Exit(code)
}

// warm is the built-in tiny model after 60 SFT steps (`lanpo sft`), made
// once for the package's tests: from random weights GRPO earns no reward
// and its updates are zero, so a resume test would compare weights that
// never move.
var warm struct {
	once sync.Once
	dir  string
	ckpt string
	err  error
}

func warmTiny(t *testing.T) string {
	t.Helper()
	warm.once.Do(func() {
		if warm.dir, warm.err = os.MkdirTemp("", "lanpo-warm-tiny-"); warm.err != nil {
			return
		}
		run := filepath.Join(warm.dir, "sft")
		var out string
		out, warm.err = runWithStdin(t, "", "--log-level", "error", "sft", "--config", "../../configs/tiny-sft.yaml", "--set", "run_dir="+run,
			"--set", "data.train=../../configs/data/tiny-arith-sft.jsonl", "--set", "data.eval=", "--set", "total_steps=60",
			"--set", "checkpoint.every=0", "--set", "checkpoint.keep=1")
		if warm.err != nil {
			warm.err = fmt.Errorf("%w: %s", warm.err, out)
		}
		warm.ckpt = filepath.Join(run, "checkpoints", "step-000060")
	})
	if warm.err != nil {
		t.Fatalf("warming the tiny model: %v", warm.err)
	}
	return warm.ckpt
}

const signalSteps = "40"

func trainArgs(t *testing.T, run string) []string {
	return []string{"--log-level", "error", "train", "--config", "../../configs/tiny-grpo.yaml", "--set", "run_dir=" + run, "--set", "model=" + warmTiny(t),
		"--set", "data.train=../../configs/data/tiny-arith.jsonl", "--set", "total_steps=" + signalSteps, "--set", "checkpoint.every=0"}
}

// startTraining starts `lanpo train` as a child process and waits until it
// has finished at least minSteps steps.
func startTraining(t *testing.T, run string, minSteps int) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], trainArgs(t, run)...)
	cmd.Env = append(os.Environ(), "LANPO_TEST_AS_CLI=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for metricLines(run) < minSteps {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no %d steps after 2 minutes: %s", minSteps, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd, &stderr
}

func metricLines(run string) int {
	b, _ := os.ReadFile(filepath.Join(run, "metrics.jsonl"))
	return bytes.Count(b, []byte("\n"))
}

func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// finalWeights runs --resume auto to the end and returns the last
// checkpoint's weights.
func finalWeights(t *testing.T, run, resume string) []byte {
	t.Helper()
	args := trainArgs(t, run)
	if resume != "" {
		args = append(args, "--resume", resume)
	}
	if out, err := runWithStdin(t, "", args...); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(run, "checkpoints", "step-0000"+signalSteps, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSecondSignalSaysWhatIsKept: before any checkpoint a second signal
// says nothing is kept (it used to claim "the newest complete checkpoint
// is intact" then too).
func TestSecondSignalSaysWhatIsKept(t *testing.T) {
	run := t.TempDir()
	if m := secondSignal(run); !strings.Contains(m, "no checkpoint of "+run+" has been saved yet") {
		t.Fatalf("no checkpoint: %q", m)
	}
	if out, err := runWithStdin(t, "", append(trainArgs(t, run), "--set", "total_steps=1")...); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if m := secondSignal(run); !strings.Contains(m, filepath.Join(run, "checkpoints", "step-000001")+", is intact") {
		t.Fatalf("after a checkpoint: %q", m)
	}
}

// TestSIGTERMSavesAndResumes: SIGTERM during a run finishes the step, saves
// its checkpoint and exits 130; --resume auto then ends bit for bit where an
// uninterrupted run ends. Two signals in a row exit 130 at once; whatever
// checkpoint is left is complete, and resuming still ends at the same
// weights.
func TestSIGTERMSavesAndResumes(t *testing.T) {
	straight := finalWeights(t, filepath.Join(t.TempDir(), "straight"), "")
	if init, _ := os.ReadFile(filepath.Join(warmTiny(t), "model.safetensors")); bytes.Equal(init, straight) {
		t.Fatal("training left the weights unchanged: the test compares nothing")
	}
	t.Run("one signal", func(t *testing.T) {
		run := filepath.Join(t.TempDir(), "run")
		cmd, _ := startTraining(t, run, 3)
		cmd.Process.Signal(syscall.SIGTERM)
		if code := exitCode(t, cmd); code != 130 {
			t.Fatalf("exit code %d, want 130", code)
		}
		n := metricLines(run)
		if n < 3 || n >= 40 {
			t.Fatalf("%d steps done at the signal", n)
		}
		entries, _ := os.ReadDir(filepath.Join(run, "checkpoints"))
		if len(entries) != 1 || entries[0].Name() != fmt.Sprintf("step-%06d", n) {
			t.Fatalf("checkpoints %v after %d steps", entries, n)
		}
		if !bytes.Equal(finalWeights(t, run, "auto"), straight) {
			t.Fatal("the resumed run ended with other weights than the straight run")
		}
	})
	t.Run("two signals", func(t *testing.T) {
		run := filepath.Join(t.TempDir(), "run")
		cmd, stderr := startTraining(t, run, 2)
		start := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Process.Signal(syscall.SIGTERM)
		if code := exitCode(t, cmd); code != 130 {
			t.Fatalf("exit code %d, want 130", code)
		}
		t.Logf("exited %v after the signals", time.Since(start))
		// The kernel may merge two signals sent at once; when the second
		// was seen, its message matches what is kept.
		if strings.Contains(stderr.String(), "second signal") && !strings.Contains(stderr.String(), secondSignal(run)) {
			t.Fatalf("stderr %q, want %q", stderr.String(), secondSignal(run))
		}
		if !bytes.Equal(finalWeights(t, run, "auto"), straight) {
			t.Fatal("resuming after two signals ended with other weights than the straight run")
		}
	})
}
