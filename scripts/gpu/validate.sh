#!/usr/bin/env bash
# scripts/gpu/validate.sh STAGE — build lanpo with CUDA on a GPU machine from
# the checkout and gpu-bundle/ alone (no Go, module proxy or network needed),
# against the machine's own torch and CUDA, then run one stage:
#
#   test    facts, build, every GPU test (go test -run CUDA ./...)
#   bench   facts, build, the GPU benchmarks (lanpo bench … --device cuda --json);
#           bench NAME… runs only those (names in the list below)
#
# Each stage rebuilds (a GPU machine stays warm only ~30 s between calls).
# Results go to $OUT (default ./gpu-out), at most 6 files:
#   facts.json      GPU, driver, torch, CUDA, nvcc, compiler, CPUs; build times
#   build.log       prepare and go build
#   STAGE.log       the stage's raw output
#   STAGE.jsonl     one JSON object per test or benchmark: name, status
#                   (pass, fail, skip, ok), seconds, and the benchmark's JSON
#   summary.md      the same as tables
# Without a GPU (make gpu-rehearsal) the build still runs through the link,
# the test binaries are compiled and linked, and every GPU test and
# benchmark is reported "skip" with the reason "no GPU".
#
# Finds: torch through `python3 -c 'import torch'` (or LIBTORCH), CUDA through
# nvcc (or CUDA_HOME), NCCL's header in pip's nvidia/nccl. See docs/gpu.md.
set -uo pipefail
stage=${1:-}
only=("${@:2}")
case "$stage" in test | bench) ;; *)
	echo "usage: scripts/gpu/validate.sh test | bench [NAME...]" >&2
	exit 2
	;;
esac
cd "$(dirname "$0")/../.."
repo=$PWD
bundle=$repo/gpu-bundle
OUT=${OUT:-$repo/gpu-out}
work=${LANPO_GPU_WORK:-/tmp/lanpo-gpu}
mkdir -p "$OUT" "$work"
t_start=$(date +%s)
log() { echo "validate: $*" | tee -a "$OUT/build.log" >&2; }
now() { date +%s; }
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))' 2>/dev/null || printf '"%s"' "$(sed 's/\\/\\\\/g; s/"/\\"/g' | tr '\n' ' ')"; }
: >"$OUT/build.log"

# --- unpack the bundle --------------------------------------------------
for n in go modcache gotch gloo; do
	[ -f "$bundle/$n.tar.xz" ] || { log "no $bundle/$n.tar.xz: run make gpu-bundle on the CPU machine and carry gpu-bundle"; exit 1; }
	if [ ! -f "$work/$n/.unpacked" ]; then
		rm -rf "${work:?}/$n" && mkdir -p "$work/$n"
		xz -dc -T0 "$bundle/$n.tar.xz" | tar -C "$work/$n" -xf - && touch "$work/$n/.unpacked"
	fi
done
export GOROOT=$work/go PATH=$work/go/bin:$PATH GOMODCACHE=$work/modcache GOPROXY=off GOSUMDB=off
export GOTOOLCHAIN=local GOFLAGS=-trimpath GOCACHE=$work/gocache XDG_CACHE_HOME=$work/cache GOTELEMETRY=off
export LANPO_GOTCH_SRC=$work/gotch LANPO_GLOO_INCLUDE=$work/gloo CUDA=1
unset GOWORK
if [ -z "${LIBTORCH:-}" ]; then
	LIBTORCH=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>>"$OUT/build.log") || {
		log "no torch: python3 cannot import torch and LIBTORCH is unset"
		exit 1
	}
fi
export LIBTORCH

# --- facts ----------------------------------------------------------------
gpu_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
torch_line=$(python3 -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>/dev/null)
nvcc_bin=$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")
nvcc_line=$("$nvcc_bin" --version 2>/dev/null | tail -2 | tr '\n' ' ')
{
	echo "{"
	echo "  \"stage\": \"$stage\","
	echo "  \"gpu\": $(printf '%s' "${gpu_line:-none}" | json_str),"
	echo "  \"torch_python\": $(printf '%s' "${torch_line:-none}" | json_str),"
	echo "  \"libtorch\": $(printf '%s' "$LIBTORCH" | json_str),"
	echo "  \"nvcc\": $(printf '%s' "${nvcc_line:-none}" | json_str),"
	echo "  \"cxx\": $(printf '%s' "$(${CXX:-g++} --version | head -1)" | json_str),"
	echo "  \"go\": $(printf '%s' "$(go version)" | json_str),"
	echo "  \"cpus\": $(nproc),"
	echo "  \"mem_kib\": $(awk '/MemTotal/{print $2}' /proc/meminfo),"
} >"$OUT/facts.json.part"
log "GPU: ${gpu_line:-none}; torch: ${torch_line:-none}; nvcc: ${nvcc_line:-none}; $(nproc) CPUs"

