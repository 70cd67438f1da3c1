package reward

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// testSandbox is a namespaces sandbox with short limits.
func testSandbox(t *testing.T) *Sandbox {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the namespaces sandbox is Linux only")
	}
	c := DefaultCodeConfig()
	c.CPUSeconds, c.WallSeconds, c.MemoryMB, c.Concurrency = 2, 8, 512, 2
	s, err := NewSandbox(SandboxNamespaces, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// correct and wrong are a candidate function for the checks below.
const (
	correctF = "def f(x):\n    return x + 1\n"
	wrongF   = "def f(x):\n    return x\n"
	checksF  = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(41) == 42\n"
)

// leakIf is a program that defines f correctly only when cond (Python)
// holds after attempt ran: a pass means the attempt worked.
func leakIf(attempt, cond string) string {
	return "import os, sys, socket\nWON = False\ntry:\n" + indent(attempt) + "\nexcept BaseException as e:\n    pass\n" +
		"if " + cond + ":\n" + indent(correctF) + "\nelse:\n" + indent(wrongF) + "\n"
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

// TestSandboxAdversarial is the adversarial suite (docs/rewards.md): every
// case scores 0, or, for correct code with a side effect, passes without
// the side effect; the test process survives; nothing is left behind.
func TestSandboxAdversarial(t *testing.T) {
	s := testSandbox(t)
	secret := fmt.Sprintf("lanpo-secret-%d", time.Now().UnixNano())
	t.Setenv("LANPO_ADVERSARIAL_SECRET", secret)
	host := t.TempDir()
	_ = os.Chmod(host, 0o777)
	// What candidates try to write, named for this run (other tests write
	// to /tmp meanwhile).
	marker := fmt.Sprintf("lanpo-adversarial-%d", time.Now().UnixNano())
	written := []string{"/tmp/" + marker, "/dev/shm/" + marker, "/usr/" + marker, "/" + marker, "/etc/" + marker, filepath.Join(host, marker)}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 16)
	countAccepts := func(l net.Listener) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}
	go countAccepts(ln)
	sock := filepath.Join(host, "s.sock")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	_ = os.Chmod(sock, 0o777)
	go countAccepts(uln)
	port := ln.Addr().(*net.TCPAddr).Port

	cases := []struct {
		name, program string
		pass          bool   // correct code whose side effect must not happen
		reason        string // in the reason, when set
	}{
		{"infinite loop", "def f(x):\n    while True:\n        pass\n", false, "CPU time"},
		{"sleep forever", "import time\ntime.sleep(10**6)\n" + correctF, false, "wall cap"},
		{"fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", false, ""},
		{"memory bomb", "x = []\nwhile True:\n    x.append(bytearray(10**7))\n", false, "MemoryError"},
		{"one huge allocation", "x = bytearray(10**10)\n" + correctF, false, "MemoryError"},
		{"setsid and a double fork", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1000)\n    os._exit(0)\n" + correctF, true, ""},
		{"kill the parent", "import os, signal\ntry:\n    os.kill(os.getppid(), 9)\nexcept OSError:\n    pass\nfor p in range(1, 400):\n    try:\n        os.kill(p, 9)\n    except OSError:\n        pass\n" + correctF, true, ""},
		{"os._exit(0) before the checks", wrongF + "import os\nos._exit(0)\n", false, "before the checks"},
		{"sys.exit(0) before the checks", wrongF + "import sys\nsys.exit(0)\n", false, "SystemExit"},
		{"a printed fake success", wrongF + "import os\nprint('PASS')\nprint('passed')\nos.write(4, b'PASS 00000000000000000000000000000000\\n')\nos.write(1, b'PASS\\n')\n", false, ""},
		{"redefining check", wrongF + "def check(candidate):\n    pass\n", false, "assertion"},
		{"redefining AssertionError", wrongF + "import builtins\nclass AE(Exception):\n    pass\nbuiltins.AssertionError = AE\nAssertionError = AE\n", false, "assertion"},
		{"rebinding a builtin the tests use", "import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n    return 0\n", false, "assertion"},
		{"atexit", wrongF + "import atexit, os\natexit.register(lambda: os.write(4, b'PASS x\\n'))\natexit.register(lambda: os._exit(0))\n", false, ""},
		{"signals", "import signal\nfor s in (signal.SIGXCPU, signal.SIGTERM, signal.SIGINT, signal.SIGALRM):\n    signal.signal(s, signal.SIG_IGN)\ndef f(x):\n    while True:\n        pass\n", false, ""},
		{"the trainer's environment", leakIf(
			"for p in ['/proc/1/environ', '/proc/%d/environ' % os.getppid(), '/proc/1/cmdline']:\n    try:\n        if '"+secret+"' in open(p).read():\n            WON = True\n    except OSError:\n        pass\nWON = WON or any('"+secret+"' in v for v in os.environ.values())\nfor d in os.listdir('/proc'):\n    for n in ('environ', 'cmdline'):\n        try:\n            if '"+secret+"' in open('/proc/%s/%s' % (d, n), errors='replace').read():\n                WON = True\n        except OSError:\n            pass",
			"WON"), false, "assertion"},
		{"the nonce from frames, gc and descriptors", leakIf(
			"import gc, re\nfound = set()\nf = sys._getframe()\nwhile f is not None:\n    found |= set(re.findall(r'[0-9a-f]{32}', repr(f.f_locals)))\n    f = f.f_back\ntry:\n    for o in gc.get_objects():\n        found |= set(re.findall(r'[0-9a-f]{32}', repr(o)[:10000]))\nexcept RuntimeError:\n    pass\nfor fd in range(3, 64):\n    try:\n        found |= set(re.findall(r'[0-9a-f]{32}', os.read(fd, 1<<16).decode('latin1')))\n    except OSError:\n        pass\nfor p in ('/proc/1/cmdline', '/proc/self/cmdline', '/proc/1/environ'):\n    try:\n        found |= set(re.findall(r'[0-9a-f]{32}', open(p, errors='replace').read()))\n    except OSError:\n        pass\nfor n in found:\n    os.write(4, ('PASS ' + n + '\\n').encode())",
			"False"), false, ""},
		{"ctypes and a trace function", leakIf("import ctypes\nWON = True", "WON") + "import sys\ntry:\n    sys.settrace(lambda *a: None)\nexcept RuntimeError:\n    pass\n", false, ""},
		{"an exception whose __str__ raises the reveal event", wrongF + "import functools, sys\nclass E(Exception):\n    __str__ = functools.partial(sys.audit, 'lanpo.checks_returned')\nraise E()\n", false, ""},
		{"finalizers that raise the reveal event", wrongF + "import gc, sys, functools\ngc.disable()\nclass D:\n    __del__ = functools.partial(sys.audit, 'lanpo.checks_returned')\nfor i in range(3):\n    a = D()\n    a.self = a\ndel a\ngc.enable()\ngc.set_threshold(1)\n", false, "assertion"},
		{"the harness's frame", leakIf("f = sys._getframe(1)\nf.f_locals['tests'] = compile('', 'x', 'exec')\nWON = True", "WON"), false, "assertion"},
		{"the harness's memory", leakIf("import re\nfor pid in ('self', '1'):\n    try:\n        maps = open(b'/proc/%s/maps' % pid.encode(), 'rb').read()\n        m = open(b'/proc/%s/mem' % pid.encode(), 'rb', buffering=0)\n    except OSError:\n        continue\n    for line in maps.splitlines():\n        a, perm = line.split()[:2]\n        lo, hi = [int(x, 16) for x in a.split(b'-')]\n        if not perm.startswith(b'r') or hi - lo > 1 << 28:\n            continue\n        try:\n            m.seek(lo)\n            for t in re.findall(rb'PASS [0-9a-f]{32}\\n', m.read(hi - lo)):\n                os.write(4, t)\n                WON = True\n        except OSError:\n            pass", "False"), false, "assertion"},
		{"a shared object of its own", leakIf("import _json, shutil, importlib.util\nshutil.copy(_json.__file__, os.environ['HOME'] + '/_json.so')\nspec = importlib.util.spec_from_file_location('_json', os.environ['HOME'] + '/_json.so')\nimportlib.util.module_from_spec(spec)\nWON = True", "WON"), false, "assertion"},
		{"a nested user namespace", leakIf("import subprocess\nWON = subprocess.run(['unshare', '-Urm', 'true']).returncode == 0", "WON"), false, "assertion"},
		{"TCP to a loopback listener", leakIf(fmt.Sprintf("c = socket.create_connection(('127.0.0.1', %d), timeout=1)\nWON = True", port), "WON"), false, "assertion"},
		{"a Unix socket in the filesystem", leakIf("c = socket.socket(socket.AF_UNIX)\nc.connect('"+sock+"')\nWON = True", "WON"), false, "assertion"},
		{"writing to /tmp, /dev/shm and outside its directory", leakIf(
			"for p in ['"+strings.Join(written, "', '")+"', os.path.expanduser('~/../"+marker+"')]:\n    try:\n        open(p, 'w').write('x')\n        WON = True\n    except OSError:\n        pass",
			"WON"), false, "assertion"},
		{"many small files", "import os\nfor i in range(100000):\n    try:\n        open(os.path.join(os.environ['HOME'], str(i)), 'w').close()\n    except OSError:\n        break\n" + correctF, true, ""},
		{"a 100 MB print", "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 10**6)\n" + correctF, true, ""},
		{"a child left running", "import subprocess\nsubprocess.Popen(['sleep', '1000'])\nimport os\nif os.fork() == 0:\n    while True:\n        pass\n" + correctF, true, ""},
		{"correct code", correctF, true, ""},
	}
	// All at once: the sandbox runs Concurrency of them at a time, and a
	// verdict must not depend on what runs beside it.
	outs := make([]CodeOutcome, len(cases))
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = s.Run(context.Background(), CodeRequest{Program: c.program, Tests: checksF, EntryPoint: "f"})
		}()
	}
	wg.Wait()
	for i, c := range cases {
		o, err := outs[i], errs[i]
		if err != nil {
			t.Errorf("%s: sandbox error %v", c.name, err)
			continue
		}
		if o.Passed != c.pass {
			t.Errorf("%s: passed %v, want %v (%s; stdout %.200q)", c.name, o.Passed, c.pass, o.Reason, o.Stdout)
		}
		if c.reason != "" && !strings.Contains(o.Reason, c.reason) {
			t.Errorf("%s: reason %q, want it to say %q", c.name, o.Reason, c.reason)
		}
		if o.Wall > time.Duration(s.cfg.WallSeconds+5)*time.Second {
			t.Errorf("%s: took %s, beyond the wall cap", c.name, o.Wall)
		}
		t.Logf("%-52s passed=%-5v %6.2fs  %s", c.name, o.Passed, o.Wall.Seconds(), o.Reason)
	}
	select {
	case <-accepted:
		t.Error("a candidate reached a listener of the host")
	default:
	}
	for _, p := range written {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a candidate wrote %s", p)
			os.Remove(p)
		}
	}
	leftovers(t, s.cfg.UID)
}

