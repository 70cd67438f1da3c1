package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const gotchModule, gotchVersion = "github.com/sugarme/gotch", "v0.9.1"

// Build is what a preparation produces: the libtorch chosen and the flags
// every cgo package that includes torch headers compiles and links with.
type Build struct {
	Libtorch        *Libtorch
	CUDA            bool
	CUDAHome        string
	GotchDir        string
	TorchCPPFLAGS   []string // libtorch's include directories and ABI: what gotch's wrapper compiles with
	CPPFLAGS        []string // TorchCPPFLAGS plus, for CUDA builds, the toolkit's headers and -DLANPO_CUDA
	CXXFLAGS        []string
	LDFLAGS         []string
	UnavailableOps  []string
	CUDALDFLAGS     []string // the CUDA runtime and cuBLAS, as found (cudalibs.go)
	PreparedAlready bool
	Wrapper         *wrapperLib
}

func newBuild(lt *Libtorch, cuda bool) (*Build, error) {
	b := &Build{Libtorch: lt, CUDA: cuda}
	if lt.CXXStd == "" {
		lt.CXXStd = "c++17"
	}
	b.TorchCPPFLAGS = []string{
		"-I" + lt.IncludeDir,
		"-I" + filepath.Join(lt.IncludeDir, "torch", "csrc", "api", "include"),
		fmt.Sprintf("-D_GLIBCXX_USE_CXX11_ABI=%d", lt.ABI),
	}
	b.CPPFLAGS = append([]string(nil), b.TorchCPPFLAGS...)
	b.CXXFLAGS = []string{"-std=" + lt.CXXStd, "-O2", "-w"}
	b.LDFLAGS = []string{"-L" + lt.LibDir, "-Wl,-rpath," + lt.LibDir}
	if cuda {
		if !lt.HasCUDA {
			return nil, fmt.Errorf("CUDA=1 but %s has no libtorch_cuda.so/libc10_cuda.so (a CPU-only libtorch)", lt.LibDir)
		}
		home, err := findCUDAHome(lt)
		if err != nil {
			return nil, err
		}
		b.CUDAHome = home
		b.CPPFLAGS = append(b.CPPFLAGS, "-DLANPO_CUDA=1", "-I"+filepath.Join(home, "include"))
		// Beside a pip torch, pip's CUDA headers (cuSPARSE, cuSOLVER… that
		// ATen's CUDA headers include) come second, for a system toolkit
		// installed without them.
		if site := pipSite(lt); site != "" {
			if inc := filepath.Join(site, "nvidia", "cu13", "include"); inc != filepath.Join(home, "include") && fileExists(inc) {
				b.CPPFLAGS = append(b.CPPFLAGS, "-I"+inc)
			}
		}
		// Nothing references libtorch_cuda's symbols directly; without
		// --no-as-needed the linker drops it and CUDA never registers its
		// kernels with the dispatcher ("no CUDA backend" at run time).
		b.LDFLAGS = append(b.LDFLAGS, "-Wl,--no-as-needed", "-ltorch_cuda", "-lc10_cuda", "-Wl,--as-needed")
		// csrc calls the CUDA runtime, its kernels cuBLAS.
		dirs := cudaLibDirs(lt, home)
		for _, name := range []string{"cudart", "cublas"} {
			flags, _, err := linkCUDALib(name, dirs)
			if err != nil {
				return nil, fmt.Errorf("CUDA=1: %w", err)
			}
			b.CUDALDFLAGS = append(b.CUDALDFLAGS, flags...)
		}
		b.LDFLAGS = append(b.LDFLAGS, b.CUDALDFLAGS...)
		// For link checks on machines without the CUDA libraries that
		// libtorch_cuda needs (cudacheck.go): only libtorch's references
		// into them stay unresolved, never lanpo's.
		if os.Getenv("LANPO_ALLOW_SHLIB_UNDEFINED") == "1" {
			b.LDFLAGS = append(b.LDFLAGS, "-Wl,--allow-shlib-undefined")
		}
	}
	// gotch's wrapper is a static library now, so a package that links
	// gotch without any C++ of its own is linked by gcc, not g++: the C++
	// runtime and libm must be named.
	b.LDFLAGS = append(b.LDFLAGS, "-ltorch_cpu", "-lc10", "-lstdc++", "-lm")
	// Binaries for another machine (the GPU bundle's prebuilt ones) carry
	// no RUNPATH into this machine's libtorch: there LD_LIBRARY_PATH finds
	// that machine's, and a library it lacks cannot be found here instead.
	if os.Getenv("LANPO_NO_RPATH") == "1" {
		b.LDFLAGS = withoutRPath(b.LDFLAGS)
		b.CUDALDFLAGS = withoutRPath(b.CUDALDFLAGS)
	}
	return b, nil
}

