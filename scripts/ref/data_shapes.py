#!/usr/bin/env python3
"""Writes the data-shape fixtures of trainer/testdata/shapes/ from ../shared/data
(run by hand from the repository root; the outputs are committed):

- gsm8k.jsonl: GSM8K as Hugging Face ships it, {"question", "answer"} with the
  worked solution ending in "#### 72" (data.problem_key question,
  data.answer_format gsm8k; no id: lanpo names them file:line);
- nested.jsonl: nested records with numeric answers, {"meta": {"uid"},
  "input": {"text"}, "gold": 72 or 0.5} (data.problem_key input.text,
  data.answer_key gold, data.id_key meta.uid).

    python3 scripts/ref/data_shapes.py ../shared/data
"""
import json
import sys

src = sys.argv[1]
out = "trainer/testdata/shapes/"

with open(f"{src}/gsm8k_test.jsonl") as f, open(out + "gsm8k.jsonl", "w") as g:
    for i, line in enumerate(f):
        if i == 6:
            break
        r = json.loads(line)
        g.write(json.dumps({"question": r["problem"], "answer": r["solution"]}, ensure_ascii=False) + "\n")

ints, decimals = [], []
with open(f"{src}/math_train.jsonl") as f:
    for line in f:
        r = json.loads(line)
        if len(r["problem"]) > 200:
            continue
        a = r["answer"]
        try:
            ints.append((r, int(a)))
        except ValueError:
            try:
                decimals.append((r, float(a)))
            except ValueError:
                pass
        if len(ints) >= 4 and len(decimals) >= 2:
            break
with open(out + "nested.jsonl", "w") as g:
    for r, v in ints[:4] + decimals[:2]:
        g.write(json.dumps({"meta": {"uid": r["id"]}, "input": {"text": r["problem"]}, "gold": v}, ensure_ascii=False) + "\n")
print("wrote", out)
