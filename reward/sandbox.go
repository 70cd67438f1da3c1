package reward

import (
	"bufio"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lanpo-rl/lanpo/internal/iocap"
)

// The sandbox runs untrusted Python (a code reward's candidates) with
// limits, and decides success by a nonce the candidate cannot forge. In
// namespaces mode (the default) each candidate gets new user, PID, mount,
// network, IPC and UTS namespaces; sandbox/init.py builds its root and
// limits and sandbox/harness.py runs the program and its checks.
// docs/rewards.md has the guarantees and what is not guaranteed.

//go:embed sandbox/init.py
var sandboxInit string

//go:embed sandbox/harness.py
var sandboxHarness string

// Sandbox modes (Config.Sandbox).
const (
	SandboxNamespaces = "namespaces"
	SandboxNone       = "none"
)

// CodeConfig is reward.code: the limits of one candidate's run.
type CodeConfig struct {
	Python       string `yaml:"python"`         // the interpreter, looked up on PATH (default python3; ≥ 3.8)
	CPUSeconds   int    `yaml:"cpu_seconds"`    // CPU time of each process (default 3, HumanEval's timeout)
	WallSeconds  int    `yaml:"wall_seconds"`   // wall cap for the whole candidate from the harness's start, killing all it started (default 10)
	MemoryMB     int    `yaml:"memory_mb"`      // address space of each process (default 1024)
	MaxProcs     int    `yaml:"max_procs"`      // processes and threads of the sandbox's uid (default 8)
	MaxOpenFiles int    `yaml:"max_open_files"` // descriptors per process (default 64)
	FileMB       int    `yaml:"file_mb"`        // largest file a process may write (default 16)
	TmpfsMB      int    `yaml:"tmpfs_mb"`       // size of the one writable directory (default 32)
	MaxFiles     int    `yaml:"max_files"`      // files and directories in it (default 512)
	Concurrency  int    `yaml:"concurrency"`    // candidates run at once per rank (default 2)
	UID          int    `yaml:"uid"`            // host uid the candidate runs as when lanpo runs as root (default 65534, nobody)
}

// DefaultCodeConfig is what unset reward.code keys mean. The worst case of
// one candidate's memory is about max_procs × (memory_mb + max_open_files
// × file_mb) + tmpfs_mb (address space, plus memfds, which RLIMIT_AS does
// not count); concurrency 2 keeps two such beside a model in 24 GiB only
// when candidates are not adversarial in every way at once —
// docs/rewards.md.
func DefaultCodeConfig() CodeConfig {
	return CodeConfig{Python: "python3", CPUSeconds: 3, WallSeconds: 10, MemoryMB: 1024, MaxProcs: 8,
		MaxOpenFiles: 64, FileMB: 16, TmpfsMB: 32, MaxFiles: 512, Concurrency: 2, UID: 65534}
}

