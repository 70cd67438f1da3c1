package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeIndex serves one wheel through a PyPI-like JSON API (with a URL
// relative to the API, as some mirrors give) and byte ranges.
func fakeIndex(t *testing.T, files map[string]string, record func(name, content string) string) (*httptest.Server, *atomic.Int64) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var rec strings.Builder
	for name, content := range files {
		w, _ := zw.Create(name)
		w.Write([]byte(content))
		fmt.Fprintf(&rec, "%s,%s,%d\n", name, record(name, content), len(content))
	}
	w, _ := zw.Create("nvidia_fake-1.0.dist-info/RECORD")
	w.Write([]byte(rec.String()))
	// Padding that must not be downloaded: a large stored member.
	big, _ := zw.CreateHeader(&zip.FileHeader{Name: "nvidia/cu13/lib/libhuge.so", Method: zip.Store})
	big.Write(bytes.Repeat([]byte{7}, 5<<20))
	zw.Close()
	wheel := buf.Bytes()
	var served atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/pypi/nvidia-fake/json", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"releases": {"1.0": [{"filename": "nvidia_fake-1.0-py3-none-win_amd64.whl", "url": "../../x/bad.whl"},
			{"filename": "nvidia_fake-1.0-py3-none-manylinux2014_x86_64.whl", "url": "../../files/fake.whl"}]}}`)
	})
	mux.HandleFunc("/files/fake.whl", func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w, n: &served}
		http.ServeContent(cw, r, "fake.whl", time.Time{}, bytes.NewReader(wheel))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &served
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return c.ResponseWriter.Write(p)
}

func goodRecord(_, content string) string {
	h := sha256.Sum256([]byte(content))
	return "sha256=" + base64.RawURLEncoding.EncodeToString(h[:])
}

func TestFetchWheelFilesByRanges(t *testing.T) {
	files := map[string]string{
		"nvidia/cu13/include/cublas_v2.h": "// cublas\n",
		"nvidia/cu13/bin/nvcc":            "#!/bin/sh\n",
		"nvidia/cu13/include/other.txt":   "not wanted",
	}
	srv, served := fakeIndex(t, files, goodRecord)
	root := t.TempDir()
	w := toolkitWheel{"nvidia-fake", "1.0", "nvidia/cu13/", func(rel string) bool { return strings.HasSuffix(rel, ".h") || rel == "bin/nvcc" }}
	n, err := fetchWheelFiles(srv.URL, w, root)
	if err != nil || n != 2 {
		t.Fatalf("fetched %d files: %v", n, err)
	}
	// Files land where pip puts them: at their path in the wheel.
	if b, _ := os.ReadFile(filepath.Join(root, "nvidia", "cu13", "include", "cublas_v2.h")); string(b) != "// cublas\n" {
		t.Fatalf("header content %q", b)
	}
	if st, err := os.Stat(filepath.Join(root, "nvidia", "cu13", "bin", "nvcc")); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("bin/nvcc not executable: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "nvidia", "cu13", "include", "other.txt")); err == nil {
		t.Fatal("an unwanted file was extracted")
	}
	if got := served.Load(); got > 3<<20 {
		t.Fatalf("%d bytes served for a few small files: the wheel was downloaded, not ranged", got)
	}
}

func TestFetchWheelFilesChecksRecord(t *testing.T) {
	files := map[string]string{"nvidia/cu13/include/cublas_v2.h": "// cublas\n"}
	srv, _ := fakeIndex(t, files, func(name, content string) string { return goodRecord(name, content+"tampered") })
	w := toolkitWheel{"nvidia-fake", "1.0", "nvidia/cu13/", under("include/")}
	_, err := fetchWheelFiles(srv.URL, w, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "RECORD says") {
		t.Fatalf("a file whose sha256 differs from RECORD was accepted: %v", err)
	}
	if _, err := fetchWheelFiles(srv.URL, toolkitWheel{"nvidia-fake", "2.0", "nvidia/cu13/", under("include/")}, t.TempDir()); err == nil ||
		!strings.Contains(err.Error(), "no manylinux x86_64 wheel for version 2.0") {
		t.Fatalf("a missing version: %v", err)
	}
}

// A pip torch finds CUDA's libraries beside it (versioned files only), a
// system toolkit in lib64 (unversioned links); torch's own come first.
func TestLinkToolkitLib(t *testing.T) {
	site := t.TempDir()
	torch := filepath.Join(site, "torch")
	writeFile(t, filepath.Join(torch, "include", versionHeader), fakeVersionH)
	writeFile(t, filepath.Join(torch, "lib", "libtorch_cpu.so"), "")
	writeFile(t, filepath.Join(torch, "lib", "libc10.so"), "")
	pipLib := filepath.Join(site, "nvidia", "cu13", "lib")
	writeFile(t, filepath.Join(pipLib, "libcudart.so.12"), "")
	writeFile(t, filepath.Join(pipLib, "libcudart.so.13"), "")
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "lib64", "libcudart.so"), "")
	writeFile(t, filepath.Join(home, "lib64", "libcublas.so"), "")
	lt, err := probeLibtorch(torch)
	if err != nil {
		t.Fatal(err)
	}
	if pipSite(lt) != site {
		t.Fatalf("pipSite = %q, want %q", pipSite(lt), site)
	}
	dirs := cudaLibDirs(lt, home)
	flags, file, err := linkCUDALib("cudart", dirs)
	if err != nil || file != filepath.Join(pipLib, "libcudart.so.13") || flags[len(flags)-1] != "-l:libcudart.so.13" {
		t.Errorf("cudart: %v %s %v (want pip's libcudart.so.13)", flags, file, err)
	}
	flags, file, err = linkCUDALib("cublas", dirs)
	if err != nil || file != filepath.Join(home, "lib64", "libcublas.so") || flags[len(flags)-1] != "-lcublas" {
		t.Errorf("cublas: %v %s %v (want the toolkit's libcublas.so)", flags, file, err)
	}
	if _, _, err := linkCUDALib("cufft", dirs); err == nil || !strings.Contains(err.Error(), "libcufft.so") {
		t.Errorf("a missing library should be named: %v", err)
	}
}

func TestFindToolkitHome(t *testing.T) {
	site := t.TempDir()
	lt := &Libtorch{Root: filepath.Join(site, "torch")}
	pip := filepath.Join(site, "nvidia", "cu13")
	writeFile(t, filepath.Join(pip, "include", "cuda_runtime_api.h"), "")
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CUDA_HOME", "")
	if fileExists("/usr/local/cuda/include/cuda_runtime_api.h") {
		t.Skip("this machine has a system toolkit, which comes first")
	}
	if _, err := findCUDAHome(lt); err == nil || !strings.Contains(err.Error(), "needs nvidia-cuda-nvcc") {
		t.Errorf("pip's toolkit without nvcc: %v", err)
	}
	writeFile(t, filepath.Join(pip, "bin", "nvcc"), "")
	if h, err := findCUDAHome(lt); err != nil || h != pip {
		t.Errorf("pip's toolkit: %q %v", h, err)
	}
	other := t.TempDir()
	writeFile(t, filepath.Join(other, "include", "cuda_runtime_api.h"), "")
	writeFile(t, filepath.Join(other, "bin", "nvcc"), "#!/bin/sh\n")
	os.Chmod(filepath.Join(other, "bin", "nvcc"), 0o755)
	t.Setenv("PATH", filepath.Join(other, "bin"))
	if h, err := findCUDAHome(lt); err != nil || h != other {
		t.Errorf("nvcc on PATH: %q %v, want %s", h, err, other)
	}
	t.Setenv("CUDA_HOME", "/nonexistent")
	if _, err := findCUDAHome(lt); err == nil || !strings.Contains(err.Error(), "CUDA_HOME=/nonexistent") {
		t.Errorf("bad CUDA_HOME: %v", err)
	}
}
