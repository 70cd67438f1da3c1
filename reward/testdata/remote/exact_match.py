#!/usr/bin/env python3
"""A minimal lanpo reward program (reward.kind: command).

reward:
  kind: command
  command: [python3, reward/testdata/remote/exact_match.py]

Protocol (reward/command.go, Command): JSON lines. lanpo writes one line
per batch, {"requests": [{"problem": {...}, "id": ..., "answer": ...,
"prompt": ..., "response": ..., "truncated": ...}, ...]}, and reads one
line back, {"verdicts": [{"reward": ..., "correct": ..., "reason": ...},
...]}, one verdict per request in order. stdout carries replies only:
diagnostics go to stderr. At EOF on stdin the program exits.

The reward here: 1 when the response's last non-empty line, trimmed (and
taken out of a \\boxed{...} if it holds one), is the gold answer.
"""
import json
import re
import sys


def score(req):
    lines = [l.strip() for l in req["response"].splitlines() if l.strip()]
    last = lines[-1] if lines else ""
    boxed = re.search(r"\\boxed\{([^{}]*)\}", last)
    if boxed:
        last = boxed.group(1).strip()
    gold = req.get("answer", "").strip()
    if req["truncated"]:
        return {"reward": 0.0, "correct": False, "reason": "truncated"}
    if last == gold:
        return {"reward": 1.0, "correct": True, "reason": "matched " + gold}
    return {"reward": 0.0, "correct": False, "reason": "last line %r is not %r" % (last, gold)}


def main():
    for line in sys.stdin:
        try:
            batch = json.loads(line)
            reply = {"verdicts": [score(r) for r in batch["requests"]]}
        except Exception as e:  # this batch only: the next may be fine
            reply = {"error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
