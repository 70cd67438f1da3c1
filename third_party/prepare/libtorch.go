package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Libtorch describes one libtorch installation: where its headers and
// libraries are and what it was built as.
type Libtorch struct {
	Root       string // what the user or the search named
	IncludeDir string // holds torch/csrc/api/include/torch/version.h
	LibDir     string // holds libtorch_cpu.so and libc10.so
	Version    string // "2.1.0", read from torch/version.h
	CXXStd     string // "c++17" or "c++20", what the headers require
	ABI        int    // _GLIBCXX_USE_CXX11_ABI value it was built with
	HasCUDA    bool   // libtorch_cuda.so and libc10_cuda.so are present
	Source     string // "LIBTORCH", "cache (PyPI wheel)", "Debian libtorch-dev"
}

// Is21 reports whether gotch v0.9.1's generated ops match this libtorch
// without stubs.
func (lt *Libtorch) Is21() bool { return strings.HasPrefix(lt.Version, "2.1.") }

// probeLibtorch inspects root as a libtorch tree (include/, lib/), a pip
// torch package directory (the same layout), or a system prefix such as /usr
// (include/, lib/<multiarch>/).
func probeLibtorch(root string) (*Libtorch, error) {
	root = filepath.Clean(root)
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", root)
	}
	lt := &Libtorch{Root: root}
	for _, inc := range []string{filepath.Join(root, "include")} {
		if fileExists(filepath.Join(inc, versionHeader)) {
			lt.IncludeDir = inc
		}
	}
	if lt.IncludeDir == "" {
		return nil, fmt.Errorf("%s has no include/%s", root, versionHeader)
	}
	for _, lib := range libDirCandidates(root) {
		if fileExists(filepath.Join(lib, "libtorch_cpu.so")) && fileExists(filepath.Join(lib, "libc10.so")) {
			lt.LibDir = lib
			break
		}
	}
	if lt.LibDir == "" {
		return nil, fmt.Errorf("%s has no lib directory with libtorch_cpu.so and libc10.so (looked in %s)",
			root, strings.Join(libDirCandidates(root), ", "))
	}
	v, err := readTorchVersion(filepath.Join(lt.IncludeDir, versionHeader))
	if err != nil {
		return nil, err
	}
	lt.Version = v
	lt.CXXStd = cxxStandard(lt.IncludeDir)
	lt.ABI, err = readABI(lt)
	if err != nil {
		return nil, err
	}
	lt.HasCUDA = fileExists(filepath.Join(lt.LibDir, "libtorch_cuda.so")) &&
		fileExists(filepath.Join(lt.LibDir, "libc10_cuda.so"))
	return lt, nil
}

const versionHeader = "torch/csrc/api/include/torch/version.h"

func libDirCandidates(root string) []string {
	return []string{
		filepath.Join(root, "lib"),
		filepath.Join(root, "lib64"),
		filepath.Join(root, "lib", "x86_64-linux-gnu"),
		filepath.Join(root, "lib", "aarch64-linux-gnu"),
	}
}

var (
	versionDefine  = regexp.MustCompile(`#define\s+TORCH_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)`)
	versionInclude = regexp.MustCompile(`#include\s+[<"](torch/headeronly/version\.h)[>"]`)
)

// readTorchVersion reads TORCH_VERSION_{MAJOR,MINOR,PATCH} from torch/version.h,
// or, from torch 2.9 on, from torch/headeronly/version.h, which version.h
// only includes.
func readTorchVersion(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	parts := map[string]string{}
	for _, m := range versionDefine.FindAllStringSubmatch(string(b), -1) {
		parts[m[1]] = m[2]
	}
	if m := versionInclude.FindSubmatch(b); m != nil && parts["MAJOR"] == "" {
		inc := filepath.Join(includeRootOf(path), string(m[1]))
		v, err := readTorchVersion(inc)
		if err != nil {
			return "", fmt.Errorf("%s includes %s: %w", path, m[1], err)
		}
		return v, nil
	}
	if parts["MAJOR"] == "" || parts["MINOR"] == "" || parts["PATCH"] == "" {
		return "", fmt.Errorf("%s: no TORCH_VERSION_MAJOR/MINOR/PATCH defines", path)
	}
	return parts["MAJOR"] + "." + parts["MINOR"] + "." + parts["PATCH"], nil
}

// includeRootOf returns the include/ directory a version header lives under.
func includeRootOf(versionH string) string {
	if root, ok := strings.CutSuffix(filepath.ToSlash(versionH), "/"+versionHeader); ok {
		return filepath.FromSlash(root)
	}
	return filepath.Dir(filepath.Dir(versionH))
}

