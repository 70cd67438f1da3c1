// Package gpu_test checks scripts/gpu/validate.sh's logic with stand-ins
// for the GPU machine (nvidia-smi, the bundle's binaries, torch's library
// directory): what it runs, what it writes, and when it fails. The real
// binaries and libraries are exercised by make gpu-rehearsal (docs/gpu.md).
package gpu_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A stand-in lanpo: `env --json` prints what FAKE_CUDA says (or fails to
// start with FAKE_START=fail); `bench generate` prints lanpo's object, then
// the whole one (or exits 3 in between with FAKE_HF=crash, or reports
// hf_error with FAKE_HF=error); other
// benchmarks print one object.
const fakeLanpo = `#!/bin/sh
case "$1" in
env)
	if [ "$FAKE_START" = fail ]; then echo "lanpo: symbol lookup error: undefined symbol: _ZN3c105Error" >&2; exit 127; fi
	echo "{\"built_with_cuda\":true,\"cuda_available\":${FAKE_CUDA:-true}}" ;;
bench)
	case "$2" in
	generate)
		echo '{"lanpo_tokens_per_s":1000.5,"hf_pending":true}'
		[ "$FAKE_HF" = crash ] && exit 3
		[ "$FAKE_HF" = error ] && { echo '{"lanpo_tokens_per_s":1000.5,"hf_error":"out of memory"}'; exit 0; }
		echo '{"lanpo_tokens_per_s":1000.5,"lanpo_over_hf":2.5}' ;;
	*) echo '{"speedup":3.25}' ;;
	esac ;;
*) exit 2 ;;
esac
`

// A stand-in test binary: passes one GPU test when run from its package's
// directory with LANPO_REQUIRE_CUDA=1 set (as on a GPU), skips it without.
const fakeTest = `#!/bin/sh
echo "=== RUN   TestCUDAThing"
if [ ! -f here.txt ]; then echo "    thing_test.go:9: not run from its package directory"; echo "--- FAIL: TestCUDAThing (0.00s)"; exit 1; fi
if [ "$LANPO_REQUIRE_CUDA" = 1 ]; then echo "--- PASS: TestCUDAThing (0.25s)"; else printf '    thing_test.go:7: no CUDA here ≈ × "quoted" \\ back\ttab\n'; echo "--- SKIP: TestCUDAThing (0.00s)"; fi
echo PASS
`

const fakeSMI = "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 580.159, 81559 MiB'\n"

// machine is a scratch checkout with validate.sh, a bundle of the given
// files (name → content; executables), a torch directory and a stub
// nvidia-smi.
type machine struct {
	root, out string
	env       []string
}

func newMachine(t *testing.T, bundle map[string]string, smi bool) *machine {
	t.Helper()
	root := t.TempDir()
	m := &machine{root: root, out: filepath.Join(root, "out")}
	for _, f := range []string{"validate.sh", "lib.sh"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, "scripts", "gpu", f), string(b), 0o755)
	}
	write(t, filepath.Join(root, "pkg", "here.txt"), "", 0o644)
	write(t, filepath.Join(root, "internal", "other", "here.txt"), "", 0o644)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range bundle {
		if err := tw.WriteHeader(&tar.Header{Name: "./" + name, Mode: 0o755, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	tarPath := filepath.Join(root, "bin.tar")
	write(t, tarPath, buf.String(), 0o644)
	if len(bundle) > 0 {
		os.MkdirAll(filepath.Join(root, "gpu-bundle"), 0o755)
		if out, err := exec.Command("sh", "-c", "xz -c "+tarPath+" > "+filepath.Join(root, "gpu-bundle", "bin.tar.xz")).CombinedOutput(); err != nil {
			t.Fatalf("xz: %v %s", err, out)
		}
	}
	stub := filepath.Join(root, "stub")
	os.MkdirAll(stub, 0o755)
	if smi {
		write(t, filepath.Join(stub, "nvidia-smi"), fakeSMI, 0o755)
	}
	torch := filepath.Join(root, "site", "torch")
	os.MkdirAll(filepath.Join(torch, "lib"), 0o755)
	m.env = []string{"PATH=" + stub + ":/usr/bin:/bin", "HOME=" + root, "OUT=" + m.out,
		"LANPO_GPU_WORK=" + filepath.Join(root, "work"), "LIBTORCH=" + torch}
	return m
}

func write(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// run runs validate.sh with args and extra environment; it returns the
// exit code.
func (m *machine) run(t *testing.T, extra []string, args ...string) int {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(m.root, "scripts", "gpu", "validate.sh")}, args...)...)
	cmd.Env = append(append([]string{}, m.env...), extra...)
	out, err := cmd.CombinedOutput()
	t.Logf("validate.sh %v: %v\n%s", args, err, out)
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

func (m *machine) file(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.out, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rows reads a .jsonl file, failing on a line that is not JSON.
func (m *machine) rows(t *testing.T, name string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(m.file(t, name)), "\n") {
		if l == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s: %v: %s", name, err, l)
		}
		rows = append(rows, r)
	}
	return rows
}

