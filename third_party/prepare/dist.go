package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Multi-process training (package dist) runs on torch's c10d: TCPStore and
// ProcessGroupGloo are compiled into libtorch_cpu, ProcessGroupNCCL into
// libtorch_cuda. lanpo's csrc/dist.cpp only needs their headers, and
// ProcessGroupGloo.hpp includes Gloo's own headers, which the torch wheel
// does not ship. Debian's libgloo-dev has them (headers only, so the amd64
// package serves any architecture); prepare takes them, in this order, from
//
//  1. LANPO_GLOO_INCLUDE (a directory holding gloo/config.h),
//  2. the system (/usr/include/gloo, e.g. `apt-get install libgloo-dev`),
//  3. the cache (~/.cache/lanpo/gloo-<version>/usr/include), filled on first
//     use by downloading the pinned .deb from Debian (LANPO_DEBIAN_MIRROR
//     overrides http://deb.debian.org/debian), checking its sha256, and
//     unpacking it with dpkg-deb, or ar and tar where dpkg-deb is missing.
//
// Distributed support is compiled in (-DLANPO_DIST -DUSE_C10D_GLOO) only when
// the headers are found and libtorch has ProcessGroupGloo.hpp. Otherwise the
// build goes on without it, and prepare's summary line says why; so does
// every dist call at run time.
//
// The Gloo these headers describe (0.0~git20220518) is older than the one
// inside libtorch 2.1: csrc/dist.cpp must never construct or subclass gloo
// types itself, only hand torch's own classes what they ask for.
const (
	glooDebVersion = "0.0~git20220518.5b14351-3"
	glooDebFile    = "libgloo-dev_" + glooDebVersion + "_amd64.deb"
	glooDebPool    = "pool/main/g/gloo/"
	glooDebSHA256  = "80529c9fd8af452faf489e686b94bf87075965c40673803810c4f41634b1e299"
	debianMirror   = "http://deb.debian.org/debian"

	processGroupGlooHeader = "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
)

// systemInclude is where a system-wide libgloo-dev / libnccl-dev put their
// headers; a variable so tests can point it elsewhere.
var systemInclude = "/usr/include"

// Dist is what prepare decided about distributed support for csrc.
type Dist struct {
	GlooInclude string // directory holding gloo/; "" when off
	NCCL        bool   // ProcessGroupNCCL compiled in (CUDA builds with nccl.h)
	NCCLInclude string
	Why         string   // non-empty: no distributed support, and why (one line)
	CPPFLAGS    []string // added to csrc's flags only (gotch does not need them)
}

// Summary is the one-line state for prepare's report.
func (d Dist) Summary() string {
	if d.Why != "" {
		return "distributed off: " + d.Why
	}
	s := "distributed: gloo (headers in " + d.GlooInclude + ")"
	if d.NCCL {
		s += ", nccl (nccl.h in " + d.NCCLInclude + ")"
	}
	return s
}

// prepareDist finds what csrc/dist.cpp needs and returns its flags. It never
// fails the build: anything missing turns distributed support off, with Why
// saying what.
func prepareDist(lt *Libtorch, cuda bool, cudaHome, cache string, logf func(string, ...any)) Dist {
	if !fileExists(filepath.Join(lt.IncludeDir, processGroupGlooHeader)) {
		return Dist{Why: fmt.Sprintf("libtorch %s has no include/%s", lt.Version, processGroupGlooHeader)}
	}
	inc, err := findGloo(cache, pinnedGlooDeb, logf)
	if err != nil {
		return Dist{Why: err.Error()}
	}
	d := Dist{GlooInclude: inc, CPPFLAGS: []string{"-DLANPO_DIST", "-DUSE_C10D_GLOO", "-I" + inc}}
	if cuda {
		// ProcessGroupNCCL is compiled into libtorch_cuda, which brings its
		// own NCCL (linked statically in the libtorch zips; libnccl.so.2 found
		// through its own runpath in pip's torch). lanpo links no NCCL of its
		// own: a second copy could put two NCCL versions in one process.
		// nccl.h is only needed to compile ProcessGroupNCCL.hpp.
		if inc := findNCCL(lt, cudaHome); inc == "" {
			logf("dist: CUDA build without nccl.h (looked in LANPO_NCCL_INCLUDE, pip's nvidia/nccl/include, %s/include, %s): Gloo only", cudaHome, systemInclude)
		} else {
			d.NCCL, d.NCCLInclude = true, inc
			d.CPPFLAGS = append(d.CPPFLAGS, "-DUSE_C10D_NCCL", "-I"+inc)
		}
	}
	return d
}

// debSource is where the Gloo .deb comes from and what its sha256 must be.
type debSource struct{ Mirror, SHA256 string }

var pinnedGlooDeb = debSource{Mirror: debianMirror, SHA256: glooDebSHA256}

