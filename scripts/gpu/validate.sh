#!/usr/bin/env bash
# scripts/gpu/validate.sh all | test | bench [NAME...] — validate lanpo on a
# lent GPU machine from the checkout and gpu-bundle/ alone (no Go, module
# proxy or network needed), against the machine's own torch and CUDA:
#
#   all     everything in one call, most valuable first: facts, the binaries,
#           lanpo env on the GPU, every GPU test, the fused log-prob,
#           generate-0.5b and grpo-step-0.5b benchmarks, then the 7B ones
#   test    facts, the binaries, every GPU test
#   bench   facts, the binaries, the GPU benchmarks; bench NAME… runs only
#           those (names in the list below)
#
# The binaries: the bundle's prebuilt ones (bin.tar.xz: bin/lanpo and a test
# binary per package with GPU tests), run with LD_LIBRARY_PATH naming the
# machine's torch/lib and nvidia/*/lib; when one does not start for a reason
# a rebuild can fix (not a missing library), or the bundle has none, they are
# built from source with the bundle's Go and modules (≈ 3–4 minutes).
#
# Results go to $OUT (default ./gpu-out), each line flushed as it comes, so a
# timeout or crash keeps what came before. Six files:
#   facts.json   GPU, driver, torch, CUDA, compiler, CPUs; which binaries ran
#                and why; build times; lanpo env --json
#   build.log    unpacking, the build if any, and why anything failed to load
#                (lanpo env's stderr, ldd's "not found", LD_DEBUG=libs lines)
#   run.log      the tests' and benchmarks' raw output
#   test.jsonl   one object per GPU test: package, name, status, seconds
#   bench.jsonl  one object per benchmark: name, status (ok, partial, fail,
#                skip), seconds, command, the benchmark's JSON
#   summary.md   all of it as tables, rewritten after every result
#
# Exit 1 when lanpo cannot start, when nvidia-smi (or torch) lists a GPU
# that lanpo does not see, or when a test or benchmark fails, is partial
# (the baseline failed or did not finish) or could not run in time. A GPU
# test that skips on a GPU machine fails (LANPO_REQUIRE_CUDA=1). Without a
# GPU (make gpu-rehearsal) the test binaries run and skip, the benchmarks
# are "skip".
#
# LANPO_GPU_BUDGET_S (default 400, for the device tool's timeout_s 420):
# the seconds this call may take; a timeout is cut to what is left. Finds: torch through `python3 -c 'import torch'`
# (or LIBTORCH), CUDA through nvcc (or CUDA_HOME). See docs/gpu.md.
set -uo pipefail
stage=${1:-}
only=("${@:2}")
case "$stage" in all | test | bench) ;; *)
	echo "usage: scripts/gpu/validate.sh all | test | bench [NAME...]" >&2
	exit 2
	;;
esac
cd "$(dirname "$0")/../.."
repo=$PWD
source scripts/gpu/lib.sh
bundle=$repo/gpu-bundle
OUT=${OUT:-$repo/gpu-out}
work=${LANPO_GPU_WORK:-/tmp/lanpo-gpu}
budget=${LANPO_GPU_BUDGET_S:-400}
mkdir -p "$OUT" "$work"
t_start=$(date +%s)
now() { date +%s; }
left() { echo $((budget - ($(now) - t_start))); }
log() { echo "validate: $*" | tee -a "$OUT/build.log" >&2; }
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))' 2>/dev/null || printf '"%s"' "$(sed 's/\\/\\\\/g; s/"/\\"/g' | tr '\n' ' ')"; }
: >"$OUT/build.log"
: >"$OUT/run.log"
case "$stage" in all) stages="test bench" ;; *) stages=$stage ;; esac
for s in $stages; do : >"$OUT/$s.jsonl"; done

