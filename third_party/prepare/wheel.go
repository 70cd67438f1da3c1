package main

import (
	"archive/zip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// The libtorch for development on a machine without one is cut out of PyPI
// wheels: torch itself (headers, cmake files, libtorch_cpu, libc10, the
// bundled libgomp) and the small CUDA runtime wheels that libtorch_cpu.so
// names in DT_NEEDED (libcudart for its CUDA hooks, libcupti for the kineto
// profiler). They only have to load; nothing calls into CUDA on a CPU
// machine. Two versions are known: the one gotch v0.9.1 was generated for,
// and the one the GPU machines (and users in 2026) run.

// torchSpec says how one torch version's libtorch is cut out of its wheels.
type torchSpec struct {
	version string
	dir     string // directory name in the cache
	root    string // the libtorch root inside dir (LIBTORCH for the build)
	wheels  []wheelSpec
}

type wheelSpec struct {
	req    string            // pip requirement
	prefix string            // path prefix inside the wheel
	keep   func(string) bool // relative path (after prefix) → extract?
	into   string            // destination relative to the spec's directory
}

// keepCPU keeps what a CPU build compiles and links against.
func keepCPU(p string) bool {
	switch {
	case strings.HasPrefix(p, "include/"), strings.HasPrefix(p, "share/cmake/"):
		return true
	case p == "lib/libtorch_cpu.so", p == "lib/libc10.so":
		return true
	case strings.HasPrefix(p, "lib/libgomp"):
		return true
	}
	return false
}

var torchSpecs = map[string]torchSpec{
	// torch 2.1.0 (pre-cxx11 ABI, CUDA 12.1): the flat libtorch layout,
	// include/ and lib/ at the top, the CUDA runtime libraries in lib/.
	// Versions pinned by torch 2.1.0's own requirements.
	"2.1.0": {version: "2.1.0", dir: "libtorch-2.1.0-cpu", root: ".",
		wheels: []wheelSpec{
			{req: "torch==2.1.0", prefix: "torch/", into: ".", keep: keepCPU},
			{req: "nvidia-cuda-runtime-cu12==12.1.105", prefix: "nvidia/cuda_runtime/lib/", into: "lib",
				keep: func(p string) bool { return p == "libcudart.so.12" }},
			{req: "nvidia-cuda-cupti-cu12==12.1.105", prefix: "nvidia/cuda_cupti/lib/", into: "lib",
				keep: func(p string) bool { return p == "libcupti.so.12" }},
		}},
	// torch 2.11.0 (cxx11 ABI, CUDA 13.0): laid out as pip installs it, a
	// site-packages with torch/ and nvidia/cu13/lib/ side by side, so
	// libtorch's own RPATH ($ORIGIN/../../nvidia/cu13/lib) finds the runtime
	// exactly as on a GPU machine. It also keeps libtorch_cuda and
	// libc10_cuda: `make cuda-check` links a CUDA=1 build against them.
	// Versions pinned by torch 2.11.0's requirements (cuda-toolkit 13.0.2).
	"2.11.0": {version: "2.11.0", dir: "torch-2.11.0-cu130", root: "torch",
		wheels: []wheelSpec{
			{req: "torch==2.11.0", prefix: "torch/", into: "torch", keep: func(p string) bool {
				return keepCPU(p) || p == "lib/libtorch_cuda.so" || p == "lib/libc10_cuda.so" || p == "lib/libtorch_nvshmem.so"
			}},
			{req: "nvidia-cuda-runtime==13.0.96", prefix: "nvidia/cu13/lib/", into: "nvidia/cu13/lib",
				keep: func(p string) bool { return p == "libcudart.so.13" }},
			{req: "nvidia-cuda-cupti==13.0.85", prefix: "nvidia/cu13/lib/", into: "nvidia/cu13/lib",
				keep: func(p string) bool { return p == "libcupti.so.13" }},
		}},
}

// defaultTorch is the libtorch `make` uses when LIBTORCH and LANPO_TORCH are
// unset; README.md ("How libtorch is found") says why.
const defaultTorch = "2.11.0"

// knownTorchVersions lists torchSpecs' keys, oldest first, for messages.
func knownTorchVersions() string {
	var vs []string
	for v := range torchSpecs {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return versionLess(vs[i], vs[j]) })
	return strings.Join(vs, ", ")
}

