#!/usr/bin/env python3
"""Compares two `lanpo demo` run directories: each stage's metrics.jsonl as key→value maps without
timings (seconds, tokens_per_s), demo_results.json, and byte for byte every checkpoint's weights and
optimizer state, trainer state, pool, rollout log, evaluation samples and data file. Used to check that
a change leaves the demo's seed-1 run unchanged (build the old and the new lanpo, run
`lanpo demo --run-dir A --seed 1` with each, then):

    python3 scripts/dev/compare_demo_runs.py A B

Prints what differs and IDENTICAL or DIFFERENT; exits 1 when they differ.
"""
import glob
import json
import os
import sys

TIMINGS = ("seconds", "tokens_per_s")


def metrics(path):
    rows = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            for k in TIMINGS:
                row.pop(k, None)
            rows.append(row)
    return rows


def compared_files(run):
    out = []
    for p in glob.glob(os.path.join(run, "**", "*"), recursive=True):
        rel = os.path.relpath(p, run)
        if not os.path.isfile(p):
            continue
        if (rel.endswith((".safetensors", "pool.jsonl", "samples.jsonl", "optimizer.json", "trainer_state.json"))
                or rel.startswith("data" + os.sep) or os.sep + "rollouts" + os.sep in rel):
            out.append(rel)
    return sorted(out)


def main(a, b):
    same = True
    stages = sorted(os.path.relpath(os.path.dirname(p), a) for p in glob.glob(os.path.join(a, "*", "metrics.jsonl")))
    for stage in stages:
        x, y = metrics(os.path.join(a, stage, "metrics.jsonl")), metrics(os.path.join(b, stage, "metrics.jsonl"))
        eq = x == y
        print(f"{stage}/metrics.jsonl: {len(x)} lines, equal without timings: {eq}")
        if not eq:
            same = False
            for i, (p, q) in enumerate(zip(x, y)):
                if p != q:
                    print(f"  line {i + 1}:", {k: (p.get(k), q.get(k)) for k in set(p) | set(q) if p.get(k) != q.get(k)})
                    break
    with open(os.path.join(a, "demo_results.json")) as fa, open(os.path.join(b, "demo_results.json")) as fb:
        eq = json.load(fa) == json.load(fb)
    print("demo_results.json equal:", eq)
    same &= eq
    files = compared_files(a)
    differ = []
    for rel in files:
        pb = os.path.join(b, rel)
        with open(os.path.join(a, rel), "rb") as fa:
            if not os.path.exists(pb) or fa.read() != open(pb, "rb").read():
                differ.append(rel)
    print(f"{len(files)} files compared byte for byte; differing: {differ[:10]}")
    same &= not differ
    print("IDENTICAL" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
