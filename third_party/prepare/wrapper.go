package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// gotch's C++ wrapper (libtch/torch_api.cpp, which includes the 2,500
// generated ops of torch_api_generated.cpp.h) is one translation unit of
// ~1 MB that takes minutes to compile, and `go build` compiles a package's
// C++ files one after another. prepare compiles it instead: the generated
// ops split into parts, all parts compiled in parallel with g++, into a
// static library that the prepared gotch links. The library depends only on
// libtorch's headers and the compile flags, so CPU and CUDA builds of one
// libtorch share it, and a generated op that does not compile against this
// libtorch is replaced by a stub (stubs.go) in the same pass.

// wrapperLib is a compiled wrapper in the cache.
type wrapperLib struct {
	Dir         string // cache/gotch-wrapper/<hash>
	Unavailable []string
	Times       []fileTime
}

func (w *wrapperLib) lib() string { return filepath.Join(w.Dir, "libgotch_wrapper.a") }

// fileTime is one compiled file and the CPU time g++ spent on it.
type fileTime struct {
	File    string  `json:"file"`
	CPUSecs float64 `json:"cpu_s"`
	Bytes   int     `json:"bytes"`
}

// wrapperSources are gotch's files the wrapper is built from.
var wrapperSources = []string{"torch_api.cpp", "torch_api.h", "torch_api_generated.cpp.h", "torch_api_generated.h",
	"stb_image.h", "stb_image_resize.h", "stb_image_write.h"}

const (
	wrapperMain      = "torch_api.cpp"
	wrapperGenerated = "torch_api_generated.cpp.h"
)

// wrapperFlags are the flags gotch's C++ compiles with: libtorch's headers
// and ABI, the C++ standard its headers need, position-independent code
// (the library goes into Go's cgo link).
func wrapperFlags(b *Build) []string {
	return append([]string{"-std=" + b.Libtorch.CXXStd, "-O2", "-w", "-fPIC", "-I."}, b.TorchCPPFLAGS...)
}

// wrapperRecipe names how this file turns gotch's sources into the library
// (splitting, flags, stubbing rounds). Change it with any change here that
// changes the library's content; other edits here (messages, parallelism)
// then keep the cached library. stubs.go and patch.go are hashed whole.
const wrapperRecipe = "split-parts-1"

// wrapperKey hashes everything the library's content depends on.
func wrapperKey(b *Build, libtch string) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, wrapperRecipe)
	for _, name := range []string{"stubs.go", "patch.go"} {
		src, err := toolFS.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("prepare: embedded source missing: %s", name)
		}
		h.Write(src)
	}
	for _, f := range wrapperSources {
		src, err := os.ReadFile(filepath.Join(libtch, f))
		if err != nil {
			return "", err
		}
		h.Write(src)
	}
	fmt.Fprintf(h, "%q %s %s\n", wrapperFlags(b), b.Libtorch.Version, compilerVersion())
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func cxx() string {
	if c := os.Getenv("CXX"); c != "" {
		return c
	}
	return "g++"
}

func compilerVersion() string {
	out, _ := exec.Command(cxx(), "--version").Output()
	first, _, _ := strings.Cut(string(out), "\n")
	return first
}

