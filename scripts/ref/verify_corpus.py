#!/usr/bin/env python3
"""Builds the verifier agreement corpus and math-verify's verdicts on it.

Run by hand:
    python3 -m venv /tmp/mv && /tmp/mv/bin/pip install math-verify==0.9.0
    /tmp/mv/bin/python scripts/ref/verify_corpus.py [--shared ../shared/data]

Writes reward/testdata/verify_corpus.jsonl: one {"pred", "gold", "kind", "mv"} per line, where
gold is a dataset answer string, pred a model-style response around an equivalent rewrite or a
near-miss of it (deterministic, seeded), and mv math-verify's verdict computed as
verify(parse("\\boxed{" + gold + "}"), parse(pred)) -- the way RL trainers call it on a whole
response. The hand-written hard cases at the bottom are included too.
"""
import argparse
import json
import os
import random
import re
import signal

from math_verify import parse, verify

HERE = os.path.dirname(os.path.abspath(__file__))


def load(shared, name, n):
    rows = [json.loads(l) for l in open(os.path.join(shared, name), encoding="utf-8")]
    return [r["answer"] for r in rows[:n]]


def is_int(s):
    return re.fullmatch(r"-?\d+", s) is not None


def rewrites(g, rng):
    out = []
    if "\\frac" in g:
        out.append(g.replace("\\frac", "\\dfrac"))
        m = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", g)
        if m:
            v = int(m.group(2)) / int(m.group(3)) * (-1 if m.group(1) else 1)
            out.append(f"{v:.6g}")
            out.append(f"{m.group(1)}{m.group(2)}/{m.group(3)}")
    if "\\left" in g or "\\right" in g:
        out.append(g.replace("\\left", "").replace("\\right", ""))
    if is_int(g):
        n = int(g)
        out.append(f"{n}.0")
        out.append(f"x = {n}")
        if abs(n) >= 1000:
            out.append(f"{n:,}")
        out.append(f"{n} \\text{{ units}}")
        out.append(f"\\${n}")
    if re.fullmatch(r"-?\d+\.\d+", g):
        out.append(g + "0")
        out.append(str(float(g)))
    if "," in g:
        out.append(g.replace(",", ", "))
    if "\\sqrt" in g:
        out.append(g.replace("\\sqrt{", "\\sqrt {"))
    if "^\\circ" in g:
        out.append(g.replace("^\\circ", ""))
    if "\\pi" in g:
        out.append(g.replace("\\pi", "\\pi "))
    out.append(" " + g + " ")
    out.append("\\displaystyle " + g)
    return out


def near_misses(g, rng):
    out = []
    if is_int(g):
        n = int(g)
        out += [str(n + 1), str(-n) if n else "1", str(n * 10)]
    digits = [i for i, c in enumerate(g) if c.isdigit()]
    if digits:
        i = rng.choice(digits)
        out.append(g[:i] + str((int(g[i]) + 1) % 10) + g[i + 1:])
    if g.startswith("-"):
        out.append(g[1:])
    elif g:
        out.append("-" + g)
    if "," in g:
        parts = g.split(",")
        out.append(",".join(reversed(parts)))
    if "\\sqrt" in g:
        out.append(g.replace("\\sqrt", "", 1))
    if "(" in g and ")" in g:
        out.append(g.replace("(", "[").replace(")", "]"))
    return out


def wrap(ans, rng):
    ans = re.sub(r"(?<!\\)\$", "", ans)  # gold answers like "$2n$": a model writes 2n inside its own math
    # How RL-trained math models state answers: mostly \boxed (the prompt asks for it), sometimes
    # "The final answer is $...$". Rarer forms (\fbox, bare "Answer: ...") are in HARD.
    forms = [
        (5, lambda a: f"We compute step by step. Therefore the answer is $\\boxed{{{a}}}$."),
        (2, lambda a: f"Let me check once more.\n\nThe final answer is $\\boxed{{{a}}}$"),
        (2, lambda a: f"So we get \\[\\boxed{{{a}}}\\]"),
        (1, lambda a: f"The final answer is ${a}$."),
    ]
    r = rng.uniform(0, sum(w for w, _ in forms))
    for w, f in forms:
        r -= w
        if r <= 0:
            return f(ans)
    return forms[0][1](ans)


