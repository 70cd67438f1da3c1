package dist

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LaunchOptions say what Launch starts on this machine.
type LaunchOptions struct {
	NProcPerNode int    // processes (ranks) on this machine
	NNodes       int    // machines in the run (0: 1)
	NodeRank     int    // this machine's index in [0, NNodes)
	MasterAddr   string // rendezvous host (default 127.0.0.1 on one machine; required on several)
	MasterPort   int    // rendezvous port (0 on one machine: a free port)
	Exe          string // the program every rank runs
	Args         []string
	// Env is added to each child's environment after the launcher's own
	// variables, so it can override them (tests use this to emulate
	// torchrun's agent store).
	Env            []string
	Stdout, Stderr io.Writer     // where the children's prefixed lines go (nil: os.Stdout, os.Stderr)
	Grace          time.Duration // SIGTERM to SIGKILL (0: 30 s)
	// MaxRestarts: when a rank fails, every rank is stopped and the job
	// started again, at most this many times (torchrun's --max-restarts;
	// one machine only). Each start's ranks get TORCHELASTIC_RESTART_COUNT
	// = the restarts so far, which lanpo's training reads as --resume auto.
	MaxRestarts int
	// HangTimeout: when no rank has reported progress for this long
	// (progress.go), the job is taken as hung: every rank is stopped (and
	// restarted under MaxRestarts) and the rank that reported least
	// recently is named. 0: no hang detection.
	HangTimeout time.Duration
}

// The exit statuses of a rank whose failure a restart cannot fix: the
// launcher does not restart the job after them. lanpo exits ExitConfig for
// a usage or config error (a refused resume included) and ExitNoSpace for
// a checkpoint that did not fit on its disk.
const (
	ExitConfig  = 2
	ExitNoSpace = 3
)

// noRestart reports whether a rank's exit status says a restart would fail
// the same way.
func noRestart(status int) bool { return status == ExitConfig || status == ExitNoSpace }

// ExitError is how a launch ends when a rank fails: the first rank that
// exited non-zero or was killed by a signal.
type ExitError struct {
	Rank   int
	Status int            // exit status, when it exited
	Signal syscall.Signal // the signal that killed it, or 0
	// Forwarded is the signal the launcher had passed on to every rank
	// before (SIGINT or SIGTERM it received), or 0.
	Forwarded os.Signal
}

func (e *ExitError) Error() string {
	s := e.what()
	if e.Forwarded != nil {
		s += fmt.Sprintf(" (after the launcher forwarded %s to every rank)", e.Forwarded)
	}
	return s
}

func (e *ExitError) what() string {
	var s string
	if e.Signal != 0 {
		s = fmt.Sprintf("rank %d was killed by signal %d (%s)", e.Rank, int(e.Signal), signalName(e.Signal))
	} else {
		s = fmt.Sprintf("rank %d exited with status %d", e.Rank, e.Status)
	}
	return s
}

// RestartsError is how a launch with restarts ends when they run out: the
// failure of every start (an *ExitError or a *HangError), the last one
// first in Error.
type RestartsError struct {
	Failures []error
	Max      int
}

func (e *RestartsError) Error() string {
	var all []string
	for i, f := range e.Failures {
		all = append(all, fmt.Sprintf("start %d: %s", i+1, failureText(f)))
	}
	return fmt.Sprintf("%s, after %d restart(s) (--max-restarts %d): %s", failureText(e.Failures[len(e.Failures)-1]),
		len(e.Failures)-1, e.Max, strings.Join(all, "; "))
}

// failureText is a start's failure in a word: how the rank ended, or the
// hung rank.
func failureText(err error) string {
	var ee *ExitError
	var he *HangError
	switch {
	case errors.As(err, &he):
		return fmt.Sprintf("rank %d hung (no progress for %s; last: %s)", he.Rank, he.Timeout, he.Last)
	case errors.As(err, &ee):
		return ee.what()
	}
	return err.Error()
}

func (e *RestartsError) Unwrap() error { return e.Failures[len(e.Failures)-1] }

