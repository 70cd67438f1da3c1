#!/usr/bin/env bash
# LANPO's update (#55): the dose experiment on the transfer world's oracle
# arm (docs/demo.md, "LANPO's update"; results in docs/benchmarks.md).
# Design and predictions were committed before these ran.
#
#   grid    from one SFT model (SFT=…/sft/checkpoints/step-001600 of world
#           seed 1): GRPO 100 steps; the oracle for 100 steps at p_t
#           {0.75, 1} × λ {0.25, 1, 4}, and λ 0 at p_t 1 (the control)
#   replay  the consolidation rows of the oracle at p_t 1, λ 1 through
#           lanpo sft at RL's learning rate (3e-4) and at SFT's (3e-3)
#   own     phase B's screen: the oracle at p_t 0.75 for 100 steps with
#           consolidation in a step of its own (lanpo.consolidate_lr 1e-3
#           and 3e-3), beside the grid's joint λ 4
#
# Runs go JOBS at a time (default 2), each with OMP_NUM_THREADS=1.
#   SFT=runs/demo/sft/checkpoints/step-001600 scripts/demo/dose.sh grid [OUT]
#   scripts/demo/dose.sh replay [OUT]
#   SFT=… scripts/demo/dose.sh own [OUT]
set -euo pipefail
phase=${1:?grid, replay or own}
out=${2:-runs/dose}
lanpo=${LANPO:-bin/lanpo}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
jobs=${JOBS:-2}
mkdir -p "$out"

# run NAME ARGS…: one lanpo demo (or sft) run in the background, its log
# in OUT/NAME.log, at most $jobs at a time.
run() {
	local name=$1
	shift
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
	echo "dose: $name" >&2
	"$@" >"$out/$name.log" 2>&1 &
}

case $phase in
grid)
	sft=${SFT:?SFT=the world-seed-1 SFT checkpoint}
	run grpo100 $lanpo demo --seed 1 --arms grpo-budget --budget-steps 100 --sft-from "$sft" --run-dir "$out/grpo100"
	for pt in 1 0.75; do
		for lam in 0.25 1 4; do
			run "oracle-pt$pt-l$lam" $lanpo demo --seed 1 --arms lanpo-oracle --p-t $pt --set lanpo.consolidate=$lam \
				--set total_steps=100 --sft-from "$sft" --run-dir "$out/oracle-pt$pt-l$lam"
		done
	done
	run oracle-pt1-l0 $lanpo demo --seed 1 --arms lanpo-oracle --p-t 1 --set lanpo.consolidate=0 \
		--set total_steps=100 --sft-from "$sft" --run-dir "$out/oracle-pt1-l0"
	wait
	;;
replay)
	src=$out/oracle-pt1-l1
	for lr in 3e-4 3e-3; do
		python3 scripts/demo/replay_consolidation.py "$src/lanpo-oracle" "$src" "$out/replay-$lr" --lr $lr
		run "replay-$lr" $lanpo sft --config "$out/replay-$lr/sft.yaml"
	done
	wait
	;;
own)
	sft=${SFT:?SFT=the world-seed-1 SFT checkpoint}
	for lr in 1e-3 3e-3; do
		run "oracle-pt0.75-own$lr" $lanpo demo --seed 1 --arms lanpo-oracle --p-t 0.75 --set lanpo.consolidate=1 \
			--set lanpo.consolidate_lr=$lr --set total_steps=100 --sft-from "$sft" --run-dir "$out/oracle-pt0.75-own$lr"
	done
	wait
	;;
*)
	echo "dose.sh: want grid, replay or own, got $phase" >&2
	exit 2
	;;
esac
