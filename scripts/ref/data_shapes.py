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

# Parquet, with pyarrow (pip install pyarrow):
# - verl.parquet: verl's RL data as its preprocessing scripts write it — "prompt"
#   a list<struct<role, content>> chat with the instruction inside, the gold at
#   reward_model.ground_truth (data.answer_key reward_model.ground_truth);
# - plain.parquet: string columns id, problem, answer.
import pyarrow as pa
import pyarrow.parquet as pq

rows = [json.loads(l) for l in open(f"{src}/math_train.jsonl")][:400]
rows = [r for r in rows if len(r["problem"]) < 200][:5]
instruction = "Let's think step by step and output the final answer within \\boxed{}."
verl = pa.table({
    "data_source": ["DigitalLearningGmbH/MATH-lighteval"] * len(rows),
    "prompt": [[{"role": "user", "content": r["problem"] + " " + instruction}] for r in rows],
    "ability": ["math"] * len(rows),
    "reward_model": [{"style": "rule", "ground_truth": r["answer"]} for r in rows],
    "extra_info": [{"split": "train", "index": i} for i in range(len(rows))],
})
pq.write_table(verl, out + "verl.parquet")
plain = pa.table({"id": [r["id"] for r in rows], "problem": [r["problem"] for r in rows], "answer": [r["answer"] for r in rows]})
pq.write_table(plain, out + "plain.parquet")
print(verl.schema)
