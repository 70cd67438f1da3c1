package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Where a CUDA build finds the CUDA toolkit and libraries. Two layouts
// matter: a system toolkit (/usr/local/cuda: bin/nvcc, include/, lib64/
// with unversioned libcudart.so and libcublas.so), and pip's (torch in
// site-packages/torch, the toolkit's pieces in site-packages/nvidia/cu13 —
// include/, lib/ with only versioned libcudart.so.13 and libcublas.so.13,
// bin/nvcc when nvidia-cuda-nvcc is installed — and NCCL in
// site-packages/nvidia/nccl). The GPU machines lanpo is validated on have
// both: nvcc 13.0 in the system and torch 2.11 from pip.

// pipSite returns the site-packages directory holding a pip-installed torch
// (lt.Root is its torch/ directory and nvidia/ lies beside it), or "".
func pipSite(lt *Libtorch) string {
	if filepath.Base(lt.Root) != "torch" {
		return ""
	}
	site := filepath.Dir(lt.Root)
	if st, err := os.Stat(filepath.Join(site, "nvidia")); err == nil && st.IsDir() {
		return site
	}
	return ""
}

// findCUDAHome picks the toolkit a CUDA build compiles with: CUDA_HOME;
// else /usr/local/cuda; else the toolkit of the nvcc on PATH; else pip's
// nvidia/cu13 beside a pip torch when it has nvcc. A toolkit is a directory
// with include/cuda_runtime_api.h.
func findCUDAHome(lt *Libtorch) (string, error) {
	ok := func(dir string) bool { return fileExists(filepath.Join(dir, "include", "cuda_runtime_api.h")) }
	if env := os.Getenv("CUDA_HOME"); env != "" {
		if !ok(env) {
			return "", fmt.Errorf("CUDA_HOME=%s has no include/cuda_runtime_api.h", env)
		}
		return env, nil
	}
	var tried []string
	if ok("/usr/local/cuda") {
		return "/usr/local/cuda", nil
	}
	tried = append(tried, "/usr/local/cuda")
	if nvcc, err := exec.LookPath("nvcc"); err == nil {
		if real, err := filepath.EvalSymlinks(nvcc); err == nil {
			nvcc = real
		}
		home := filepath.Dir(filepath.Dir(nvcc))
		if ok(home) {
			return home, nil
		}
		tried = append(tried, home+" (from nvcc on PATH)")
	} else {
		tried = append(tried, "nvcc on PATH (none)")
	}
	if site := pipSite(lt); site != "" {
		home := filepath.Join(site, "nvidia", "cu13")
		if ok(home) && fileExists(filepath.Join(home, "bin", "nvcc")) {
			return home, nil
		}
		tried = append(tried, home+" (pip, needs nvidia-cuda-nvcc)")
	}
	return "", fmt.Errorf("CUDA=1 but no CUDA toolkit found (looked in %s); set CUDA_HOME", strings.Join(tried, ", "))
}

// cudaLibDirs are the directories CUDA's libraries are taken from, torch's
// own first: the process must load the one CUDA runtime libtorch_cuda was
// built against, and the dynamic loader takes the first library of a
// SONAME it finds for everyone.
func cudaLibDirs(lt *Libtorch, home string) []string {
	var dirs []string
	if site := pipSite(lt); site != "" {
		for _, d := range []string{"cu13/lib", "cuda_runtime/lib", "cublas/lib"} {
			dirs = append(dirs, filepath.Join(site, "nvidia", filepath.FromSlash(d)))
		}
	}
	dirs = append(dirs, lt.LibDir)
	if home != "" {
		dirs = append(dirs, filepath.Join(home, "lib64"), filepath.Join(home, "lib"))
	}
	return dirs
}

// linkCUDALib returns the link flags for CUDA library name (cudart, cublas)
// from the first directory that has it: -lname for an unversioned .so,
// -l:libname.so.N (the highest N) where pip ships only versioned files. It
// also returns the file it links.
func linkCUDALib(name string, dirs []string) ([]string, string, error) {
	versioned := regexp.MustCompile(`^lib` + regexp.QuoteMeta(name) + `\.so\.(\d+)$`)
	for _, d := range dirs {
		if fileExists(filepath.Join(d, "lib"+name+".so")) {
			return []string{"-L" + d, "-Wl,-rpath," + d, "-l" + name}, filepath.Join(d, "lib"+name+".so"), nil
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		var found []string
		for _, e := range entries {
			if versioned.MatchString(e.Name()) {
				found = append(found, e.Name())
			}
		}
		if len(found) == 0 {
			continue
		}
		sort.Slice(found, func(i, j int) bool {
			a, _ := strconv.Atoi(versioned.FindStringSubmatch(found[i])[1])
			b, _ := strconv.Atoi(versioned.FindStringSubmatch(found[j])[1])
			return a > b
		})
		return []string{"-L" + d, "-Wl,-rpath," + d, "-l:" + found[0]}, filepath.Join(d, found[0]), nil
	}
	return nil, "", fmt.Errorf("no lib%s.so or lib%s.so.N in %s", name, name, strings.Join(dirs, ", "))
}
