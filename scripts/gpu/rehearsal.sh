#!/usr/bin/env bash
# make gpu-rehearsal: run scripts/gpu/validate.sh here as a lent GPU machine
# would run it — on a copy of the working tree as the device tool makes it
# (tracked and untracked-but-not-ignored files, plus gpu-bundle/), with no Go
# on PATH, no network (unshare -n; without it every proxy points at a closed
# port so fetches fail at once), a fresh HOME and caches, and LIBTORCH set to
# torch 2.11 from PyPI with CUDA 13.0's compiler from PyPI (both made by
# make cuda-check). No GPU here, so both stages build CUDA=1 through the link
# and report every GPU test and benchmark as skipped.
#
# The CUDA libraries libtorch_cuda needs (cuDNN, cuBLASLt, NCCL, ... several
# GB) are not on this machine: LANPO_ALLOW_SHLIB_UNDEFINED=1 lets the link
# leave libtorch's own references into them unresolved. lanpo's are resolved.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
cache=${XDG_CACHE_HOME:-$HOME/.cache}/lanpo
site=$cache/torch-2.11.0-cu130
[ -x "$site/nvidia/cu13/bin/nvcc" ] || { echo "gpu-rehearsal: no CUDA 13.0 toolkit in $site (run make cuda-check)" >&2; exit 1; }
# The bundle depends on the checkout only through go.sum (the modules it
# carries); it is made again when that changed or it is missing.
if ! grep -q "^go.sum sha256 $(sha256sum go.sum | cut -d' ' -f1)\$" gpu-bundle/MANIFEST 2>/dev/null; then
	make --no-print-directory gpu-bundle
fi
base=$(mktemp -d /tmp/lanpo-rehearsal.XXXXXX)
tree=$base/tree
mkdir -p "$tree" "$base/home"
git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -C "$tree" -xf -
cp -r gpu-bundle "$tree/"
echo "gpu-rehearsal: tree $(du -sh --exclude=gpu-bundle "$tree" | cut -f1) + bundle $(du -sh gpu-bundle | cut -f1) in $tree" >&2

isolate=(unshare -n --)
if ! unshare -n true 2>/dev/null; then
	echo "gpu-rehearsal: unshare -n unavailable (not root?): proxies point at a closed port instead" >&2
	isolate=(env http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9)
fi
clean_env=(env -i HOME="$base/home" PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
	LIBTORCH="$site/torch" CUDA_HOME="$site/nvidia/cu13" LANPO_ALLOW_SHLIB_UNDEFINED=1)
if "${clean_env[@]}" bash -c 'command -v go' >/dev/null; then
	echo "gpu-rehearsal: go is on the clean PATH; the rehearsal would not prove the bundle's Go is used" >&2
	exit 1
fi
status=0
for stage in test bench; do
	t0=$(date +%s)
	# Each stage on a fresh machine: its own unpacked bundle and caches.
	if "${isolate[@]}" "${clean_env[@]}" OUT="$base/out-$stage" LANPO_GPU_WORK="$base/work-$stage" \
		bash "$tree/scripts/gpu/validate.sh" "$stage"; then
		st=ok
	else
		st=FAILED
		status=1
	fi
	echo "gpu-rehearsal: stage $stage $st in $(($(date +%s) - t0)) s (results in $base/out-$stage)" >&2
done
grep -h '"status":"fail"' "$base"/out-*/*.jsonl >&2 && status=1
rm -rf "$base"/work-* # the unpacked bundles and caches, ~750 MB a stage
echo "gpu-rehearsal: $([ $status -eq 0 ] && echo passed || echo FAILED); outputs in $base" >&2
exit $status
