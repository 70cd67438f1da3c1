package main

import (
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// `make cuda-check` checks the CUDA build on a machine without CUDA or a GPU:
//
//  1. csrc/cuda/*.cu compile with nvcc 13.0 (PyPI) for sm_80/sm_90/sm_100,
//     warnings as errors;
//  2. a CUDA=1 lanpo compiles and links against torch 2.11's libtorch_cuda
//     (the cached PyPI build) with the CUDA 13.0 runtime and cuBLAS and
//     NCCL's header from PyPI, in a scratch copy of the checkout, through
//     scripts/docker/build.sh (the Docker image's build steps) — every
//     include and every symbol lanpo's own code uses resolved. The machine
//     lacks the CUDA libraries libtorch_cuda itself needs (cuDNN, cuBLASLt,
//     NCCL…, gigabytes), so the link runs with LANPO_ALLOW_SHLIB_UNDEFINED=1:
//     the linker leaves libtorch's references into them unresolved, and
//     still fails on any of lanpo's own;
//  3. lanpo's C++ and gotch's hand-written wrapper compile (syntax only)
//     against the headers of the newest torch on PyPI, read out of its
//     wheel by range requests, with the C++ standard those headers ask for.
//
// Nothing runs: the GPU machines do that (scripts/gpu/validate.sh).

const (
	cudaCheckTorch = "2.11.0" // the torch the GPU machines run
	newestTorch    = "2.15.0" // the newest torch on PyPI, headers only
)

func cudaCheck(repo, cache string, logf func(string, ...any)) error {
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	lt, err := cachedLibtorch(cache, torchSpecs[cudaCheckTorch], logf)
	if err != nil {
		return err
	}
	site := pipSite(lt)
	if site == "" {
		return fmt.Errorf("cuda-check: %s is not laid out as pip installs torch", lt.Root)
	}
	home, err := cudaToolkit(site, cache, logf)
	if err != nil {
		return err
	}
	// 1. The kernels, into a scratch cache so they always compile.
	tmp, err := os.MkdirTemp("", "lanpo-cuda-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	kb := &Build{Libtorch: lt, CUDAHome: home}
	lib, n, err := buildCUDAKernels(kb, repo, tmp, logf, "-Werror=all-warnings")
	if err != nil {
		return err
	}
	if !fileExists(lib) {
		return fmt.Errorf("cuda-check: the kernel build left no %s", lib)
	}
	// 2. The CUDA=1 build, compiled and linked.
	needed, dist, err := cudaLinkCheck(repo, lt, home, logf)
	if err != nil {
		return err
	}
	// 3. The newest torch's headers.
	newest, err := newestHeadersCheck(repo, cache, home, logf)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "prepare: cuda-check ok: %d kernel file(s) built for sm_80, sm_90, sm_100 with nvcc 13.0 (PyPI); "+
		"a CUDA=1 lanpo links against torch %s (%s) with %s; %s; %s\n",
		n, lt.Version, lt.Source, strings.Join(needed, ", "), dist, newest)
	return nil
}

// cudaLinkCheck builds lanpo with CUDA=1 in a scratch copy of the checkout
// (the checkout's own go.work and csrc flags stay as they are) by running
// scripts/docker/build.sh, the Docker image's build steps, and returns the
// CUDA libraries the binary needs and its distributed support.
func cudaLinkCheck(repo string, lt *Libtorch, home string, logf func(string, ...any)) ([]string, string, error) {
	scratch, err := os.MkdirTemp("", "lanpo-cuda-link-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(scratch)
	if err := copyCheckout(repo, scratch); err != nil {
		return nil, "", err
	}
	cmd := exec.Command("bash", filepath.Join(scratch, "scripts", "docker", "build.sh"))
	cmd.Dir = scratch
	var env []string
	for _, kv := range os.Environ() {
		// make runs prepare with GOWORK=off; the build needs the scratch go.work.
		if k, _, _ := strings.Cut(kv, "="); k != "GOWORK" && k != "CUDA" && k != "LIBTORCH" && k != "CUDA_HOME" && k != "LANPO_TORCH" {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "LIBTORCH="+lt.Root, "CUDA_HOME="+home, "LANPO_ALLOW_SHLIB_UNDEFINED=1",
		"DEST="+filepath.Join(scratch, "out"), "VERSION=cuda-check", "PATH="+filepath.Dir(goCommand())+string(os.PathListSeparator)+os.Getenv("PATH"))
	logf("scripts/docker/build.sh (CUDA=1 against %s, in %s)", lt.Root, scratch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("cuda-check: scripts/docker/build.sh (CUDA=1 against libtorch %s): %w\n%s", lt.Version, err, out)
	}
	// The binary is kept as bin/lanpo-cuda-check for inspection (readelf -d).
	bin := filepath.Join(repo, "bin", "lanpo-cuda-check")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return nil, "", err
	}
	if err := copyFile(filepath.Join(scratch, "out", "lanpo"), bin); err != nil {
		return nil, "", err
	}
	f, err := elf.Open(bin)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, "", err
	}
	have := map[string]bool{}
	for _, l := range libs {
		have[l] = true
	}
	want := []string{"libtorch_cuda.so", "libc10_cuda.so", "libcudart.so.13", "libcublas.so.13"}
	for _, l := range want {
		if !have[l] {
			return nil, "", fmt.Errorf("cuda-check: the CUDA=1 lanpo does not need %s (it needs %v)", l, libs)
		}
	}
	flags, err := os.ReadFile(filepath.Join(scratch, "csrc", "zz_cgo_flags.go"))
	if err != nil {
		return nil, "", err
	}
	dist := "distributed: gloo"
	switch {
	case !strings.Contains(string(flags), "-DUSE_C10D_GLOO"):
		dist = "no distributed support"
	case strings.Contains(string(flags), "-DUSE_C10D_NCCL"):
		dist = "distributed: gloo and nccl"
	}
	return want, dist, nil
}

func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// copyCheckout copies the checkout's files, without git's data, build
// outputs, run directories and generated files.
func copyCheckout(repo, dst string) error {
	skipDir := map[string]bool{".git": true, "bin": true, "runs": true, "gpu-bundle": true}
	skipFile := map[string]bool{"go.work": true, "go.work.sum": true, filepath.Join("csrc", "zz_cgo_flags.go"): true}
	return filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, p)
		if d.IsDir() {
			if skipDir[rel] {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if skipFile[rel] || !d.Type().IsRegular() {
			return nil
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
}

// newestHeaders returns the include directory of the newest torch, read out
// of its wheel on first use into the cache.
func newestHeaders(cache string, logf func(string, ...any)) (string, error) {
	dir := filepath.Join(cache, "torch-"+newestTorch+"-headers")
	inc := filepath.Join(dir, "torch", "include")
	stamp := filepath.Join(dir, ".lanpo-stamp")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == newestTorch+"\n" {
		return inc, nil
	}
	tmp, err := os.MkdirTemp(cache, ".headers-tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	w := toolkitWheel{"torch", newestTorch, "torch/", under("include/", "share/cmake/Torch/")}
	n, err := fetchWheelFiles(pypiIndex(), w, tmp)
	if err != nil {
		return "", fmt.Errorf("torch %s headers from PyPI: %w", newestTorch, err)
	}
	logf("cuda: %d header files of torch %s", n, newestTorch)
	if err := os.WriteFile(filepath.Join(tmp, ".lanpo-stamp"), []byte(newestTorch+"\n"), 0o644); err != nil {
		return "", err
	}
	os.RemoveAll(dir)
	return inc, os.Rename(tmp, dir)
}

// newestHeadersCheck compiles (syntax only) csrc's C++ — CUDA, Gloo and
// NCCL branches included — and gotch's hand-written wrapper (which, unlike
// its generated ops, cannot be stubbed) against the newest torch's headers.
func newestHeadersCheck(repo, cache, cudaHome string, logf func(string, ...any)) (string, error) {
	inc, err := newestHeaders(cache, logf)
	if err != nil {
		return "", err
	}
	root := filepath.Dir(inc)
	lt := &Libtorch{Root: root, IncludeDir: inc, LibDir: filepath.Join(root, "lib")}
	if lt.Version, err = readTorchVersion(filepath.Join(inc, versionHeader)); err != nil {
		return "", err
	}
	lt.CXXStd = cxxStandard(inc)
	if lt.ABI, err = readABI(lt); err != nil {
		return "", err
	}
	b, err := newBuild(lt, false)
	if err != nil {
		return "", err
	}
	flags := append([]string{"-fsyntax-only", "-std=" + lt.CXXStd, "-w", "-DLANPO_CUDA=1", "-I" + filepath.Join(cudaHome, "include")}, b.TorchCPPFLAGS...)
	gloo, err := findGloo(cache, pinnedGlooDeb, logf)
	if err == nil {
		flags = append(flags, "-DLANPO_DIST", "-DUSE_C10D_GLOO", "-DUSE_C10D_NCCL", "-I"+gloo,
			"-I"+filepath.Join(filepath.Dir(cudaHome), "nccl", "include"))
	}
	srcs, err := filepath.Glob(filepath.Join(repo, "csrc", "*.cpp"))
	if err != nil {
		return "", err
	}
	// gotch's torch_api.cpp without the generated ops it includes.
	gotchSrc, err := gotchSource()
	if err != nil {
		return "", err
	}
	wdir, err := os.MkdirTemp("", "lanpo-newest-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(wdir)
	for _, f := range wrapperSources {
		if err := copyFile(filepath.Join(gotchSrc, "libtch", f), filepath.Join(wdir, f)); err != nil {
			return "", err
		}
	}
	if err := patchTorchAPIHeader(filepath.Join(wdir, "torch_api.h")); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(wdir, wrapperGenerated), nil, 0o644); err != nil {
		return "", err
	}
	files := []string{filepath.Join(wdir, wrapperMain)}
	for _, s := range srcs {
		files = append(files, s)
	}
	logf("cuda: compiling %d files against torch %s's headers (-std=%s)", len(files), lt.Version, lt.CXXStd)
	for _, r := range compileAll(wdir, files, append(flags, "-I"+wdir), buildJobs()) {
		if r.err != nil {
			return "", r.err
		}
		if !r.ok {
			return "", fmt.Errorf("cuda-check: %s does not compile against torch %s's headers (-std=%s):\n%s",
				filepath.Base(r.file), lt.Version, lt.CXXStd, firstErrors(r.out, 10))
		}
	}
	what := "csrc's C++ (CUDA branches)"
	if gloo != "" {
		what = "csrc's C++ (CUDA, Gloo and NCCL branches)"
	}
	return fmt.Sprintf("%s and gotch's wrapper compile against torch %s's headers with -std=%s", what, lt.Version, lt.CXXStd), nil
}
