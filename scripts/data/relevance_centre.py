#!/usr/bin/env python3
"""Writes feedback/relevance_centre.jsonl: the fixed set of problems whose mean
embedding the embedding relevance scorer subtracts (docs/lanpo.md, "An
absolute floor"). Eight short MATH-train problems per subject, drawn with a
fixed seed, so "centred" means "relative to math problems in general" in any
run, whatever its data, pool or number of ranks.

Run by hand from the repository root; the output is committed:
    python3 scripts/data/relevance_centre.py ../shared/data/math_train.jsonl
"""
import json
import random
import sys

PER_SUBJECT = 8
MAX_CHARS = 240


def main(path):
    by_subject = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if len(r["problem"]) <= MAX_CHARS:
                by_subject.setdefault(r["subject"], []).append(r)
    rng = random.Random(20261125)
    out = []
    for subject in sorted(by_subject):
        rows = sorted(by_subject[subject], key=lambda r: r["id"])
        for r in rng.sample(rows, PER_SUBJECT):
            out.append({"id": r["id"], "subject": subject, "problem": r["problem"]})
    with open("feedback/relevance_centre.jsonl", "w") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(out)} problems, {len(by_subject)} subjects")


if __name__ == "__main__":
    main(sys.argv[1])
