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
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// lanpo's CUDA kernels (csrc/cuda/*.cu) are compiled with nvcc into a static
// library that csrc links when CUDA=1. On a machine without CUDA, `make test`
// still checks the CUDA build (-cuda-check, cudacheck.go): it fetches the
// pieces of NVIDIA's CUDA 13.0 toolkit that PyPI publishes as wheels (nvcc,
// cicc, headers, the runtime and cuBLAS libraries, NCCL's header) beside the
// cached torch 2.11, as pip would install them, compiles the kernels for the
// GPU architectures lanpo targets and links a CUDA=1 lanpo, without running
// anything.

// cudaArchs are the GPU architectures the kernels are built for: A100,
// H100/H200, B200 (sm_80, sm_90, sm_100), plus PTX for newer ones.
var cudaArchs = []string{"-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
	"-gencode=arch=compute_100,code=sm_100", "-gencode=arch=compute_100,code=compute_100"}

// toolkitWheel is one PyPI wheel and which of its files to extract: those
// under prefix (the path in the wheel, kept as the path in site-packages)
// for which keep(rel) holds.
type toolkitWheel struct {
	name, version string
	prefix        string
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

func oneOf(names ...string) func(string) bool {
	return func(rel string) bool {
		for _, n := range names {
			if rel == n {
				return true
			}
		}
		return false
	}
}

func either(a, b func(string) bool) func(string) bool {
	return func(rel string) bool { return a(rel) || b(rel) }
}

// toolkitWheels are CUDA 13.0 as torch 2.11 pins it (cuda-toolkit 13.0.2;
// nvidia-nccl-cu13 2.28.9) — nvcc 13.0 is also what the GPU machines lanpo
// is validated on have. Only what compiling and linking needs is read: the
// cuBLAS wheel is 403 MB, its headers a few hundred KB and libcublas.so.13
// a fraction (libcublasLt, the bulk, is not needed to link), so wheels are
// read by HTTP range requests, not downloaded.
var toolkitWheels = []toolkitWheel{
	{"nvidia-cuda-nvcc", "13.0.88", "nvidia/cu13/", either(under("include/"),
		oneOf("bin/nvcc", "bin/nvcc.profile", "bin/cudafe++", "bin/ptxas", "bin/fatbinary", "bin/bin2c", "bin/nvlink"))},
	{"nvidia-nvvm", "13.0.88", "nvidia/cu13/", under("nvvm/bin/", "nvvm/libdevice/")},
	{"nvidia-cuda-crt", "13.0.88", "nvidia/cu13/", under("include/")},
	{"nvidia-cuda-runtime", "13.0.96", "nvidia/cu13/", either(under("include/"), oneOf("lib/libcudart.so.13"))},
	{"nvidia-cuda-cccl", "13.0.85", "nvidia/cu13/", under("include/")},
	{"nvidia-cublas", "13.1.0.3", "nvidia/cu13/", either(under("include/"), oneOf("lib/libcublas.so.13"))},
	// ATen's CUDA context headers (csrc's CUDA branch, ProcessGroupNCCL)
	// include cuSPARSE's and cuSOLVER's.
	{"nvidia-cusparse", "12.6.3.3", "nvidia/cu13/", under("include/")},
	{"nvidia-cusolver", "12.0.4.66", "nvidia/cu13/", under("include/")},
	{"nvidia-nccl-cu13", "2.28.9", "nvidia/nccl/", oneOf("include/nccl.h")},
}

func toolkitStamp() string {
	var parts []string
	for _, w := range toolkitWheels {
		parts = append(parts, w.name+"=="+w.version)
	}
	return strings.Join(parts, "\n") + "\n"
}

// pypiIndex is the package index the toolkit's wheels are read from.
func pypiIndex() string {
	if index := os.Getenv("LANPO_PYPI_URL"); index != "" {
		return index
	}
	return "https://pypi.org"
}

// cudaToolkit adds the toolkit wheels' files to site (a site-packages
// holding torch 2.11), on first use, and returns the toolkit's root
// (site/nvidia/cu13). Files are fetched into a scratch directory and moved
// into place; a stamp written last marks the set complete.
func cudaToolkit(site, cache string, logf func(string, ...any)) (string, error) {
	home := filepath.Join(site, "nvidia", "cu13")
	stamp := filepath.Join(site, "nvidia", ".lanpo-cuda-toolkit")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == toolkitStamp() {
		return home, nil
	}
	tmp, err := os.MkdirTemp(cache, ".cuda-tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, w := range toolkitWheels {
		n, err := fetchWheelFiles(pypiIndex(), w, tmp)
		if err != nil {
			return "", fmt.Errorf("CUDA toolkit from PyPI: %s==%s: %w", w.name, w.version, err)
		}
		logf("cuda: %d files from %s==%s", n, w.name, w.version)
	}
	if err := moveTree(tmp, site); err != nil {
		return "", err
	}
	return home, os.WriteFile(stamp, []byte(toolkitStamp()), 0o644)
}

// moveTree moves every file under src to the same relative path under dst.
func moveTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		return os.Rename(p, to)
	})
}

// httpClient bounds every request prepare makes: offline, a fetch fails in
// seconds instead of hanging.
var httpClient = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 15 * time.Second}).DialContext,
	TLSHandshakeTimeout:   15 * time.Second,
	ResponseHeaderTimeout: 30 * time.Second,
}}

// wheelURL asks the index's JSON API for the manylinux x86_64 wheel of a
// release.
func wheelURL(index, name, version string) (string, error) {
	api := strings.TrimRight(index, "/") + "/pypi/" + name + "/json"
	resp, err := httpClient.Get(api)
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

// fetchWheelFiles extracts the wanted files of a remote wheel into root
// (each at its path in the wheel, as in site-packages), each checked against
// the sha256 the wheel's RECORD gives for it.
func fetchWheelFiles(index string, w toolkitWheel, root string) (int, error) {
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
		rel, ok := strings.CutPrefix(f.Name, w.prefix)
		if !ok || strings.HasSuffix(f.Name, "/") || !w.keep(rel) {
			continue
		}
		if strings.Contains(f.Name, "..") || filepath.IsAbs(f.Name) {
			return n, fmt.Errorf("unsafe path %q in wheel", f.Name)
		}
		want, ok := record[f.Name]
		if !ok {
			return n, fmt.Errorf("%s is not in the wheel's RECORD", f.Name)
		}
		dst := filepath.Join(root, filepath.FromSlash(f.Name))
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
	resp, err := httpClient.Head(u)
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
	resp, err := httpClient.Do(req)
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
	// --threads 0: one thread per architecture.
	args := []string{"-c", "-std=c++17", "-O3", "--threads", "0", "-Xcompiler", "-fPIC",
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
// changed kernel changes the link flags and Go relinks), and returns the
// archive and how many sources it holds. It does not change b: the caller
// adds the archive to the link (kernelLinkFlags), so it can run beside the
// gotch preparation.
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
	return lib, len(srcs), nil
}

// kernelLinkFlags puts the kernel archive first in b's link flags (it
// refers to cuBLAS and the CUDA runtime, which come later).
func kernelLinkFlags(b *Build, lib string) {
	b.LDFLAGS = append([]string{"-L" + filepath.Dir(lib), "-llanpo_cuda"}, b.LDFLAGS...)
}
