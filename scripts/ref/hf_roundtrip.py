#!/usr/bin/env python3
"""A lanpo-written checkpoint, loaded by transformers: chats rendered with its chat_template and scored.

Run by hand in an environment with torch and transformers (e.g. torch==2.1.0, transformers==4.51.3):

    LANPO_HF_ROUNDTRIP_DIR=/tmp/hf-roundtrip go test ./trainer -run TestHFRoundTrip   # writes the checkpoint
    python3 scripts/ref/hf_roundtrip.py /tmp/hf-roundtrip trainer/testdata/hf_roundtrip.json

The test writes lanpo's built-in model (the directory every run and checkpoint of builtin:tiny starts
from: config.json, model.safetensors, tokenizer.json, tokenizer_config.json) and fails until the
fixture matches. This script loads that directory with AutoTokenizer and AutoModelForCausalLM only —
no lanpo code — renders each conversation below with apply_chat_template (so through the Jinja
template in tokenizer_config.json), and writes the text, the ids and log p(ids[i] | ids[<i]) in fp32.
TestHFRoundTrip then checks that lanpo renders the same text and ids and scores them within 1e-4.
"""
import json
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

CASES = [
    # no system message: the template's default system prompt
    dict(messages=[{"role": "user", "content": "What is 12 + 30?"}], add_generation_prompt=True),
    # a system prompt, a full answer, no generation prompt (an SFT example)
    dict(messages=[
        {"role": "system", "content": "Please reason step by step, and put your final answer within \\boxed{}."},
        {"role": "user", "content": "Compute 7 \u00d7 6."},
        {"role": "assistant", "content": "7 \u00d7 6 = 42, so the answer is \\boxed{42}."},
    ], add_generation_prompt=False),
    # several turns, non-ASCII, a generation prompt after them
    dict(messages=[
        {"role": "user", "content": "Is \u221a2 rational?"},
        {"role": "assistant", "content": "No: \u221a2 = p/q leads to a contradiction."},
        {"role": "user", "content": "And \u03c0\u00b2?"},
    ], add_generation_prompt=True),
]


def main(ckpt, out):
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32)
    model.eval()
    cases = []
    for c in CASES:
        text = tok.apply_chat_template(c["messages"], tokenize=False, add_generation_prompt=c["add_generation_prompt"])
        ids = tok.apply_chat_template(c["messages"], tokenize=True, add_generation_prompt=c["add_generation_prompt"])
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        lp = [logp[i - 1, ids[i]].item() for i in range(1, len(ids))]
        cases.append(dict(c, text=text, ids=ids, logprobs=lp))
    with open(out, "w") as f:
        json.dump(dict(transformers=transformers.__version__, torch=torch.__version__, cases=cases), f, indent=1)
        f.write("\n")
    print(f"{out}: {len(cases)} chats, {sum(len(c['ids']) for c in cases)} tokens")


if __name__ == "__main__":
    main(*sys.argv[1:])
