package dist

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/lanpo-rl/lanpo/internal/tensor"
)

// The multi-process tests start this test binary once per rank (through
// Launch) with LANPO_DIST_TEST_ROLE naming what the child does; TestMain
// runs the role instead of the tests. A role prints what the parent checks
// and exits: 0 when its own checks passed, 1 with a FAIL line otherwise.

const roleVar = "LANPO_DIST_TEST_ROLE"

var roles = map[string]func() error{
	"collectives": roleCollectives,
	"agent":       roleAgent,
	"kill":        roleKill,
	"silent":      roleSilent,
	"echo":        roleEcho,
	"fail":        roleFail,
	"stubborn":    roleStubborn,
	"signal":      roleSignal,
	"flaky":       roleFlaky,
	"hang":        roleHang,
}

func runRole(name string) int {
	f, ok := roles[name]
	if !ok {
		fmt.Println("FAIL: unknown role", name)
		return 1
	}
	// All torch work of a child on one OS thread (CONTRIBUTING.md, Threads).
	runtime.LockOSThread()
	if err := f(); err != nil {
		fmt.Println("FAIL:", err)
		return 1
	}
	return 0
}

// join reads the launch environment and joins the group; the timeout comes
// from LANPO_DIST_TEST_TIMEOUT (a Go duration, default 20 s).
func join() (Comm, Env, error) {
	env, launched, err := FromEnv()
	if err != nil || !launched {
		return nil, env, fmt.Errorf("FromEnv: launched %v, %v", launched, err)
	}
	timeout := 20 * time.Second
	if s := os.Getenv("LANPO_DIST_TEST_TIMEOUT"); s != "" {
		if timeout, err = time.ParseDuration(s); err != nil {
			return nil, env, err
		}
	}
	c, err := Init(env, Options{Timeout: timeout, Device: gotch.CPU})
	return c, env, err
}