// withoutRPath is flags without their -Wl,-rpath,DIR entries.
func withoutRPath(flags []string) []string {
	var out []string
	for _, f := range flags {
		if !strings.HasPrefix(f, "-Wl,-rpath,") {
			out = append(out, f)
		}
	}
	return out
}

func (b *Build) kind() string {
	if b.CUDA {
		return "cuda"
	}
	return "cpu"
}

// gotchSource returns gotch's source directory: LANPO_GOTCH_SRC (a local
// copy, e.g. the offline GPU bundle's, which needs no go command and no
// network), else the module cache's, which the go command downloads if
// needed (the Go proxy serves gotch by explicit version only).
func gotchSource() (string, error) {
	if dir := os.Getenv("LANPO_GOTCH_SRC"); dir != "" {
		if !fileExists(filepath.Join(dir, "libtch", wrapperGenerated)) || !fileExists(filepath.Join(dir, "ts")) {
			return "", fmt.Errorf("LANPO_GOTCH_SRC=%s is not gotch %s's source (no libtch/%s or ts/)", dir, gotchVersion, wrapperGenerated)
		}
		return dir, nil
	}
	cmd := exec.Command("go", "mod", "download", "-json", gotchModule+"@"+gotchVersion)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w (offline? set LANPO_GOTCH_SRC to a copy of its source)", gotchModule, gotchVersion, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download: %w", err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", gotchModule, gotchVersion, info.Error)
	}
	return info.Dir, nil
}

