#!/usr/bin/env python3
"""Writes configs/data/tiny-arith.jsonl: small addition/subtraction problems for the built-in
tiny model's configs (deterministic). Run by hand: python3 scripts/make_tiny_arith.py"""
import json
import os
import random

rng = random.Random(7)
out = os.path.join(os.path.dirname(__file__), "../configs/data/tiny-arith.jsonl")
with open(out, "w") as f:
    for i in range(400):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        op = rng.choice("+-") if a >= b else "+"
        ans = a + b if op == "+" else a - b
        f.write(json.dumps({"id": f"arith-{i}", "problem": f"What is {a} {op} {b}?", "answer": str(ans)}) + "\n")
print("wrote", out)

# SFT conversations for the same task (a different seed, so GRPO's problems are not memorized
# verbatim), and a small held-out set for the eval loss.
rng = random.Random(11)
system = "Answer with \\boxed{}."
for name, n in (("tiny-arith-sft.jsonl", 2000), ("tiny-arith-sft-eval.jsonl", 64)):
    path = os.path.join(os.path.dirname(__file__), "../configs/data", name)
    with open(path, "w") as f:
        for _ in range(n):
            a, b = rng.randint(0, 9), rng.randint(0, 9)
            op = rng.choice("+-") if a >= b else "+"
            ans = a + b if op == "+" else a - b
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": f"What is {a} {op} {b}?"},
                    {"role": "assistant", "content": f"\\boxed{{{ans}}}"}]
            f.write(json.dumps({"messages": msgs}) + "\n")
    print("wrote", path)
