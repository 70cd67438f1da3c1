//go:build unix

package reward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var python struct {
	once sync.Once
	path string
}

// pythonPath is the Python interpreter itself: a version manager's shim in
// front of it costs a fraction of a second per start.
func pythonPath(t *testing.T) string {
	t.Helper()
	python.once.Do(func() {
		out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
		if err == nil {
			python.path = strings.TrimSpace(string(out))
		}
	})
	if python.path == "" {
		t.Skip("no python3: the reward programs under testdata/remote are Python")
	}
	return python.path
}

// newCommandScorer is a Command running a script of testdata/remote.
func newCommandScorer(t *testing.T, c Config, script string, args ...string) *Command {
	t.Helper()
	c.Kind = KindCommand
	c.Command = append([]string{pythonPath(t), filepath.Join("testdata", "remote", script)}, args...)
	s, err := New(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Command)
}

// pidOf scores one PID rollout: the program's pid.
func pidOf(t *testing.T, s Scorer) int {
	t.Helper()
	vs, err := s.Score(context.Background(), requests("PID"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(vs[0].Reason)
	if err != nil {
		t.Fatalf("reason %q: %v", vs[0].Reason, err)
	}
	return pid
}

// gone waits up to 2 s for pid to end. A zombie counts: it is no longer
// ours to reap once reparented (a container's init may never reap it).
func gone(pid int) bool {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			return true
		}
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] == "Z" {
				return true
			}
		}
	}
	return false
}

func TestCommandExactMatch(t *testing.T) {
	s := newCommandScorer(t, Config{BatchSize: 2, Timeout: "10s"}, "exact_match.py")
	reqs := requests("so the answer is\n4", "5", "4", "", "4")
	reqs[4].Truncated = true
	vs, err := s.Score(context.Background(), reqs) // three batches
	if err != nil {
		t.Fatal(err)
	}
	want := []Verdict{
		{Reward: 1, Correct: true, Reason: "matched 4"},
		{Reward: 0, Reason: "last line '5' is not '4'"},
		{Reward: 1, Correct: true, Reason: "matched 4"},
		{Reward: 0, Reason: "last line '' is not '4'"},
		{Reward: 0, Reason: "truncated"},
	}
	if fmt.Sprint(vs) != fmt.Sprint(want) {
		t.Errorf("got  %v\nwant %v", vs, want)
	}
	if vs, err := s.Score(context.Background(), nil); err != nil || len(vs) != 0 {
		t.Errorf("no rollouts: got %v, %v", vs, err)
	}
}

func TestCommandKeepsOneProgram(t *testing.T) {
	s := newCommandScorer(t, Config{Timeout: "10s"}, "misbehave.py")
	if a, b := pidOf(t, s), pidOf(t, s); a != b {
		t.Errorf("pids %d then %d: want one program for every batch", a, b)
	}
}

func TestCommandTimeout(t *testing.T) {
	const timeout = time.Second // room for a fresh interpreter to answer on a busy machine
	t.Run("fail", func(t *testing.T) {
		s := newCommandScorer(t, Config{Timeout: timeout.String()}, "misbehave.py")
		pid := pidOf(t, s)
		start := time.Now()
		_, err := s.Score(context.Background(), requests("4", "SLEEP"))
		took := time.Since(start)
		if err == nil {
			t.Fatal("no error for a program that never replies")
		}
		for _, want := range []string{"reward program " + pythonPath(t), `rollouts 0–1 (first problem "p0")`, "no reply within 1s (reward.timeout)", "it was killed", "misbehave.py started"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q: want %q in it", err, want)
			}
		}
		if took < timeout || took > timeout+2*time.Second {
			t.Errorf("took %s: want about %s", took, timeout)
		}
		if !gone(pid) {
			t.Errorf("program %d still runs after its timeout", pid)
		}
		if again := pidOf(t, s); again == pid {
			t.Errorf("pid %d after a timeout: want a fresh program", again)
		}
	})
	t.Run("zero", func(t *testing.T) {
		s := newCommandScorer(t, Config{Timeout: timeout.String(), OnError: OnErrorZero, BatchSize: 2}, "misbehave.py")
		vs, err := s.Score(context.Background(), requests("4", "4", "SLEEP", "4", "4"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := fmt.Sprint(rewards(vs)), "[1 1 0 0 1]"; got != want {
			t.Errorf("rewards %s, want %s (the timed-out batch 0, the next batch scored again)", got, want)
		}
		for i, v := range vs {
			failed := i == 2 || i == 3
			if failed != (v.Err != "") || (failed && (v.Correct || !strings.Contains(v.Err, `rollouts 2–3 (first problem "p2"): no reply within`))) {
				t.Errorf("rollout %d: %+v", i, v)
			}
		}
	})
}

func TestCommandCrashRestarts(t *testing.T) {
	s := newCommandScorer(t, Config{Timeout: "10s"}, "misbehave.py")
	pid := pidOf(t, s)
	_, err := s.Score(context.Background(), requests("EXIT"))
	if err == nil {
		t.Fatal("no error for a program that exits")
	}
	for _, want := range []string{`rollout 0 (problem "p0")`, "its stdout ended before a reply", "it exited (exit status 3)", "a fresh one scores the next batch", "exiting on EXIT"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: want %q in it", err, want)
		}
	}
	if !gone(pid) {
		t.Errorf("program %d not reaped", pid)
	}
	if again := pidOf(t, s); again == pid {
		t.Errorf("pid %d after a crash: want a fresh program", again)
	}
}