// Launch starts NProcPerNode children of Exe with Args and the environment
// torchrun gives its workers: RANK = NodeRank·NProcPerNode + local rank,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT (0, then the
// restarts so far) and, when unset,
// OMP_NUM_THREADS = max(1, CPUs / NProcPerNode). TORCHELASTIC_USE_AGENT_STORE
// is removed: Launch serves no store, rank 0 does (dist.Init).
//
// Each line a child writes is passed on prefixed with "[rank R] ". SIGINT
// and SIGTERM sent to the launcher are forwarded to every child. When a
// child fails (non-zero exit or killed by a signal), the others get SIGTERM,
// then SIGKILL after Grace, and Launch returns an *ExitError naming the
// first failed rank and how it ended. Cancelling ctx stops the children the
// same way. Launch returns nil when every child exits 0. With MaxRestarts,
// a failed start is followed by another (not after a signal the launcher
// forwarded, a cancelled ctx, or a rank that exited ExitConfig or
// ExitNoSpace), and
// when they run out Launch returns a *RestartsError listing each start's
// failure.
func Launch(ctx context.Context, o LaunchOptions) error {
	fixedPort := o.MasterPort != 0
	if err := o.defaults(); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	if o.MaxRestarts < 0 {
		return fmt.Errorf("launch: max-restarts %d: want 0 or more", o.MaxRestarts)
	}
	if o.MaxRestarts > 0 && o.NNodes > 1 {
		return fmt.Errorf("launch: --max-restarts works on one machine (--nnodes 1): the launchers of several machines do not coordinate a restart; use torchrun's elastic agent there")
	}
	var failures []error
	for restart := 0; ; restart++ {
		err := o.launchOnce(ctx, restart)
		var ee *ExitError
		var he *HangError
		isExit, isHang := errors.As(err, &ee), errors.As(err, &he)
		if err == nil || !(isExit || isHang) || o.MaxRestarts == 0 {
			return err
		}
		failures = append(failures, err)
		switch {
		case isExit && ee.Forwarded != nil || ctx.Err() != nil:
			return err // stopped on purpose
		case isExit && ee.Signal == 0 && noRestart(ee.Status):
			fmt.Fprintf(o.Stderr, "launch: %s: a failure a restart cannot fix (a refused config, a full disk): not restarting\n", ee.what())
			return err
		case restart == o.MaxRestarts:
			return &RestartsError{Failures: failures, Max: o.MaxRestarts}
		}
		if !fixedPort { // the old rendezvous port may still be held
			if p, perr := freePort(); perr == nil {
				o.MasterPort = p
			}
		}
		fmt.Fprintf(o.Stderr, "launch: %s; restart %d of %d: every rank starts again and resumes from the newest complete checkpoint\n",
			failureText(err), restart+1, o.MaxRestarts)
	}
}

// launchOnce is one start of the job: restart is the restarts before it.
func (o LaunchOptions) launchOnce(ctx context.Context, restart int) error {
	base := envWithout(os.Environ(), "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", ProgressDirVar)
	base = append(base, "TORCHELASTIC_RESTART_COUNT="+strconv.Itoa(restart))
	// The ranks' progress reports: in LANPO_PROGRESS_DIR when the launcher
	// was given one (a test's fault injector reads it too; each start
	// begins it empty), else in a directory of its own.
	progressDir := os.Getenv(ProgressDirVar)
	if progressDir != "" {
		if err := os.MkdirAll(progressDir, 0o755); err != nil {
			return fmt.Errorf("launch: %s: %w", ProgressDirVar, err)
		}
		old, _ := filepath.Glob(filepath.Join(progressDir, "rank-*.json"))
		for _, f := range old {
			os.Remove(f)
		}
	} else {
		var err error
		if progressDir, err = os.MkdirTemp("", "lanpo-progress-"); err != nil {
			return fmt.Errorf("launch: %w", err)
		}
		defer os.RemoveAll(progressDir)
	}
	base = append(base, ProgressDirVar+"="+progressDir)
	if _, ok := lookupEnv(append(base, o.Env...), "OMP_NUM_THREADS"); !ok {
		base = append(base, fmt.Sprintf("OMP_NUM_THREADS=%d", max(1, runtime.NumCPU()/o.NProcPerNode)))
	}

	// Forward SIGINT/SIGTERM from now on; before Start a signal would find
	// no child, so it is held until they run.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	var outMu, errMu sync.Mutex
	done := make(chan rankExit, o.NProcPerNode)
	running := map[int]*exec.Cmd{}
	var flushers []func()
	defer func() {
		for _, f := range flushers {
			f()
		}
	}()
	for local := 0; local < o.NProcPerNode; local++ {
		rank := o.NodeRank*o.NProcPerNode + local
		cmd, flush := o.rankCmd(base, local, &outMu, &errMu)
		flushers = append(flushers, flush...)
		if err := cmd.Start(); err != nil {
			for _, p := range running {
				signalGroup(p, syscall.SIGKILL)
				p.Wait()
			}
			return fmt.Errorf("launch: rank %d: %w", rank, err)
		}
		running[rank] = cmd
		go func(rank int, cmd *exec.Cmd) { done <- rankExit{rank, cmd.Wait()} }(rank, cmd)
	}
	return o.supervise(ctx, running, done, sigs, progressDir, restart)
}

// rankExit is how one rank's process ended.
type rankExit struct {
	rank int
	err  error
}

