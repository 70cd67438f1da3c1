#!/usr/bin/env python3
"""Reference values for lanpo's AdamW (optim/optim.go) and LR schedule
(optim/schedule.go), written by PyTorch; optim/optim_ref_test.go checks
lanpo against them.

Run by hand; the output is committed, so the Go tests need neither Python
nor the network:

    python3 -m venv ~/.cache/lanpo/ref-venv
    ~/.cache/lanpo/ref-venv/bin/pip install torch==2.1.0 'numpy<2'
        (or the wheel file ~/.cache/lanpo/wheels/torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl;
        torch 2.1 does not load with numpy 2)
    ~/.cache/lanpo/ref-venv/bin/python scripts/ref/optim_ref.py optim/testdata/optim_ref.json

The committed fixture was made with torch 2.1.0 (the PyPI wheel, +cu121,
run on CPU) and numpy 1.26.4; the file records the torch version. Torch
runs on CPU in deterministic single-tensor code (AdamW(foreach=False),
clip_grad_norm_(foreach=False)), so reruns give the same bytes.

What it pins:

  adamw: a few parameters with fixed initial values and K gradients each,
    stepped by torch.optim.AdamW with the learning rate of a torch
    lr_scheduler (with a warmup), recording after every step the parameters
    and the exp_avg / exp_avg_sq state. The bf16 case emulates lanpo's mixed
    precision: AdamW updates an fp32 master (made by .float() of the bf16
    parameter, gradients cast bf16 -> fp32), and after each step the bf16
    parameter is the master cast to bf16 (copy_: round to nearest even).
    Both the bf16 parameters and the fp32 masters are recorded. One case
    clips the global gradient norm with torch.nn.utils.clip_grad_norm_
    before each step.

  lr: the learning rate at chosen steps of constant and cosine schedules
    with and without warmup, from torch.optim.lr_scheduler: LinearLR
    (start_factor=1/warmup, total_iters=warmup-1) for the warmup, then
    CosineAnnealingLR(T_max=span-1, eta_min=min_ratio*peak) joined by
    SequentialLR(milestones=[warmup]). For comparison the cosine cases also
    record transformers' get_cosine_with_min_lr_schedule_with_warmup (its
    lr_lambda transcribed below, run through LambdaLR), which lanpo does
    not follow.

Every float is written as a JSON number with Python's repr (shortest
round-trip), so fp32/bf16 values are exact when read back as float64.
"""
import json
import math
import sys
import warnings

import numpy as np
import torch

# Stepping SequentialLR's second scheduler with an explicit epoch warns
# (deprecated API used inside torch itself); the values are unaffected.
warnings.filterwarnings("ignore", category=UserWarning, module="torch.optim.lr_scheduler")

K = 5  # AdamW steps per case


def flat(t):
    """Values of a tensor as float64 (exact for fp32/bf16/fp64)."""
    return t.detach().to(torch.float64).reshape(-1).tolist()


def schedulers(opt, total, warmup, min_ratio, kind):
    """The torch lr_scheduler construction lanpo's LR() follows: LR at
    update `step` (0-based) is what the scheduler gives after `step` calls
    of scheduler.step(). Returns None for a constant LR with no warmup."""
    peak = opt.param_groups[0]["lr"]
    after = None
    if kind == "cosine":
        span = total - warmup
        # A span of one step cannot decay: lanpo keeps the peak there, and
        # CosineAnnealingLR(T_max=0) would divide by zero.
        if span > 1:
            after = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=span - 1, eta_min=min_ratio * peak)
    elif kind != "constant":
        raise ValueError(kind)
    if warmup == 0:
        return after
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0,
                                             total_iters=max(warmup - 1, 0))
    if after is None:
        return warm  # after total_iters LinearLR stays at end_factor*peak
    return torch.optim.lr_scheduler.SequentialLR(opt, [warm, after], milestones=[warmup])


def hf_cosine_min_lr(total, warmup, min_ratio):
    """The lr_lambda of transformers' get_cosine_with_min_lr_schedule_with_warmup
    (_get_cosine_schedule_with_warmup_lr_lambda in
    src/transformers/optimization.py, num_cycles=0.5, min_lr_rate=min_ratio),
    transcribed so transformers need not be installed: warmup from 0
    (step/warmup), cosine over total-warmup steps so the minimum is reached
    at step `total`, one past the last update."""
    def f(step):
        if step < warmup:
            return step / max(1, warmup)
        progress = (step - warmup) / max(1, total - warmup)
        factor = 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress))
        factor = factor * (1 - min_ratio) + min_ratio
        return max(0, factor)
    return f