// stamp identifies a preparation: this program's source, gotch's location
// and everything about the libtorch and flags. A changed stamp means the
// prepared copy is rebuilt.
func (b *Build) stamp(gotchSrc string) string {
	h := sha256.New()
	for _, name := range gotchSources {
		src, err := toolFS.ReadFile(name)
		if err != nil {
			panic("prepare: embedded source missing: " + name)
		}
		h.Write(src)
	}
	lt := b.Libtorch
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n%d\n%s\n", gotchSrc, lt.IncludeDir, lt.LibDir, lt.Version, lt.ABI, b.kind())
	fmt.Fprintf(h, "%q %q %q %s\n", b.CPPFLAGS, b.CXXFLAGS, b.LDFLAGS, b.Wrapper.Dir)
	if st, err := os.Stat(filepath.Join(lt.LibDir, "libtorch_cpu.so")); err == nil {
		fmt.Fprintf(h, "%d %d\n", st.Size(), st.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// prepareGotch makes (or reuses) the patched copy of gotch for this build:
// its Go packages, with gotch's C++ compiled beforehand into a static
// library (wrapper.go) that the copy's libtch links instead of compiling it.
func prepareGotch(b *Build, cacheDir string, logf func(string, ...any)) error {
	src, err := gotchSource()
	if err != nil {
		return err
	}
	if b.Wrapper, err = buildWrapper(b, src, cacheDir, logf); err != nil {
		return err
	}
	b.UnavailableOps = b.Wrapper.Unavailable
	stamp := b.stamp(src)
	lt := b.Libtorch
	// One stable directory per libtorch and kind: cgo flags carry absolute
	// paths, so a stable location lets Go's build cache serve every clone.
	b.GotchDir = filepath.Join(cacheDir, "gotch", fmt.Sprintf("%s-torch%s-abi%d-%s-%s",
		gotchVersion, lt.Version, lt.ABI, b.kind(), stamp[:10]))
	stampFile := filepath.Join(b.GotchDir, ".lanpo-stamp")
	if got, err := os.ReadFile(stampFile); err == nil && strings.TrimSpace(string(got)) == stamp {
		b.PreparedAlready = true
		logf("gotch: prepared copy is up to date: %s", b.GotchDir)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(b.GotchDir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(b.GotchDir), ".prep-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logf("gotch: preparing %s@%s for libtorch %s (%s, C++ ABI %d) in %s", gotchModule, gotchVersion, lt.Version, b.kind(), lt.ABI, b.GotchDir)
	if err := copyTree(src, tmp); err != nil {
		return err
	}
	if err := patchTS(filepath.Join(tmp, "ts")); err != nil {
		return err
	}
	lib := filepath.Join(tmp, "libtch")
	if err := patchTorchAPIHeader(filepath.Join(lib, "torch_api.h")); err != nil {
		return err
	}
	// The C++ is in the library; left here, go build would compile it again.
	for _, f := range []string{wrapperMain, wrapperGenerated} {
		if err := os.Remove(filepath.Join(lib, f)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(lib, "lib.go"), []byte(libGo(b)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(lib, "lanpo_prepared.go"), []byte(preparedGo(b)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".lanpo-stamp"), []byte(stamp+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(b.GotchDir); err != nil {
		return err
	}
	if err := os.Rename(tmp, b.GotchDir); err != nil {
		// Another build prepared the same copy concurrently; use it if it is complete.
		if got, rerr := os.ReadFile(stampFile); rerr == nil && strings.TrimSpace(string(got)) == stamp {
			return nil
		}
		return err
	}
	return nil
}

// patchTS applies the ts package rewrites and checks each found what it
// expects, so a different gotch fails here rather than misbehaving later.
func patchTS(dir string) error {
	want := map[string]int{"malloc": 2000, "fatal": 2500, "bigStruct": 1, "torchErr": 1, "inplace": 250}
	got := map[string]int{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		s := string(b)
		var n int
		s, n = fixListOut(s)
		got["list"] += n
		s, n = fixMallocOut(s)
		got["malloc"] += n
		s, n = fixFatal(s)
		got["fatal"] += n
		s, n = fixBigStruct(s)
		got["bigStruct"] += n
		s, n = fixTorchErr(s)
		got["torchErr"] += n
		s, n = fixInplaceHandle(s)
		got["inplace"] += n
		if s != string(b) {
			if err := os.WriteFile(p, []byte(ensureUsed(s, "unsafe", "log")), 0o644); err != nil {
				return err
			}
		}
	}
	for k, min := range want {
		if got[k] < min {
			return fmt.Errorf("patch gotch ts: expected at least %d %s rewrites, made %d (not gotch %s?)", min, k, got[k], gotchVersion)
		}
	}
	return nil
}

// patchFile applies one rewrite that must change exactly one place.
func patchFile(path string, fix func(string) (string, int)) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s, n := fix(string(b))
	if n != 1 {
		return fmt.Errorf("patch %s: expected 1 rewrite, made %d (not gotch %s?)", path, n, gotchVersion)
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func libGo(b *Build) string {
	return fmt.Sprintf(`// Code generated by lanpo third_party/prepare for libtorch %s (%s); DO NOT EDIT.

package libtch

// gotch's C++ (torch_api.cpp and its generated ops) is compiled into
// %s.

// #cgo CPPFLAGS: -I${SRCDIR}
// #cgo CFLAGS: -O2 -w
// #cgo LDFLAGS: -L%s -lgotch_wrapper %s
import "C"
`, b.Libtorch.Version, b.kind(), b.Wrapper.lib(), b.Wrapper.Dir, strings.Join(b.LDFLAGS, " "))
}

func preparedGo(b *Build) string {
	var ops strings.Builder
	for _, op := range b.UnavailableOps {
		fmt.Fprintf(&ops, "\t%q,\n", op)
	}
	lt := b.Libtorch
	return fmt.Sprintf(`// Code generated by lanpo third_party/prepare; DO NOT EDIT.

package libtch

// What this copy of gotch was prepared for.
const (
	LanpoLibtorchDir     = %q
	LanpoLibtorchVersion = %q
	LanpoLibtorchSource  = %q
	LanpoCXX11ABI        = %d
	LanpoCUDA            = %v
	LanpoGotchVersion    = %q
)

// LanpoUnavailableOps lists the generated ops that did not compile against
// this libtorch; each now returns an error naming itself.
var LanpoUnavailableOps = []string{
%s}
`, lt.Root, lt.Version, lt.Source, lt.ABI, b.CUDA, gotchVersion, ops.String())
}

// copyTree copies gotch without its examples and tests; the module cache is
// read-only, the copy is writable.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if rel == "example" || rel == "gen" || rel == ".git" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if strings.HasSuffix(p, "_test.go") || !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(filepath.Join(dst, rel), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