// rankCmd is the command of this node's local-th rank: the torchrun
// environment, its output lines prefixed with its rank (flush writes a
// last unterminated line), in its own process group.
func (o *LaunchOptions) rankCmd(base []string, local int, outMu, errMu *sync.Mutex) (cmd *exec.Cmd, flush []func()) {
	rank := o.NodeRank*o.NProcPerNode + local
	cmd = exec.Command(o.Exe, o.Args...)
	cmd.Env = append(append([]string(nil), base...),
		"RANK="+strconv.Itoa(rank), "LOCAL_RANK="+strconv.Itoa(local),
		"WORLD_SIZE="+strconv.Itoa(o.NNodes*o.NProcPerNode), "LOCAL_WORLD_SIZE="+strconv.Itoa(o.NProcPerNode),
		"GROUP_RANK="+strconv.Itoa(o.NodeRank), "GROUP_WORLD_SIZE="+strconv.Itoa(o.NNodes),
		"MASTER_ADDR="+o.MasterAddr, "MASTER_PORT="+strconv.Itoa(o.MasterPort))
	cmd.Env = append(cmd.Env, o.Env...)
	prefix := fmt.Sprintf("[rank %d] ", rank)
	stdout := &lineWriter{w: o.Stdout, mu: outMu, prefix: prefix}
	stderr := &lineWriter{w: o.Stderr, mu: errMu, prefix: prefix}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Own process group: a Ctrl-C at the terminal reaches the launcher
	// only, which forwards it once. Pdeathsig: a launcher killed outright
	// takes its children with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A grandchild holding the output pipes must not keep Wait forever.
	cmd.WaitDelay = 5 * time.Second
	return cmd, []func(){stdout.flush, stderr.flush}
}