// findGloo returns an include directory holding gloo/config.h, or an error
// (one line) saying why there is none.
func findGloo(cache string, src debSource, logf func(string, ...any)) (string, error) {
	if env := os.Getenv("LANPO_GLOO_INCLUDE"); env != "" {
		if hasGlooHeaders(env) {
			return env, nil
		}
		return "", fmt.Errorf("LANPO_GLOO_INCLUDE=%s has no gloo/config.h", env)
	}
	if hasGlooHeaders(systemInclude) {
		return systemInclude, nil
	}
	dest := glooCacheDir(cache)
	inc := filepath.Join(dest, "usr", "include")
	if hasGlooHeaders(inc) {
		return inc, nil
	}
	if m := os.Getenv("LANPO_DEBIAN_MIRROR"); m != "" {
		src.Mirror = m
	}
	url := strings.TrimRight(src.Mirror, "/") + "/" + glooDebPool + glooDebFile
	logf("dist: no Gloo headers (LANPO_GLOO_INCLUDE unset, none in %s/gloo); fetching %s once into %s", systemInclude, url, dest)
	if err := fetchGlooDeb(url, src.SHA256, cache, dest); err != nil {
		return "", fmt.Errorf("no Gloo headers (set LANPO_GLOO_INCLUDE or apt-get install libgloo-dev): %w", err)
	}
	if !hasGlooHeaders(inc) {
		return "", fmt.Errorf("%s unpacked without usr/include/gloo/config.h", glooDebFile)
	}
	return inc, nil
}

func hasGlooHeaders(inc string) bool {
	return fileExists(filepath.Join(inc, "gloo", "config.h")) && fileExists(filepath.Join(inc, "gloo", "algorithm.h"))
}

// glooCacheDir is named by the Debian version with '~' made '-', a character
// cgo accepts in flags.
func glooCacheDir(cache string) string {
	return filepath.Join(cache, "gloo-"+strings.ReplaceAll(glooDebVersion, "~", "-"))
}

// fetchGlooDeb downloads the .deb (kept in cache/debs), checks its sha256
// and unpacks it into dest, atomically: a temporary directory renamed into
// place at the end.
func fetchGlooDeb(url, sha, cache, dest string) error {
	debs := filepath.Join(cache, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return err
	}
	deb := filepath.Join(debs, filepath.Base(url))
	if got, err := fileSHA256(deb); err != nil || got != sha {
		if err := download(url, sha, deb); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp(cache, ".gloo-tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := unpackDeb(deb, tmp); err != nil {
		return err
	}
	if err := os.RemoveAll(dest); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}

// download writes url's body to path if its sha256 is sha; a mismatch leaves
// nothing behind.
func download(url, sha, path string) error {
	resp, err := httpClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		os.Remove(tmp)
		return fmt.Errorf("GET %s: sha256 %s, want %s", url, got, sha)
	}
	return os.Rename(tmp, path)
}

// lookPath finds tools; tests replace it to take the ar+tar route.
var lookPath = exec.LookPath

// unpackDeb extracts a .deb's data archive into dest: with dpkg-deb -x where
// there is one, else with ar (binutils, which cgo's toolchain brings) and
// tar, which recognises the gzip/xz/zstd compression itself.
func unpackDeb(deb, dest string) error {
	if dpkg, err := lookPath("dpkg-deb"); err == nil {
		if out, err := exec.Command(dpkg, "-x", deb, dest).CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg-deb -x %s: %w: %s", deb, err, out)
		}
		return nil
	}
	ar, err := lookPath("ar")
	if err != nil {
		return errors.New("neither dpkg-deb nor ar on PATH to unpack " + filepath.Base(deb))
	}
	tar, err := lookPath("tar")
	if err != nil {
		return errors.New("no tar on PATH to unpack " + filepath.Base(deb))
	}
	work, err := os.MkdirTemp("", "lanpo-deb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	abs, err := filepath.Abs(deb)
	if err != nil {
		return err
	}
	cmd := exec.Command(ar, "x", abs)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ar x %s: %w: %s", deb, err, out)
	}
	data, _ := filepath.Glob(filepath.Join(work, "data.tar*"))
	if len(data) != 1 {
		return fmt.Errorf("%s holds %d data.tar* members, want 1", deb, len(data))
	}
	if out, err := exec.Command(tar, "-xf", data[0], "-C", dest).CombinedOutput(); err != nil {
		return fmt.Errorf("tar -xf %s: %w: %s", filepath.Base(data[0]), err, out)
	}
	return nil
}

// findNCCL returns the directory holding nccl.h: LANPO_NCCL_INCLUDE, pip's
// nvidia/nccl/include beside a pip torch (the NCCL that torch loads), the
// CUDA toolkit's, or the system's.
func findNCCL(lt *Libtorch, cudaHome string) string {
	var cands []string
	if env := os.Getenv("LANPO_NCCL_INCLUDE"); env != "" {
		cands = append(cands, env)
	}
	if site := pipSite(lt); site != "" {
		cands = append(cands, filepath.Join(site, "nvidia", "nccl", "include"))
	}
	if cudaHome != "" {
		cands = append(cands, filepath.Join(cudaHome, "include"))
	}
	cands = append(cands, systemInclude)
	for _, c := range cands {
		if fileExists(filepath.Join(c, "nccl.h")) {
			return c
		}
	}
	return ""
}
