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
	t.Setenv("CUDA_HOME", cudaHome)
	gpu, err := newBuild(lt, true)
	if err != nil {
		t.Fatal(err)
	}
	ld = strings.Join(gpu.LDFLAGS, " ")
	if !strings.Contains(ld, "-Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed") {
		t.Errorf("CUDA LDFLAGS must keep libtorch_cuda under --no-as-needed: %s", ld)
	}
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
	n, err := extractWheel(whl, wheels[0], root)
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
	whl := filepath.Join(dl, "torch-"+wheelTorchVersion+"-cp311-cp311-manylinux1_x86_64.whl")
	writeFile(t, whl, "PK\x03\x04 this is not a whole zip")
	err := buildWheelLibtorch(cache, filepath.Join(cache, "lt"), t.Logf)
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
