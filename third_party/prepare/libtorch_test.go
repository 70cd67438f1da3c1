package main

import (
	"archive/zip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const fakeVersionH = "#define TORCH_VERSION_MAJOR 2\n#define TORCH_VERSION_MINOR 4\n#define TORCH_VERSION_PATCH 1\n"

func TestProbeLibtorchLayouts(t *testing.T) {
	t.Run("libtorch zip or pip torch dir", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, filepath.Join(root, "include", versionHeader), fakeVersionH)
		writeFile(t, filepath.Join(root, "lib", "libtorch_cpu.so"), "")
		writeFile(t, filepath.Join(root, "lib", "libc10.so"), "")
		writeFile(t, filepath.Join(root, "lib", "libtorch_cuda.so"), "")
		writeFile(t, filepath.Join(root, "lib", "libc10_cuda.so"), "")
		writeFile(t, filepath.Join(root, "share", "cmake", "Torch", "TorchConfig.cmake"), `set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=1")`)
		lt, err := probeLibtorch(root)
		if err != nil {
			t.Fatal(err)
		}
		if lt.Version != "2.4.1" || lt.ABI != 1 || !lt.HasCUDA || lt.Is21() || lt.LibDir != filepath.Join(root, "lib") {
			t.Errorf("got %+v", lt)
		}
	})
	t.Run("Debian multiarch, ABI from symbols", func(t *testing.T) {
		root := t.TempDir()
		lib := filepath.Join(root, "lib", "x86_64-linux-gnu")
		writeFile(t, filepath.Join(root, "include", versionHeader), strings.ReplaceAll(fakeVersionH, "2\n#define TORCH_VERSION_MINOR 4", "1\n#define TORCH_VERSION_MINOR 13"))
		writeFile(t, filepath.Join(lib, "libtorch_cpu.so"), "")
		writeFile(t, filepath.Join(lib, "libc10.so"), "\x00_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE\x00")
		lt, err := probeLibtorch(root)
		if err != nil {
			t.Fatal(err)
		}
		if lt.Version != "1.13.1" || lt.ABI != 1 || lt.HasCUDA || lt.LibDir != lib {
			t.Errorf("got %+v", lt)
		}
	})
	t.Run("no libraries", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, filepath.Join(root, "include", versionHeader), fakeVersionH)
		_, err := probeLibtorch(root)
		if err == nil || !strings.Contains(err.Error(), "libtorch_cpu.so") {
			t.Errorf("want an error naming libtorch_cpu.so, got %v", err)
		}
	})
	t.Run("no headers", func(t *testing.T) {
		_, err := probeLibtorch(t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "version.h") {
			t.Errorf("want an error naming version.h, got %v", err)
		}
	})
}

func TestDiscoverNamesBadLIBTORCH(t *testing.T) {
	t.Setenv("LIBTORCH", "/nonexistent/libtorch")
	_, err := discover(t.TempDir(), false, t.Logf)
	if err == nil || !strings.Contains(err.Error(), "LIBTORCH=/nonexistent/libtorch") {
		t.Fatalf("got %v", err)
	}
}