func expect(what string, got, want []float64) error {
	if tensor.MaxAbsDiff(got, want) != 0 {
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	return nil
}

// roleCollectives checks every collective's values; rank r contributes
// values made from r so each result is known in closed form.
func roleCollectives() error {
	c, _, err := join()
	if err != nil {
		return err
	}
	defer c.Close()
	r, w := c.Rank(), c.Size()
	fr, fw := float64(r), float64(w)
	sum := fw * (fw + 1) / 2 // Σ_r (r+1)
	var s tensor.Scope
	defer s.Close()

	for _, dt := range []gotch.DType{gotch.Float, gotch.Double} {
		x := s.Keep(tensor.FromSlice(&s, []float64{fr + 1, 2 * (fr + 1), 3 * (fr + 1)}, nil, gotch.CPU).MustTotype(dt, false))
		if err := c.AllReduceSum(x); err != nil {
			return err
		}
		if err := expect(fmt.Sprintf("allreduce %v", dt), tensor.Float64s(x), []float64{sum, 2 * sum, 3 * sum}); err != nil {
			return err
		}
	}

	root := w - 1
	b := tensor.FromSlice(&s, []float32{float32(r), float32(r), float32(r), float32(r)}, nil, gotch.CPU)
	if err := c.Broadcast(b, root); err != nil {
		return err
	}
	fRoot := float64(root)
	if err := expect("broadcast", tensor.Float64s(b), []float64{fRoot, fRoot, fRoot, fRoot}); err != nil {
		return err
	}

	// AllGather: chunk q of out is rank q's input.
	in := tensor.FromSlice(&s, []float32{10 * float32(r), 10*float32(r) + 1}, nil, gotch.CPU)
	out := s.Keep(ts.MustZeros([]int64{int64(2 * w)}, gotch.Float, gotch.CPU))
	if err := c.AllGather(in, out); err != nil {
		return err
	}
	var want []float64
	for q := 0; q < w; q++ {
		want = append(want, 10*float64(q), 10*float64(q)+1)
	}
	if err := expect("allgather", tensor.Float64s(out), want); err != nil {
		return err
	}

	// ReduceScatter: in[i] = (r+1)(i+1); out = Σ_r of chunk r.
	const n = 3
	vals := make([]float64, w*n)
	for i := range vals {
		vals[i] = (fr + 1) * float64(i+1)
	}
	rsIn := tensor.FromSlice(&s, vals, nil, gotch.CPU)
	rsOut := s.Keep(ts.MustZeros([]int64{n}, gotch.Double, gotch.CPU))
	if err := c.ReduceScatterSum(rsIn, rsOut); err != nil {
		return err
	}
	want = want[:0]
	for i := r * n; i < (r+1)*n; i++ {
		want = append(want, sum*float64(i+1))
	}
	if err := expect("reduce_scatter", tensor.Float64s(rsOut), want); err != nil {
		return err
	}
	if err := expect("reduce_scatter input", tensor.Float64s(rsIn), vals); err != nil {
		return err
	}

	// Variable lengths, rank 0's empty.
	mine := bytes.Repeat([]byte{byte('a' + r)}, r)
	all, err := c.AllGatherBytes(mine)
	if err != nil {
		return err
	}
	for q := 0; q < w; q++ {
		if !bytes.Equal(all[q], bytes.Repeat([]byte{byte('a' + q)}, q)) || all[q] == nil {
			return fmt.Errorf("allgather bytes: entry %d is %q", q, all[q])
		}
	}
	if empty, err := c.AllGatherBytes(nil); err != nil || len(empty) != w || len(empty[w-1]) != 0 {
		return fmt.Errorf("allgather of empty bytes: %q, %v", empty, err)
	}
	fs, err := AllGatherFloat64s(c, make([]float64, r))
	if err != nil || len(fs) != w || len(fs[w-1]) != w-1 {
		return fmt.Errorf("AllGatherFloat64s: %v, %v", fs, err)
	}
	m, err := AllReduceMaxFloat64(c, 1.5*fr-1)
	if err != nil || m != 1.5*(fw-1)-1 {
		return fmt.Errorf("AllReduceMaxFloat64 = %v, %v; want %v", m, err, 1.5*(fw-1)-1)
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	fmt.Printf("ok rank %d/%d\n", r, w)

	// A wrong shape is refused before anything is sent, naming the rank
	// and the op, and the group stays usable (every rank makes the same
	// mistake, so none waits for the others).
	bad := s.Keep(ts.MustZeros([]int64{int64(2*w + 1)}, gotch.Float, gotch.CPU))
	err = c.AllGather(in, bad)
	fmt.Printf("bad shape: %v\n", err)
	fmt.Printf("after: %v\n", c.Barrier())
	return nil
}

// roleAgent joins through a store the test serves, as under torchrun's
// agent, and checks a sum.
func roleAgent() error {
	c, env, err := join()
	if err != nil {
		return err
	}
	defer c.Close()
	var s tensor.Scope
	defer s.Close()
	x := tensor.FromSlice(&s, []float64{float64(c.Rank() + 1)}, nil, gotch.CPU)
	if err := c.AllReduceSum(x); err != nil {
		return err
	}
	w := float64(c.Size())
	if err := expect("allreduce", tensor.Float64s(x), []float64{w * (w + 1) / 2}); err != nil {
		return err
	}
	fmt.Printf("agent ok rank %d prefix %s\n", c.Rank(), env.StorePrefix())
	return nil
}

// roleKill: rank 1 kills itself with SIGKILL while both ranks run
// allreduces of 4 MB; rank 0 reports the error and how long the failing
// collective took.
func roleKill() error {
	signal.Ignore(syscall.SIGTERM) // the launcher's SIGTERM must not cut the report short
	c, _, err := join()
	if err != nil {
		return err
	}
	var s tensor.Scope
	defer s.Close()
	x := s.Keep(ts.MustZeros([]int64{1 << 20}, gotch.Float, gotch.CPU))
	if c.Rank() == 1 {
		go func() {
			time.Sleep(300 * time.Millisecond)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}()
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		start := time.Now()
		if err := c.AllReduceSum(x); err != nil {
			fmt.Printf("failed after %d ms: %v\n", time.Since(start).Milliseconds(), err)
			next := c.AllReduceSum(x)
			fmt.Printf("next: %v\n", next)
			start = time.Now()
			c.Close()
			fmt.Printf("closed in %d ms\n", time.Since(start).Milliseconds())
			return nil
		}
	}
	return fmt.Errorf("no error within 15 s")
}

// roleSilent: rank 1 joins, then never calls the collective rank 0 waits
// in; it leaves once rank 0 has written the file LANPO_DIST_TEST_DONE.
func roleSilent() error {
	c, _, err := join()
	if err != nil {
		return err
	}
	done := os.Getenv("LANPO_DIST_TEST_DONE")
	if c.Rank() == 1 {
		for i := 0; i < 3000; i++ {
			if _, err := os.Stat(done); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		c.Close()
		return nil
	}
	var s tensor.Scope
	defer s.Close()
	x := tensor.FromSlice(&s, []float32{1}, nil, gotch.CPU)
	start := time.Now()
	err = c.AllReduceSum(x)
	fmt.Printf("failed after %d ms: %v\n", time.Since(start).Milliseconds(), err)
	start = time.Now()
	c.Close()
	fmt.Printf("closed in %d ms\n", time.Since(start).Milliseconds())
	return os.WriteFile(done, nil, 0o644)
}

// Launcher roles: no torch, no group.

func roleEcho() error {
	env, _, _ := FromEnv()
	fmt.Printf("out %d of %d local %d omp %s\n", env.Rank, env.World, env.LocalRank, os.Getenv("OMP_NUM_THREADS"))
	fmt.Fprintf(os.Stderr, "err %d\n", env.Rank)
	fmt.Printf("partial %d", env.Rank) // no newline: the launcher ends the line
	return nil
}

func roleFail() error {
	env, _, _ := FromEnv()
	if env.Rank == 1 {
		time.Sleep(100 * time.Millisecond)
		os.Exit(3)
	}
	time.Sleep(60 * time.Second) // ended by the launcher's SIGTERM
	return nil
}

// roleFlaky: while TORCHELASTIC_RESTART_COUNT is below
// LANPO_DIST_TEST_FAILS, rank 1 exits with LANPO_DIST_TEST_STATUS (3 when
// unset) and rank 0 waits to be stopped; after that both exit 0.
func roleFlaky() error {
	env, _, _ := FromEnv()
	count, _ := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT"))
	fails, _ := strconv.Atoi(os.Getenv("LANPO_DIST_TEST_FAILS"))
	fmt.Printf("start %d\n", count)
	if count < fails {
		if env.Rank == 1 {
			status := 3
			if s := os.Getenv("LANPO_DIST_TEST_STATUS"); s != "" {
				status, _ = strconv.Atoi(s)
			}
			time.Sleep(100 * time.Millisecond)
			os.Exit(status)
		}
		time.Sleep(60 * time.Second) // ended by the launcher's SIGTERM
	}
	return nil
}

// roleHang: both ranks report progress (rank 0 twice); while
// TORCHELASTIC_RESTART_COUNT is below LANPO_DIST_TEST_FAILS rank 1 then
// stops itself (SIGSTOP) and rank 0 waits, reporting nothing more — a rank
// that made no progress, and one waiting for it; after that both exit 0.
// With LANPO_DIST_TEST_BUSY=1 rank 0 keeps reporting for 3 s instead (a
// long phase on one rank while the other waits: not a hang).
func roleHang() error {
	env, _, _ := FromEnv()
	count, _ := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT"))
	fails, _ := strconv.Atoi(os.Getenv("LANPO_DIST_TEST_FAILS"))
	pf := NewProgressFile(env.Rank)
	if pf == nil {
		return fmt.Errorf("no %s in the environment", ProgressDirVar)
	}
	pf.Report(1, "rollout", "8/16 sequences")
	fmt.Printf("start %d\n", count)
	if os.Getenv("LANPO_DIST_TEST_BUSY") == "1" {
		if env.Rank == 1 {
			time.Sleep(3 * time.Second) // waiting, silent, while rank 0 works
			return nil
		}
		for i := 0; i < 15; i++ {
			time.Sleep(200 * time.Millisecond)
			pf.Report(1, "eval", fmt.Sprintf("%d/15 problems", i+1))
			pf.last = time.Time{} // every report written
		}
		return nil
	}
	if count >= fails {
		return nil
	}
	if env.Rank == 1 {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		return nil
	}
	time.Sleep(300 * time.Millisecond)
	pf.Report(1, "update", "0/4 micro-batches")
	time.Sleep(60 * time.Second) // waiting for rank 1
	return nil
}

func roleStubborn() error {
	signal.Ignore(syscall.SIGTERM)
	env, _, _ := FromEnv()
	if env.Rank == 1 {
		time.Sleep(100 * time.Millisecond)
		os.Exit(3)
	}
	time.Sleep(60 * time.Second) // ended by SIGKILL after the grace period
	return nil
}

// roleSignal waits for SIGINT, which the test sends to the launcher.
func roleSignal() error {
	env, _, _ := FromEnv()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT)
	dir := os.Getenv("LANPO_DIST_TEST_DONE")
	if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(env.Rank)), nil, 0o644); err != nil {
		return err
	}
	select {
	case s := <-sig:
		fmt.Printf("rank %d got %v\n", env.Rank, s)
	case <-time.After(20 * time.Second):
		return fmt.Errorf("no signal within 20 s")
	}
	return nil
}