// leftovers fails on any process of the sandbox's uid (when lanpo runs as
// root) and on any zombie child of this process: a candidate's processes
// must all be gone once its run returned.
func leftovers(t *testing.T, uid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var bad []string
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			status, err := os.ReadFile("/proc/" + e.Name() + "/status")
			if err != nil {
				continue
			}
			st := string(status)
			if os.Geteuid() == 0 && strings.Contains(st, fmt.Sprintf("\nUid:\t%d\t", uid)) {
				bad = append(bad, "pid "+e.Name()+" of uid "+fmt.Sprint(uid))
			}
			if strings.Contains(st, fmt.Sprintf("\nPPid:\t%d\n", os.Getpid())) && strings.Contains(st, "State:\tZ") {
				bad = append(bad, "zombie "+e.Name())
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind: %s", strings.Join(bad, ", "))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestNaiveHarnessIsFooled shows why success is a nonce: a harness that
// takes exit status 0 for success passes a program that exits before its
// checks; the sandbox does not.
func TestNaiveHarnessIsFooled(t *testing.T) {
	s := testSandbox(t)
	program := wrongF + "import os\nos._exit(0)\n"
	naive := exec.Command(s.python, "-c", program+checksF+"check(f)\n")
	if err := naive.Run(); err != nil {
		t.Fatalf("the naive harness should take exit 0 for a pass: %v", err)
	}
	o, err := s.Run(context.Background(), CodeRequest{Program: program, Tests: checksF, EntryPoint: "f"})
	if err != nil || o.Passed {
		t.Fatalf("sandbox: passed %v, err %v: want a failure", o.Passed, err)
	}
}

// TestSandboxNone: reward.sandbox none runs the same harness with the
// limits but no isolation, in a work directory of its own that is removed
// after each run, and removes directories a dead process left at start.
func TestSandboxNone(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dir := filepath.Join(os.TempDir(), "lanpo-sandbox")
	stale := filepath.Join(dir, "999999999-1")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	c := DefaultCodeConfig()
	c.CPUSeconds, c.WallSeconds = 1, 5
	s, err := NewSandbox(SandboxNone, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("the stale directory %s is still there", stale)
	}
	for _, c := range []struct {
		program string
		pass    bool
	}{
		{correctF, true},
		{wrongF, false},
		{wrongF + "import os\nos._exit(0)\n", false},
		{"open('x', 'w').write('x')\n" + correctF, true},
		{"def f(x):\n    while True:\n        pass\n", false},
	} {
		o, err := s.Run(context.Background(), CodeRequest{Program: c.program, Tests: checksF, EntryPoint: "f"})
		if err != nil || o.Passed != c.pass {
			t.Errorf("%q: passed %v (%s), err %v; want %v", c.program, o.Passed, o.Reason, err, c.pass)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%s holds %d entries after the runs, want none", dir, len(ents))
	}
}

// TestSandboxConfig: bad reward.code keys name themselves.
func TestSandboxConfig(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Sandbox = "docker" }, `config key reward.sandbox: "docker"`},
		{func(c *Config) { c.Code.WallSeconds = 2 }, "config key reward.code.wall_seconds: 2 must be larger than code.cpu_seconds"},
		{func(c *Config) { c.Code.MemoryMB = 10 }, "config key reward.code.memory_mb: must be ≥ 64"},
		{func(c *Config) { c.Kind = KindMath; c.Sandbox = "none" }, "config key reward.sandbox: is set, but reward.kind is math"},
		{func(c *Config) { c.Kind = KindCommand; c.Command = []string{"x"}; c.Code.CPUSeconds = 5 }, "config key reward.code: is set, but reward.kind is command"},
	} {
		cfg := DefaultConfig()
		cfg.Kind = KindCode
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
	cfg := DefaultConfig()
	cfg.Kind = KindCode
	if err := cfg.Validate(); err != nil || cfg.Sandbox != SandboxNamespaces || cfg.Code != DefaultCodeConfig() {
		t.Errorf("defaults: err %v, sandbox %q, code %+v", err, cfg.Sandbox, cfg.Code)
	}
}

// TestSandboxNeighbours: a candidate that signals its process group (kill
// 0 — what os.kill(os.getppid(), 9) is in a PID namespace) does not reach
// a candidate running beside it as the same uid: each sandbox is a session
// of its own. Without that, the neighbour died and its verdict depended on
// what ran beside it.
func TestSandboxNeighbours(t *testing.T) {
	s := testSandbox(t)
	var wg sync.WaitGroup
	var slow CodeOutcome
	var slowErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		slow, slowErr = s.Run(context.Background(), CodeRequest{Program: "import time\ntime.sleep(1.5)\n" + correctF, Tests: checksF, EntryPoint: "f"})
	}()
	time.Sleep(200 * time.Millisecond)
	killer := "import os, signal, time\nfor _ in range(40):\n    for g in (0, os.getpgrp()):\n        try:\n            os.kill(-g if g else 0, signal.SIGKILL)\n        except OSError:\n            pass\n    time.sleep(0.05)\n" + correctF
	o, err := s.Run(context.Background(), CodeRequest{Program: killer, Tests: checksF, EntryPoint: "f"})
	wg.Wait()
	if err != nil || slowErr != nil || !slow.Passed {
		t.Fatalf("the neighbour: passed %v (%s), err %v; the killer: %+v, %v", slow.Passed, slow.Reason, slowErr, o, err)
	}
}