func TestBuildFlags(t *testing.T) {
	lt := &Libtorch{Root: "/lt", IncludeDir: "/lt/include", LibDir: "/lt/lib", Version: "2.1.0", ABI: 0, HasCUDA: true}
	cpu, err := newBuild(lt, false)
	if err != nil {
		t.Fatal(err)
	}
	ld := strings.Join(cpu.LDFLAGS, " ")
	if strings.Contains(ld, "cuda") || !strings.Contains(ld, "-ltorch_cpu -lc10") || !strings.Contains(ld, "-Wl,-rpath,/lt/lib") {
		t.Errorf("CPU LDFLAGS: %s", ld)
	}
	if !strings.Contains(strings.Join(cpu.CPPFLAGS, " "), "-D_GLIBCXX_USE_CXX11_ABI=0") {
		t.Errorf("CPPFLAGS lack the ABI define: %v", cpu.CPPFLAGS)
	}
	cudaHome := t.TempDir()
	writeFile(t, filepath.Join(cudaHome, "include", "cuda_runtime_api.h"), "")
	writeFile(t, filepath.Join(cudaHome, "lib64", "libcudart.so"), "")
	writeFile(t, filepath.Join(cudaHome, "lib64", "libcublas.so"), "")
	t.Setenv("CUDA_HOME", cudaHome)
	gpu, err := newBuild(lt, true)
	if err != nil {
		t.Fatal(err)
	}
	ld = strings.Join(gpu.LDFLAGS, " ")
	if !strings.Contains(ld, "-Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed") {
		t.Errorf("CUDA LDFLAGS must keep libtorch_cuda under --no-as-needed: %s", ld)
	}
	if !strings.Contains(ld, "-lcudart") || !strings.Contains(ld, "-lcublas") || strings.Contains(ld, "allow-shlib-undefined") {
		t.Errorf("CUDA LDFLAGS: %s", ld)
	}
	if !strings.Contains(ld, "-Wl,-rpath,") {
		t.Errorf("CUDA LDFLAGS without a RUNPATH: %s", ld)
	}
	// LANPO_NO_RPATH=1 (the GPU bundle's binaries): no RUNPATH at all.
	t.Setenv("LANPO_NO_RPATH", "1")
	bare, err := newBuild(lt, true)
	if err != nil {
		t.Fatal(err)
	}
	if ld := strings.Join(bare.LDFLAGS, " "); strings.Contains(ld, "rpath") || !strings.Contains(ld, "-L/lt/lib") || !strings.Contains(ld, "-lcudart") {
		t.Errorf("LANPO_NO_RPATH=1 LDFLAGS: %s", ld)
	}
	t.Setenv("LANPO_NO_RPATH", "")
	lt.HasCUDA = false
	if _, err := newBuild(lt, true); err == nil {
		t.Error("CUDA=1 with a CPU-only libtorch was accepted")
	}
}

func TestExtractWheelKeepsOnlyWhatIsAsked(t *testing.T) {
	dir := t.TempDir()
	whl := filepath.Join(dir, "torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl")
	f, _ := os.Create(whl)
	z := zip.NewWriter(f)
	for _, name := range []string{"torch/include/a.h", "torch/lib/libtorch_cpu.so", "torch/lib/libtorch_cuda.so",
		"torch/lib/libgomp-a34b3233.so.1", "torch/share/cmake/Torch/TorchConfig.cmake", "torch/__init__.py"} {
		w, _ := z.Create(name)
		w.Write([]byte(name))
	}
	z.Close()
	f.Close()
	root := filepath.Join(dir, "out")
	n, err := extractWheel(whl, torchSpecs["2.1.0"].wheels[0], root)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("extracted %d files, want 4", n)
	}
	for _, p := range []string{"include/a.h", "lib/libtorch_cpu.so", "lib/libgomp-a34b3233.so.1", "share/cmake/Torch/TorchConfig.cmake"} {
		if !fileExists(filepath.Join(root, p)) {
			t.Errorf("%s not extracted", p)
		}
	}
	for _, p := range []string{"lib/libtorch_cuda.so", "__init__.py"} {
		if fileExists(filepath.Join(root, p)) {
			t.Errorf("%s extracted but not wanted", p)
		}
	}
}

func TestTruncatedWheelIsRemoved(t *testing.T) {
	cache := t.TempDir()
	dl := filepath.Join(cache, "wheels")
	spec := torchSpecs["2.1.0"]
	whl := filepath.Join(dl, "torch-"+spec.version+"-cp311-cp311-manylinux1_x86_64.whl")
	writeFile(t, whl, "PK\x03\x04 this is not a whole zip")
	err := buildWheelLibtorch(cache, filepath.Join(cache, "lt"), spec, t.Logf)
	if err == nil || !strings.Contains(err.Error(), whl) {
		t.Fatalf("want an error naming %s, got %v", whl, err)
	}
	if fileExists(whl) {
		t.Error("the broken wheel was kept; the next run would fail the same way")
	}
	if fileExists(filepath.Join(cache, "lt")) {
		t.Error("a partial libtorch was left in place")
	}
}