// chosenTorch is the spec LANPO_TORCH names, or the default.
func chosenTorch() (torchSpec, error) {
	v := os.Getenv("LANPO_TORCH")
	if v == "" {
		v = defaultTorch
	}
	s, ok := torchSpecs[v]
	if !ok {
		return torchSpec{}, fmt.Errorf("LANPO_TORCH=%s: lanpo knows how to fetch torch %s (or point LIBTORCH at any libtorch)", v, knownTorchVersions())
	}
	return s, nil
}

// buildWheelLibtorch downloads the wheels (kept in cacheDir/wheels so a
// second attempt does not download again) and extracts the libtorch into
// dest, atomically: a temporary directory renamed into place at the end.
func buildWheelLibtorch(cacheDir, dest string, spec torchSpec, logf func(string, ...any)) error {
	dl := filepath.Join(cacheDir, "wheels")
	if err := os.MkdirAll(dl, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(cacheDir, ".libtorch-tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, w := range spec.wheels {
		path, err := downloadWheel(dl, w.req, logf)
		if err != nil {
			return err
		}
		n, err := extractWheel(path, w, tmp)
		if err != nil {
			// Most likely a download cut short: drop it so the next run
			// fetches it again instead of failing the same way.
			os.Remove(path)
			return fmt.Errorf("extract %s (removed; run make deps again to download it anew): %w", path, err)
		}
		if n == 0 {
			return fmt.Errorf("%s holds none of the files lanpo needs under %s", path, w.prefix)
		}
		logf("libtorch: extracted %d files from %s", n, filepath.Base(path))
	}
	if err := os.RemoveAll(dest); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}

// wheelPlatforms are the pip platform tags accepted for x86-64 Linux
// wheels: torch 2.11's is manylinux_2_28, cupti 13's manylinux_2_25, the
// CUDA 13 runtime's manylinux_2_17, torch 2.1's manylinux1.
var wheelPlatforms = []string{"manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_25_x86_64",
	"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"}

// downloadWheel fetches one wheel with pip (pip knows the index, proxies
// and certificates the user configured). Only x86-64 Linux wheels for
// CPython 3.11 are taken: the CUDA runtime wheels are py3-none, torch's
// cp311.
func downloadWheel(dir, req string, logf func(string, ...any)) (string, error) {
	name, version, _ := strings.Cut(req, "==")
	prefix := strings.ReplaceAll(name, "-", "_") + "-" + version + "-"
	if p := findWheel(dir, prefix); p != "" {
		return p, nil
	}
	python := "python3"
	if p := os.Getenv("PYTHON"); p != "" {
		python = p
	}
	logf("libtorch: pip download %s (once; kept in %s)", req, dir)
	args := []string{"-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp"}
	for _, p := range wheelPlatforms {
		args = append(args, "--platform", p)
	}
	cmd := exec.Command(python, append(args, "--progress-bar", "off", "-d", dir, req)...)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s -m pip download %s: %w (offline? point LIBTORCH at a libtorch instead)", python, req, err)
	}
	if p := findWheel(dir, prefix); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("pip download %s left no wheel in %s", req, dir)
}

func findWheel(dir, namePrefix string) string {
	m, _ := filepath.Glob(filepath.Join(dir, namePrefix+"*.whl"))
	if len(m) == 0 {
		return ""
	}
	return m[0]
}

func extractWheel(path string, w wheelSpec, root string) (int, error) {
	z, err := zip.OpenReader(path)
	if err != nil {
		return 0, err
	}
	defer z.Close()
	n := 0
	for _, f := range z.File {
		rel, ok := strings.CutPrefix(f.Name, w.prefix)
		if !ok || strings.HasSuffix(f.Name, "/") || !w.keep(rel) {
			continue
		}
		// Wheels are data from the network: refuse paths that climb out.
		if strings.Contains(rel, "..") || filepath.IsAbs(rel) {
			return n, fmt.Errorf("unsafe path %q in wheel", f.Name)
		}
		dst := filepath.Join(root, w.into, rel)
		if err := extractFile(f, dst); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func extractFile(f *zip.File, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	r, err := f.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	mode := os.FileMode(0o644)
	if strings.Contains(filepath.Base(dst), ".so") {
		mode = 0o755
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