func (c *CodeConfig) validate(bad func(key, format string, args ...any) error) error {
	def := DefaultCodeConfig()
	if c.Python == "" {
		c.Python = def.Python
	}
	for _, f := range []struct {
		key string
		v   *int
		def int
		min int
	}{
		{"cpu_seconds", &c.CPUSeconds, def.CPUSeconds, 1}, {"wall_seconds", &c.WallSeconds, def.WallSeconds, 1},
		{"memory_mb", &c.MemoryMB, def.MemoryMB, 64}, {"max_procs", &c.MaxProcs, def.MaxProcs, 1},
		{"max_open_files", &c.MaxOpenFiles, def.MaxOpenFiles, 16}, {"file_mb", &c.FileMB, def.FileMB, 1},
		{"tmpfs_mb", &c.TmpfsMB, def.TmpfsMB, 1}, {"max_files", &c.MaxFiles, def.MaxFiles, 16},
		{"concurrency", &c.Concurrency, def.Concurrency, 1}, {"uid", &c.UID, def.UID, 1},
	} {
		if f.key == "uid" && *f.v > 1<<31-2 {
			return bad("code.uid", "%d is not a uid", *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < f.min {
			return bad("code."+f.key, "must be ≥ %d, got %d", f.min, *f.v)
		}
	}
	if c.WallSeconds <= c.CPUSeconds {
		return bad("code.wall_seconds", "%d must be larger than code.cpu_seconds (%d): the wall cap is a backstop, generous beyond the CPU limit, so that verdicts do not depend on the machine's load", c.WallSeconds, c.CPUSeconds)
	}
	return nil
}

// CodeRequest is one program and its checks.
type CodeRequest struct {
	Program    string `json:"program"`
	Tests      string `json:"tests"`       // Python run after the program, in its names
	EntryPoint string `json:"entry_point"` // when set, check(<entry_point>) is called after the tests
	// Run runs the program alone, for its output (a tool's call): no
	// tests, no verdict to protect, so none of the harness's guards for
	// one (the audit hook that refuses frames and ctypes); the sandbox's
	// isolation is the same. Passed means it ran to its end.
	Run bool `json:"run,omitempty"`
}

// CodeOutcome is how a run ended.
type CodeOutcome struct {
	Passed bool
	Reason string        // "passed", or why not
	Stdout string        // the tail of what the candidate printed
	Stderr string        // the tail of its stderr
	Wall   time.Duration // the whole run, set-up included
}

// Sandbox runs CodeRequests; safe for concurrent use, at most
// Concurrency at once.
type Sandbox struct {
	mode   string
	cfg    CodeConfig
	python string   // the interpreter's real path
	flags  []string // the harness interpreter's flags
	binds  []string // what the root shows, read-only
	sem    chan struct{}
	dir    string // none mode: where work directories are made
	seq    int64
	mu     sync.Mutex
}

// pythonInfo asks the interpreter (trusted: the user's own) where it is.
func pythonInfo(python string) (exe string, prefixes []string, minor int, err error) {
	path, err := exec.LookPath(python)
	if err != nil {
		return "", nil, 0, err
	}
	out, err := exec.Command(path, "-I", "-S", "-c",
		"import sys,json;print(json.dumps([sys.executable,sys.prefix,sys.base_prefix,sys.exec_prefix,sys.base_exec_prefix,sys.version_info[0],sys.version_info[1]]))").Output()
	if err != nil {
		return "", nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	var v []any
	if err := json.Unmarshal(out, &v); err != nil || len(v) != 7 {
		return "", nil, 0, fmt.Errorf("%s: unexpected answer %q", path, out)
	}
	exe, _ = v[0].(string)
	if exe == "" {
		return "", nil, 0, fmt.Errorf("%s does not know its own executable", path)
	}
	major, _ := v[5].(float64)
	m, _ := v[6].(float64)
	if major != 3 || m < 8 {
		return "", nil, 0, fmt.Errorf("%s is Python %v.%v: the sandbox needs ≥ 3.8 (audit hooks)", path, major, m)
	}
	for _, p := range v[1:5] {
		if s, _ := p.(string); s != "" {
			prefixes = append(prefixes, s)
		}
	}
	prefixes = append(prefixes, filepath.Dir(exe))
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		prefixes = append(prefixes, filepath.Dir(filepath.Dir(real)))
	}
	return exe, prefixes, int(m), nil
}

// NewSandbox resolves the interpreter and tries the sandbox once: a mode
// that cannot be set up here is an error naming what is missing.
func NewSandbox(mode string, c CodeConfig) (*Sandbox, error) {
	exe, prefixes, minor, err := pythonInfo(c.Python)
	if err != nil {
		return nil, fmt.Errorf("config key reward.code.python: %w", err)
	}
	s := &Sandbox{mode: mode, cfg: c, python: exe, sem: make(chan struct{}, c.Concurrency)}
	// -I minus -E: isolated (no user site, no script directory on the
	// path) but reading the environment we give, which holds only a fixed
	// PYTHONHASHSEED and HOME/TMPDIR; -B: no .pyc files. Never -O.
	s.flags = []string{"-s", "-B"}
	if minor >= 11 {
		s.flags = append(s.flags, "-P")
	}
	s.binds = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache", "/etc/localtime"}
	seen := map[string]bool{}
	for _, p := range prefixes {
		p = filepath.Clean(p)
		if seen[p] || p == "/" || strings.HasPrefix(p+"/", "/usr/") {
			continue
		}
		seen[p] = true
		s.binds = append(s.binds, p)
	}
	if mode == SandboxNone {
		s.dir = filepath.Join(os.TempDir(), "lanpo-sandbox")
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return nil, fmt.Errorf("reward.sandbox: none: %w", err)
		}
		// Stale entries are removed from it: it must be this user's own
		// directory, not a link someone put there (on a shared /tmp).
		if err := ownDir(s.dir); err != nil {
			return nil, fmt.Errorf("reward.sandbox: none: %w", err)
		}
		removeStale(s.dir)
	} else if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("config key reward.sandbox: namespaces needs Linux (this is %s); set reward.sandbox: none to run candidates without isolation", runtime.GOOS)
	}
	o, err := s.Run(context.Background(), CodeRequest{Program: "x = 1\n", Tests: "assert x == 1\n"})
	if err != nil {
		if mode == SandboxNamespaces {
			return nil, fmt.Errorf("config key reward.sandbox: namespaces: the sandbox cannot be set up here: %w (it needs user namespaces, and in a container the right to make them: docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt systempaths=unconfined, or --privileged; docs/rewards.md \"Running in a container\"); to run candidates without isolation set reward.sandbox: none", err)
		}
		return nil, fmt.Errorf("reward.sandbox: none: %w", err)
	}
	if !o.Passed {
		return nil, fmt.Errorf("config key reward.sandbox: %s: a trivial program did not pass (%s; stderr %q)", mode, o.Reason, o.Stderr)
	}
	return s, nil
}