// torch 2.9 moved the version defines into torch/headeronly/version.h,
// which torch/version.h only includes (seen in the 2.11 wheel).
func TestReadTorchVersionFollowsHeaderOnly(t *testing.T) {
	inc := filepath.Join(t.TempDir(), "include")
	writeFile(t, filepath.Join(inc, versionHeader), "#pragma once\n#if !defined(TORCH_STABLE_ONLY)\n#include <torch/headeronly/version.h>\n#endif\n")
	writeFile(t, filepath.Join(inc, "torch", "headeronly", "version.h"),
		"#define TORCH_VERSION_MAJOR 2\n#define TORCH_VERSION_MINOR 11\n#define TORCH_VERSION_PATCH 0\n#define TORCH_VERSION_ABI_TAG 0\n")
	v, err := readTorchVersion(filepath.Join(inc, versionHeader))
	if err != nil || v != "2.11.0" {
		t.Fatalf("got %q, %v; want 2.11.0", v, err)
	}
	os.Remove(filepath.Join(inc, "torch", "headeronly", "version.h"))
	if _, err := readTorchVersion(filepath.Join(inc, versionHeader)); err == nil || !strings.Contains(err.Error(), "headeronly/version.h") {
		t.Errorf("a missing included header should be named, got %v", err)
	}
}

func TestCXXStandardFromHeaders(t *testing.T) {
	for _, c := range []struct{ guard, want string }{
		{"#if !defined(__cplusplus) || (!defined(_MSC_VER) && __cplusplus < 201703L)\n#error C++17\n#endif\n", "c++17"},
		{"#if __cplusplus < 202002L\n#error \"C++20 or later compatible compiler is required to use PyTorch.\"\n#endif\n", "c++20"},
		{"", "c++17"},
	} {
		inc := t.TempDir()
		if c.guard != "" {
			writeFile(t, filepath.Join(inc, "c10", "util", "C++17.h"), c.guard)
		}
		if got := cxxStandard(inc); got != c.want {
			t.Errorf("guard %q: got %s, want %s", c.guard, got, c.want)
		}
	}
}

func TestVersionLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		less bool
	}{{"2.9.1", "2.11.0", true}, {"2.11.0", "2.9.1", false}, {"2.1.0", "2.1.0", false}, {"2.1", "2.1.1", true}} {
		if got := versionLess(c.a, c.b); got != c.less {
			t.Errorf("versionLess(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

func TestChosenTorch(t *testing.T) {
	t.Setenv("LANPO_TORCH", "")
	if s, err := chosenTorch(); err != nil || s.version != defaultTorch {
		t.Errorf("default: %+v %v", s, err)
	}
	t.Setenv("LANPO_TORCH", "2.1.0")
	if s, err := chosenTorch(); err != nil || s.version != "2.1.0" || s.root != "." {
		t.Errorf("2.1.0: %+v %v", s, err)
	}
	t.Setenv("LANPO_TORCH", "1.99.0")
	if _, err := chosenTorch(); err == nil || !strings.Contains(err.Error(), "LANPO_TORCH=1.99.0") || !strings.Contains(err.Error(), "2.1.0, 2.11.0") {
		t.Errorf("unknown version: %v", err)
	}
}

// The 2.11 libtorch is laid out as pip installs it: libtorch_cpu.so finds
// the CUDA runtime through its RPATH, $ORIGIN/../../nvidia/cu13/lib.
func TestTorch211SpecIsPipLayout(t *testing.T) {
	s := torchSpecs["2.11.0"]
	if s.root != "torch" || s.wheels[0].into != "torch" {
		t.Fatalf("%+v", s)
	}
	for _, w := range s.wheels[1:] {
		if w.into != "nvidia/cu13/lib" {
			t.Errorf("%s goes to %s", w.req, w.into)
		}
	}
	for _, p := range []string{"lib/libtorch_cuda.so", "lib/libc10_cuda.so", "lib/libtorch_cpu.so", "include/ATen/ATen.h"} {
		if !s.wheels[0].keep(p) {
			t.Errorf("%s not kept", p)
		}
	}
	if s.wheels[0].keep("lib/libtorch_python.so") {
		t.Error("libtorch_python.so kept")
	}
}
