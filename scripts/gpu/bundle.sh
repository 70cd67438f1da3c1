#!/usr/bin/env bash
# make gpu-bundle: writes gpu-bundle/ (git-ignored), everything a lent GPU
# machine (no Go, no module proxy, no network) needs to validate lanpo with
# scripts/gpu/validate.sh beside the machine's own torch and CUDA:
#
#   bin.tar.xz       prebuilt CUDA=1 binaries, stripped, built here against
#                    torch 2.11's PyPI libtorch (cu130, what the GPU machines
#                    run) with kernels for sm_80/sm_90/sm_100: bin/lanpo and
#                    the test binary of every package with GPU tests
#                    (tests/PKG.test, run from the package's directory). They
#                    carry no RUNPATH (LANPO_NO_RPATH=1): on the device
#                    LD_LIBRARY_PATH names its torch/lib and nvidia/*/lib.
# The source build, the fallback validate.sh takes when a prebuilt binary
# does not load:
#   go.tar.xz        a Go toolchain without tests, testdata, src/cmd, api, doc,
#                    misc, test (compile, link, asm, cgo, vet, cover kept)
#   modcache.tar.xz  the modules the build and the tests need, for GOPROXY=off
#                    (their tests and testdata left out)
#   gotch.tar.xz     gotch v0.9.1's source without example/ and gen/
#                    (prepare takes it through LANPO_GOTCH_SRC)
#   gloo.tar.xz      Gloo's headers (LANPO_GLOO_INCLUDE)
# The GPU tests and benchmarks read nothing from outside the checkout (tiny
# models and fixtures in testdata/, random weights and generated problems),
# so ../shared, which does not travel, is not needed.
#   MANIFEST         what is inside, with sizes and the versions it was made from
#
# The bundle and the checkout travel together to the GPU machine: at most 64
# MiB in all (LANPO_CARRY_LIMIT_MIB). When both do not fit, the source
# build's pieces are dropped first (MANIFEST says so; validate.sh then has no
# fallback); if the binaries alone do not fit, the script fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
out=$repo/gpu-bundle
limit_mib=${LANPO_CARRY_LIMIT_MIB:-64}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/lanpo
site=$cache/torch-2.11.0-cu130
source scripts/gpu/lib.sh
goroot=$(go env GOROOT)
gover=$(go env GOVERSION)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
say() { echo "gpu-bundle: $*" >&2; }
pack() { # pack NAME DIR [tar args...]: DIR's content as NAME.tar.xz
	local name=$1 dir=$2
	shift 2
	tar -C "$dir" -cf - "$@" . | xz -9e -T0 >"$out.tmp/$name.tar.xz"
}

# 0. The prebuilt binaries: CUDA=1 against torch 2.11 (made by make
# cuda-check), in a copy of the checkout as the device gets it, so this
# checkout's go.work and csrc flags stay as they are. libtorch_cuda's own
# dependencies (cuDNN, NCCL, … gigabytes) are not here: the link leaves
# libtorch's references into them unresolved (LANPO_ALLOW_SHLIB_UNDEFINED),
# never lanpo's; the rehearsal loads them all from PyPI's wheels.
[ -x "$site/nvidia/cu13/bin/nvcc" ] || { echo "gpu-bundle: no torch 2.11 with CUDA 13.0 in $site (run make cuda-check)" >&2; exit 1; }
version=$(git describe --always --dirty 2>/dev/null || echo dev)
tree_sum=$(tree_sha256)
say "prebuilt CUDA=1 binaries ($version) against $site/torch"
src=$work/src
mkdir -p "$src" "$work/bin/bin" "$work/bin/tests"
git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -C "$src" -xf -
t0=$(date +%s)
(
	cd "$src"
	export LIBTORCH=$site/torch CUDA_HOME=$site/nvidia/cu13 CUDA=1 LANPO_ALLOW_SHLIB_UNDEFINED=1 LANPO_NO_RPATH=1 GOFLAGS=-trimpath
	unset GOWORK
	make --no-print-directory build CUDA=1 VERSION="$version" >&2
	mapfile -t pkgs < <(gpu_test_packages)
	go test -c -o "$work/bin/tests/" "${pkgs[@]}" >&2
	name_test_binaries "$work/bin/tests" "${pkgs[@]}"
	cp bin/lanpo "$work/bin/bin/lanpo"
)
strip "$work/bin/bin/lanpo" "$work/bin/tests/"*.test
if readelf -d "$work/bin/bin/lanpo" | grep -qE 'RPATH|RUNPATH'; then
	echo "gpu-bundle: the prebuilt lanpo still has a RUNPATH into this machine" >&2
	exit 1
