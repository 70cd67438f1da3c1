#!/usr/bin/env python3
"""Writes model/tokenizer/testdata/corpus.jsonl: the texts the tokenizer fixtures cover.

Run by hand (no third-party packages needed):
    python3 scripts/ref/tokenizer_corpus.py [--shared ../shared/data]

The corpus is deterministic: hand-written edge cases, generated combinations of the
characters the Qwen/Llama-3 split pattern treats differently, every problem of
aime24.jsonl and math500.jsonl, and a few long solutions from math500. Reference ids are
produced from it by tokenizer_ref.mjs (tokenizers.js) and tokenizer_ref.py (Rust tokenizers).
"""
import argparse
import json
import os
import random

HAND = [
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    "\r\n",
    "\r\n\r\n  \r\n",
    "\t",
    "\t\t  \t",
    "Hello world",
    "Hello  world",
    "Hello   world   ",
    "  leading and trailing  ",
    "word\n\nword\n \n word",
    "line1\r\nline2\rline3\nline4",
    "It's, I'm, you're, we've, they'll, he'd, don't",
    "IT'S I'M YOU'RE WE'VE THEY'LL HE'D DON'T",
    "It'S mIxEd'Ll cAsE'Re",
    "'s's's'''s",
    "ſ ﬁ 'ſ 'ſt",
    "The answer is $\\boxed{42}$.",
    "$\\frac{a}{b} + \\sqrt{x^2 + y^2} = \\int_0^\\infty e^{-t}\\,dt$",
    "\\begin{align*}\n  x &= 1 \\\\\n  y &= 2\n\\end{align*}",
    "Let $f(x) = 3x^2 - 2x + 7$. Find $f(-1)$.",
    "1234567890",
    "3.14159265358979323846",
    "1,000,000 and 1 000 000 and 1_000_000",
    "x₁ + x₂ = ½ and ² ³ ⁴ Ⅻ ① ٣ ४",
    "def f(x):\n\treturn x * 2\n\n\nclass A:\n    pass\n",
    "if (a && b) { return c; } // comment\n\t\tint x = 0;",
    "for i in range(10):\n        print(i)  # trailing   \n",
    "```python\nprint('hi')\n```",
    "<html><body><p class=\"x\">Hi</p></body></html>",
    "SELECT * FROM t WHERE a >= 10 AND b <> 'x';",
    "中文测试：你好，世界！这是一个句子。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트입니다.",
    "Ελληνικά και Русский текст, ещё немного.",
    "עברית טקסט לדוגמה",
    "النص العربي مع أرقام ١٢٣",
    "mixed English עם עברית and العربية",
    "emoji 😀😃😄 and 👍🏽 and 🇺🇸🇫🇷",
    "family 👨‍👩‍👧‍👦 and 🏳️‍🌈 zwj",
    "e\u0301 vs é, n\u0303 vs ñ, A\u030a vs Å",
    "a\u0300\u0301\u0302\u0303\u0304 stacked combining",
    "\u1100\u1161\u11a8 (conjoining jamo)",
    "Ω vs Ω (ohm sign), Å vs Å (angstrom)",
    "zero\u200bwidth\u200cjoiner\u200dtest\ufeffbom",
    "nbsp\u00a0here\u2003em\u3000ideographic\u2028ls\u2029ps\u0085nel",
    "tabs\t\tand\u000bvt\u000cff",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|endoftext|>",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "a<think>b</think>c",
    "<|im_start|> spaced <|im_end|>  ",
    "not special: <|im_start |> <| im_end|> <|unknown|>",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "a" * 1000,
    "ab" * 700,
    "supercalifragilisticexpialidocious" * 20,
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "x" + " " * 50 + "y",
    " " * 200,
    "\n" * 100,
    "-" * 80,
    "=" * 33 + "\n" + "#" * 17,
    "....!!!???,,,;;;:::",
    "http://example.com/path?query=1&b=2#frag",
    "user@example.com, +1 (555) 123-4567",
    "C:\\Windows\\System32\\drivers",
    "\\n is not a newline, \\t is not a tab",
    "Ünïcödé Çàfé naïve résumé coöperate",
    "İstanbul ı I i ß ẞ",
    "\U0001d400\U0001d401 math bold, \U0001d7d8 double-struck digit",
    "∑_{i=1}^{n} i = n(n+1)/2 ≤ ∞ ≠ ∅ ∈ ℝ ⊆ ℕ → ⇒ ∀ ∃",
    "°C ± × ÷ µ ‰ € £ ¥ © ® ™",
    "“smart quotes” ‘single’ — en–dash … ellipsis",
    "\x00\x01\x02 control \x7f chars",
    "trailing newline\n",
    "\n leading newline",
    " \n \n ",
    "a\n\n\n\nb",
    "a \n\t \r\n b",
    "!\n\n",
    "?\r\n\r\n",
    "42\n\n",
    "abc   \n   def",
    "   \t\n",
]

PIECES = ["a", "Z", "é", "中", "1", "٣", "!", "$", "\\", "'", "'s", "'LL", " ", "  ", "\t", "\n", "\r\n",
          "\r", "\u00a0", "\u3000", "😀", "\u0301", "<|im_end|>", "<think>", "x y", "..."]


def generated(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 12)
        out.append("".join(rng.choice(PIECES) for _ in range(k)))
    return out


def problems(path, limit=None, field="problem"):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line)[field])
    return rows[:limit] if limit else rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "../../../shared/data"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../model/tokenizer/testdata/corpus.jsonl"))
    args = ap.parse_args()
    texts = list(HAND)
    texts += generated(160, seed=7)
    texts += problems(os.path.join(args.shared, "aime24.jsonl"))
    texts += problems(os.path.join(args.shared, "math500.jsonl"))
    texts += problems(os.path.join(args.shared, "math500.jsonl"), limit=20, field="solution")
    with open(args.out, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    print(f"wrote {len(texts)} texts to {args.out}")


if __name__ == "__main__":
    main()