# --- build ------------------------------------------------------------------
t0=$(now)
GOWORK=off go run ./third_party/prepare >>"$OUT/build.log" 2>&1
rc=$?
t_prepare=$(($(now) - t0))
if [ $rc -eq 0 ]; then
	t0=$(now)
	go build -o bin/lanpo ./cmd/lanpo >>"$OUT/build.log" 2>&1
	rc=$?
	t_build=$(($(now) - t0))
else
	t_build=0
fi
wrapper_json=$(ls -t "$XDG_CACHE_HOME"/lanpo/gotch-wrapper/*/timings.json 2>/dev/null | head -1)
{
	cat "$OUT/facts.json.part"
	echo "  \"prepare_s\": $t_prepare,"
	echo "  \"go_build_s\": $t_build,"
	echo "  \"build_ok\": $([ $rc -eq 0 ] && echo true || echo false),"
	echo "  \"gotch_wrapper\": $(cat "${wrapper_json:-/dev/null}" 2>/dev/null || echo null),"
	echo "  \"lanpo_env\": $(bin/lanpo env --json 2>/dev/null || echo null)"
	echo "}"
} >"$OUT/facts.json"
rm -f "$OUT/facts.json.part"
if [ $rc -ne 0 ]; then
	log "build failed after ${t_prepare}+${t_build} s (build.log)"
	printf '# lanpo GPU validation: %s\n\nBuild failed; see build.log.\n' "$stage" >"$OUT/summary.md"
	exit 1
fi
log "built CUDA=1 lanpo in ${t_prepare} s (prepare) + ${t_build} s (go build)"
gpu=false
if bin/lanpo env --json 2>/dev/null | grep -q '"cuda_available":true'; then gpu=true; fi
log "GPU usable by lanpo: $gpu"

results=$OUT/$stage.jsonl
: >"$results"
: >"$OUT/$stage.log"
emit() { # emit NAME STATUS SECONDS [EXTRA-JSON-FIELDS]
	printf '{"stage":"%s","name":"%s","status":"%s","seconds":%s%s}\n' "$stage" "$1" "$2" "$3" "${4:+,$4}" >>"$results"
}

# --- stage: test -------------------------------------------------------------
run_tests() {
	local names
	names=$(grep -rhoE '^func (Test[A-Za-z0-9_]*CUDA[A-Za-z0-9_]*)\(t \*testing\.T\)' --include='*_test.go' . |
		sed -E 's/^func (Test[A-Za-z0-9_]*)\(.*/\1/' | sort -u)
	if [ "$gpu" != true ]; then
		# No GPU: prove every test binary compiles and links offline, and
		# report the GPU tests as skipped.
		local t0 rc
		t0=$(now)
		mkdir -p "$work/testbin"
		go vet ./... >>"$OUT/test.log" 2>&1 && go test -c -o "$work/testbin/" ./... >>"$OUT/test.log" 2>&1
		rc=$?
		emit "compile and link every test binary (CUDA=1)" "$([ $rc -eq 0 ] && echo pass || echo fail)" $(($(now) - t0))
		for n in $names; do emit "$n" skip 0 '"reason":"no GPU"'; done
		return $rc
	fi
	# A GPU test that skips on a GPU machine is a failure here.
	export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8} LANPO_REQUIRE_CUDA=1
	go test -count=1 -v -timeout 5m -run CUDA ./... >"$OUT/test.log" 2>&1
	local rc=$?
	# --- PASS: TestX (1.23s) / --- FAIL / --- SKIP, with the package from the
	# ok/FAIL line that closes each package.
	awk -v stage=test '
		/^=== RUN/ { next }
		/^(    )?--- (PASS|FAIL|SKIP): / {
			st = $2; sub(":", "", st); name = $3; secs = $4; gsub(/[()s]/, "", secs)
			if (name ~ /\//) next
			pend[++n] = sprintf("\"name\":\"%s\",\"status\":\"%s\",\"seconds\":%s", name, tolower(st), secs); next
		}
		/^(ok|FAIL)[ \t]+[a-z]/ {
			for (i = 1; i <= n; i++) printf "{\"stage\":\"%s\",\"package\":\"%s\",%s}\n", stage, $2, pend[i]
			n = 0
		}' "$OUT/test.log" >>"$results"
	grep -E '^(ok|FAIL|panic|---)' "$OUT/test.log" | head -50 >&2
	return $rc
}

