#!/usr/bin/env bash
# LANPO's fair test in the transfer world (docs/demo.md, "The fair test";
# results in docs/benchmarks.md). Two phases:
#
#   screen   one SFT (world seed 101, not a confirmation seed) × 2 RL seeds:
#            GRPO, the oracle, and LANPO with consolidation in four
#            configurations (lesson_order recency|outcome × context plan|lessons)
#   screen-pt  the oracle and the screen's best configuration (BEST_SET) with
#            p_t 0.25
#   screen-lambda  the oracle with lanpo.consolidate 0.05
#   confirm  world seeds 1-3, one SFT each × RL_SEEDS RL seeds (default 2):
#            GRPO and the oracle
#   confirm-best    the best LANPO configuration (BEST_SET: the --set flags
#            of the screen's winner) from the same SFT models and RL seeds
#   confirm-budget  GRPO with twice the steps (grpo-budget), RL seed 1
#
# then lanpo demo paired prints the tables. Usage:
#   scripts/demo/fair_test.sh screen  [OUT]   (default OUT runs/fair)
#   scripts/demo/fair_test.sh confirm [OUT]
#   BEST_SET="--set lanpo.lesson_order=outcome" scripts/demo/fair_test.sh confirm-best [OUT]
#   scripts/demo/fair_test.sh confirm-budget [OUT]
set -euo pipefail
phase=${1:?screen or confirm}
out=${2:-runs/fair}
lanpo=${LANPO:-bin/lanpo}
case $phase in
screen)
	s=101
	base=$out/screen/s$s
	# --sft-lessons: the SFT teaches the lessons context too, for the configurations that use it
	$lanpo demo --seed $s --rl-seeds 2 --arms grpo,lanpo-consolidate,lanpo-oracle --sft-lessons --run-dir $base
	sft=$base/sft/checkpoints/step-001600
	for v in "outcome:--set lanpo.lesson_order=outcome" "lessons:--set lanpo.context=lessons" \
		"lessons-outcome:--set lanpo.context=lessons --set lanpo.lesson_order=outcome"; do
		name=${v%%:*}
		# shellcheck disable=SC2086 # the --set flags split on purpose
		$lanpo demo --seed $s --rl-seeds 2 --arms lanpo-consolidate --sft-from $sft ${v#*:} --run-dir $out/screen/$name-s$s
	done
	;;
screen-pt)
	# After the screen: the oracle, and the best of its four configurations
	# (BEST_SET), with p_t 0.25 — three quarters of the prompts bare, as
	# GRPO's all are.
	s=101
	sft=$out/screen/s$s/sft/checkpoints/step-001600
	$lanpo demo --seed $s --rl-seeds 2 --arms lanpo-oracle --p-t 0.25 --sft-from $sft --run-dir $out/screen/oracle-pt25-s$s
	# shellcheck disable=SC2086
	$lanpo demo --seed $s --rl-seeds 2 --arms lanpo-consolidate --p-t 0.25 ${BEST_SET:-} --sft-from $sft --run-dir $out/screen/best-pt25-s$s
	;;
screen-lambda)
	# The oracle with a weaker consolidation (λ 0.05): does the NLL's
	# gradient drown the bare prompt's own RL signal?
	s=101
	$lanpo demo --seed $s --rl-seeds 2 --arms lanpo-oracle --set lanpo.consolidate=0.05 \
		--sft-from $out/screen/s$s/sft/checkpoints/step-001600 --run-dir $out/screen/oracle-lambda005-s$s
	;;
confirm)
	# GRPO and the oracle do not depend on the screen: they run first; the
	# best LANPO configuration then starts from the same SFT models.
	for s in 1 2 3; do
		$lanpo demo --seed $s --rl-seeds "${RL_SEEDS:-2}" --arms grpo,lanpo-oracle --run-dir $out/confirm/s$s
	done
	;;
confirm-best)
	for s in 1 2 3; do
		# shellcheck disable=SC2086
		$lanpo demo --seed $s --rl-seeds "${RL_SEEDS:-2}" --arms lanpo-consolidate ${BEST_SET:-} \
			--sft-from $out/confirm/s$s/sft/checkpoints/step-001600 --run-dir $out/confirm/best-s$s
	done
	;;
confirm-budget)
	for s in 1 2 3; do
		$lanpo demo --seed $s --arms grpo-budget --sft-from $out/confirm/s$s/sft/checkpoints/step-001600 --run-dir $out/confirm/budget-s$s
	done
	;;
*)
	echo "fair_test.sh: want screen or confirm, got $phase" >&2
	exit 2
	;;
esac