// ownDir checks that dir is a directory (not a symbolic link) owned by
// this process's user and closed to others.
func ownDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory (a symbolic link?): remove it, or set TMPDIR elsewhere", dir)
	case ok && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d, not to this user (%d): remove it, or set TMPDIR elsewhere", dir, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s is open to other users (mode %o): want 0700", dir, fi.Mode().Perm())
	}
	return nil
}

// removeStale removes work directories left by processes that are gone
// (none mode; a killed trainer cannot clean up after itself).
func removeStale(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		pid, err := strconv.Atoi(strings.SplitN(e.Name(), "-", 2)[0])
		if err != nil || (pid != os.Getpid() && syscall.Kill(pid, 0) != nil) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// errSetup: the sandbox itself failed (not the candidate).
var errSetup = errors.New("sandbox set-up failed")

// Run runs one program and its checks. The error is the sandbox's own
// failure (it could not start or set up); whatever the candidate does is
// an outcome.
func (s *Sandbox) Run(ctx context.Context, r CodeRequest) (CodeOutcome, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return CodeOutcome{}, ctx.Err()
	}
	defer func() { <-s.sem }()
	t0 := time.Now()
	o, err := s.run(ctx, r)
	o.Wall = time.Since(t0)
	return o, err
}

func (s *Sandbox) run(ctx context.Context, r CodeRequest) (CodeOutcome, error) {
	var nb [16]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return CodeOutcome{}, err
	}
	nonce := hex.EncodeToString(nb[:])
	payload, err := json.Marshal(struct {
		CodeRequest
		Nonce string `json:"nonce"`
	}{r, nonce})
	if err != nil {
		return CodeOutcome{}, err
	}
	c := s.cfg
	work := "/sandbox"
	uid := 0
	if s.mode == SandboxNone {
		s.mu.Lock()
		s.seq++
		work = filepath.Join(s.dir, fmt.Sprintf("%d-%d", os.Getpid(), s.seq))
		s.mu.Unlock()
		if err := os.Mkdir(work, 0o700); err != nil {
			return CodeOutcome{}, err
		}
		defer os.RemoveAll(work)
	}
	attr, switchUID := sandboxAttr(s.mode, c.UID)
	if switchUID {
		uid = c.UID
	}
	settings, _ := json.Marshal(map[string]any{
		"mode": s.mode, "binds": s.binds, "work": work, "uid": uid, "switch_uid": switchUID,
		"tmpfs_kb": c.TmpfsMB << 10, "inodes": c.MaxFiles,
		"cpu_s": c.CPUSeconds, "as_bytes": int64(c.MemoryMB) << 20, "fsize_bytes": int64(c.FileMB) << 20,
		"nofile": c.MaxOpenFiles, "nproc": c.MaxProcs,
		"python": s.python,
		"argv":   append(append([]string{s.python}, s.flags...), "-c", sandboxHarness),
		"env": map[string]string{"HOME": work, "TMPDIR": work, "PYTHONHASHSEED": "0", "PATH": "/usr/local/bin:/usr/bin:/bin",
			"LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
	})
	inR, inW, err := os.Pipe()
	if err != nil {
		return CodeOutcome{}, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return CodeOutcome{}, err
	}
	defer outR.Close()
	wall := time.Duration(c.WallSeconds) * time.Second
	cmd := exec.Command(s.python, "-I", "-S", "-B", "-c", sandboxInit, string(settings))
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = attr
	cmd.ExtraFiles = []*os.File{inR, outW}
	stdout, stderr := &iocap.Tail{Max: 4 << 10}, &iocap.Tail{Max: 4 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		return CodeOutcome{}, fmt.Errorf("%w: start: %v", errSetup, err)
	}
	go func() {
		_, _ = inW.Write(payload)
		inW.Close()
	}()
	lines := make(chan []string, 1)
	started := make(chan struct{})
	go func() { lines <- readOutcome(outR, started) }()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	// The wall cap counts from the harness's start: a set-up slowed by a
	// loaded machine does not eat the candidate's time (setupLimit bounds
	// the set-up itself).
	timer := time.NewTimer(setupLimit)
	defer timer.Stop()
	var waitErr error
	walled, setupSlow := false, false
wait:
	for {
		select {
		case waitErr = <-waited:
			break wait
		case <-started:
			started = nil
			timer.Reset(wall)
		case <-timer.C:
			walled, setupSlow = started == nil, started != nil
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	// The harness is gone or is killed now; in namespaces mode so is all
	// it started (a PID namespace ends with its first process). In none
	// mode its process group goes.
	killSandbox(cmd.Process, s.mode)
	if walled || setupSlow || ctx.Err() != nil {
		select {
		case waitErr = <-waited:
		case <-time.After(reapLimit):
			return CodeOutcome{}, fmt.Errorf("%w: pid %d not reaped within %s of SIGKILL (%s)", errSetup, cmd.Process.Pid, reapLimit, procState(cmd.Process.Pid))
		}
	}
	if ctx.Err() != nil {
		return CodeOutcome{}, ctx.Err()
	}
	var got []string
	select {
	case got = <-lines:
	case <-time.After(reapLimit):
		outR.Close()
		got = <-lines
	}
	o := CodeOutcome{Stdout: stdout.String(), Stderr: stderr.String()}
	if setupSlow {
		return o, fmt.Errorf("%w: the sandbox did not start within %s", errSetup, setupLimit)
	}
	if len(got) == 0 || got[0] != "START" {
		if len(got) > 0 && strings.HasPrefix(got[0], "SETUP ") {
			return o, fmt.Errorf("%w: %s", errSetup, strings.TrimPrefix(got[0], "SETUP "))
		}
		return o, fmt.Errorf("%w: the harness did not start (%v; stderr %q)", errSetup, waitErr, o.Stderr)
	}
	want := "PASS " + nonce
	fail := ""
	for _, l := range got[1:] {
		if l == want || (r.Run && l == "RAN") { // a run's end needs no proof: nothing is scored by it
			o.Passed, o.Reason = true, "passed"
			return o, nil
		}
		if fail == "" && strings.HasPrefix(l, "FAIL ") {
			fail = strings.TrimPrefix(l, "FAIL ")
		}
	}
	switch {
	case walled:
		o.Reason = fmt.Sprintf("killed at the wall cap (%ds)", c.WallSeconds)
	case fail != "":
		o.Reason = fail
	default:
		o.Reason = exitReason(cmd.ProcessState, c.CPUSeconds)
	}
	return o, nil
}

// setupLimit bounds a sandbox's set-up, before the harness starts.
const setupLimit = 60 * time.Second

// readOutcome reads the harness's lines (fd 4) to its end, at most 64 KiB,
// closing started at the harness's "START". The harness writes "START"
// first (init.py "SETUP <error>" instead), so nothing the candidate writes
// there comes first.
func readOutcome(r io.Reader, started chan struct{}) []string {
	var out []string
	br := bufio.NewReader(io.LimitReader(r, 64<<10))
	for {
		line, err := br.ReadString('\n')
		if line = strings.TrimRight(line, "\n"); line != "" || err == nil {
			out = append(out, line)
			if len(out) == 1 && line == "START" {
				close(started)
			}
		}
		if err != nil {
			_, _ = io.Copy(io.Discard, r)
			return out
		}
	}
}

// exitReason says how the harness ended when it wrote no outcome.
func exitReason(ps *os.ProcessState, cpu int) string {
	if ps == nil {
		return "did not finish"
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		sig := ws.Signal()
		used := ps.UserTime() + ps.SystemTime()
		if sig == syscall.SIGXCPU || (sig == syscall.SIGKILL && used >= time.Duration(cpu)*time.Second) {
			return fmt.Sprintf("the CPU time limit (%ds)", cpu)
		}
		return "killed by " + sig.String()
	}
	return fmt.Sprintf("exited with status %d before the checks returned", ps.ExitCode())
}
