package dist

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/disttest"
	"github.com/lanpo-rl/lanpo/internal/syncbuf"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleVar); role != "" {
		os.Exit(runRole(role))
	}
	os.Exit(m.Run())
}

// launchRole runs n ranks of this test binary in role, bounded by 60 s.
func launchRole(t *testing.T, role string, n int, o LaunchOptions) (string, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	o.NProcPerNode, o.Exe, o.Args = n, exe, []string{"-test.run=^$"}
	o.Env = append([]string{roleVar + "=" + role}, o.Env...)
	o.Stdout, o.Stderr = &out, &out
	if o.Grace == 0 {
		o.Grace = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	err = Launch(ctx, o)
	t.Logf("%s × %d: %.1f s, %v\n%s", role, n, time.Since(start).Seconds(), err, out.String())
	return out.String(), err
}

func needDist(t *testing.T) {
	t.Helper()
	gloo, _, why := Available()
	disttest.Need(t, gloo, why)
}

func TestCollectives(t *testing.T) {
	needDist(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			out, err := launchRole(t, "collectives", n, LaunchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for r := 0; r < n; r++ {
				if !strings.Contains(out, fmt.Sprintf("[rank %d] ok rank %d/%d\n", r, r, n)) {
					t.Errorf("rank %d did not pass its checks", r)
				}
				for _, want := range []string{
					fmt.Sprintf("[rank %d] bad shape: dist rank %d/%d: allgather: output has %d elements, want %d = world size %d × 2\n",
						r, r, n, 2*n+1, 2*n, n),
					fmt.Sprintf("[rank %d] after: <nil>\n", r),
				} {
					if !strings.Contains(out, want) {
						t.Errorf("rank %d: no %q", r, want)
					}
				}
			}
		})
	}
}

// torchrun's agent serves the store and the ranks connect as clients under
// /worker/attempt_<restart>. Two attempts share one store, as after a
// torchrun restart: the second only works if its keys do not meet the
// first's.
func TestAgentStore(t *testing.T) {
	needDist(t)
	store, err := csrc.ServeDistStore("127.0.0.1", 0, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for attempt := 0; attempt < 2; attempt++ {
		out, err := launchRole(t, "agent", 2, LaunchOptions{MasterPort: store.Port,
			Env: []string{"TORCHELASTIC_USE_AGENT_STORE=True", "TORCHELASTIC_RESTART_COUNT=" + strconv.Itoa(attempt)}})
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		for r := 0; r < 2; r++ {
			want := fmt.Sprintf("[rank %d] agent ok rank %d prefix /worker/attempt_%d\n", r, r, attempt)
			if !strings.Contains(out, want) {
				t.Errorf("attempt %d: no %q", attempt, want)
			}
		}
	}
}

var failedAfter = regexp.MustCompile(`\[rank 0\] failed after (\d+) ms: (.*)`)

// A rank killed with SIGKILL in the middle of allreduces: the survivor's
// error names it at once (the timeout is 60 s), and the launch reports it.
func TestKilledRankIsNamed(t *testing.T) {
	needDist(t)
	out, err := launchRole(t, "kill", 2, LaunchOptions{Env: []string{"LANPO_DIST_TEST_TIMEOUT=60s"}})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Rank != 1 || ee.Signal != syscall.SIGKILL || err.Error() != "rank 1 was killed by signal 9 (SIGKILL)" {
		t.Fatalf("launch error %v, want rank 1 killed by SIGKILL", err)
	}
	m := failedAfter.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("rank 0 reported no failure")
	}
	if ms, _ := strconv.Atoi(m[1]); ms > 5000 {
		t.Errorf("the failure took %d ms to surface", ms)
	}
	if !regexp.MustCompile(`^dist rank 0/2: allreduce: .+; rank 1 \(pid \d+ on this host\) has exited$`).MatchString(m[2]) {
		t.Errorf("error %q does not name rank 1 as exited", m[2])
	}
	if !strings.Contains(out, "[rank 0] next: dist rank 0/2: allreduce: the group failed earlier") {
		t.Error("the group was used again after the failure")
	}
	if !strings.Contains(out, "[rank 0] closed in") {
		t.Error("Close did not return")
	}
}

