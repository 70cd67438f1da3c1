package main

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// lanpo's CUDA kernels (csrc/cuda/*.cu) are compiled with nvcc into a static
// library that csrc links when CUDA=1. On a machine without CUDA, `make test`
// still compile-checks them (-cuda-check): it fetches the pieces of NVIDIA's
// CUDA 13 toolkit that PyPI publishes as wheels (nvcc, cicc, the runtime,
// CCCL and cuBLAS headers) into the cache and compiles the kernels for the
// GPU architectures lanpo targets, without running them.

// cudaArchs are the GPU architectures the kernels are built for: A100 and
// H100/H200 (sm_80, sm_90), plus PTX for newer ones.
var cudaArchs = []string{"-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
	"-gencode=arch=compute_90,code=compute_90"}

// toolkitWheel is one PyPI wheel of the CUDA toolkit and which of its files
// the compile check needs (paths under nvidia/cu13/).
type toolkitWheel struct {
	name, version string
	keep          func(rel string) bool
}

func under(prefixes ...string) func(string) bool {
	return func(rel string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(rel, p) {
				return true
			}
		}
		return false
	}
}

// CUDA 13.5 and the CCCL release that ships with it. Only the files nvcc
// needs to compile (-c) are read: the cuBLAS wheel is 444 MB, its headers a
// few hundred KB, so wheels are read by HTTP range requests, not downloaded.
var toolkitWheels = []toolkitWheel{
	{"nvidia-cuda-nvcc", "13.5.37", func(rel string) bool {
		return strings.HasPrefix(rel, "include/") || rel == "bin/nvcc" || rel == "bin/nvcc.profile" ||
			rel == "bin/cudafe++" || rel == "bin/ptxas" || rel == "bin/fatbinary" || rel == "bin/bin2c"
	}},
	{"nvidia-nvvm", "13.5.37", under("nvvm/bin/", "nvvm/libdevice/")},
	{"nvidia-cuda-crt", "13.5.37", under("include/")},
	{"nvidia-cuda-runtime", "13.5.37", under("include/")},
	{"nvidia-cuda-cccl", "13.3.5.0.6", under("include/")},
	{"nvidia-cublas", "13.10.0.20", under("include/")},
}

func toolkitStamp() string {
	var parts []string
	for _, w := range toolkitWheels {
		parts = append(parts, w.name+"=="+w.version)
	}
	return strings.Join(parts, "\n") + "\n"
}

// cudaToolkit returns the cached compile-only CUDA toolkit, fetching it on
// first use (atomically: a temporary directory renamed into place).
func cudaToolkit(cache string, logf func(string, ...any)) (string, error) {
	dest := filepath.Join(cache, "cuda-13.5-pypi")
	stamp := filepath.Join(dest, "STAMP")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == toolkitStamp() {
		return dest, nil
	}
	tmp, err := os.MkdirTemp(cache, ".cuda-tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	index := os.Getenv("LANPO_PYPI_URL")
	if index == "" {
		index = "https://pypi.org"
	}
	for _, w := range toolkitWheels {
		n, err := fetchWheelFiles(index, w, tmp)
		if err != nil {
			return "", fmt.Errorf("CUDA toolkit from PyPI: %s==%s: %w", w.name, w.version, err)
		}
		logf("cuda: %d files from %s==%s", n, w.name, w.version)
	}
	if err := os.WriteFile(filepath.Join(tmp, "STAMP"), []byte(toolkitStamp()), 0o644); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dest); err != nil {
		return "", err
	}
	return dest, os.Rename(tmp, dest)
}