def lr_values(total, warmup, peak, min_ratio, kind, hf=False):
    """LR at every step 0..total-1 from a scheduler on a dummy optimizer."""
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=peak)
    if hf:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, hf_cosine_min_lr(total, warmup, min_ratio))
    else:
        sched = schedulers(opt, total, warmup, min_ratio, kind)
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched is not None:
            sched.step()
    return out


LR_CASES = [
    # name, total, warmup, peak, min_ratio, schedule, chosen steps (None: all)
    ("constant_nowarmup", 8, 0, 1e-3, 0.0, "constant", None),
    ("constant_warmup3", 8, 3, 1e-3, 0.0, "constant", None),
    ("cosine_nowarmup", 10, 0, 1.0, 0.1, "cosine", None),
    ("cosine_warmup1_min0", 10, 1, 1.0, 0.0, "cosine", None),
    ("cosine_warmup4", 20, 4, 3e-6, 0.1, "cosine", None),
    ("cosine_span2", 5, 3, 1.0, 0.2, "cosine", None),  # the only cosine steps are peak and minimum
    ("cosine_total_eq_warmup_plus1", 6, 5, 1.0, 0.1, "cosine", None),  # span 1: stays at peak
    ("cosine_total1", 1, 0, 2e-5, 0.1, "cosine", None),
    ("cosine_long", 1000, 100, 1e-6, 0.1, "cosine", [0, 1, 50, 98, 99, 100, 101, 333, 549, 550, 777, 997, 998, 999]),
]


def lr_fixture():
    out = []
    for name, total, warmup, peak, min_ratio, kind, steps in LR_CASES:
        vals = lr_values(total, warmup, peak, min_ratio, kind)
        hf = lr_values(total, warmup, peak, min_ratio, kind, hf=True) if kind == "cosine" else None
        idx = list(range(total)) if steps is None else steps
        c = {"name": name, "total": total, "warmup": warmup, "peak": peak, "min_ratio": min_ratio,
             "schedule": kind, "steps": idx, "torch": [vals[i] for i in idx]}
        if hf is not None:
            c["hf_min_lr_cosine"] = [hf[i] * 1.0 for i in idx]
        out.append(c)
    return out


def params_for(rng, specs):
    """specs: (name, dtype, shape, grad scale or None for no gradient).
    Initial values and gradients are exactly representable in the dtype
    (bf16 parameters get bf16 gradients, as autograd gives them)."""
    ps = []
    for name, dtype, shape, gscale in specs:
        init = torch.from_numpy(rng.standard_normal(shape)).to(dtype)
        grads = None
        if gscale is not None:
            grads = [(torch.from_numpy(rng.standard_normal(shape)) * gscale).to(dtype) for _ in range(K)]
        ps.append({"name": name, "dtype": dtype, "shape": list(shape), "init": init, "grads": grads})
    return ps


ADAMW_CASES = [
    # name, betas, weight_decay, schedule (total, warmup, peak, min_ratio, kind), max_grad_norm, seed, params
    ("fp32_b095_wd01_cosine", (0.9, 0.95), 0.1, (K, 2, 0.05, 0.1, "cosine"), 0.0, 1,
     [("w", torch.float32, (3, 4), 1.0), ("b", torch.float32, (5,), 0.3),
      # gradients ~1e-8, where eps=1e-8 is as large as sqrt(v): pins where eps goes
      ("tiny", torch.float32, (6,), 1e-8),
      # never gets a gradient: torch skips it, and so must lanpo (no decay either)
      ("frozen", torch.float32, (2,), None)]),
    ("fp32_b0999_wd0_constant", (0.9, 0.999), 0.0, (K, 0, 0.01, 0.0, "constant"), 0.0, 2,
     [("w", torch.float32, (4, 3), 1.0), ("b", torch.float32, (5,), 2.0)]),
    ("bf16_master_b095_wd01_cosine", (0.9, 0.95), 0.1, (K, 1, 0.05, 0.1, "cosine"), 0.0, 3,
     [("w16", torch.bfloat16, (4, 3), 1.0), ("b16", torch.bfloat16, (5,), 0.5), ("w32", torch.float32, (2, 3), 1.0)]),
    ("fp64_b0999_wd01_cosine", (0.9, 0.999), 0.1, (K, 2, 0.05, 0.0, "cosine"), 0.0, 4,
     [("w", torch.float64, (3, 4), 1.0), ("b", torch.float64, (5,), 0.3)]),
    # grads scaled so the global norm (~3.5 per unit scale) crosses max_norm=1
    # on some steps and not on others (scales vary per step below)
    ("fp32_clip1_b095_wd01_constant", (0.9, 0.95), 0.1, (K, 2, 0.05, 0.0, "constant"), 1.0, 5,
     [("w", torch.float32, (3, 4), 1.0), ("b", torch.float32, (5,), 1.0)]),
]
CLIP_STEP_SCALE = [1.0, 0.05, 2.0, 0.2, 0.5]


