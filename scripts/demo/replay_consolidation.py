#!/usr/bin/env python3
"""Replay a LANPO run's consolidation rows through `lanpo sft` (#55, "Rule out
the plumbing"): every verified-correct response sampled with feedback in
context, as the answer to its bare problem, in an SFT run with RL's optimizer
settings — one SFT step per RL step, each step as many rows as the RL run
consolidated on average — evaluated on the held-out problems as the RL arm
was. If SFT on the same answers at the same learning rate shows the RL arm's
plateau, the plateau is the dose; if it learns clearly sooner, something in
the GRPO step interferes. Stdlib only.

  scripts/demo/replay_consolidation.py ARM_RUN_DIR DEMO_RUN_DIR OUT_DIR [--lr 3e-4] [--steps N]

ARM_RUN_DIR is the arm's run directory (rollouts/ and metrics.jsonl: the demo
logs rollouts in the rule worlds), DEMO_RUN_DIR the demo run it belongs to
(data/heldout/*.jsonl), OUT_DIR gets sft.jsonl and sft.yaml; then:

  bin/lanpo sft --config OUT_DIR/sft.yaml
"""
import argparse
import glob
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("arm")
    ap.add_argument("demo")
    ap.add_argument("out")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--steps", type=int, default=0, help="SFT steps (0: the RL run's)")
    ap.add_argument("--model", default="", help="the SFT model the arm started from (default: the arm's config)")
    a = ap.parse_args()

    cfg = open(os.path.join(a.arm, "config.resolved.yaml")).read()
    def key(k):
        for line in cfg.splitlines():
            s = line.strip()
            if s.startswith(k + ":"):
                return s.split(":", 1)[1].strip().strip("'\"")
        sys.exit(f"{a.arm}/config.resolved.yaml: no {k}")
    model = a.model or key("model")
    system = key("system_prompt")

    rows, steps = [], 0
    for path in sorted(glob.glob(os.path.join(a.arm, "rollouts", "step-*.jsonl"))):
        steps += 1
        for n, line in enumerate(open(path), 1):
            r = json.loads(line)
            if r["correct"] and r["mode"] != "scratch":
                rows.append(r)
    if not rows:
        sys.exit(f"{a.arm}/rollouts: no consolidated rows (correct, feedback-aware)")
    problems = {}
    with open(os.path.join(a.demo, "data", "rl.jsonl")) as f:
        for line in f:
            p = json.loads(line)
            problems[p["id"]] = p["problem"]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "sft.jsonl"), "w") as f:
        for r in rows:
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": problems[r["problem_id"]]},
                    {"role": "assistant", "content": r["response"]}]
            f.write(json.dumps({"messages": msgs}) + "\n")
    per_step = max(1, round(len(rows) / steps))
    total = a.steps or steps
    bench = sorted(glob.glob(os.path.join(os.path.abspath(a.demo), "data", "heldout", "*.jsonl")))
    with open(os.path.join(a.out, "sft.yaml"), "w") as f:
        f.write(f"""# Replay of {a.arm}'s consolidation rows ({len(rows)} over {steps} RL steps) through lanpo sft
run_dir: {os.path.abspath(os.path.join(a.out, 'run'))}
model: {model}
seed: 1
total_steps: {total}
data:
  train: {os.path.abspath(os.path.join(a.out, 'sft.jsonl'))}
  system_prompt: {json.dumps(system)}
  prompt_template: '{{problem}}'
sft:
  max_len: 224
  micro_batch_size: {per_step}
  grad_accum: 1
optim:
  lr: {a.lr}
  lr_schedule: constant
  beta1: 0.9
  beta2: 0.98
  eps: 1.0e-8
  grad_clip: 1
  weight_decay: 0
rollout:
  max_new_tokens: 48
eval:
  every: 5
  k: 1
  temperature: 0
  batch_size: 64
  reference_nll: true
  bench: {json.dumps(bench)}
checkpoint:
  every: 0
  keep: 1
""")
    print(f"{len(rows)} rows from {steps} steps; {per_step} per SFT step, {total} steps at lr {a.lr}: {a.out}/sft.yaml")


if __name__ == "__main__":
    main()
