#!/usr/bin/env python3
"""Reference ids (Rust `tokenizers`) and chat renderings (jinja2, as transformers does).

Run by hand:
    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers==0.21.1 jinja2==3.1.6
    /tmp/tokvenv/bin/python scripts/ref/tokenizer_ref.py NAME TOKENIZER_DIR

Writes, under model/tokenizer/testdata/:
  ids_NAME.jsonl   one {"ids": [...]} per line of corpus.jsonl (add_special_tokens=True)
  chat_NAME.jsonl  one {"messages", "add_generation_prompt", "enable_thinking"?, "text"} per case
The jinja2 environment copies transformers' apply_chat_template: trim_blocks, lstrip_blocks,
loopcontrols, tojson with ensure_ascii=False, raise_exception.
"""
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "../../model/tokenizer/testdata")

CONVERSATIONS = [
    [{"role": "user", "content": "What is 1+1?"}],
    [{"role": "system", "content": "You are a careful mathematician."},
     {"role": "user", "content": "Solve $x^2=4$."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Add 2 and 3."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "A"},
     {"role": "assistant", "content": "B"}, {"role": "user", "content": "C"},
     {"role": "assistant", "content": "D"}],
    [{"role": "user", "content": "Q"},
     {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nThe answer is 4."}],
    [{"role": "user", "content": "Q1"},
     {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\nA1"},
     {"role": "user", "content": "Q2"},
     {"role": "assistant", "content": "<think>\n\nnew reasoning\n\n</think>\n\n\nA2"}],
    [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "plain answer, no think"}],
    [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
     {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2 </think> tail"}],
    [{"role": "user", "content": ""}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "  spaced\n\ncontent  "}],
    [{"role": "user", "content": "中文问题：$\\frac{1}{2}$ 是多少？"}],
    [{"role": "user", "content": "first"}, {"role": "system", "content": "mid-conversation system"},
     {"role": "user", "content": "second"}],
    [{"role": "user", "content": "<|im_start|> inside <|im_end|> content"}],
    [{"role": "assistant", "content": "assistant first"}],
    [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": "R"}],
    [{"role": "user", "content": "Q"},
     {"role": "assistant", "content": "<think>only open tag, no close"}],
]


def render_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    name, tokdir = sys.argv[1], sys.argv[2]
    tok = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    with open(os.path.join(TESTDATA, "corpus.jsonl"), encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    with open(os.path.join(TESTDATA, f"ids_{name}.jsonl"), "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"ids": tok.encode(t, add_special_tokens=True).ids}) + "\n")
    print(f"wrote {len(texts)} id rows for {name}")

    with open(os.path.join(tokdir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    template = render_env().from_string(cfg["chat_template"])
    special = {k: cfg.get(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
    special = {k: (v["content"] if isinstance(v, dict) else v) for k, v in special.items()}
    cases = []
    for msgs in CONVERSATIONS:
        for agp in (False, True):
            for thinking in (None, True, False):
                kw = {} if thinking is None else {"enable_thinking": thinking}
                text = template.render(messages=msgs, add_generation_prompt=agp, **special, **kw)
                case = {"messages": msgs, "add_generation_prompt": agp, "text": text}
                if thinking is not None:
                    case["enable_thinking"] = thinking
                cases.append(case)
    with open(os.path.join(TESTDATA, f"chat_{name}.jsonl"), "w", encoding="utf-8") as f:
        for c in cases:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} chat renderings for {name}")


if __name__ == "__main__":
    main()
