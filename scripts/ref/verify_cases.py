#!/usr/bin/env python3
"""Cross-checks lanpo's verifier cases for equation, set, +- and inequality forms, and the
last-line fallback of finished responses, against math-verify.

Run by hand:
    python3 -m venv ~/.cache/lanpo/mv-venv && ~/.cache/lanpo/mv-venv/bin/pip install math-verify==0.9.0
    ~/.cache/lanpo/mv-venv/bin/python scripts/ref/verify_cases.py

Writes reward/testdata/verify_cases.jsonl: one {"pred", "gold", "want", "mv", "why"} per case,
where want is lanpo's verdict (what the Go test TestVerifyCases requires), mv math-verify's,
computed as verify(parse("\\boxed{" + gold + "}"), parse(pred)) like verify_corpus.py, and why the
reason lanpo keeps a verdict math-verify does not share (docs/verifier.md lists them). The cases
are finished responses: math-verify has no notion of a truncated one.
"""
import json
import os
import signal

from math_verify import parse, verify

HERE = os.path.dirname(os.path.abspath(__file__))

T, F = True, False

# (gold, pred, want, why-if-math-verify-differs)
CASES = [
    # An equation whose left side is a number states its right side.
    (r"-128", r"\boxed{16 \times (-8) = -128}", T, ""),
    (r"-128", r"\boxed{16 \times (-8) = 128}", F, ""),
    (r"-128", r"So $16 \times (-8) = -128$.", T, ""),
    (r"6", r"\boxed{2+3 = 6}", T, ""),
    (r"5", r"\boxed{2+3 = 6}", F, ""),
    (r"\frac{1}{2}", r"\boxed{\frac{3}{6} = \frac{1}{2}}", T, ""),
    (r"12", "We multiply.\n$$3 \\cdot 4 = 12$$", T, ""),
    (r"x = 5", r"\boxed{2+3 = 5}", F, ""),
    (r"x = 5", r"\boxed{y = 5}", F, ""),
    (r"5", r"\boxed{x+1 = 5}", F,
     "x+1 = 5 is an equation whose solution is x = 4; math-verify compares its right side whatever the left side is."),
    (r"4", r"\boxed{x^2 = 4}", F,
     "x^2 = 4 is an equation (x = ±2), not the value 4; math-verify compares its right side."),
    # Set notation.
    (r"\{1,2\}", r"\boxed{\left\{1,2\right\}}", T, ""),
    (r"\{1,2\}", r"\boxed{\lbrace 1, 2\rbrace}", T,
     r"math-verify does not read \lbrace/\rbrace (it extracts 2); they are \{ and \}."),
    (r"\{1,2\}", r"\boxed{\left\lbrace 2, 1 \right\rbrace}", T,
     r"Same: \lbrace/\rbrace."),
    (r"\{1,2\}", r"\boxed{\{1\} \cup \{2\}}", T, ""),
    (r"\{1,2\}", r"\boxed{\{1\} \cup \{3\}}", F, ""),
    (r"\{1,2\}", r"\boxed{\{1,3\}}", F, ""),
    (r"\{1,2\}", r"\boxed{\{1,2,3\}}", F, ""),
    (r"\emptyset", r"\boxed{\varnothing}", T,
     r"math-verify reads \varnothing as a symbol named varnothing; it is the empty set, \emptyset."),
    (r"\varnothing", r"\boxed{\emptyset}", T, r"Same: \varnothing."),
    (r"\emptyset", r"\boxed{\{\}}", T, ""),
    (r"\emptyset", r"\boxed{\{\emptyset\}}", F, ""),
    (r"\emptyset", r"\boxed{0}", F, ""),
    (r"\{0\}", r"\boxed{\emptyset}", F, ""),
    (r"(2,\infty)", r"\boxed{\{x \mid x > 2\}}", T,
     r"math-verify extracts only the 2 of the set-builder set; \{x \mid x > 2\} is (2, \infty)."),
    (r"(2,\infty)", r"\boxed{\{x \in \mathbb{R} : x > 2\}}", T,
     r"Same: set-builder notation."),
    (r"(2,\infty)", r"\boxed{\{x \mid x \geq 2\}}", F, ""),
    (r"2", r"\boxed{\{x \mid x > 2\}}", F,
     r"math-verify extracts the 2 in the condition and calls it equal: a false positive; the set is (2, \infty)."),
    (r"\{2\}", r"\boxed{\{x \mid x = 2\}}", T, ""),
    # \pm and solutions written out.
    (r"3, -3", r"\boxed{x = \pm 3}", T, ""),
    (r"-3, 3", r"\boxed{\pm 3}", T, ""),
    (r"\{-3, 3\}", r"\boxed{\pm 3}", T, ""),
    (r"\{-3, 3\}", r"\boxed{\{\pm 3\}}", T, ""),
    (r"3, -3", r"\boxed{x = 3 \text{ or } x = -3}", T, ""),
    (r"\{-3, 3\}", r"\boxed{x = -3 \text{ or } x = 3}", T, ""),
    (r"3, -3", r"\boxed{x=3, x=-3}", T, ""),
    (r"3, -3", r"\boxed{3 \text{ and } -3}", T, ""),
    (r"1, 2, 3", r"\boxed{1, 2, \text{ or } 3}", T, ""),
    (r"\pm 3", r"\boxed{3}", F, ""),
    (r"3", r"\boxed{\pm 3}", F, ""),
    (r"3", r"\boxed{x = \pm 3}", F, ""),
    (r"3, -3", r"\boxed{x = 3 \text{ or } x = 3}", F, ""),
    (r"3, -3", r"\boxed{x = \pm 2}", F, ""),
    (r"\{1\pm\sqrt{5},-2\}", r"\boxed{-2, 1+\sqrt{5}, 1-\sqrt{5}}", T, ""),
    (r"\{1\pm\sqrt{5},-2\}", r"\boxed{1+\sqrt{5}, 1-\sqrt{5}}", F, ""),
    # Intervals written as inequalities.
    (r"(2, \infty)", r"\boxed{x > 2}", T,
     r"math-verify does not compare an inequality with an interval gold (it does the reverse: gold x > 2, answer (2, \infty))."),
    (r"(2, \infty)", r"\boxed{2 < x}", T, "Same: inequality against an interval gold."),
    (r"(2, \infty)", r"\boxed{x \geq 2}", F, ""),
    (r"(2, \infty)", r"\boxed{x < 2}", F, ""),
    (r"(2, \infty)", r"\boxed{x > 3}", F, ""),
    (r"(2, \infty)", r"\boxed{2}", F, ""),
    (r"(2, \infty)", r"\boxed{x \in (2, \infty)}", T, ""),
    (r"[-1, 3)", r"\boxed{-1 \le x < 3}", T, "Same: inequality against an interval gold."),
    (r"[-1, 3)", r"\boxed{3 > x \geq -1}", T, "Same: inequality against an interval gold."),
    (r"[-1, 3)", r"\boxed{-1 < x < 3}", F, ""),
    (r"[-1, 3)", r"\boxed{-1 \le x \le 3}", F, ""),
    (r"[0,\infty)", r"\boxed{x \geq 0}", T, "Same: inequality against an interval gold."),
    (r"[0,\infty)", r"\boxed{x \ge 0}", T, "Same: inequality against an interval gold."),
    (r"[0,\infty)", r"\boxed{x \geqslant 0}", T, "Same: inequality against an interval gold."),
    (r"[0,\infty)", r"\boxed{x > 0}", F, ""),
    (r"(-\infty, 3]", r"\boxed{x \leq 3}", T, "Same: inequality against an interval gold."),
    (r"(-\infty, 3]", r"\boxed{x < 3}", F, ""),
    (r"(-\infty,0)\cup(1,\infty)", r"\boxed{x<0 \text{ or } x>1}", T,
     "Same: inequalities against an interval gold."),
    (r"(-\infty,0)\cup(1,\infty)", r"\boxed{x \le 0 \text{ or } x > 1}", F, ""),
    (r"(-\infty,0)\cup(1,\infty)", r"\boxed{x<0 \text{ or } x>2}", F, ""),
    (r"(-\infty,0)\cup(1,\infty)", r"\boxed{x<0 \text{ and } x>1}", F, ""),
    (r"(0,9) \cup (9,36)", r"\boxed{0<x<9 \text{ or } 9<x<36}", T,
     "Same: inequalities against an interval gold."),
    (r"(0,9) \cup (9,36)", r"\boxed{0 < x < 36 \text{ and } x \neq 9}", T,
     "Same: inequalities against an interval gold."),
    (r"(0,9) \cup (9,36)", r"\boxed{0 < x < 36}", F, ""),
    (r"(-\infty, 0) \cup\{1\}", r"\boxed{x < 0 \text{ or } x = 1}", T,
     "Same: inequalities against an interval gold."),
    (r"(-\infty, 0) \cup\{1\}", r"\boxed{x \le 0 \text{ or } x = 1}", F, ""),
    (r"(-\infty, 2) \cup (2, \infty)", r"\boxed{x \neq 2}", T, "Same: inequality against an interval gold."),
    (r"(-\infty, 2) \cup (2, \infty)", r"\boxed{x \neq 3}", F, ""),
    (r"(-\sqrt{11},-2)\cup (\sqrt{11},9)", r"\boxed{-\sqrt{11} < x < -2 \text{ or } \sqrt{11} < x < 9}", T,
     "Same: inequalities against an interval gold."),
    (r"\left(\frac{3}{5},\frac{8}{3}\right]", r"\boxed{\frac35 < x \le \frac83}", T,
     "Same: inequality against an interval gold."),
    (r"x > 2", r"\boxed{(2, \infty)}", T, ""),
    (r"x \geq 0", r"\boxed{[0,\infty)}", T, ""),
    (r"x \geq 0", r"\boxed{(0,\infty)}", F, ""),
    (r"-1 \le x < 3", r"\boxed{[-1,3)}", T, ""),
    (r"-1 \le x < 3", r"\boxed{[-1,3]}", F, ""),
    (r"x \neq 2", r"\boxed{(-\infty,2)\cup(2,\infty)}", T, ""),
    (r"x<0 \text{ or } x>1", r"\boxed{(-\infty,0)\cup(1,\infty)}", T,
     "math-verify reads the gold as the list of two inequalities, not their union."),
    (r"x > 2", r"\boxed{[2, \infty)}", F, ""),
    (r"x > 2", r"\boxed{y > 2}", F, ""),
    (r"x > 2", r"\boxed{x \ge 2}", F, ""),
    (r"k \geqslant 2", r"\boxed{k \ge 2}", T, ""),
    # The last-line fallback of a finished response without an explicit answer.
    (r"12", "We count the cases.\n\nSo there are 12 ways.", T, ""),
    (r"12", "There are 12 ways to choose $k$.", T,
     "math-verify takes the last math on the line, $k$; lanpo takes inline math only when it holds a digit or a command and no number follows it."),
    (r"\frac{3}{4}", "We divide.\n\nThe probability is $\\frac{3}{4}$.", T, ""),
    (r"5", "Listing them: 1, 2, 3, 4, 5.\n\nI could not finish the count.", F,
     "No answer is stated: the 5 is the end of a list lines before the end, not a conclusion; math-verify takes the last number anywhere."),
    (r"9", "We get\n\\[ 9 \\]\nbut that is not all of it.", F,
     "The display math is not the last line; the response goes on without stating an answer. math-verify takes the last display math anywhere."),
    (r"9", "We get\n\\[\n9\n\\]", T, ""),
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
    out = os.path.join(HERE, "../../reward/testdata/verify_cases.jsonl")
    agree = 0
    with open(out, "w", encoding="utf-8") as f:
        for gold, pred, want, why in CASES:
            m = mv(pred, gold)
            agree += m == want
            if m != want and not why:
                print(f"UNEXPLAINED: gold {gold!r} pred {pred!r}: lanpo {want}, math-verify {m}")
            if m == want and why:
                print(f"AGREES NOW (drop the why): gold {gold!r} pred {pred!r}")
            f.write(json.dumps({"gold": gold, "pred": pred, "want": want, "mv": m, "why": why if m != want else ""},
                               ensure_ascii=False) + "\n")
    print(f"wrote {len(CASES)} cases to {out}; math-verify agrees on {agree}")


if __name__ == "__main__":
    main()