// versionLess compares dotted versions numerically ("2.9.1" < "2.11.0").
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y int
		if i < len(pa) {
			fmt.Sscanf(pa[i], "%d", &x)
		}
		if i < len(pb) {
			fmt.Sscanf(pb[i], "%d", &y)
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// cxxStandard is the -std a libtorch's headers need: c10 states its
// minimum in an #error guard (c10/util/C++17.h: "__cplusplus < 201703L";
// releases that need C++20 check 202002L). Reading the guard, rather than
// a table of versions, keeps a future libtorch right without a release of
// lanpo; a header set without the guard gets C++17.
func cxxStandard(includeDir string) string {
	for _, h := range []string{"c10/util/C++17.h", "c10/macros/Macros.h", "torch/headeronly/macros/Macros.h"} {
		b, err := os.ReadFile(filepath.Join(includeDir, h))
		if err != nil {
			continue
		}
		if cxx20Guard.Match(b) {
			return "c++20"
		}
	}
	return "c++17"
}

var cxx20Guard = regexp.MustCompile(`__cplusplus\s*<\s*202002L`)

var abiFlag = regexp.MustCompile(`_GLIBCXX_USE_CXX11_ABI=([01])`)

// readABI takes the C++ ABI from TorchConfig.cmake, which libtorch
// distributions up to 2.6 ship with the define; where it is missing it
// looks for cxx11-ABI symbols in libc10.so, since a library built with the
// old ABI never mentions them; without libraries (a header-only check),
// torch 2.7 and later are built with the cxx11 ABI only.
func readABI(lt *Libtorch) (int, error) {
	for _, p := range []string{
		filepath.Join(lt.Root, "share", "cmake", "Torch", "TorchConfig.cmake"),
		filepath.Join(lt.LibDir, "cmake", "Torch", "TorchConfig.cmake"),
	} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if m := abiFlag.FindSubmatch(b); m != nil {
			return int(m[1][0] - '0'), nil
		}
	}
	b, err := os.ReadFile(filepath.Join(lt.LibDir, "libc10.so"))
	if err != nil {
		if lt.Version != "" && !versionLess(lt.Version, "2.7.0") {
			return 1, nil
		}
		return 0, fmt.Errorf("read ABI: no _GLIBCXX_USE_CXX11_ABI in TorchConfig.cmake and %w", err)
	}
	if strings.Contains(string(b), "St7__cxx11") || strings.Contains(string(b), "NSt7__cxx11") {
		return 1, nil
	}
	return 0, nil
}

// Discovery order, as documented in the README: LIBTORCH, then the cached
// wheel-derived libtorch of LANPO_TORCH (default defaultTorch), then
// Debian's libtorch-dev.
func discover(cacheDir string, wantCUDA bool, logf func(string, ...any)) (*Libtorch, error) {
	var tried []string
	if env := os.Getenv("LIBTORCH"); env != "" {
		lt, err := probeLibtorch(env)
		if err != nil {
			return nil, fmt.Errorf("LIBTORCH=%s: %w", env, err)
		}
		lt.Source = "LIBTORCH"
		logf("libtorch: using LIBTORCH=%s", env)
		return lt, nil
	}
	if wantCUDA {
		return nil, errors.New("CUDA=1 needs LIBTORCH pointing at a CUDA libtorch, e.g. a pip torch: " +
			"LIBTORCH=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')")
	}
	spec, err := chosenTorch()
	if err != nil {
		return nil, err
	}
	lt, err := cachedLibtorch(cacheDir, spec, logf)
	if err == nil {
		return lt, nil
	}
	tried = append(tried, "PyPI wheel: "+err.Error())
	logf("libtorch: PyPI route failed: %v", err)
	if lt, err := probeLibtorch("/usr"); err == nil {
		lt.Source = "Debian libtorch-dev"
		logf("libtorch: falling back to the system libtorch in /usr (%s)", lt.Version)
		return lt, nil
	} else {
		tried = append(tried, "system /usr: "+err.Error())
	}
	return nil, fmt.Errorf("no usable libtorch found:\n  - %s\nfix one of these:\n"+
		"  1. point LIBTORCH at a libtorch tree or a pip torch package directory (it has include/ and lib/):\n"+
		"       make build LIBTORCH=/opt/libtorch   or   LIBTORCH=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')\n"+
		"  2. let the build fetch torch==%s from PyPI: needs python3 with pip and access to PyPI\n"+
		"  3. install Debian's libtorch 1.13: apt-get install libtorch-dev",
		strings.Join(tried, "\n  - "), spec.version)
}

// cachedLibtorch returns the cached wheel-derived libtorch of spec, building
// it on first use.
func cachedLibtorch(cacheDir string, spec torchSpec, logf func(string, ...any)) (*Libtorch, error) {
	dir := filepath.Join(cacheDir, spec.dir)
	root := filepath.Join(dir, spec.root)
	if lt, err := probeLibtorch(root); err == nil {
		lt.Source = "cache (PyPI wheel)"
		logf("libtorch: LIBTORCH unset; using cached torch %s at %s", spec.version, root)
		return lt, nil
	}
	logf("libtorch: LIBTORCH unset and no cache at %s; building it from the PyPI wheel torch==%s", dir, spec.version)
	if err := buildWheelLibtorch(cacheDir, dir, spec, logf); err != nil {
		return nil, err
	}
	lt, err := probeLibtorch(root)
	if err != nil {
		return nil, err
	}
	lt.Source = "cache (PyPI wheel)"
	return lt, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
