#!/usr/bin/env bash
# make gpu-bundle: writes gpu-bundle/ (git-ignored), everything a GPU machine
# without Go, a module proxy or network needs to build and validate lanpo
# with scripts/gpu/validate.sh beside the machine's own torch and CUDA:
#
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
# The bundle and the checkout travel together to the GPU machine (64 MiB in
# all), so the bundle must stay under 48 MiB; the script fails above that.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
out=$repo/gpu-bundle
limit_mib=${LANPO_BUNDLE_LIMIT_MIB:-48}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/lanpo
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

{
	echo "lanpo GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git describe --always --dirty 2>/dev/null || echo unknown)"
	echo "go $gover (trimmed); gotch v0.9.1 source (no example/, gen/); Gloo headers from $(basename "$(dirname "$(dirname "$gloo")")")"
	echo "go.sum sha256 $(sha256sum go.sum | cut -d' ' -f1)"
	echo "modules:"
	(cd "$modcache/cache/download" && find . -name '*.mod' | sed 's|^\./||; s|/@v/| |; s|\.mod$||' | sort | sed 's/^/  /')
	echo "files:"
	(cd "$out.tmp" && find . -type f ! -name MANIFEST -printf '  %p %s\n' | sort)
} >"$out.tmp/MANIFEST"
rm -rf "$out"
mv "$out.tmp" "$out"
size=$(du -sb "$out" | cut -f1)
say "wrote $out: $(awk -v s="$size" 'BEGIN{printf "%.1f MiB", s/1048576}')"
if [ "$size" -gt $((limit_mib * 1048576)) ]; then
	echo "gpu-bundle: $out is larger than ${limit_mib} MiB; it and the checkout must fit the 64 MiB a GPU command carries" >&2
	exit 1
fi