fi
say "built in $(($(date +%s) - t0)) s: bin/lanpo $(du -h "$work/bin/bin/lanpo" | cut -f1), $(ls "$work/bin/tests/"*.test | wc -l) test binaries"
pack bin "$work/bin"

# 1. Go, trimmed: what building cgo programs and running their tests needs.
say "Go $gover from $goroot"
mkdir -p "$work/go"
(cd "$goroot" && tar -cf - --exclude='*_test.go' --exclude=testdata \
	--exclude=./src/cmd --exclude=./api --exclude=./doc --exclude=./misc --exclude=./test \
	--exclude=./pkg/tool/linux_amd64/fix --exclude=./pkg/tool/linux_amd64/preprofile \
	--exclude=./lib/wasm --exclude=./pkg/obj \
	VERSION go.env bin src pkg lib) | tar -C "$work/go" -xf -
pack go "$work/go"

# 2. The module cache subset: fill a fresh module cache with exactly what
# building and testing lanpo downloads, then drop the zips (the extracted
# directories, go.mod files and hashes are what GOPROXY=off reads).
say "module cache subset"
modcache=$work/modcache
gotch_src=$(GOWORK=off GOFLAGS=-mod=mod go mod download -json github.com/sugarme/gotch@v0.9.1 | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$gotch_src" ] || { echo "gpu-bundle: no gotch source in the module cache" >&2; exit 1; }
mkdir -p "$work/gotch"
(cd "$gotch_src" && tar -cf - --exclude=./example --exclude=./gen --exclude='*_test.go' .) | tar -C "$work/gotch" -xf -
chmod -R u+w "$work/gotch"
(
	export GOMODCACHE=$modcache GOFLAGS= GOWORK=$repo/go.work
	# go.work points gotch at the prepared copy, so its module is not needed;
	# every other module the build and the tests import is.
	go list -deps -test ./... >/dev/null
)
chmod -R u+w "$modcache"
find "$modcache/cache/download" -name '*.zip' -delete
find "$modcache" -path "$modcache/cache" -prune -o \( -name '*_test.go' -o -name testdata \) -print0 | xargs -0 rm -rf
rm -rf "$modcache/cache/vcs" "$modcache/github.com/sugarme/gotch@v0.9.1" "$modcache/cache/download/github.com/sugarme/gotch"
pack modcache "$modcache"

# 3. gotch's source and Gloo's headers.
pack gotch "$work/gotch"
gloo=$(ls -d "$cache"/gloo-*/usr/include 2>/dev/null | head -1)
[ -f "$gloo/gloo/config.h" ] || { echo "gpu-bundle: no Gloo headers in $cache (run make deps)" >&2; exit 1; }
pack gloo "$gloo" ./gloo

# The carry limit: the checkout (tracked and untracked-unignored files, as
# the device tool copies it) and the bundle. The source build's pieces go
# first when both do not fit.
tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- | tail -1 | cut -f1)
limit=$((limit_mib * 1048576))
fallback="source build: go, modcache, gotch, gloo"
if [ $((tree + $(du -sb "$out.tmp" | cut -f1))) -gt "$limit" ]; then
	say "checkout + bundle over ${limit_mib} MiB: dropping the source build's pieces (no fallback on the device)"
	rm -f "$out.tmp"/{go,modcache,gotch,gloo}.tar.xz
	fallback="source build: dropped to fit ${limit_mib} MiB"
fi
{
	echo "lanpo GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) from $version"
	echo "binaries: CUDA=1 against $(basename "$site") (PyPI), sm_80/sm_90/sm_100, no RUNPATH; tests: $(cut -d' ' -f2 "$work/bin/tests/packages" | tr '\n' ' ')"
	echo "$fallback"
	echo "go $gover (trimmed); gotch v0.9.1 source (no example/, gen/); Gloo headers from $(basename "$(dirname "$(dirname "$gloo")")")"
	echo "tree sha256 $tree_sum"
	echo "modules:"
	(cd "$modcache/cache/download" && find . -name '*.mod' | sed 's|^\./||; s|/@v/| |; s|\.mod$||' | sort | sed 's/^/  /')
	echo "files:"
	(cd "$out.tmp" && find . -type f ! -name MANIFEST -printf '  %p %s\n' | sort)
} >"$out.tmp/MANIFEST"
rm -rf "$out"
mv "$out.tmp" "$out"
size=$(du -sb "$out" | cut -f1)
say "wrote $out: $(awk -v s="$size" 'BEGIN{printf "%.1f MiB", s/1048576}') + checkout $(awk -v s="$tree" 'BEGIN{printf "%.1f MiB", s/1048576}') ($fallback)"
if [ $((size + tree)) -gt "$limit" ]; then
	echo "gpu-bundle: $out and the checkout are larger than ${limit_mib} MiB, the most a GPU command carries" >&2
	exit 1
fi