def adamw_case(name, betas, wd, sched, max_norm, seed, specs):
    total, warmup, peak, min_ratio, kind = sched
    rng = np.random.default_rng(seed)
    ps = params_for(rng, specs)
    if max_norm:
        for p in ps:
            if p["grads"] is not None:
                p["grads"] = [(g.double() * s).to(p["dtype"]) for g, s in zip(p["grads"], CLIP_STEP_SCALE)]
    # model parameters (the dtype lanpo stores) and what AdamW updates
    model = [torch.nn.Parameter(p["init"].clone()) for p in ps]
    master = [m if m.dtype in (torch.float32, torch.float64) else torch.nn.Parameter(m.detach().float())
              for m in model]
    opt = torch.optim.AdamW(master, lr=peak, betas=betas, eps=1e-8, weight_decay=wd, foreach=False)
    sch = schedulers(opt, total, warmup, min_ratio, kind)
    lrs, norms = [], []
    steps = [[] for _ in ps]
    for k in range(K):
        for p, m in zip(ps, model):
            m.grad = None if p["grads"] is None else p["grads"][k].clone()
        if max_norm:
            # on the model's gradients, as lanpo clips before the update
            norms.append(float(torch.nn.utils.clip_grad_norm_(model, max_norm, foreach=False)))
        for m, w in zip(model, master):
            if w is not m:
                w.grad = None if m.grad is None else m.grad.float()
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sch is not None:
            sch.step()
        with torch.no_grad():
            for m, w in zip(model, master):
                if w is not m:
                    m.copy_(w)  # fp32 -> bf16, round to nearest even
        for i, (m, w) in enumerate(zip(model, master)):
            st = opt.state.get(w, {})
            rec = {"param": flat(m),
                   "exp_avg": flat(st["exp_avg"]) if st else None,
                   "exp_avg_sq": flat(st["exp_avg_sq"]) if st else None}
            if w is not m:
                rec["master"] = flat(w)
            steps[i].append(rec)
    out = {"name": name, "beta1": betas[0], "beta2": betas[1], "eps": 1e-8, "weight_decay": wd,
           "max_grad_norm": max_norm,
           "schedule": {"total": total, "warmup": warmup, "peak": peak, "min_ratio": min_ratio, "kind": kind},
           "lrs": lrs, "params": []}
    if max_norm:
        out["grad_norms"] = norms
    for p, st in zip(ps, steps):
        out["params"].append({
            "name": p["name"], "dtype": str(p["dtype"]).removeprefix("torch."), "shape": p["shape"],
            "init": flat(p["init"]),
            "grads": None if p["grads"] is None else [flat(g) for g in p["grads"]],
            "steps": st})
    return out


def main(path):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    fx = {"generator": "scripts/ref/optim_ref.py", "torch": torch.__version__, "numpy": np.__version__,
          "adamw": [adamw_case(*c) for c in ADAMW_CASES], "lr": lr_fixture()}
    with open(path, "w") as f:
        f.write(dump(fx) + "\n")


def dump(v, indent=""):
    """JSON with objects one key a line and number arrays on one line (a
    regenerated fixture diffs by array); numbers by repr, exact."""
    if isinstance(v, dict):
        inner = indent + " "
        items = [f"{inner}{json.dumps(k)}: {dump(x, inner)}" for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v):
        inner = indent + " "
        return "[\n" + ",\n".join(inner + dump(x, inner) for x in v) + "\n" + indent + "]"
    return json.dumps(v)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: optim_ref.py OUT.json")
    main(sys.argv[1])
