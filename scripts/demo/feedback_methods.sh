#!/usr/bin/env bash
# The language-feedback methods side by side (#48; design and predictions in
# docs/demo.md, results in docs/benchmarks.md): SDPO and Critique-GRPO at
# their defaults from the fair test's SFT models in the transfer world, and
# with GRPO from #45's SFT models in the arithmetic world. Phases:
#
#   transfer   world seeds 1-3 × RL seeds 1-2 from OUT/confirm/sS (the fair
#              test's confirmation: scripts/demo/fair_test.sh confirm)
#   arithmetic world seeds 1-2 × RL seeds 1-2: GRPO, SDPO, Critique-GRPO
#              from ARITH_SFT/arith-sS (default runs/lora: #45's runs)
#   variants   the transfer world again with SDPO at λ 0.5, Critique-GRPO
#              with critique.source outcome, and Critique-GRPO with the std
#              in its advantages as GRPO has it (OUT/fb-variants/{lambda,
#              outcome,std}/sS)
#   control    world seeds 1-3 × RL seeds 1-2: GRPO, SDPO, Critique-GRPO
#              from the transfer world's SFT models (the two worlds share
#              one SFT), OUT/confirm/sS as for transfer; into OUT/control-fb/sS
#
# then lanpo demo paired prints the tables (docs/benchmarks.md). Usage:
#   scripts/demo/feedback_methods.sh transfer [OUT]     (default OUT runs/fair)
#   scripts/demo/feedback_methods.sh arithmetic [OUT]   (default OUT runs/fb)
#   scripts/demo/feedback_methods.sh control [OUT]      (default OUT runs/fair)
#   scripts/demo/feedback_methods.sh variants [OUT]     (default OUT runs/fair)
set -euo pipefail
phase=${1:?transfer, arithmetic, control or variants}
lanpo=${LANPO:-bin/lanpo}
case $phase in
transfer)
	out=${2:-runs/fair}
	for s in 1 2 3; do
		$lanpo demo --seed $s --rl-seeds 2 --arms sdpo,critique-grpo \
			--sft-from $out/confirm/s$s/sft/checkpoints/step-001600 --run-dir $out/confirm/fb-s$s
	done
	;;
arithmetic)
	out=${2:-runs/fb}
	for s in 1 2; do
		$lanpo demo --world arithmetic --seed $s --rl-seeds 2 --arms grpo,sdpo,critique-grpo \
			--sft-from "${ARITH_SFT:-runs/lora}/arith-s$s/sft/checkpoints/step-001400" --run-dir $out/arith-s$s
	done
	;;
variants)
	out=${2:-runs/fair}
	# one variant over every seed, then the next
	for v in "std:critique-grpo:critique.adv_std=true" "lambda:sdpo:sdpo.lambda=0.5" "outcome:critique-grpo:critique.source=outcome"; do
		IFS=: read -r dir arm set <<<"$v"
		for s in 1 2 3; do
			$lanpo demo --seed $s --rl-seeds 2 --arms "$arm" --set "$set" \
				--sft-from $out/confirm/s$s/sft/checkpoints/step-001600 --run-dir $out/fb-variants/$dir/s$s
		done
	done
	;;
control)
	out=${2:-runs/fair}
	for s in 1 2 3; do
		$lanpo demo --world control --seed $s --rl-seeds 2 --arms grpo,sdpo,critique-grpo \
			--sft-from $out/confirm/s$s/sft/checkpoints/step-001600 --run-dir $out/control-fb/s$s
	done
	;;
*)
	echo "feedback_methods.sh: want transfer, arithmetic, control or variants, got $phase" >&2
	exit 2
	;;
esac