// wheelURL asks the index's JSON API for the manylinux x86_64 wheel of a
// release.
func wheelURL(index, name, version string) (string, error) {
	api := strings.TrimRight(index, "/") + "/pypi/" + name + "/json"
	resp, err := http.Get(api)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", api, resp.Status)
	}
	var meta struct {
		Releases map[string][]struct {
			Filename string `json:"filename"`
			URL      string `json:"url"`
		} `json:"releases"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&meta); err != nil {
		return "", fmt.Errorf("GET %s: %w", api, err)
	}
	for _, f := range meta.Releases[version] {
		if strings.HasSuffix(f.Filename, ".whl") && strings.Contains(f.Filename, "manylinux") && strings.Contains(f.Filename, "x86_64") {
			base, _ := url.Parse(api)
			u, err := base.Parse(f.URL) // the index may give it relative to the API URL
			if err != nil {
				return "", err
			}
			return u.String(), nil
		}
	}
	return "", fmt.Errorf("%s lists no manylinux x86_64 wheel for version %s", api, version)
}

// fetchWheelFiles extracts the wanted files of a remote wheel into root,
// each checked against the sha256 the wheel's RECORD gives for it.
func fetchWheelFiles(index string, w toolkitWheel, root string) (int, error) {
	return fetchWheelFilesUnder(index, w, "nvidia/cu13/", root)
}

// fetchWheelFilesUnder is fetchWheelFiles for a wheel whose files live
// under another prefix (nvidia-nccl-cu13: nvidia/nccl/).
func fetchWheelFilesUnder(index string, w toolkitWheel, prefix, root string) (int, error) {
	u, err := wheelURL(index, w.name, w.version)
	if err != nil {
		return 0, err
	}
	ra, err := newHTTPReaderAt(u)
	if err != nil {
		return 0, err
	}
	z, err := zip.NewReader(ra, ra.size)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", u, err)
	}
	record, err := wheelRecord(z)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", u, err)
	}
	n := 0
	for _, f := range z.File {
		rel, ok := strings.CutPrefix(f.Name, prefix)
		if !ok || strings.HasSuffix(f.Name, "/") || !w.keep(rel) {
			continue
		}
		if strings.Contains(rel, "..") || filepath.IsAbs(rel) {
			return n, fmt.Errorf("unsafe path %q in wheel", f.Name)
		}
		want, ok := record[f.Name]
		if !ok {
			return n, fmt.Errorf("%s is not in the wheel's RECORD", f.Name)
		}
		dst := filepath.Join(root, rel)
		if err := extractFile(f, dst); err != nil {
			return n, err
		}
		if got, err := fileSHA256(dst); err != nil || got != want {
			return n, fmt.Errorf("%s: sha256 %s, RECORD says %s (%v)", f.Name, got, want, err)
		}
		if strings.HasPrefix(rel, "bin/") || strings.HasPrefix(rel, "nvvm/bin/") {
			if err := os.Chmod(dst, 0o755); err != nil {
				return n, err
			}
		}
		n++
	}
	if n == 0 {
		return 0, errors.New("no wanted files in the wheel")
	}
	return n, nil
}

// wheelRecord reads *.dist-info/RECORD: path → hex sha256.
func wheelRecord(z *zip.Reader) (map[string]string, error) {
	for _, f := range z.File {
		if !strings.HasSuffix(f.Name, ".dist-info/RECORD") {
			continue
		}
		r, err := f.Open()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Split(line, ",")
			if len(fields) < 2 {
				continue
			}
			h, ok := strings.CutPrefix(fields[1], "sha256=")
			if !ok {
				continue
			}
			raw, err := base64.RawURLEncoding.DecodeString(h)
			if err != nil {
				return nil, fmt.Errorf("RECORD line %q: %w", line, err)
			}
			out[fields[0]] = hex.EncodeToString(raw)
		}
		return out, nil
	}
	return nil, errors.New("no .dist-info/RECORD")
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// httpReaderAt reads a remote file by HTTP range requests, a 1 MiB block at
// a time, each block fetched once.
type httpReaderAt struct {
	url    string
	size   int64
	blocks map[int64][]byte
}

const httpBlock = 1 << 20

func newHTTPReaderAt(u string) (*httpReaderAt, error) {
	resp, err := http.Head(u)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength <= 0 {
		return nil, fmt.Errorf("HEAD %s: %s, length %d", u, resp.Status, resp.ContentLength)
	}
	if resp.Header.Get("Accept-Ranges") != "bytes" {
		return nil, fmt.Errorf("HEAD %s: the server does not serve byte ranges", u)
	}
	return &httpReaderAt{url: resp.Request.URL.String(), size: resp.ContentLength, blocks: map[int64][]byte{}}, nil
}

func (h *httpReaderAt) block(i int64) ([]byte, error) {
	if b, ok := h.blocks[i]; ok {
		return b, nil
	}
	lo, hi := i*httpBlock, min((i+1)*httpBlock, h.size)-1
	req, err := http.NewRequest(http.MethodGet, h.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", lo, hi))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return nil, fmt.Errorf("GET %s bytes %d-%d: %s", h.url, lo, hi, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != hi-lo+1 {
		return nil, fmt.Errorf("GET %s bytes %d-%d: got %d bytes", h.url, lo, hi, len(b))
	}
	h.blocks[i] = b
	return b, nil
}

func (h *httpReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		if pos >= h.size {
			return n, io.EOF
		}
		b, err := h.block(pos / httpBlock)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], b[pos%httpBlock:])
	}
	return n, nil
}

// cudaSources are the kernel files under csrc/cuda.
func cudaSources(repo string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(repo, "csrc", "cuda", "*.cu"))
	if err != nil || len(m) == 0 {
		return nil, fmt.Errorf("no csrc/cuda/*.cu in %s (%v)", repo, err)
	}
	sort.Strings(m)
	return m, nil
}

// nvccArgs compiles one kernel file (csrc/cuda/x.cu) to an object. Its
// headers live in csrc/, where Go tracks them for csrc's own rebuilds.
func nvccArgs(src, obj string, abi int, extra ...string) []string {
	args := []string{"-c", "-std=c++17", "-O3", "-Xcompiler", "-fPIC",
		fmt.Sprintf("-D_GLIBCXX_USE_CXX11_ABI=%d", abi), "-I" + filepath.Dir(filepath.Dir(src))}
	args = append(args, cudaArchs...)
	args = append(args, extra...)
	return append(args, src, "-o", obj)
}

func runLogged(logf func(string, ...any), name string, args ...string) error {
	logf("%s %s", filepath.Base(name), strings.Join(args, " "))
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", filepath.Base(name), err, out)
	}
	return nil
}

// buildCUDAKernels compiles csrc/cuda/*.cu with the toolkit's nvcc into
// liblanpo_cuda.a in a cache directory named by the sources' hash (so a
// changed kernel changes the link flags and Go relinks), adds it and cuBLAS
// to the link flags, and returns the archive and how many sources it holds.
func buildCUDAKernels(b *Build, repo, cache string, logf func(string, ...any), nvccFlags ...string) (lib string, n int, err error) {
	srcs, err := cudaSources(repo)
	if err != nil {
		return "", 0, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%v %v %d %s\n", cudaArchs, nvccFlags, b.Libtorch.ABI, b.CUDAHome)
	headers, err := filepath.Glob(filepath.Join(repo, "csrc", "*.h"))
	if err != nil {
		return "", 0, err
	}
	for _, s := range append(srcs, headers...) {
		data, err := os.ReadFile(s)
		if err != nil {
			return "", 0, err
		}
		h.Write(data)
	}
	dir := filepath.Join(cache, "cuda-kernels", hex.EncodeToString(h.Sum(nil))[:16])
	lib = filepath.Join(dir, "liblanpo_cuda.a")
	if !fileExists(lib) {
		tmp, err := os.MkdirTemp(cache, ".cuda-kernels-")
		if err != nil {
			return "", 0, err
		}
		defer os.RemoveAll(tmp)
		nvcc := filepath.Join(b.CUDAHome, "bin", "nvcc")
		var objs []string
		for _, s := range srcs {
			obj := filepath.Join(tmp, strings.TrimSuffix(filepath.Base(s), ".cu")+".o")
			if err := runLogged(logf, nvcc, nvccArgs(s, obj, b.Libtorch.ABI, nvccFlags...)...); err != nil {
				return "", 0, err
			}
			objs = append(objs, obj)
		}
		if err := runLogged(logf, "ar", append([]string{"rcs", filepath.Join(tmp, "liblanpo_cuda.a")}, objs...)...); err != nil {
			return "", 0, err
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return "", 0, err
		}
		os.RemoveAll(dir)
		if err := os.Rename(tmp, dir); err != nil {
			return "", 0, err
		}
	}
	b.LDFLAGS = append([]string{"-L" + dir, "-llanpo_cuda", "-lcublas"}, b.LDFLAGS...)
	return lib, len(srcs), nil
}

// cudaCheck compile-checks the CUDA code on a machine without CUDA: the
// kernels with the PyPI toolkit's nvcc, and logprob.cpp's CUDA branch
// (-DLANPO_CUDA) against the libtorch headers at hand.
func cudaCheck(repo, cache string, logf func(string, ...any)) error {
	tk, err := cudaToolkit(cache, logf)
	if err != nil {
		return err
	}
	lt, err := discover(cache, false, logf)
	if err != nil {
		return err
	}
	// The same build step as CUDA=1, into a scratch cache so it always
	// compiles, with warnings as errors.
	tmp, err := os.MkdirTemp("", "lanpo-cuda-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	kb := &Build{Libtorch: lt, CUDAHome: tk}
	lib, n, err := buildCUDAKernels(kb, repo, tmp, logf, "-Werror=all-warnings")
	if err != nil {
		return err
	}
	if !fileExists(lib) || !strings.Contains(strings.Join(kb.LDFLAGS, " "), "-llanpo_cuda -lcublas") {
		return fmt.Errorf("cuda-check: the kernel build left no %s or link flags %v", lib, kb.LDFLAGS)
	}
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	b, err := newBuild(lt, false)
	if err != nil {
		return err
	}
	args := append([]string{"-fsyntax-only", "-std=c++17", "-DLANPO_CUDA=1", "-I" + filepath.Join(tk, "include")}, b.CPPFLAGS...)
	for _, f := range []string{"logprob.cpp", "bridge.cpp"} {
		if err := runLogged(logf, cxx, append(args, filepath.Join(repo, "csrc", f))...); err != nil {
			return err
		}
	}
	distNote, err := distCheck(cxx, args, repo, cache, lt, logf)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "prepare: cuda-check ok: %d kernel file(s) built into liblanpo_cuda.a for sm_80, sm_90 with nvcc 13.5 (PyPI), as CUDA=1 builds them; csrc's CUDA branch compiles against libtorch %s; %s\n",
		n, lt.Version, distNote)
	return nil
}