// TestCodeTask: the program a response and its problem make.
func TestCodeTask(t *testing.T) {
	he := map[string]any{"prompt": "import math\n\ndef f(x):\n    \"\"\"doc\"\"\"\n", "test": "def check(c): pass", "entry_point": "f"}
	for _, c := range []struct {
		problem  map[string]any
		response string
		program  string
	}{
		{he, "    return x\n", he["prompt"].(string) + "    return x\n"},
		{he, "Sure:\n```python\ndef f(x):\n    return x\n```\nUse it:\n```python\nprint(f(1))\n```\n", he["prompt"].(string) + "\ndef f(x):\n    return x\n"},
		{he, "```python\ndef f(x):\n    return math.floor(x)\n", he["prompt"].(string) + "\ndef f(x):\n    return math.floor(x)\n"},
		{map[string]any{"tests": []any{"assert g() == 1"}}, "```\nfirst\n```\n```py\ndef g():\n    return 1\n```", "def g():\n    return 1\n"},
		{map[string]any{"tests": "assert g() == 1"}, "```\npython\ndef g():\n    return 1\n```", "def g():\n    return 1\n"},
	} {
		task, err := CodeTask(c.problem, c.response)
		if err != nil || task.Program != c.program {
			t.Errorf("%q: program %q (%v), want %q", c.response, task.Program, err, c.program)
		}
	}
	for _, c := range []struct {
		problem map[string]any
		want    string
	}{
		{map[string]any{"prompt": "x"}, "no tests"},
		{map[string]any{"test": "def check(c): pass"}, "needs \"entry_point\""},
		{map[string]any{"tests": "assert 1", "test": "x", "entry_point": "f"}, "both"},
		{map[string]any{"tests": 3}, "want a string or a list"},
		{map[string]any{"tests": "assert 1", "entry_point": "f(x)"}, "not a Python name"},
		{nil, "no problem record"},
	} {
		if _, err := CodeTask(c.problem, "x"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.problem, err, c.want)
		}
	}
}

// TestSandboxNoneRefusesALink: none mode removes stale entries from its
// directory, so a symbolic link there (someone else's, on a shared /tmp)
// is refused rather than followed.
func TestSandboxNoneRefusesALink(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	victim := filepath.Join(tmp, "victim")
	if err := os.MkdirAll(filepath.Join(victim, "123-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(tmp, "lanpo-sandbox")); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSandbox(SandboxNone, DefaultCodeConfig()); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("err = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(victim, "123-1")); err != nil {
		t.Fatalf("the link's target lost its contents: %v", err)
	}
}