func prebuilt() map[string]string {
	return map[string]string{"bin/lanpo": fakeLanpo, "tests/pkg.test": fakeTest, "tests/internal_other.test": fakeTest,
		"tests/packages": "pkg.test ./pkg\ninternal_other.test ./internal/other\n"}
}

func needTools(t *testing.T) {
	for _, tool := range []string{"bash", "xz", "python3", "ldd", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("validate.sh needs %s: %v", tool, err)
		}
	}
}

// One call on a GPU machine: the prebuilt binaries run, every test and
// benchmark lands in its file with lanpo's figures, in the order of the
// list, and the summary says which binaries ran.
func TestValidateAllOnAGPU(t *testing.T) {
	needTools(t)
	m := newMachine(t, prebuilt(), true)
	if rc := m.run(t, nil, "all"); rc != 0 {
		t.Fatalf("exit %d", rc)
	}
	tests := m.rows(t, "test.jsonl")
	pkgs := map[any]bool{}
	for _, r := range tests {
		pkgs[r["package"]] = true
		if r["name"] != "TestCUDAThing" || r["status"] != "pass" {
			t.Errorf("test.jsonl: %v", r)
		}
	}
	if len(tests) != 2 || !pkgs["pkg"] || !pkgs["internal/other"] {
		t.Errorf("test.jsonl: %v", tests)
	}
	benches := m.rows(t, "bench.jsonl")
	var names []string
	for _, b := range benches {
		names = append(names, b["name"].(string))
		if b["status"] != "ok" {
			t.Errorf("%s: %v", b["name"], b)
		}
		res, _ := b["result"].(map[string]any)
		if strings.HasPrefix(b["name"].(string), "generate") && (res["lanpo_over_hf"] != 2.5 || res["hf_pending"] != nil) {
			t.Errorf("%s: want the whole object, the last line: %v", b["name"], res)
		}
	}
	want := "logprob-7b-forward logprob-7b-forward-backward generate-0.5b grpo-step-0.5b generate-7b generate-0.5b-top-p long-tail-0.5b"
	if strings.Join(names, " ") != want {
		t.Errorf("benchmarks ran as %v, want %s", names, want)
	}
	var facts map[string]any
	if err := json.Unmarshal([]byte(m.file(t, "facts.json")), &facts); err != nil {
		t.Fatalf("facts.json: %v", err)
	}
	if facts["binaries"] != "prebuilt" || facts["lanpo_env"] == nil || !strings.Contains(facts["gpu"].(string), "H100") {
		t.Errorf("facts: %v", facts)
	}
	sum := m.file(t, "summary.md")
	for _, s := range []string{"Binaries: prebuilt", "| pkg.TestCUDAThing | pass |", "| generate-7b | ok |", "lanpo_over_hf 2.5", "speedup 3.25"} {
		if !strings.Contains(sum, s) {
			t.Errorf("summary.md lacks %q:\n%s", s, sum)
		}
	}
	entries, _ := os.ReadDir(m.out)
	if len(entries) != 6 {
		t.Errorf("%d files in OUT, want the 6 docs/gpu.md names", len(entries))
	}
}

