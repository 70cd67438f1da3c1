#!/usr/bin/env bash
# make gpu-rehearsal: run scripts/gpu/validate.sh all here the way a lent GPU
# machine runs it — on a copy of the working tree as the device tool makes it
# (tracked and untracked-but-not-ignored files, plus gpu-bundle/), with no Go
# on PATH, no network (unshare -n; without it every proxy points at a closed
# port), a fresh HOME and caches, and torch found through `python3 -c 'import
# torch'` in a venv holding PyPI's torch==2.11.0 with its nvidia-* wheels
# (scripts/gpu/torch_venv.sh; several GB, made once into ~/.cache/lanpo by
# this target alone). LD_LIBRARY_PATH is only what validate.sh sets, and
# nothing links with LANPO_ALLOW_SHLIB_UNDEFINED: libtorch_cuda and every
# library it needs (cuDNN, NCCL, cusparseLt, nvshmem…) load here as on the
# device. What stays unrehearsed: the driver (libcuda) and running kernels.
#
# Four runs, each on a fresh machine's state:
#   prebuilt      the bundle's binaries start, the test binaries run (their
#                 GPU tests skip: no GPU), the benchmarks are "skip"; exit 0
#   source        the same with bin.tar.xz removed: built from source; exit 0
#   no-library    a stub nvidia-smi that lists a GPU, and a torch whose
#                 libc10_cuda.so is missing: exit 1, the library named in
#                 build.log
#   gpu-unseen    the stub nvidia-smi alone (lanpo starts but sees no GPU, as
#                 with a driver it cannot load): exit 1, build.log says why
# LANPO_REHEARSAL="prebuilt gpu-unseen" runs only those.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
cache=${XDG_CACHE_HOME:-$HOME/.cache}/lanpo
site=$cache/torch-2.11.0-cu130
[ -x "$site/nvidia/cu13/bin/nvcc" ] || { echo "gpu-rehearsal: no CUDA 13.0 toolkit in $site (run make cuda-check)" >&2; exit 1; }
venv=$(bash scripts/gpu/torch_venv.sh)
vsite=$("$venv/bin/python" -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
# The bundle holds binaries built from this tree: it is made again when any
# file of the tree changed, or it is missing.
source scripts/gpu/lib.sh
if ! grep -q "^tree sha256 $(tree_sha256)\$" gpu-bundle/MANIFEST 2>/dev/null; then
	make --no-print-directory gpu-bundle
fi
base=$(mktemp -d /tmp/lanpo-rehearsal.XXXXXX)
tree=$base/tree
mkdir -p "$tree"
git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -C "$tree" -xf -
cp -r gpu-bundle "$tree/"
echo "gpu-rehearsal: tree $(du -sh --exclude=gpu-bundle "$tree" | cut -f1) + bundle $(du -sh gpu-bundle | cut -f1) in $tree; torch from $vsite" >&2

# A stub nvidia-smi that lists one GPU, and a torch missing libc10_cuda.so
# (symbolic links to the venv's, but for that one).
mkdir -p "$base/stub" "$base/broken/torch/lib"
cat >"$base/stub/nvidia-smi" <<'EOF'
#!/bin/sh
echo "NVIDIA H100 80GB HBM3, 580.159, 81559 MiB (stub: gpu-rehearsal)"
EOF
chmod +x "$base/stub/nvidia-smi"
for f in "$vsite"/torch/*; do [ "$(basename "$f")" = lib ] || ln -s "$f" "$base/broken/torch/"; done
for f in "$vsite"/torch/lib/*; do [ "$(basename "$f")" = libc10_cuda.so ] || ln -s "$f" "$base/broken/torch/lib/"; done
ln -s "$vsite/nvidia" "$base/broken/nvidia"

isolate=(unshare -n --)
if ! unshare -n true 2>/dev/null; then
	echo "gpu-rehearsal: unshare -n unavailable (not root?): proxies point at a closed port instead" >&2
	isolate=(env http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9)
fi
path=$venv/bin:/usr/sbin:/usr/bin:/sbin:/bin
# CUDA_HOME: the GPU machines have nvcc 13.0 installed; here PyPI's.
clean_env=(env -i LANG=C.UTF-8 CUDA_HOME="$site/nvidia/cu13")
if "${clean_env[@]}" PATH="$path" bash -c 'command -v go' >/dev/null; then
	echo "gpu-rehearsal: go is on the clean PATH; the rehearsal would not prove the bundle's Go is used" >&2
	exit 1
fi

status=0
check() { # check RUN WHAT COMMAND...: a check on a run's outputs
	local run=$1 what=$2
	shift 2
	if "$@" >/dev/null 2>&1; then
		echo "gpu-rehearsal: $run: $what: yes" >&2
	else
		echo "gpu-rehearsal: $run: $what: NO" >&2
		status=1
	fi
}
runs=${LANPO_REHEARSAL:-no-library gpu-unseen prebuilt source}
for run in $runs; do
	out=$base/out-$run
	env_extra=() p=$path
	case $run in
	source) rm -f "$tree/gpu-bundle/bin.tar.xz" ;;
	no-library) p=$base/stub:$path env_extra=(LIBTORCH="$base/broken/torch") ;;
	gpu-unseen) p=$base/stub:$path ;;
	prebuilt) ;;
	*) echo "gpu-rehearsal: unknown run $run" >&2; exit 2 ;;
	esac
	mkdir -p "$base/home-$run"
	t0=$(date +%s)
	set +e
	"${isolate[@]}" "${clean_env[@]}" HOME="$base/home-$run" PATH="$p" "${env_extra[@]}" OUT="$out" \
		LANPO_GPU_WORK="$base/work-$run" bash "$tree/scripts/gpu/validate.sh" all 2>"$base/stderr-$run"
	rc=$?
	set -e
	echo "gpu-rehearsal: $run: exit $rc in $(($(date +%s) - t0)) s (results in $out)" >&2
	case $run in
	prebuilt | source)
		want=prebuilt
		[ "$run" = source ] && want="built from source"
		check "$run" "exit 0" test "$rc" -eq 0
		check "$run" "the summary says \"$want\"" grep -q "^Binaries: $want" "$out/summary.md"
		check "$run" "lanpo env ran (a CUDA build)" grep -q '"built_with_cuda":true' "$out/facts.json"
		check "$run" "every GPU test binary ran" python3 -c "
import json, sys
rows = [json.loads(l) for l in open('$out/test.jsonl')]
names = {r['name'] for r in rows if r['status'] == 'skip'}
want = set(sys.argv[1:])
sys.exit(0 if want <= names and len(want) > 0 else 'missing: %s' % (want - names))" $(cd "$tree" && gpu_test_names)
		check "$run" "every benchmark reported" test "$(grep -c '"status":"skip"' "$out/bench.jsonl")" -ge 6
		;;
	no-library)
		check "$run" "exit 1" test "$rc" -eq 1
		check "$run" "build.log names libc10_cuda.so as not found" grep -q 'libc10_cuda.so => not found' "$out/build.log"
		check "$run" "the summary says lanpo does not start" grep -q 'lanpo starts | fail' "$out/summary.md"
		;;
	gpu-unseen)
		check "$run" "exit 1" test "$rc" -eq 1
		check "$run" "build.log says lanpo sees no GPU" grep -q 'lists a GPU .* but lanpo sees none' "$out/build.log"
		check "$run" "build.log holds the LD_DEBUG lines for libcuda" grep -q 'libcuda' "$out/build.log"
		;;
	esac
	rm -rf "$base/work-$run" # the unpacked bundle and caches
done
echo "gpu-rehearsal: $([ $status -eq 0 ] && echo passed || echo FAILED); outputs in $base" >&2
exit $status
