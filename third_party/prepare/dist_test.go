package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// tarGz packs files (path → content) into a .tar.gz.
func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(content))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// fakeDeb builds a Debian package: an ar archive of debian-binary,
// control.tar.gz and data.tar.gz holding files.
func fakeDeb(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteString("!<arch>\n")
	member := func(name string, data []byte) {
		fmt.Fprintf(&buf, "%-16s%-12d%-6d%-6d%-8s%-10d`\n", name, 0, 0, 0, "100644", len(data))
		buf.Write(data)
		if len(data)%2 == 1 {
			buf.WriteByte('\n')
		}
	}
	member("debian-binary", []byte("2.0\n"))
	member("control.tar.gz", tarGz(t, map[string]string{"./control": "Package: libgloo-dev\nVersion: 0.0\nArchitecture: amd64\n"}))
	member("data.tar.gz", tarGz(t, files))
	return buf.Bytes()
}

var glooFiles = map[string]string{
	"./usr/include/gloo/config.h":    "#define GLOO_VERSION_MAJOR 0\n",
	"./usr/include/gloo/algorithm.h": "// algorithm\n",
	"./usr/share/doc/x/copyright":    "BSD\n",
}

// debServer serves deb at /debian/pool/main/g/gloo/<file> and counts requests.
func debServer(t *testing.T, deb []byte) (mirror string, hits *atomic.Int64) {
	hits = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/debian/"+glooDebPool+glooDebFile {
			http.NotFound(w, r)
			return
		}
		w.Write(deb)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/debian", hits
}