// Loud failures: lanpo that cannot start exits 1 and, when a library is
// missing, says which and does not try a rebuild; a GPU that nvidia-smi
// lists and lanpo does not see exits 1 with the reason in build.log.
func TestValidateFailsLoudly(t *testing.T) {
	needTools(t)
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatalf("gcc: %v", err)
	}
	t.Run("missing library", func(t *testing.T) {
		// A real ELF lanpo that needs a library the machine lacks.
		dir := t.TempDir()
		write(t, filepath.Join(dir, "gone.c"), "int gone(void) { return 0; }\n", 0o644)
		write(t, filepath.Join(dir, "main.c"), "int gone(void);\nint main(void) { return gone(); }\n", 0o644)
		for _, c := range [][]string{{"gcc", "-shared", "-fPIC", "-o", "libgone.so", "gone.c"}, {"gcc", "-o", "lanpo", "main.c", "-L.", "-lgone"}} {
			cmd := exec.Command(c[0], c[1:]...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v %s", c, err, out)
			}
		}
		elf, _ := os.ReadFile(filepath.Join(dir, "lanpo"))
		b := prebuilt()
		b["bin/lanpo"] = string(elf)
		m := newMachine(t, b, true)
		if rc := m.run(t, nil, "all"); rc != 1 {
			t.Fatalf("exit %d, want 1", rc)
		}
		log := m.file(t, "build.log")
		if !strings.Contains(log, "libgone.so => not found") || !strings.Contains(log, "LD_DEBUG=libs lines for libgone.so") {
			t.Errorf("build.log does not name the missing library:\n%s", log)
		}
		if facts := m.file(t, "facts.json"); strings.Contains(log, "building from source") || !strings.Contains(facts, "not found: libgone.so (a rebuild needs them too)") {
			t.Errorf("a missing library should stop the call without a rebuild (which would need it too):\n%s\n%s", log, facts)
		}
		if sum := m.file(t, "summary.md"); !strings.Contains(sum, "| lanpo starts | fail |") {
			t.Errorf("summary.md:\n%s", sum)
		}
	})
	t.Run("does not start, no fallback", func(t *testing.T) {
		m := newMachine(t, prebuilt(), true)
		if rc := m.run(t, []string{"FAKE_START=fail"}, "all"); rc != 1 {
			t.Fatalf("exit %d, want 1", rc)
		}
		log := m.file(t, "build.log")
		if !strings.Contains(log, "undefined symbol") || !strings.Contains(m.file(t, "facts.json"), "no source build to fall back on") {
			t.Errorf("build.log or facts.json do not say why:\n%s\n%s", log, m.file(t, "facts.json"))
		}
	})
	t.Run("GPU listed, not seen", func(t *testing.T) {
		m := newMachine(t, prebuilt(), true)
		if rc := m.run(t, []string{"FAKE_CUDA=false"}, "all"); rc != 1 {
			t.Fatalf("exit %d, want 1", rc)
		}
		if log := m.file(t, "build.log"); !strings.Contains(log, "lists a GPU") || !strings.Contains(log, "LD_DEBUG=libs lines for libcuda.so") {
			t.Errorf("build.log:\n%s", log)
		}
	})
	t.Run("no GPU", func(t *testing.T) {
		// Without a GPU (the rehearsal): the tests run and skip, the
		// benchmarks are "skip", exit 0.
		m := newMachine(t, prebuilt(), false)
		if rc := m.run(t, []string{"FAKE_CUDA=false"}, "all"); rc != 0 {
			t.Fatalf("exit %d, want 0", rc)
		}
		tests, benches := m.rows(t, "test.jsonl"), m.rows(t, "bench.jsonl")
		if len(tests) != 2 || tests[0]["status"] != "skip" || tests[0]["reason"] != "thing_test.go:7: no CUDA here ≈ × \"quoted\" \\ back\ttab" {
			t.Errorf("test.jsonl: %v", tests)
		}
		if len(benches) != 7 || benches[0]["status"] != "skip" || benches[0]["reason"] != "no GPU" {
			t.Errorf("bench.jsonl: %v", benches)
		}
	})
}

// A baseline that dies after lanpo's figures, or reports an error, leaves
// them as "partial" (and exit 1); a benchmark name that does not exist
// fails; on a GPU, a call out of time fails what it could not start.
func TestValidateKeepsPartialResults(t *testing.T) {
	needTools(t)
	m := newMachine(t, prebuilt(), true)
	if rc := m.run(t, []string{"FAKE_HF=crash"}, "bench", "generate-0.5b", "logprob-7b-forward"); rc != 1 {
		t.Fatalf("exit %d, want 1", rc)
	}
	benches := m.rows(t, "bench.jsonl")
	if len(benches) != 2 || benches[0]["name"] != "logprob-7b-forward" || benches[0]["status"] != "ok" {
		t.Fatalf("bench.jsonl: %v", benches)
	}
	g := benches[1]
	res, _ := g["result"].(map[string]any)
	if g["status"] != "partial" || g["exit"] != 3.0 || res["lanpo_tokens_per_s"] != 1000.5 {
		t.Errorf("generate-0.5b: %v", g)
	}

	m = newMachine(t, prebuilt(), true)
	if rc := m.run(t, []string{"FAKE_HF=error"}, "bench", "generate-7b", "generate-70b"); rc != 1 {
		t.Fatalf("exit %d, want 1", rc)
	}
	benches = m.rows(t, "bench.jsonl")
	if len(benches) != 2 || benches[0]["name"] != "generate-70b" || benches[0]["status"] != "fail" || benches[1]["status"] != "partial" {
		t.Errorf("bench.jsonl: %v", benches)
	}
	if sum := m.file(t, "summary.md"); !strings.Contains(sum, "baseline failed: out of memory") {
		t.Errorf("summary.md does not say the baseline failed:\n%s", sum)
	}

	m = newMachine(t, prebuilt(), true)
	if rc := m.run(t, []string{"LANPO_GPU_BUDGET_S=1"}, "all"); rc != 1 {
		t.Fatalf("exit %d, want 1", rc)
	}
	for _, f := range []string{"test.jsonl", "bench.jsonl"} {
		rows := m.rows(t, f)
		for _, r := range rows {
			if r["status"] != "fail" || !strings.HasPrefix(r["reason"].(string), "out of time") {
				t.Errorf("%s: %v", f, r)
			}
		}
		if len(rows) == 0 {
			t.Errorf("%s is empty", f)
		}
	}
}