// supervise waits for the running ranks: it forwards signals to them, and
// on the first failure (or ctx's end) stops the others — SIGTERM, then
// SIGKILL after the grace period. It returns the first rank's failure, or
// ctx's error.
func (o *LaunchOptions) supervise(ctx context.Context, running map[int]*exec.Cmd, done <-chan rankExit, sigs <-chan os.Signal, progressDir string, restart int) error {
	var first *ExitError
	var hang *HangError
	var ctxErr error
	start := time.Now()
	var ranks []int
	for r := range running {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	// The progress reports are watched for hangs, and after a restart for
	// the step the ranks resumed at (logged once).
	var watch <-chan time.Time
	announce := restart > 0
	if o.HangTimeout > 0 || announce {
		every := 2 * time.Second
		if o.HangTimeout > 0 {
			every = min(o.HangTimeout/4, every)
		}
		t := time.NewTicker(min(every, 500*time.Millisecond))
		defer t.Stop()
		watch = t.C
	}
	var forwarded os.Signal
	var kill <-chan time.Time
	stopping := false
	stopAll := func() {
		if stopping {
			return
		}
		stopping = true
		for _, p := range running {
			signalGroup(p, syscall.SIGTERM)
		}
		kill = time.After(o.Grace)
	}
	ctxDone := ctx.Done()
	for len(running) > 0 {
		select {
		case e := <-done:
			delete(running, e.rank)
			if ee := exitError(e.rank, e.err); ee != nil && first == nil && hang == nil {
				ee.Forwarded = forwarded
				first = ee
				if all := readProgress(progressDir); len(all) > 0 {
					fmt.Fprintf(o.Stderr, "launch: %s; %s\n", ee.what(), progressSummary(all))
				}
				stopAll()
			} else if e.err != nil && first == nil && !isExit(e.err) {
				// Wait failed for another reason (the output copy): report it.
				ctxErr = fmt.Errorf("launch: rank %d: %w", e.rank, e.err)
				stopAll()
			}
		case s := <-sigs:
			forwarded = s
			for _, p := range running {
				signalGroup(p, s.(syscall.Signal))
			}
		case <-ctxDone:
			ctxDone = nil
			if ctxErr == nil {
				ctxErr = fmt.Errorf("launch: %w", ctx.Err())
			}
			stopAll()
		case <-kill:
			for _, p := range running {
				signalGroup(p, syscall.SIGKILL)
			}
		case now := <-watch:
			if stopping {
				continue
			}
			all := readProgress(progressDir)
			if announce {
				announce = !o.announceResume(all, ranks[0], restart)
			}
			if o.HangTimeout <= 0 {
				continue
			}
			if r, ok := hung(all, ranks, start, now, o.HangTimeout); ok {
				// A rank the kernel shows stopped (SIGSTOP, a debugger) or in
				// uninterruptible sleep (a stuck filesystem) is the one; else
				// the one that reported least recently.
				var state string
				for _, rr := range ranks {
					if p, ok := running[rr]; ok && p.Process != nil {
						if st := procState(p.Process.Pid); st == "T" || st == "t" || st == "D" {
							r, state = rr, st
							break
						}
					}
				}
				hang = &HangError{Rank: r, Last: all[r], Timeout: o.HangTimeout, All: all, State: state}
				fmt.Fprintf(o.Stderr, "launch: %s: stopping every rank\n", hang)
				// A stopped (SIGSTOP) or wedged rank does not act on SIGTERM:
				// the grace period ends in SIGKILL.
				for _, p := range running {
					signalGroup(p, syscall.SIGCONT)
				}
				stopAll()
			}
		}
	}
	if announce { // a start too short for the watch to see its first report
		o.announceResume(readProgress(progressDir), ranks[0], restart)
	}
	if hang != nil {
		return hang
	}
	if first != nil {
		return first
	}
	return ctxErr
}

// announceResume logs the step a restarted job's rank resumed at, from its
// first progress report; false when it has not reported yet.
func (o *LaunchOptions) announceResume(all map[int]Progress, rank, restart int) bool {
	p, ok := all[rank]
	if !ok || p.FirstStep == 0 {
		return false
	}
	from := fmt.Sprintf("from the checkpoint of step %d", p.FirstStep-1)
	if p.FirstStep == 1 {
		from = "from the start: no checkpoint yet"
	}
	fmt.Fprintf(o.Stderr, "launch: restart %d: rank %d resumed at step %d (%s)\n", restart, rank, p.FirstStep, from)
	return true
}

func (o *LaunchOptions) defaults() error {
	if o.NNodes == 0 {
		o.NNodes = 1
	}
	switch {
	case o.NProcPerNode < 1:
		return fmt.Errorf("nproc-per-node %d: want at least 1", o.NProcPerNode)
	case o.NNodes < 1:
		return fmt.Errorf("nnodes %d: want at least 1", o.NNodes)
	case o.NodeRank < 0 || o.NodeRank >= o.NNodes:
		return fmt.Errorf("node-rank %d: want 0 to %d", o.NodeRank, o.NNodes-1)
	case o.Exe == "":
		return errors.New("no program to run")
	case o.MasterPort < 0 || o.MasterPort > 65535:
		return fmt.Errorf("master-port %d: not a TCP port", o.MasterPort)
	}
	if o.NNodes > 1 && (o.MasterAddr == "" || o.MasterPort == 0) {
		return fmt.Errorf("%d nodes need --master-addr and --master-port (the address of node 0, where rank 0 serves the rendezvous)", o.NNodes)
	}
	if o.MasterAddr == "" {
		o.MasterAddr = "127.0.0.1"
	}
	if o.MasterPort == 0 {
		p, err := freePort()
		if err != nil {
			return fmt.Errorf("no free port for the rendezvous: %w", err)
		}
		o.MasterPort = p
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	return nil
}

// freePort asks the kernel for a free TCP port. Another process may take it
// before rank 0 binds it; rank 0 then fails with "Address already in use"
// and the launch with it.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// exitError describes a failed child, or returns nil if it exited 0.
func exitError(rank int, err error) *ExitError {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return nil
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &ExitError{Rank: rank, Signal: ws.Signal()}
	}
	return &ExitError{Rank: rank, Status: ee.ExitCode()}
}

func isExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

// signalGroup signals the child's process group (the child and whatever it
// started).
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, sig)
	}
}

func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
		syscall.SIGILL: "SIGILL", syscall.SIGHUP: "SIGHUP", syscall.SIGPIPE: "SIGPIPE", syscall.SIGQUIT: "SIGQUIT"}
	if n, ok := names[s]; ok {
		return n
	}
	return s.String()
}

// envWithout drops the named variables from env.
func envWithout(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		keep := true
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// lookupEnv finds name in env, the last setting winning as in exec.
func lookupEnv(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// lineWriter passes whole lines on to w with a prefix, one Write per line
// under mu so lines of different ranks never interleave mid-line.
type lineWriter struct {
	w      io.Writer
	mu     *sync.Mutex
	prefix string
	buf    []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.emit(l.buf[:i+1])
		l.buf = l.buf[i+1:]
	}
	// Bound the buffer for output that never ends a line (a progress bar).
	if len(l.buf) > 64<<10 {
		l.emit(append(l.buf, '\n'))
		l.buf = nil
	}
	return len(p), nil
}

// flush writes a last line that had no newline.
func (l *lineWriter) flush() {
	if len(l.buf) > 0 {
		l.emit(append(l.buf, '\n'))
		l.buf = nil
	}
}

func (l *lineWriter) emit(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]byte, 0, len(l.prefix)+len(line))
	out = append(append(out, l.prefix...), line...)
	l.w.Write(out)
}