// buildJobs is how many compilers run at once: LANPO_BUILD_JOBS, else one
// per CPU.
func buildJobs() int {
	if n, err := strconv.Atoi(os.Getenv("LANPO_BUILD_JOBS")); err == nil && n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// wrapperParts is how many parts the generated ops are split into: each
// part pays ~13 s of CPU for parsing torch's headers, so no more parts than
// compilers: the parts and the main file make one wave of jobs
// (LANPO_GOTCH_PARTS overrides, for measurements).
func wrapperParts(jobs int) int {
	if n, err := strconv.Atoi(os.Getenv("LANPO_GOTCH_PARTS")); err == nil && n > 0 {
		return n
	}
	return max(2, jobs-1)
}

// buildWrapper returns the compiled wrapper for this libtorch and these
// flags, compiling it on first use.
func buildWrapper(b *Build, gotchSrc, cache string, logf func(string, ...any)) (*wrapperLib, error) {
	libtch := filepath.Join(gotchSrc, "libtch")
	key, err := wrapperKey(b, libtch)
	if err != nil {
		return nil, err
	}
	w := &wrapperLib{Dir: filepath.Join(cache, "gotch-wrapper", key)}
	if ops, err := os.ReadFile(filepath.Join(w.Dir, "unavailable.txt")); err == nil && fileExists(w.lib()) {
		w.Unavailable = strings.Fields(string(ops))
		logf("gotch: compiled wrapper is up to date: %s", w.lib())
		return w, nil
	}
	if err := os.MkdirAll(filepath.Dir(w.Dir), 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(w.Dir), ".wrapper-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for _, f := range wrapperSources {
		if err := copyFile(filepath.Join(libtch, f), filepath.Join(tmp, f)); err != nil {
			return nil, err
		}
	}
	if err := patchTorchAPIHeader(filepath.Join(tmp, "torch_api.h")); err != nil {
		return nil, err
	}
	jobs := buildJobs()
	parts := wrapperParts(jobs)
	logf("gotch: compiling its C++ wrapper for libtorch %s (-std=%s) in %d parts, %d at a time", b.Libtorch.Version, b.Libtorch.CXXStd, parts+1, jobs)
	start := time.Now()
	objs, stubbed, times, err := compileWrapper(tmp, wrapperMain, wrapperGenerated, parts, wrapperFlags(b), jobs, b.Libtorch.Version, logf)
	if err != nil {
		return nil, err
	}
	wall := time.Since(start)
	if err := runLogged(logf, "ar", append([]string{"rcs", filepath.Join(tmp, "libgotch_wrapper.a")}, objs...)...); err != nil {
		return nil, err
	}
	for _, o := range objs {
		os.Remove(o)
	}
	w.Unavailable, w.Times = stubbed, times
	var cpu, longest float64
	for _, t := range times {
		cpu += t.CPUSecs
		longest = max(longest, t.CPUSecs)
	}
	logf("gotch: wrapper compiled in %.0f s wall, %.0f s CPU over %d files (longest %.0f s); %d generated ops stubbed",
		wall.Seconds(), cpu, len(times), longest, len(stubbed))
	report, _ := json.MarshalIndent(map[string]any{"jobs": jobs, "parts": parts, "wall_s": wall.Seconds(), "files": times,
		"libtorch": b.Libtorch.Version, "std": b.Libtorch.CXXStd, "compiler": compilerVersion()}, "", " ")
	if err := os.WriteFile(filepath.Join(tmp, "timings.json"), report, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "unavailable.txt"), []byte(strings.Join(stubbed, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	os.RemoveAll(w.Dir)
	if err := os.Rename(tmp, w.Dir); err != nil {
		if fileExists(w.lib()) { // prepared concurrently by another build
			return w, nil
		}
		return nil, err
	}
	return w, nil
}

// patchTorchAPIHeader applies gotch's header rewrites: the error guard
// (fixProtect) and the error slot declared, not defined, in the parts.
func patchTorchAPIHeader(path string) error {
	if err := patchFile(path, fixProtect); err != nil {
		return err
	}
	return patchFile(path, fixLastErrDefinition)
}

// fixLastErrDefinition: torch_api.h defines gotch's thread-local error slot,
// which is right for one translation unit; the parts declare it instead, and
// the main file keeps the one definition.
func fixLastErrDefinition(src string) (string, int) {
	const old = "thread_local char *torch_last_err = nullptr;\n"
	const repl = "#ifdef LANPO_GOTCH_PART\nextern thread_local char *torch_last_err;\n#else\nthread_local char *torch_last_err = nullptr;\n#endif\n"
	return strings.Replace(src, old, repl, 1), strings.Count(src, old)
}

var includeLine = regexp.MustCompile(`^\s*#\s*include\s+["<]([^">]+)[">]`)

// splitWrapper rewrites dir/mainFile without its #include of genFile and
// writes the generated functions into parts files part_NN.cpp of about
// equal size, each starting with mainFile's own includes (without the stb
// image implementations). It returns the part file names.
func splitWrapper(dir, mainFile, genFile string, parts int) ([]string, error) {
	mainSrc, err := os.ReadFile(filepath.Join(dir, mainFile))
	if err != nil {
		return nil, err
	}
	var prelude []string
	var kept []string
	found := 0
	for _, l := range strings.Split(string(mainSrc), "\n") {
		if m := includeLine.FindStringSubmatch(l); m != nil {
			if m[1] == genFile {
				found++
				continue
			}
			if !strings.HasPrefix(m[1], "stb_") {
				prelude = append(prelude, l)
			}
		}
		kept = append(kept, l)
	}
	if found != 1 {
		return nil, fmt.Errorf("%s includes %s %d times, want once (not gotch %s?)", mainFile, genFile, found, gotchVersion)
	}
	if err := os.WriteFile(filepath.Join(dir, mainFile), []byte(strings.Join(kept, "\n")), 0o644); err != nil {
		return nil, err
	}
	genSrc, err := os.ReadFile(filepath.Join(dir, genFile))
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(genSrc), "\n")
	fns := parseGenerated(string(genSrc))
	if len(fns) == 0 {
		return nil, fmt.Errorf("%s: no generated functions found", genFile)
	}
	head := "// Part of " + genFile + ", split by lanpo's third_party/prepare to compile in parallel.\n" +
		"#define LANPO_GOTCH_PART 1\n" + strings.Join(prelude, "\n") + "\nusing namespace std;\n\n"
	parts = min(parts, len(fns))
	target := (len(genSrc) + parts - 1) / parts
	var names []string
	var body strings.Builder
	flush := func() error {
		name := fmt.Sprintf("part_%02d.cpp", len(names))
		names = append(names, name)
		err := os.WriteFile(filepath.Join(dir, name), []byte(head+body.String()), 0o644)
		body.Reset()
		return err
	}
	for i, fn := range fns {
		body.WriteString(strings.Join(lines[fn.start:fn.end+1], "\n"))
		body.WriteString("\n\n")
		if body.Len() >= target && i < len(fns)-1 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return names, nil
}

// compileWrapper splits the wrapper (splitWrapper) and compiles every file
// into an object, jobs at a time. A part that fails has its failing
// generated functions stubbed (stubs.go) and is compiled again, up to five
// rounds; an error anywhere else is not stubbable and fails the build. It
// returns the objects, the stubbed ops (sorted) and the CPU time per file
// of the last compile of each.
func compileWrapper(dir, mainFile, genFile string, parts int, flags []string, jobs int, torchVersion string,
	logf func(string, ...any)) ([]string, []string, []fileTime, error) {
	names, err := splitWrapper(dir, mainFile, genFile, parts)
	if err != nil {
		return nil, nil, nil, err
	}
	files := append([]string{mainFile}, names...)
	times := map[string]fileTime{}
	stubbed := map[string]bool{}
	todo := files
	for round := 1; len(todo) > 0; round++ {
		if round > 5 {
			return nil, nil, nil, fmt.Errorf("gotch's wrapper still fails to compile against libtorch %s after 5 rounds of stubbing", torchVersion)
		}
		results := compileAll(dir, todo, flags, jobs)
		var again []string
		for _, r := range results {
			times[r.file] = r.time
			if r.err != nil {
				return nil, nil, nil, r.err
			}
			if r.ok {
				continue
			}
			if r.file == mainFile {
				return nil, nil, nil, fmt.Errorf("gotch's %s does not compile against libtorch %s (not stubbable):\n%s",
					mainFile, torchVersion, firstErrors(r.out, 10))
			}
			src, err := os.ReadFile(filepath.Join(dir, r.file))
			if err != nil {
				return nil, nil, nil, err
			}
			fns := parseGenerated(string(src))
			bad, other := failingFunctions(r.out, r.file, fns)
			for n := range bad {
				if stubbed[n] {
					delete(bad, n) // already a stub: the error is elsewhere
				}
			}
			if len(bad) == 0 {
				return nil, nil, nil, fmt.Errorf("%s (gotch's generated ops) does not compile against libtorch %s outside the generated functions (not stubbable):\n%s",
					r.file, torchVersion, strings.Join(other[:min(len(other), 10)], "\n"))
			}
			for n := range bad {
				stubbed[n] = true
			}
			if err := os.WriteFile(filepath.Join(dir, r.file), []byte(stubFunctions(string(src), fns, bad, torchVersion)), 0o644); err != nil {
				return nil, nil, nil, err
			}
			again = append(again, r.file)
		}
		if len(again) > 0 {
			logf("gotch: compile round %d: stubbing %d generated ops that do not compile against libtorch %s", round, len(stubbed), torchVersion)
		}
		todo = again
	}
	var objs []string
	var ft []fileTime
	for _, f := range files {
		objs = append(objs, filepath.Join(dir, objName(f)))
		ft = append(ft, times[f])
	}
	return objs, sortedKeys(stubbed), ft, nil
}

func objName(file string) string { return strings.TrimSuffix(file, filepath.Ext(file)) + ".o" }

// firstErrors returns the compiler's first n error lines, or the end of its
// output when it printed none (killed, out of memory).
func firstErrors(out string, n int) string {
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if errorLine.MatchString(l) && len(errs) < n {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 {
		out = strings.TrimSpace(out)
		return out[max(0, len(out)-2000):]
	}
	return strings.Join(errs, "\n")
}

type compileResult struct {
	file string
	ok   bool   // compiled
	out  string // the compiler's output
	err  error  // the compiler could not be run at all
	time fileTime
}

// compileAll runs the compiler on each file, jobs at a time, largest first
// so the longest file does not start last.
func compileAll(dir string, files, flags []string, jobs int) []compileResult {
	order := append([]string(nil), files...)
	size := map[string]int{}
	for _, f := range order {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
			size[f] = int(st.Size())
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return size[order[i]] > size[order[j]] })
	results := make([]compileResult, len(order))
	sem := make(chan struct{}, max(1, jobs))
	var wg sync.WaitGroup
	for i, f := range order {
		wg.Add(1)
		go func(i int, f string) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			args := append(append([]string{"-c"}, flags...), f, "-o", objName(f))
			cmd := exec.Command(cxx(), args...)
			cmd.Dir = dir
			var buf bytes.Buffer
			cmd.Stdout, cmd.Stderr = &buf, &buf
			runErr := cmd.Run()
			if runErr != nil {
				fmt.Fprintf(&buf, "\n%s: %v", cxx(), runErr)
			}
			r := compileResult{file: f, out: buf.String(), ok: runErr == nil}
			if cmd.ProcessState != nil {
				r.time = fileTime{File: f, CPUSecs: (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds(), Bytes: size[f]}
			}
			if _, exit := runErr.(*exec.ExitError); runErr != nil && !exit {
				r.err = fmt.Errorf("%s: %w", cxx(), runErr)
			}
			results[i] = r
		}(i, f)
	}
	wg.Wait()
	return results
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
