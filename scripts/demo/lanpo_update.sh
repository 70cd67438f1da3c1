#!/usr/bin/env bash
# LANPO's update (#55), phase B2: LANPO with the update phase A and B1
# chose (consolidation λ 4, the demo's default since) against GRPO and
# grpo-budget on world seeds 1-8, one SFT model each, RL seed 1, 50 steps
# (docs/demo.md, "LANPO's update"; results in docs/benchmarks.md).
#
#   SFT1=runs/demo/sft/checkpoints/step-001600 scripts/demo/lanpo_update.sh confirm [OUT]
#   scripts/demo/lanpo_update.sh paired [OUT]
#
# confirm runs JOBS (default 2) world seeds at a time, each with
# OMP_NUM_THREADS=1; SFT1, when set, is world seed 1's SFT checkpoint (make
# demo's), reused instead of trained again.
set -euo pipefail
phase=${1:?confirm, paired or paired-b3}
out=${2:-runs/lanpo-update}
lanpo=${LANPO:-bin/lanpo}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
jobs=${JOBS:-2}
mkdir -p "$out"
case $phase in
confirm)
	for s in 1 2 3 4 5 6 7 8; do
		while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
		from=()
		if [ "$s" = 1 ] && [ -n "${SFT1:-}" ]; then
			from=(--sft-from "$SFT1")
		fi
		echo "lanpo_update: world seed $s" >&2
		$lanpo demo --seed $s --arms grpo,lanpo-consolidate,grpo-budget "${from[@]}" --run-dir "$out/s$s" >"$out/s$s.log" 2>&1 &
	done
	wait
	;;
paired)
	$lanpo demo paired --baseline grpo@"$out" --arm "LANPO=lanpo-consolidate@$out" --arm "grpo-budget=grpo-budget@$out"
	$lanpo demo paired --baseline grpo-budget@"$out" --arm "LANPO=lanpo-consolidate@$out"
	;;
paired-b3)
	$lanpo demo paired --baseline grpo@"$out" --arm "LANPO (token)=lanpo-consolidate@$out-b3"
	$lanpo demo paired --baseline "LANPO (step)=lanpo-consolidate@$out" --arm "LANPO (token)=lanpo-consolidate@$out-b3"
	;;
*)
	echo "lanpo_update.sh: want confirm, paired or paired-b3, got $phase" >&2
	exit 2
	;;
esac