# --- facts, written at once and again as they grow -------------------------
declare -A fact
fact[stage]=$(printf '%s' "$stage" | json_str)
write_facts() {
	{
		echo "{"
		local k first=1
		for k in stage gpu torch_python libtorch ld_library_path nvcc cxx cpus mem_kib binaries binaries_why unpack_s prepare_s go_build_s test_build_s gotch_wrapper go lanpo_env; do
			[ -n "${fact[$k]:-}" ] || continue
			[ $first = 1 ] || echo ","
			printf '  "%s": %s' "$k" "${fact[$k]}"
			first=0
		done
		echo
		echo "}"
	} >"$OUT/facts.json"
}
gpu_line=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
gpu_listed=false
torch_line=$(timeout 60 python3 -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>/dev/null)
# A GPU that torch sees counts as listed too (nvidia-smi may be missing).
case "$torch_line" in *" True") [ -n "$gpu_line" ] || gpu_line="a GPU torch sees (no nvidia-smi)" ;; esac
nvcc_bin=$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")
nvcc_line=$("$nvcc_bin" --version 2>/dev/null | tail -2 | tr '\n' ' ')
[ -n "$gpu_line" ] && gpu_listed=true
fact[gpu]=$(printf '%s' "${gpu_line:-none}" | json_str)
fact[torch_python]=$(printf '%s' "${torch_line:-none}" | json_str)
fact[nvcc]=$(printf '%s' "${nvcc_line:-none}" | json_str)
fact[cxx]=$(printf '%s' "$(${CXX:-g++} --version 2>/dev/null | head -1)" | json_str)
fact[cpus]=$(nproc)
fact[mem_kib]=$(awk '/MemTotal/{print $2}' /proc/meminfo)
log "GPU: ${gpu_line:-none}; torch: ${torch_line:-none}; nvcc: ${nvcc_line:-none}; $(nproc) CPUs"

if [ -z "${LIBTORCH:-}" ]; then
	LIBTORCH=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>>"$OUT/build.log") || {
		log "no torch: python3 cannot import torch and LIBTORCH is unset"
		write_facts
		exit 1
	}
fi
export LIBTORCH
# The machine's torch and the CUDA libraries pip put beside it.
site=$(dirname "$LIBTORCH")
LD_LIBRARY_PATH=$LIBTORCH/lib$(for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && printf ':%s' "$d"; done)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
fact[libtorch]=$(printf '%s' "$LIBTORCH" | json_str)
fact[ld_library_path]=$(printf '%s' "$LD_LIBRARY_PATH" | json_str)
write_facts

# --- results ------------------------------------------------------------------
summary() {
	python3 - "$OUT" "$stage" "$(($(now) - t_start))" <<'PY' >"$OUT/summary.md.tmp" 2>>"$OUT/build.log" && mv "$OUT/summary.md.tmp" "$OUT/summary.md"
import json, os, sys
out, stage, wall = sys.argv[1:4]
facts = json.load(open(os.path.join(out, "facts.json")))
env = facts.get("lanpo_env") or {}
print(f"# lanpo GPU validation: {stage}\n")
print(f"GPU: {facts.get('gpu')}; torch: {facts.get('torch_python')}; nvcc: {facts.get('nvcc')}; {facts.get('cpus')} CPUs\n")
print(f"Binaries: {facts.get('binaries', 'not yet')}" + (f" ({facts['binaries_why']})" if facts.get("binaries_why") else "") +
      f"; lanpo sees CUDA: {env.get('cuda_available', 'unknown')}; wall so far {wall} s\n")
keys = {"logprob": ("speedup", "fused_ms", "naive_ms", "fused_tflops"),
        "generate": ("lanpo_tokens_per_s", "graphs_over_eager", "lanpo_over_hf", "lanpo_peak_gib"),
        "grpo": ("step_s", "tokens_per_s")}
for name in ("test", "bench"):
    path = os.path.join(out, name + ".jsonl")
    if not os.path.exists(path):
        continue
    rows = []
    for l in open(path, encoding="utf-8", errors="replace"):
        try:
            rows.append(json.loads(l))
        except ValueError:
            if l.strip():
                rows.append({"name": "(a line that is not JSON)", "status": "?", "reason": l.strip()[:80]})
    if not rows:
        continue
    print(f"## {name}\n\n| name | status | seconds | note |\n|---|---|---|---|")
    for r in rows:
        note = r.get("reason") or ("exit %s" % r["exit"] if "exit" in r else "")
        res = r.get("result")
        if isinstance(res, dict):
            ks = next((v for k, v in keys.items() if r["name"].startswith(k)), ())
            note = ", ".join(f"{k} {res[k]:.3g}" if isinstance(res[k], float) else f"{k} {res[k]}" for k in ks if k in res) or note
            if res.get("hf_error"):
                note += "; baseline failed: " + res["hf_error"][:120]
            elif res.get("hf_pending"):
                note += "; the baseline did not finish"
        pkg = (r.get("package", "").rsplit("/", 1)[-1] + ".") if r.get("package") else ""
        print(f"| {pkg}{r.get('name')} | {r.get('status')} | {r.get('seconds', '')} | {note} |")
    print()
PY
}
emit() { # emit STAGE NAME STATUS SECONDS [EXTRA-JSON-FIELDS]
	printf '{"stage":"%s","name":"%s","status":"%s","seconds":%s%s}\n' "$1" "$2" "$3" "$4" "${5:+,$5}" >>"$OUT/$1.jsonl"
	summary
}

