package main

import (
	"archive/zip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The CPU libtorch for development is cut out of PyPI wheels: torch itself
// (headers, cmake files, libtorch_cpu, libc10, the bundled libgomp) and the
// two small CUDA runtime wheels that libtorch_cpu.so names in DT_NEEDED
// (libcudart for its CUDA hooks, libcupti for the kineto profiler). They only
// have to load; nothing calls into CUDA on a CPU machine.
const wheelTorchVersion = "2.1.0"

type wheelSpec struct {
	req    string            // pip requirement
	prefix string            // path prefix inside the wheel
	keep   func(string) bool // relative path (after prefix) → extract?
	into   string            // destination relative to the libtorch root
}

var wheels = []wheelSpec{
	{req: "torch==" + wheelTorchVersion, prefix: "torch/", into: ".", keep: func(p string) bool {
		switch {
		case strings.HasPrefix(p, "include/"), strings.HasPrefix(p, "share/cmake/"):
			return true
		case p == "lib/libtorch_cpu.so", p == "lib/libc10.so":
			return true
		case strings.HasPrefix(p, "lib/libgomp"):
			return true
		}
		return false
	}},
	// Versions pinned by torch 2.1.0's own requirements.
	{req: "nvidia-cuda-runtime-cu12==12.1.105", prefix: "nvidia/cuda_runtime/lib/", into: "lib",
		keep: func(p string) bool { return p == "libcudart.so.12" }},
	{req: "nvidia-cuda-cupti-cu12==12.1.105", prefix: "nvidia/cuda_cupti/lib/", into: "lib",
		keep: func(p string) bool { return p == "libcupti.so.12" }},
}

// buildWheelLibtorch downloads the wheels (kept in cacheDir/wheels so a
// second attempt does not download again) and extracts the CPU libtorch into
// dest, atomically: a temporary directory renamed into place at the end.
func buildWheelLibtorch(cacheDir, dest string, logf func(string, ...any)) error {
	dl := filepath.Join(cacheDir, "wheels")
	if err := os.MkdirAll(dl, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(cacheDir, ".libtorch-tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, w := range wheels {
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
		logf("libtorch: extracted %d files from %s", n, filepath.Base(path))
	}
	if err := os.RemoveAll(dest); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}

func downloadWheel(dir, req string, logf func(string, ...any)) (string, error) {
	name := strings.ReplaceAll(strings.SplitN(req, "==", 2)[0], "-", "_") + "-" + strings.SplitN(req, "==", 2)[1] + "-"
	if p := findWheel(dir, name); p != "" {
		return p, nil
	}
	python := "python3"
	if p := os.Getenv("PYTHON"); p != "" {
		python = p
	}
	logf("libtorch: pip download %s (once; kept in %s)", req, dir)
	cmd := exec.Command(python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
		"--python-version", "3.11", "--implementation", "cp", "--platform", "manylinux1_x86_64",
		"--progress-bar", "off", "-d", dir, req)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s -m pip download %s: %w", python, req, err)
	}
	if p := findWheel(dir, name); p != "" {
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
