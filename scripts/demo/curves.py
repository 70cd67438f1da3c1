#!/usr/bin/env python3
"""Print an RL arm's curves from its metrics.jsonl (#55): held-out zero-shot
accuracy (mean over the families' eval/FAMILY/zero-shot/mean@k), the
held-out canonical answers' bare-prompt NLL (reference_nll, and inside the
rule: reference_nll_span), and per step-range means of consolidation's
diagnostics. Stdlib only.

  scripts/demo/curves.py RUN_DIR/ARM [--every 5]
"""
import json
import sys


def main():
    arm = sys.argv[1]
    every = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--every" else 5
    rows = [json.loads(l) for l in open(arm + "/metrics.jsonl")]
    print("step  zero-shot  ref_nll  ref_nll_span | window: cons  nll  nll_span  nll_rest  ctx_gap_span  after_span  grad_pol  grad_term  cos  acc_fb  acc_scratch")
    win = []
    for r in rows:
        win.append(r)
        ev = {k: v for k, v in r.items() if k.startswith("eval/")}
        if not ev:
            continue
        acc = [v for k, v in ev.items() if k.endswith("/zero-shot/mean@k")]
        ref = [v for k, v in ev.items() if k.endswith("/zero-shot/reference_nll")]
        span = [v for k, v in ev.items() if k.endswith("/zero-shot/reference_nll_span")]
        mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
        def wmean(k):
            xs = [w[k] for w in win if k in w]
            return mean(xs)
        print(f"{r['step']:4d}  {mean(acc):9.3f}  {mean(ref):7.3f}  {mean(span):12.3f} | "
              f"{wmean('consolidated'):6.1f} {wmean('consolidate_nll'):5.3f} {wmean('consolidate_nll_span'):8.3f} {wmean('consolidate_nll_rest'):8.3f} "
              f"{wmean('consolidate_context_gap_span'):12.3f} {wmean('consolidate_nll_span_after'):10.3f} {wmean('grad_norm_policy'):8.3f} {wmean('grad_norm_term'):9.3f} "
              f"{wmean('grad_cosine_term_policy'):5.2f} {wmean('accuracy_feedback'):6.3f} {wmean('accuracy_scratch'):6.3f}")
        win = []


if __name__ == "__main__":
    main()