func TestCommandBadReplies(t *testing.T) {
	s := newCommandScorer(t, Config{Timeout: "10s"}, "misbehave.py")
	for _, tc := range []struct {
		marker, want string
		restart      bool
	}{
		{"GARBAGE", `reply does not parse: invalid character 'h' in literal true (expecting 'r'): "this is not json"`, true},
		{"SHORT", "1 verdicts for 2 rollouts", true},
		{"NOREWARD", `rollout 1 (problem "p1"): verdict has no "reward"`, true},
		{"NAN", `rollout 1 (problem "p1"): reward NaN: want a finite number`, true},
		{"ERROR", "it reported an error: cannot score this batch", false},
	} {
		t.Run(tc.marker, func(t *testing.T) {
			pid := pidOf(t, s)
			_, err := s.Score(context.Background(), requests("4", tc.marker))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `rollouts 0–1 (first problem "p0")`) {
				t.Fatalf("got %v: want an error naming the batch and %q", err, tc.want)
			}
			if again := pidOf(t, s); (again != pid) != tc.restart {
				t.Errorf("pid %d, then %d: want a restart %v", pid, again, tc.restart)
			}
		})
	}
	t.Run("TWICE", func(t *testing.T) {
		if _, err := s.Score(context.Background(), requests("TWICE")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the second reply arrives
		_, err := s.Score(context.Background(), requests("4"))
		if err == nil || !strings.Contains(err.Error(), `it wrote a line no request asked for: "{\"verdicts\"`) {
			t.Fatalf("got %v: want the unasked-for reply named", err)
		}
		if vs, err := s.Score(context.Background(), requests("4")); err != nil || vs[0].Reward != 1 {
			t.Errorf("after a restart: %v, %v", vs, err)
		}
	})
}

func TestCommandArgsNotThroughShell(t *testing.T) {
	dir := t.TempDir()
	args := []string{"$(touch " + filepath.Join(dir, "a") + ")", "; touch " + filepath.Join(dir, "b"), "`touch " + filepath.Join(dir, "c") + "`", "a b", "*", `'"`}
	s := newCommandScorer(t, Config{Timeout: "10s"}, "misbehave.py", args...)
	vs, err := s.Score(context.Background(), requests("ARGV"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := json.Unmarshal([]byte(vs[0].Reason), &got); err != nil || fmt.Sprintf("%q", got) != fmt.Sprintf("%q", args) {
		t.Errorf("the program got %q (%v), want %q", got, err, args)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("a shell ran the arguments: %s holds %v", dir, entries)
	}
}

func TestCommandCloseKillsTheGroup(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newCommandScorer(t, Config{Timeout: "10s"}, "misbehave.py")
	vs, err := s.Score(context.Background(), requests("PID", "SPAWN"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(vs[0].Reason)
	child, _ := strconv.Atoi(vs[1].Reason)
	if pid == 0 || child == 0 {
		t.Fatalf("reasons %q, %q: want pids", vs[0].Reason, vs[1].Reason)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !gone(pid) {
		t.Errorf("program %d runs after Close", pid)
	}
	if !gone(child) {
		t.Errorf("its child %d runs after Close", child)
	}
	if _, err := s.Score(context.Background(), requests("4")); err == nil || !strings.Contains(err.Error(), "Score after Close") {
		t.Errorf("Score after Close: %v", err)
	}
	for deadline := time.Now().Add(time.Second); runtime.NumGoroutine() > before && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before New", n, before)
	}
}

func TestCommandCancel(t *testing.T) {
	s := newCommandScorer(t, Config{Timeout: "10s", OnError: OnErrorZero}, "misbehave.py")
	pid := pidOf(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Score(ctx, requests("SLEEP"))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Fatalf("got %v after %s: want the context's error at once, whatever on_error says", err, time.Since(start))
	}
	if !gone(pid) {
		t.Errorf("program %d runs after a cancelled batch", pid)
	}
}
