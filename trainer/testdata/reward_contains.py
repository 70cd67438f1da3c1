#!/usr/bin/env python3
"""A reward program for the trainer's tests (reward.kind: command): reward 1
when the record's answer appears in the response, with the prompt and the
record checked to arrive. argv[1] == "fail": every batch is an error;
"failodd": every other batch (the second, the fourth, ...)."""
import json
import sys

mode = sys.argv[1] if len(sys.argv) > 1 else ""
n = 0
for line in sys.stdin:
    batch = json.loads(line)
    n += 1
    if mode == "fail" or (mode == "failodd" and n % 2 == 0):
        print(json.dumps({"error": "told to fail"}), flush=True)
        continue
    out = []
    for r in batch["requests"]:
        gold = str(r["problem"]["answer"])
        if not r["prompt"] or r["problem"]["problem"] not in r["prompt"]:
            print(json.dumps({"error": "the prompt does not hold the problem"}), flush=True)
            break
        ok = gold in r["response"]
        out.append({"reward": 1.0 if ok else 0.0, "correct": ok, "reason": ("contains " if ok else "lacks ") + gold})
    else:
        print(json.dumps({"verdicts": out}), flush=True)
