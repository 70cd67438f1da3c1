#!/usr/bin/env python3
"""Check a converted HF dir: (1) its logits against transformers' own GGUF
loader (an independent dequantization + name mapping) and (2) a greedy
generation of a GSM8K-style question through the chat template.

usage: verify_hf.py HF_DIR [GGUF_PATH] [--max-new N] [--no-compare]
"""
import argparse
import gc
import os
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ap = argparse.ArgumentParser()
ap.add_argument("hf")
ap.add_argument("gguf", nargs="?")
ap.add_argument("--max-new", type=int, default=320)
ap.add_argument("--no-compare", action="store_true")
a = ap.parse_args()
torch.set_num_threads(os.cpu_count())

Q = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many "
     "clips in May. How many clips did Natalia sell altogether in April and May?")
tok = AutoTokenizer.from_pretrained(a.hf)
msgs = [{"role": "system", "content": "Please reason step by step, and put your final answer within \\boxed{}."},
        {"role": "user", "content": Q}]
prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
ids = tok(prompt, return_tensors="pt").input_ids
print("prompt:", repr(prompt))
print("prompt ids:", ids.shape[1], ids[0, :12].tolist())

m = AutoModelForCausalLM.from_pretrained(a.hf, torch_dtype=torch.float32)
m.eval()
with torch.no_grad():
    la = m(ids).logits[0].double()

if a.gguf and not a.no_compare:
    d, f = os.path.split(a.gguf)
    mb = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    mb.eval()
    with torch.no_grad():
        lb = mb(ids).logits[0].double()
    diff = (la - lb).abs().max().item()
    print(f"logits vs transformers' GGUF loader: max|diff| = {diff:.3e} (scale {la.abs().max().item():.2f}); "
          f"argmax agree {(la.argmax(-1) == lb.argmax(-1)).float().mean().item():.4f}")
    del mb
    gc.collect()

t0 = time.time()
with torch.no_grad():
    out = m.generate(ids, max_new_tokens=a.max_new, do_sample=False,
                     eos_token_id=m.generation_config.eos_token_id, pad_token_id=tok.pad_token_id)
dt = time.time() - t0
gen = out[0, ids.shape[1]:]
print(f"generated {gen.shape[0]} tokens in {dt:.1f}s ({gen.shape[0] / dt:.2f} tok/s)")
print("----- completion -----")
print(tok.decode(gen, skip_special_tokens=False))