# --- stage: bench ------------------------------------------------------------
# name|command (run from the checkout with bin/lanpo); each prints one JSON
# object on stdout. `validate.sh bench NAME…` runs only those named.
benches=(
	"logprob-7b-forward|bin/lanpo bench logprob --device cuda --dtype bfloat16 --n 16384 --hidden 3584 --v 152064 --reps 5 --json"
	"logprob-7b-forward-backward|bin/lanpo bench logprob --device cuda --dtype bfloat16 --n 16384 --hidden 3584 --v 152064 --grad --reps 3 --json"
	"grpo-step-0.5b|bin/lanpo bench grpo-step --device cuda --shape 0.5b --prompts 16 --samples 8 --new-tokens 256 --json"
	"generate-0.5b|bin/lanpo bench generate --device cuda --dtype bfloat16 --shape 0.5b --prompts 64 --samples 8 --prompt-len 512 --new-tokens 512 --cuda-graphs --json"
	"generate-7b|bin/lanpo bench generate --device cuda --dtype bfloat16 --shape 7b --prompts 64 --samples 8 --prompt-len 512 --new-tokens 512 --cuda-graphs --json"
	"generate-0.5b-top-p|bin/lanpo bench generate --device cuda --dtype bfloat16 --shape 0.5b --prompts 64 --samples 8 --prompt-len 512 --new-tokens 512 --top-p 0.95 --count-steps 0 --hf-python '' --json"
)
run_benches() {
	local rc=0
	for b in "${benches[@]}"; do
		local name=${b%%|*} cmd=${b#*|}
		if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then continue; fi
		if [ "$gpu" != true ]; then
			emit "$name" skip 0 "\"reason\":\"no GPU\",\"command\":$(printf '%s' "$cmd" | json_str)"
			continue
		fi
		local t0 out st
		t0=$(now)
		echo "\$ $cmd" >>"$OUT/bench.log"
		out=$(timeout 300 bash -c "$cmd" 2>>"$OUT/bench.log")
		st=$?
		printf '%s\n' "$out" >>"$OUT/bench.log"
		local result
		result=$(printf '%s\n' "$out" | grep '^{' | tail -1)
		if [ $st -eq 0 ] && [ -n "$result" ]; then
			emit "$name" ok $(($(now) - t0)) "\"command\":$(printf '%s' "$cmd" | json_str),\"result\":$result"
		else
			emit "$name" fail $(($(now) - t0)) "\"command\":$(printf '%s' "$cmd" | json_str),\"exit\":$st"
			rc=1
		fi
	done
	return $rc
}

if [ "$stage" = test ]; then run_tests; else run_benches; fi
rc=$?

# --- summary ----------------------------------------------------------------
{
	echo "# lanpo GPU validation: $stage"
	echo
	echo "GPU: ${gpu_line:-none}; torch: ${torch_line:-none}; nvcc: ${nvcc_line:-none}; $(nproc) CPUs"
	echo
	echo "Build: prepare ${t_prepare} s, go build ${t_build} s; GPU usable: $gpu; stage wall $(($(now) - t_start)) s; exit $rc"
	echo
	echo "| name | status | seconds | note |"
	echo "|---|---|---|---|"
	sed -E 's/.*"name":"([^"]*)","status":"([^"]*)","seconds":([0-9.]*)(,"reason":"([^"]*)")?.*/| \1 | \2 | \3 | \5 |/' "$results"
} >"$OUT/summary.md"
cat "$OUT/summary.md" >&2
exit $rc
