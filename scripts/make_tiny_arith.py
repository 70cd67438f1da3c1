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