func sha(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// noSystemGloo points the system include directory at an empty one, so a
// machine with libgloo-dev installed tests the same paths.
func noSystemGloo(t *testing.T) {
	old := systemInclude
	systemInclude = t.TempDir()
	t.Cleanup(func() { systemInclude = old })
	t.Setenv("LANPO_GLOO_INCLUDE", "")
	t.Setenv("LANPO_DEBIAN_MIRROR", "")
}

func TestFetchGlooDeb(t *testing.T) {
	deb := fakeDeb(t, glooFiles)
	for _, route := range []string{"dpkg-deb", "ar and tar"} {
		t.Run(route, func(t *testing.T) {
			if route == "ar and tar" {
				old := lookPath
				lookPath = func(name string) (string, error) {
					if name == "dpkg-deb" {
						return "", errors.New("not found")
					}
					return old(name)
				}
				t.Cleanup(func() { lookPath = old })
			}
			if _, err := lookPath(strings.Fields(route)[0]); err != nil {
				t.Skipf("%s not on PATH", route)
			}
			cache := t.TempDir()
			dest := filepath.Join(cache, "gloo")
			srv, hits := debServer(t, deb)
			url := srv + "/" + glooDebPool + glooDebFile
			if err := fetchGlooDeb(url, sha(deb), cache, dest); err != nil {
				t.Fatal(err)
			}
			if !hasGlooHeaders(filepath.Join(dest, "usr", "include")) {
				t.Fatal("no gloo headers unpacked")
			}
			// The .deb stays in the cache: unpacking again downloads nothing.
			if err := fetchGlooDeb(url, sha(deb), cache, dest); err != nil || hits.Load() != 1 {
				t.Fatalf("second fetch: %v, %d downloads", err, hits.Load())
			}
		})
	}
}

func TestFetchGlooDebChecksSHA256(t *testing.T) {
	deb := fakeDeb(t, glooFiles)
	srv, _ := debServer(t, deb)
	cache := t.TempDir()
	dest := filepath.Join(cache, "gloo")
	err := fetchGlooDeb(srv+"/"+glooDebPool+glooDebFile, glooDebSHA256, cache, dest)
	if err == nil || !strings.Contains(err.Error(), "sha256 "+sha(deb)+", want "+glooDebSHA256) {
		t.Fatalf("a .deb with the wrong sha256 was accepted: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(cache, "debs", "*"))
	if len(left) != 0 || fileExists(dest) {
		t.Errorf("left behind: %v, dest %v", left, fileExists(dest))
	}
}

func TestFindGloo(t *testing.T) {
	headers := func(t *testing.T) string {
		dir := t.TempDir()
		for name, content := range glooFiles {
			if rel, ok := strings.CutPrefix(name, "./usr/include/"); ok {
				writeFile(t, filepath.Join(dir, rel), content)
			}
		}
		return dir
	}
	// A mirror that must not be asked.
	unused, hits := debServer(t, nil)
	t.Run("LANPO_GLOO_INCLUDE", func(t *testing.T) {
		noSystemGloo(t)
		dir := headers(t)
		t.Setenv("LANPO_GLOO_INCLUDE", dir)
		if got, err := findGloo(t.TempDir(), debSource{unused, "x"}, t.Logf); err != nil || got != dir {
			t.Fatalf("got %q, %v", got, err)
		}
		t.Setenv("LANPO_GLOO_INCLUDE", t.TempDir())
		if _, err := findGloo(t.TempDir(), debSource{unused, "x"}, t.Logf); err == nil || !strings.Contains(err.Error(), "LANPO_GLOO_INCLUDE=") {
			t.Fatalf("a LANPO_GLOO_INCLUDE without headers: %v", err)
		}
	})
	t.Run("system", func(t *testing.T) {
		noSystemGloo(t)
		systemInclude = headers(t)
		if got, err := findGloo(t.TempDir(), debSource{unused, "x"}, t.Logf); err != nil || got != systemInclude {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	t.Run("cache, filled from the mirror once", func(t *testing.T) {
		noSystemGloo(t)
		deb := fakeDeb(t, glooFiles)
		mirror, got := debServer(t, deb)
		cache := t.TempDir()
		for i := 0; i < 2; i++ {
			inc, err := findGloo(cache, debSource{mirror, sha(deb)}, t.Logf)
			if err != nil || inc != filepath.Join(glooCacheDir(cache), "usr", "include") {
				t.Fatalf("got %q, %v", inc, err)
			}
		}
		if got.Load() != 1 {
			t.Errorf("%d downloads, want 1", got.Load())
		}
	})
	t.Run("nothing anywhere", func(t *testing.T) {
		noSystemGloo(t)
		mirror, _ := debServer(t, []byte("not a deb"))
		_, err := findGloo(t.TempDir(), debSource{mirror, glooDebSHA256}, t.Logf)
		if err == nil || !strings.Contains(err.Error(), "no Gloo headers (set LANPO_GLOO_INCLUDE or apt-get install libgloo-dev)") ||
			!strings.Contains(err.Error(), "sha256") {
			t.Fatalf("got %v", err)
		}
	})
	if hits.Load() != 0 {
		t.Errorf("the mirror was asked %d times although headers were found", hits.Load())
	}
}

func TestPrepareDist(t *testing.T) {
	noSystemGloo(t)
	lt := &Libtorch{Version: "2.1.0", IncludeDir: t.TempDir()}
	d := prepareDist(lt, false, "", t.TempDir(), t.Logf)
	if !strings.Contains(d.Why, "has no include/"+processGroupGlooHeader) || len(d.CPPFLAGS) != 0 {
		t.Fatalf("libtorch without c10d Gloo: %+v", d)
	}
	if flags := csrcFlags(&Build{Libtorch: lt}, d); !strings.Contains(flags, fmt.Sprintf("const distUnavailable = %q", d.Why)) {
		t.Errorf("zz_cgo_flags.go does not carry why:\n%s", flags)
	}

	writeFile(t, filepath.Join(lt.IncludeDir, processGroupGlooHeader), "")
	gloo := t.TempDir()
	writeFile(t, filepath.Join(gloo, "gloo", "config.h"), "")
	writeFile(t, filepath.Join(gloo, "gloo", "algorithm.h"), "")
	t.Setenv("LANPO_GLOO_INCLUDE", gloo)
	d = prepareDist(lt, false, "", t.TempDir(), t.Logf)
	if d.Why != "" || strings.Join(d.CPPFLAGS, " ") != "-DLANPO_DIST -DUSE_C10D_GLOO -I"+gloo {
		t.Fatalf("CPU build: %+v", d)
	}
	flags := csrcFlags(&Build{Libtorch: lt, CPPFLAGS: []string{"-I/lt"}}, d)
	if !strings.Contains(flags, "#cgo CPPFLAGS: -I/lt -DLANPO_DIST -DUSE_C10D_GLOO -I"+gloo+"\n") || !strings.Contains(flags, `const distUnavailable = ""`) {
		t.Errorf("zz_cgo_flags.go:\n%s", flags)
	}

	// CUDA: NCCL when nccl.h is found; no NCCL library of lanpo's own.
	cudaHome := t.TempDir()
	if d := prepareDist(lt, true, cudaHome, t.TempDir(), t.Logf); d.NCCL || strings.Contains(strings.Join(d.CPPFLAGS, " "), "NCCL") {
		t.Errorf("NCCL without nccl.h: %+v", d)
	}
	writeFile(t, filepath.Join(cudaHome, "include", "nccl.h"), "")
	d = prepareDist(lt, true, cudaHome, t.TempDir(), t.Logf)
	if !d.NCCL || !strings.HasSuffix(strings.Join(d.CPPFLAGS, " "), "-DUSE_C10D_NCCL -I"+filepath.Join(cudaHome, "include")) {
		t.Errorf("CUDA build with NCCL: %+v", d)
	}
	if flags := csrcFlags(&Build{Libtorch: lt, LDFLAGS: []string{"-ltorch_cuda"}}, d); !strings.Contains(flags, "LDFLAGS: -ltorch_cuda\n") {
		t.Errorf("zz_cgo_flags.go links something for NCCL:\n%s", flags)
	}
	// LANPO_NCCL_INCLUDE wins (pip's nvidia/nccl/include).
	pip := t.TempDir()
	writeFile(t, filepath.Join(pip, "include", "nccl.h"), "")
	t.Setenv("LANPO_NCCL_INCLUDE", filepath.Join(pip, "include"))
	if d := prepareDist(lt, true, cudaHome, t.TempDir(), t.Logf); d.NCCLInclude != filepath.Join(pip, "include") {
		t.Errorf("LANPO_NCCL_INCLUDE: %+v", d)
	}
}
