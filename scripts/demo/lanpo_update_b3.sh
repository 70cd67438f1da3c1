#!/usr/bin/env bash
# LANPO's update (#55), B3: LANPO with lanpo.consolidate_norm token (λ 4)
# from each of B2's SFT models (lanpo_update.sh confirm wrote them under
# OUT/sS), RL seed 1, waiting for each SFT checkpoint to exist; and the
# oracle with it on world seed 1 for 100 steps.
# B3's runs go to OUT-b3 (a directory apart, so lanpo demo paired reads each
# LANPO arm from its own tree):
#   SFT1=runs/demo/sft/checkpoints/step-001600 scripts/demo/lanpo_update_b3.sh [OUT]
#   scripts/demo/lanpo_update.sh paired-b3 [OUT]
set -euo pipefail
out=${1:-runs/lanpo-update}
lanpo=${LANPO:-bin/lanpo}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
token=(--set lanpo.consolidate_norm=token)
b3=$out-b3
mkdir -p "$b3"
sft1=${SFT1:-$out/s1/sft/checkpoints/step-001600}
$lanpo demo --seed 1 --arms lanpo-oracle --p-t 0.75 "${token[@]}" --set total_steps=100 --sft-from "$sft1" \
	--run-dir "$b3/oracle-s1" >"$b3/oracle-s1.log" 2>&1
for s in 1 2 3 4 5 6 7 8; do
	sft=$out/s$s/sft/checkpoints/step-001600
	[ "$s" = 1 ] && sft=$sft1
	until [ -f "$sft/manifest.json" ]; do sleep 30; done
	echo "b3: world seed $s" >&2
	$lanpo demo --seed $s --arms lanpo-consolidate "${token[@]}" --sft-from "$sft" --run-dir "$b3/s$s" >"$b3/s$s.log" 2>&1
done