# diagnose BIN WHY: why BIN cannot start or see the GPU, into build.log.
diagnose() {
	local bin=$1 why=$2 missing pat
	{
		echo "=== $why"
		echo "--- $bin env --json: exit $env_rc; stderr:"
		cat "$work/env.err" 2>/dev/null
		echo "--- LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
		echo "--- ldd $bin, libraries not found:"
		ldd "$bin" 2>&1 | grep -E 'not found|error|wrong ELF' | sort -u | grep . || echo "(none)"
	} >>"$OUT/build.log"
	missing=$(ldd "$bin" 2>&1 | awk '/not found/{print $1}' | sort -u | tr '\n' ' ')
	# The failing libraries' search, or libcuda's (the driver's library,
	# opened at run time) when every library was found.
	pat=$(printf '%s' "${missing:-libcuda.so}" | sed 's/ *$//; s/\./\\./g; s/ /|/g')
	{
		echo "--- LD_DEBUG=libs lines for ${missing:-libcuda.so (every linked library was found)}:"
		# (the loader's hardware-capability subdirectories left out)
		LD_DEBUG=libs timeout 60 "$bin" env --json 2>&1 >/dev/null | grep -E "$pat" | grep -vE 'glibc-hwcaps/|/tls/|/x86_64/(x86_64/)?lib' | head -60
		echo "--- nvidia-smi: ${gpu_line:-none}"
	} >>"$OUT/build.log"
	log "$why: see build.log${missing:+ (not found: ${missing% })}"
	missing_libs=$missing
}

# start BIN: runs BIN env --json into $env_json; 0 when it started.
start() {
	env_json=$(timeout 120 "$1" env --json 2>"$work/env.err")
	env_rc=$?
	return $env_rc
}

fail_early() { # fail_early WHY: the binaries cannot run; record and exit 1
	fact[binaries_why]=$(printf '%s' "$1" | json_str)
	write_facts
	for s in $stages; do emit "$s" "lanpo starts" fail 0 "\"reason\":$(printf '%s' "$1" | json_str)"; done
	summary
	exit 1
}

# --- the binaries -----------------------------------------------------------
lanpo=
testbin=
mode=
why=
if [ -f "$bundle/bin.tar.xz" ]; then
	t0=$(now)
	rm -rf "$work/prebuilt" && mkdir -p "$work/prebuilt"
	if xz -dc -T0 "$bundle/bin.tar.xz" | tar -C "$work/prebuilt" -xf - 2>>"$OUT/build.log"; then
		fact[unpack_s]=$(($(now) - t0))
		if start "$work/prebuilt/bin/lanpo"; then
			lanpo=$work/prebuilt/bin/lanpo testbin=$work/prebuilt/tests mode=prebuilt
			log "prebuilt binaries start ($(($(now) - t0)) s to unpack and start)"
		else
			missing_libs=
			diagnose "$work/prebuilt/bin/lanpo" "the prebuilt lanpo does not start"
			if [ -n "$missing_libs" ]; then
				# A library the machine lacks: a binary built here would
				# need it too.
				fail_early "the prebuilt lanpo does not start: not found: ${missing_libs% } (a rebuild needs them too)"
			fi
			why="the prebuilt lanpo does not start ($(tail -1 "$work/env.err" | cut -c1-200))"
		fi
	else
		why="bin.tar.xz does not unpack"
		log "$why"
	fi
else
	why="no prebuilt binaries in the bundle"
fi

