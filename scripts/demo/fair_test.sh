#!/usr/bin/env bash
# LANPO's fair test in the transfer world (docs/demo.md, "The fair test";
# results in docs/benchmarks.md). Two phases:
#
#   screen   one SFT (world seed 101, not a confirmation seed) × 2 RL seeds:
#            GRPO, the oracle, and LANPO with consolidation in four
#            configurations (lesson_order recency|outcome × context plan|lessons)
#   confirm  world seeds 1-3, one SFT each × RL_SEEDS RL seeds (default 3):
#            GRPO, GRPO with twice the steps (grpo-budget), the best LANPO
#            configuration (BEST_SET, --set flags of the screen's winner) and
#            the oracle
#
# then lanpo demo paired prints the tables. Usage:
#   scripts/demo/fair_test.sh screen  [OUT]   (default OUT runs/fair)
#   BEST_SET="--set lanpo.lesson_order=outcome" scripts/demo/fair_test.sh confirm [OUT]
set -euo pipefail
phase=${1:?screen or confirm}
out=${2:-runs/fair}
lanpo=${LANPO:-bin/lanpo}
case $phase in
screen)
	s=101
	base=$out/screen/s$s
	$lanpo demo --seed $s --rl-seeds 2 --arms grpo,lanpo-consolidate,lanpo-oracle --run-dir $base
	sft=$base/sft/checkpoints/step-001600
	for v in "outcome:--set lanpo.lesson_order=outcome" "lessons:--set lanpo.context=lessons" \
		"lessons-outcome:--set lanpo.context=lessons --set lanpo.lesson_order=outcome"; do
		name=${v%%:*}
		# shellcheck disable=SC2086 # the --set flags split on purpose
		$lanpo demo --seed $s --rl-seeds 2 --arms lanpo-consolidate --sft-from $sft ${v#*:} --run-dir $out/screen/$name-s$s
	done
	;;
confirm)
	for s in 1 2 3; do
		# shellcheck disable=SC2086
		$lanpo demo --seed $s --rl-seeds "${RL_SEEDS:-3}" --arms grpo,grpo-budget,lanpo-consolidate,lanpo-oracle ${BEST_SET:-} --run-dir $out/confirm/s$s
	done
	;;
*)
	echo "fair_test.sh: want screen or confirm, got $phase" >&2
	exit 2
	;;
esac