// A rank that is alive but never joins the collective: the waiting rank
// fails after Options.Timeout (2 s), not later.
func TestSilentRankTimesOut(t *testing.T) {
	needDist(t)
	done := filepath.Join(t.TempDir(), "done")
	out, err := launchRole(t, "silent", 2, LaunchOptions{Env: []string{"LANPO_DIST_TEST_TIMEOUT=2s", "LANPO_DIST_TEST_DONE=" + done}})
	if err != nil {
		t.Fatal(err)
	}
	m := failedAfter.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("rank 0 reported no failure")
	}
	if ms, _ := strconv.Atoi(m[1]); ms < 1500 || ms > 4000 {
		t.Errorf("failed after %d ms, want about 2000", ms)
	}
	if !strings.Contains(m[2], "dist rank 0/2: allreduce: ") || !strings.Contains(m[2], "every other rank on this host is alive") {
		t.Errorf("error %q", m[2])
	}
}

func TestLaunchPrefixesAndEnvironment(t *testing.T) {
	out, err := launchRole(t, "echo", 2, LaunchOptions{Env: []string{"OMP_NUM_THREADS=7"}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(lines)
	want := []string{"[rank 0] err 0", "[rank 0] out 0 of 2 local 0 omp 7", "[rank 0] partial 0",
		"[rank 1] err 1", "[rank 1] out 1 of 2 local 1 omp 7", "[rank 1] partial 1"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// One rank fails: the launch ends at once with its exit, the other rank
// stopped by SIGTERM — or by SIGKILL after the grace period when it ignores
// SIGTERM.
func TestLaunchStopsOthersWhenOneFails(t *testing.T) {
	for _, tc := range []struct {
		role  string
		grace time.Duration
	}{{"fail", 30 * time.Second}, {"stubborn", 500 * time.Millisecond}} {
		t.Run(tc.role, func(t *testing.T) {
			start := time.Now()
			_, err := launchRole(t, tc.role, 2, LaunchOptions{Grace: tc.grace})
			if err == nil || err.Error() != "rank 1 exited with status 3" {
				t.Fatalf("got %v, want rank 1 exited with status 3", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// --max-restarts: a failed start is followed by another, every rank
// started again with TORCHELASTIC_RESTART_COUNT counting the restarts;
// when they run out the error lists every start's failure; a rank that
// exits ExitConfig or ExitNoSpace is not restarted; several
// machines are refused.
func TestLaunchRestarts(t *testing.T) {
	env := func(fails, status int) []string {
		return []string{fmt.Sprintf("LANPO_DIST_TEST_FAILS=%d", fails), fmt.Sprintf("LANPO_DIST_TEST_STATUS=%d", status)}
	}
	out, err := launchRole(t, "flaky", 2, LaunchOptions{MaxRestarts: 2, Env: env(2, 5)})
	if err != nil {
		t.Fatalf("two failures, two restarts allowed: %v", err)
	}
	for _, want := range []string{"[rank 0] start 2", "[rank 1] start 2", "rank 1 exited with status 5; restart 1 of 2", "restart 2 of 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	_, err = launchRole(t, "flaky", 2, LaunchOptions{MaxRestarts: 1, Env: env(5, 5)})
	var re *RestartsError
	if !errors.As(err, &re) || len(re.Failures) != 2 || !strings.Contains(err.Error(), "after 1 restart(s) (--max-restarts 1): start 1: rank 1 exited with status 5; start 2: rank 1 exited with status 5") {
		t.Errorf("restarts exhausted: %v", err)
	}
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Status != 5 {
		t.Errorf("the last failure is not reachable as an *ExitError: %v", err)
	}
	for _, status := range []int{ExitConfig, ExitNoSpace} {
		out, err = launchRole(t, "flaky", 2, LaunchOptions{MaxRestarts: 3, Env: env(5, status)})
		if !errors.As(err, &ee) || ee.Status != status || strings.Contains(out, "start 1") || !strings.Contains(out, "not restarting") {
			t.Errorf("exit %d (a refused config or a full disk) was restarted: %v\n%s", status, err, out)
		}
	}
	if err := Launch(context.Background(), LaunchOptions{NProcPerNode: 1, NNodes: 2, MasterAddr: "10.0.0.1", MasterPort: 29500,
		Exe: "/bin/true", MaxRestarts: 1}); err == nil || !strings.Contains(err.Error(), "one machine") {
		t.Errorf("restarts on two machines: %v", err)
	}
}

// Hang detection by progress: no rank reports for HangTimeout → every rank
// is stopped (a SIGSTOPped one too) and the rank that reported least
// recently is named with its last phase; under MaxRestarts the job starts
// again. One rank busy for longer than the timeout while the other waits
// is not a hang.
func TestLaunchDetectsAHungRank(t *testing.T) {
	start := time.Now()
	out, err := launchRole(t, "hang", 2, LaunchOptions{HangTimeout: time.Second, Grace: time.Second, Env: []string{"LANPO_DIST_TEST_FAILS=1"}})
	var he *HangError
	if !errors.As(err, &he) || he.Rank != 1 || he.Last.Phase != "rollout" || !strings.Contains(err.Error(), "rank 1 looks hung") {
		t.Fatalf("want rank 1 named as hung in rollout: %v\n%s", err, out)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the hang took %v to end", d)
	}
	out, err = launchRole(t, "hang", 2, LaunchOptions{HangTimeout: time.Second, Grace: time.Second, MaxRestarts: 1, Env: []string{"LANPO_DIST_TEST_FAILS=1"}})
	if err != nil || !strings.Contains(out, "rank 1 hung (no progress for 1s; last: step 1, rollout 8/16 sequences); restart 1 of 1") {
		t.Fatalf("a hang under --max-restarts: %v\n%s", err, out)
	}
	if out, err := launchRole(t, "hang", 2, LaunchOptions{HangTimeout: time.Second, Env: []string{"LANPO_DIST_TEST_BUSY=1"}}); err != nil {
		t.Fatalf("one rank busy (reporting) while the other waits was taken as a hang: %v\n%s", err, out)
	}
}

func TestLaunchForwardsSignals(t *testing.T) {
	dir := t.TempDir()
	go func() {
		for i := 0; i < 2000; i++ {
			if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) == 2 {
				syscall.Kill(os.Getpid(), syscall.SIGINT)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	out, err := launchRole(t, "signal", 2, LaunchOptions{Env: []string{"LANPO_DIST_TEST_DONE=" + dir}})
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 2; r++ {
		if !strings.Contains(out, fmt.Sprintf("[rank %d] rank %d got interrupt\n", r, r)) {
			t.Errorf("rank %d did not get SIGINT", r)
		}
	}
}

func TestLaunchOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		o    LaunchOptions
		want string
	}{
		{LaunchOptions{NProcPerNode: 0, Exe: "x"}, "nproc-per-node 0"},
		{LaunchOptions{NProcPerNode: 1, NNodes: 2, Exe: "x"}, "2 nodes need --master-addr and --master-port"},
		{LaunchOptions{NProcPerNode: 1, NNodes: 2, NodeRank: 2, Exe: "x"}, "node-rank 2: want 0 to 1"},
		{LaunchOptions{NProcPerNode: 1}, "no program"},
		{LaunchOptions{NProcPerNode: 1, Exe: "/nonexistent/lanpo"}, "launch: rank 0: "},
	} {
		err := Launch(context.Background(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.o, err, tc.want)
		}
	}
}