if [ -z "$lanpo" ]; then
	for n in go modcache gotch gloo; do
		[ -f "$bundle/$n.tar.xz" ] || fail_early "$why, and no source build to fall back on ($bundle/$n.tar.xz missing: make gpu-bundle dropped it or was not run)"
	done
	log "building from source: $why"
	t0=$(now)
	for n in go modcache gotch gloo; do
		if [ ! -f "$work/$n/.unpacked" ]; then
			rm -rf "${work:?}/$n" && mkdir -p "$work/$n"
			xz -dc -T0 "$bundle/$n.tar.xz" | tar -C "$work/$n" -xf - && touch "$work/$n/.unpacked"
		fi
	done
	fact[unpack_s]=$(($(now) - t0))
	export GOROOT=$work/go PATH=$work/go/bin:$PATH GOMODCACHE=$work/modcache GOPROXY=off GOSUMDB=off
	export GOTOOLCHAIN=local GOFLAGS=-trimpath GOCACHE=$work/gocache XDG_CACHE_HOME=$work/cache GOTELEMETRY=off
	export LANPO_GOTCH_SRC=$work/gotch LANPO_GLOO_INCLUDE=$work/gloo CUDA=1
	unset GOWORK
	fact[go]=$(printf '%s' "$(go version)" | json_str)
	t0=$(now)
	GOWORK=off timeout "$(left)" go run ./third_party/prepare >>"$OUT/build.log" 2>&1
	rc=$?
	fact[prepare_s]=$(($(now) - t0))
	if [ $rc -eq 0 ]; then
		t0=$(now)
		timeout "$(left)" go build -o bin/lanpo ./cmd/lanpo >>"$OUT/build.log" 2>&1
		rc=$?
		fact[go_build_s]=$(($(now) - t0))
	fi
	if [ $rc -eq 0 ] && [[ " $stages " == *" test "* ]]; then
		t0=$(now)
		mkdir -p "$work/src-tests"
		mapfile -t pkgs < <(gpu_test_packages)
		timeout "$(left)" go test -c -o "$work/src-tests/" "${pkgs[@]}" >>"$OUT/build.log" 2>&1
		rc=$?
		name_test_binaries "$work/src-tests" "${pkgs[@]}"
		fact[test_build_s]=$(($(now) - t0))
	fi
	wrapper_json=$(ls -t "$XDG_CACHE_HOME"/lanpo/gotch-wrapper/*/timings.json 2>/dev/null | head -1)
	[ -z "$wrapper_json" ] || fact[gotch_wrapper]=$(cat "$wrapper_json")
	[ $rc -eq 0 ] || fail_early "$why; the source build failed (build.log)"
	log "built CUDA=1 lanpo from source in ${fact[prepare_s]} s (prepare) + ${fact[go_build_s]} s (go build) + ${fact[test_build_s]:-0} s (test binaries)"
	start "$repo/bin/lanpo" || {
		diagnose "$repo/bin/lanpo" "lanpo built from source does not start"
		fail_early "$why; lanpo built from source does not start either (build.log)"
	}
	lanpo=$repo/bin/lanpo testbin=$work/src-tests mode="built from source"
fi
fact[binaries]=$(printf '%s' "$mode" | json_str)
[ -z "$why" ] || fact[binaries_why]=$(printf '%s' "$why" | json_str)
fact[lanpo_env]=$env_json
write_facts

gpu=false
if printf '%s' "$env_json" | grep -q '"cuda_available":true'; then gpu=true; fi
if [ "$gpu_listed" = true ] && [ "$gpu" != true ]; then
	diagnose "$lanpo" "nvidia-smi lists a GPU ($gpu_line) but lanpo sees none"
	fail_early "nvidia-smi lists a GPU but lanpo sees none (build.log: ldd, LD_DEBUG=libs)"
fi
log "binaries: $mode; GPU usable by lanpo: $gpu"
summary

# --- GPU tests: each package's test binary, from its directory -----------------
# test_rows PKG FILE: a JSON line per top-level test in go test -v output
# (--- PASS/FAIL/SKIP), with a skip's or failure's reason: the test's last
# logged line before it.
test_rows() {
	python3 - "$1" "$2" <<'PY'
import json, re, sys
pkg, msg = sys.argv[1], ""
for line in open(sys.argv[2], encoding="utf-8", errors="replace"):
    line = line.rstrip("\n")
    if re.match(r"^    \w+\.go:\d+: ", line):
        msg = line.strip()
    elif line.startswith("=== RUN"):
        msg = ""
    m = re.match(r"^--- (PASS|FAIL|SKIP): (\S+) \(([\d.]+)s\)", line)
    if m:
        r = {"stage": "test", "package": pkg, "name": m[2], "status": m[1].lower(), "seconds": float(m[3])}
        if m[1] != "PASS" and msg:
            r["reason"] = msg[:300]
        print(json.dumps(r, ensure_ascii=False))
        msg = ""
PY
}

run_tests() {
	local rc=0 bin dir t0 st tmo n pending
	local -a tenv=(OMP_WAIT_POLICY=passive)
	if [ "$gpu" = true ]; then
		tenv+=(CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}" LANPO_REQUIRE_CUDA=1)
	fi
	if [ ! -s "$testbin/packages" ]; then
		emit test "test binaries" fail 0 "\"reason\":\"no $testbin/packages: no test binary to run\""
		return 1
	fi
	n=$(wc -l <"$testbin/packages")
	# libtorch's OpenMP threads spin while they wait: the binaries running
	# at once share the CPUs instead (make test's fix for the same thing).
	tenv+=(OMP_NUM_THREADS=$(($(nproc) / n > 0 ? $(nproc) / n : 1)))
	tmo=$(($(left) < 240 ? $(left) : 240))
	if [ "$tmo" -lt 30 ]; then
		# On a GPU an untested package is a failure; without one a skip.
		while read -r bin dir; do
			emit test "$dir" "$([ "$gpu" = true ] && echo fail || echo skip)" 0 "\"reason\":\"out of time (LANPO_GPU_BUDGET_S=$budget)\""
		done <"$testbin/packages"
		[ "$gpu" != true ]
		return
	fi
	# The packages' binaries run at once (small models; 16 CPUs and one
	# GPU to share), each from its directory under the same timeout; each
	# one's results are written as it finishes.
	t0=$(now)
	rm -rf "$work/tests" && mkdir -p "$work/tests"
	while read -r bin dir; do
		(
			# go's own timeout first, so its goroutine dump makes it into the log.
			cd "$repo/$dir" && env "${tenv[@]}" timeout -k 10 "$tmo" "$testbin/$bin" -test.run CUDA -test.v -test.count=1 \
				-test.timeout "$((tmo - 15))s" >"$work/tests/$bin.out" 2>&1
			echo $? >"$work/tests/$bin.rc"
		) &
	done <"$testbin/packages"
	pending=$(cut -d' ' -f1 "$testbin/packages")
	while [ -n "$pending" ]; do
		sleep 1
		local still=
		for bin in $pending; do
			if [ ! -f "$work/tests/$bin.rc" ]; then
				still="$still $bin"
				continue
			fi
			dir=$(awk -v b="$bin" '$1 == b {print $2}' "$testbin/packages")
			st=$(cat "$work/tests/$bin.rc")
			{
				echo "=== test $dir ($bin, timeout ${tmo} s): exit $st after $(($(now) - t0)) s"
				cat "$work/tests/$bin.out"
			} >>"$OUT/run.log"
			test_rows "${dir#./}" "$work/tests/$bin.out" >>"$OUT/test.jsonl"
			if [ "$st" -ne 0 ]; then
				rc=1
				grep -q '^--- FAIL' "$work/tests/$bin.out" ||
					emit test "$dir" fail $(($(now) - t0)) "\"exit\":$st,\"reason\":$(tail -3 "$work/tests/$bin.out" | json_str)"
			fi
			summary
		done
		pending=$still
	done
	wait
	grep -hE '^(--- |ok|FAIL|PASS|panic)' "$OUT/run.log" | tail -40 >&2
	return $rc
}

# --- benchmarks ---------------------------------------------------------------
# name|timeout seconds|command (LANPO stands for the binary); each prints
# JSON lines on stdout, the last one whole. Most valuable first.
benches=(
	"logprob-7b-forward|90|LANPO bench logprob --device cuda --dtype bfloat16 --n 16384 --hidden 3584 --v 152064 --reps 5 --json"
	"logprob-7b-forward-backward|90|LANPO bench logprob --device cuda --dtype bfloat16 --n 16384 --hidden 3584 --v 152064 --grad --reps 3 --json"
	"generate-0.5b|150|LANPO bench generate --device cuda --dtype bfloat16 --shape 0.5b --prompts 64 --samples 8 --prompt-len 512 --new-tokens 512 --cuda-graphs --json"
	"grpo-step-0.5b|120|LANPO bench grpo-step --device cuda --shape 0.5b --prompts 16 --samples 8 --new-tokens 256 --json"
	"generate-7b|240|LANPO bench generate --device cuda --dtype bfloat16 --shape 7b --prompts 64 --samples 8 --prompt-len 512 --new-tokens 512 --cuda-graphs --json"
	"generate-0.5b-top-p|120|LANPO bench generate --device cuda --dtype bfloat16 --shape 0.5b --prompts 64 --samples 8 --prompt-len 512 --new-tokens 512 --top-p 0.95 --count-steps 0 --hf-python '' --json"
	"long-tail-0.5b|240|LANPO bench generate --long-tail --device cuda --dtype bfloat16 --shape 0.5b --json"
)
run_benches() {
	local rc=0 b name tmo cmd t0 st result status
	for name in "${only[@]}"; do
		[[ " ${benches[*]%%|*} " == *" $name "* ]] || {
			log "no benchmark named $name (have: ${benches[*]%%|*})"
			emit bench "$name" fail 0 '"reason":"no such benchmark"'
			rc=1
		}
	done
	for b in "${benches[@]}"; do
		name=${b%%|*} b=${b#*|} tmo=${b%%|*} cmd=${b#*|}
		if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then continue; fi
		local cjson
		cjson=$(printf '%s' "${cmd//LANPO/bin/lanpo}" | json_str)
		if [ "$gpu" != true ]; then
			emit bench "$name" skip 0 "\"reason\":\"no GPU\",\"command\":$cjson"
			continue
		fi
		[ "$(left)" -ge "$tmo" ] || tmo=$(left)
		if [ "$tmo" -lt 30 ]; then
			# Not run on a GPU: the call fails, so no one reads it as a pass.
			emit bench "$name" fail 0 "\"reason\":\"out of time (LANPO_GPU_BUDGET_S=$budget)\",\"command\":$cjson"
			rc=1
			continue
		fi
		t0=$(now)
		echo "=== bench $name (timeout ${tmo} s): ${cmd//LANPO/bin/lanpo}" >>"$OUT/run.log"
		# timeout signals the whole process group: transformers' python too.
		# Into run.log as it comes: a benchmark cut off keeps what it printed.
		timeout -k 10 "$tmo" bash -c "${cmd//LANPO/\"\$LANPO_BIN\"}" 2>>"$OUT/run.log" | tee "$work/bench.out" >>"$OUT/run.log"
		st=${PIPESTATUS[0]}
		# The last whole JSON object; "partial" when it lacks the baseline
		# (hf_pending: lanpo's figures came, then it failed or ran out of
		# time; hf_error: the baseline failed).
		result=$(python3 -c '
import json, sys
for l in reversed(open(sys.argv[1], errors="replace").read().splitlines()):
    try:
        r = json.loads(l)
    except ValueError:
        continue
    if isinstance(r, dict):
        print(json.dumps(r))
        break' "$work/bench.out" 2>/dev/null)
		status=ok
		case "$result" in *'"hf_pending": true'* | *'"hf_error":'*) status=partial ;; esac
		if [ "$st" -eq 0 ] && [ -n "$result" ] && [ $status = ok ]; then
			emit bench "$name" ok $(($(now) - t0)) "\"command\":$cjson,\"result\":$result"
		elif [ -n "$result" ]; then
			emit bench "$name" partial $(($(now) - t0)) "\"command\":$cjson,\"exit\":$st,\"result\":$result"
			rc=1
		else
			emit bench "$name" fail $(($(now) - t0)) "\"command\":$cjson,\"exit\":$st"
			rc=1
		fi
	done
	return $rc
}

export LANPO_BIN=$lanpo
rc=0
for s in $stages; do
	if [ "$s" = test ]; then run_tests || rc=1; else run_benches || rc=1; fi
done
summary
cat "$OUT/summary.md" >&2
log "done in $(($(now) - t_start)) s, exit $rc"
exit $rc