HARD = [
    # (pred, gold)
    ("\\boxed{\\frac12}", "\\frac{1}{2}"),
    ("\\boxed{1\\frac{1}{2}}", "\\frac{3}{2}"),
    ("\\boxed{0.5}", "\\frac{1}{2}"),
    ("\\boxed{50\\%}", "\\frac{1}{2}"),
    ("\\boxed{50\\%}", "50"),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
    ("\\boxed{\\sqrt[3]{8}}", "2"),
    ("\\boxed{x^2+2x+1}", "(x+1)^2"),
    ("\\boxed{(x+1)(x-1)}", "x^2-1"),
    ("\\boxed{\\sin^2 x + \\cos^2 x}", "1"),
    ("\\boxed{e^{i\\pi}}", "-1"),
    ("\\boxed{\\{1,2,3\\}}", "\\{3,2,1\\}"),
    ("\\boxed{(1,2)}", "(2,1)"),
    ("\\boxed{[0,1)}", "[0,1)"),
    ("\\boxed{[0,1]}", "[0,1)"),
    ("\\boxed{(-\\infty, 3)}", "(-\\infty,3)"),
    ("\\boxed{\\infty}", "\\infty"),
    ("\\boxed{x=3}", "3"),
    ("\\boxed{y = 2x + 1}", "y=2x+1"),
    ("\\boxed{\\pm 2}", "\\pm 2"),
    ("\\boxed{2, -2}", "\\pm 2"),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 3 \\end{pmatrix}}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    ("\\boxed{\\text{(C)}}", "\\text{(C)}"),
    ("\\boxed{C}", "\\text{(C)}"),
    ("\\boxed{B}", "\\text{(C)}"),
    ("\\boxed{\\binom{5}{2}}", "10"),
    ("\\boxed{5!}", "120"),
    ("\\boxed{\\log_2 8}", "3"),
    ("\\boxed{\\ln e^2}", "2"),
    ("\\boxed{1.5\\times10^{3}}", "1500"),
    ("\\boxed{0.\\overline{3}}", "\\frac{1}{3}"),
    ("\\boxed{90^\\circ}", "90"),
    ("\\boxed{\\$1,000}", "1000"),
    ("\\boxed{10\\text{ cm}}", "10"),
    ("\\boxed{\\mathrm{10}}", "10"),
    ("\\boxed{\\tfrac{3}{4}}", "\\frac34"),
    ("\\boxed{\\left(\\frac{1}{2}, 3\\right)}", "\\left(\\frac12,3\\right)"),
    ("\\boxed{2\\pi}", "6.283185"),
    ("\\boxed{\\frac{\\pi}{2}}", "\\frac{\\pi}{2}"),
    ("\\boxed{\\frac{\\pi}{3}}", "\\frac{\\pi}{2}"),
    ("\\boxed{i}", "i"),
    ("\\boxed{3+4i}", "4i+3"),
    ("\\boxed{\\sqrt{-4}}", "2i"),
    ("no answer here", "5"),
    ("\\boxed{5", "5"),
    ("The answer is 7 apples.", "7"),
    ("After computing we find 41. Then adding one gives 42.", "42"),
    ("\\boxed{10^{100000}}", "1"),
    ("\\boxed{2^{2^{2^{2^{2^{2}}}}}}", "1"),
    ("\\boxed{" + "+".join(["1"] * 4000) + "}", "4000"),
    ("\\boxed{" + "(" * 200 + "1" + ")" * 200 + "}", "1"),
    ("\\boxed{\\frac{\\frac{\\frac{1}{2}}{2}}{2}}", "\\frac18"),
    ("\\boxed{0.333}", "\\frac{1}{3}"),
    ("\\boxed{0.3333333}", "\\frac{1}{3}"),
    ("\\boxed{1e3}", "1000"),
    ("\\boxed{-0}", "0"),
    ("\\boxed{x \\in [2, 5]}", "[2,5]"),
    ("\\boxed{a=2, b=3}", "a=2,b=3"),
    ("\\boxed{\\text{yes}}", "\\text{yes}"),
    ("\\boxed{\\text{no}}", "\\text{yes}"),
    ("\\boxed{1,2,3}", "1, 2, 3"),
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}"),
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt{2}}{2}"),
    ("\\boxed{2^{10}}", "1024"),
    ("\\boxed{\\cos 60^\\circ}", "\\frac12"),
    ("\\fbox{284}", "284"),
    ("Answer: 6+9i", "6+9i"),
    ("Answer: \\left( 3, \\frac{\\pi}{2} \\right)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("$$ 9 \\text{ units} $$", "9"),
    ("The final answer is $\\$225$.", "225"),
    ("\\boxed{1,284}", "1284"),
]


def timeout(signum, frame):
    raise TimeoutError()


def mv(pred, gold):
    signal.signal(signal.SIGALRM, timeout)
    signal.alarm(10)
    try:
        return bool(verify(parse("\\boxed{" + gold + "}"), parse(pred)))
    except Exception:
        return False
    finally:
        signal.alarm(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(HERE, "../../../shared/data"))
    ap.add_argument("--out", default=os.path.join(HERE, "../../reward/testdata/verify_corpus.jsonl"))
    args = ap.parse_args()
    rng = random.Random(2026)
    golds = (load(args.shared, "math500.jsonl", 500) + load(args.shared, "aime24.jsonl", 30)
             + load(args.shared, "aime25.jsonl", 30) + load(args.shared, "amc23.jsonl", 40)
             + load(args.shared, "minerva_math.jsonl", 120) + load(args.shared, "olympiadbench.jsonl", 150)
             + load(args.shared, "gsm8k_test.jsonl", 100))
    pairs = []
    for g in golds:
        if rng.random() < 0.3:
            pairs.append((wrap(g, rng), g, "same"))
        rw = rewrites(g, rng)
        for r in rng.sample(rw, min(2, len(rw))):
            pairs.append((wrap(r, rng), g, "rewrite"))
        nm = near_misses(g, rng)
        if nm:
            pairs.append((wrap(rng.choice(nm), rng), g, "near-miss"))
    pairs += [(p, g, "hard") for p, g in HARD]
    with open(args.out, "w", encoding="utf-8") as f:
        for i, (p, g, kind) in enumerate(pairs):
            f.write(json.dumps({"pred": p, "gold": g, "kind": kind, "mv": mv(p, g)}, ensure_ascii=False) + "\n")
    print(f"wrote {len(pairs)} pairs to {args.out}")


if __name__ == "__main__":
    main()
