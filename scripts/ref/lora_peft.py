#!/usr/bin/env python3
"""LoRA reference numerics from PEFT, and PEFT/transformers reading what lanpo wrote.

Run by hand in an environment with torch, transformers and peft (measured with torch 2.11.0, transformers
5.17.0, peft 0.21.2, CPU). Outputs are committed under model/testdata/lora/:

    python3 scripts/ref/lora_peft.py make model/testdata/lora

For each case below it wraps the tiny Qwen2 model model/testdata/tiny/qwen2-gqa2-tied in PEFT's LoRA,
sets every lora_A and lora_B to seeded normal values (B != 0: a zero B passes any forward test without
LoRA working), saves the adapter with save_pretrained (CASE/adapter_config.json,
CASE/adapter_model.safetensors), and writes CASE/reference.json (a batch, its next-token log-probs in
fp32, the loss weights) and CASE/grads.safetensors (d/dθ of sum(weights * logp) for every lora_A and
lora_B) and CASE/after_step.safetensors (the adapters after one torch.optim.AdamW step on those
gradients). model/lora_test.go and optim/lora_ref_test.go check lanpo against them.

Then, the other way round:

    LANPO_LORA_OUT=/tmp/lanpo-lora go test ./optim -run TestLoRAWritten    # lanpo writes adapter/ and merged/
    python3 scripts/ref/lora_peft.py check /tmp/lanpo-lora model/testdata/lora

loads /tmp/lanpo-lora/adapter (lanpo's adapter after its AdamW step) with PeftModel.from_pretrained onto
the base, and /tmp/lanpo-lora/merged (lanpo's merged export) with AutoModelForCausalLM alone, scores the
"default" batch with both and writes model/testdata/lora/lanpo_written.json; TestLoRAWritten compares.
"""
import json
import os
import sys

import peft
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

BASE = os.path.relpath(os.path.join(os.path.dirname(__file__), "..", "..", "model", "testdata", "tiny", "qwen2-gqa2-tied"))
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CASES = {
    "default": dict(r=4, lora_alpha=8, target_modules=ALL, use_rslora=False),
    "rslora": dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], use_rslora=True),
}
ADAMW = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def base_model():
    m = AutoModelForCausalLM.from_pretrained(BASE, torch_dtype=torch.float32)
    m.eval()
    return m


def batch(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 97, (2, 10), generator=g)
    weights = torch.randn(2, 9, generator=g)
    return ids, weights


def logprobs(model, ids):
    logits = model(ids).logits.float()
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def lora_params(model):
    """PEFT's saved key (no adapter name) -> parameter, sorted."""
    out = {}
    for name, p in model.named_parameters():
        if "lora_" in name:
            out[name.replace(".default.weight", ".weight")] = p
    return dict(sorted(out.items()))


def make(outdir):
    for case, kw in CASES.items():
        model = get_peft_model(base_model(), LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", **kw))
        g = torch.Generator().manual_seed(7)
        params = lora_params(model)
        with torch.no_grad():
            for p in params.values():
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        d = os.path.join(outdir, case)
        model.save_pretrained(d)
        os.remove(os.path.join(d, "README.md"))  # PEFT's model card template
        ids, weights = batch(11)
        lp = logprobs(model, ids)
        (weights * lp).sum().backward()
        save_file({k: p.grad.detach().clone().contiguous() for k, p in params.items()}, os.path.join(d, "grads.safetensors"))
        opt = torch.optim.AdamW(list(params.values()), **ADAMW)
        opt.step()
        save_file({k: p.detach().clone().contiguous() for k, p in params.items()}, os.path.join(d, "after_step.safetensors"))
        ref = dict(torch=torch.__version__, transformers=transformers.__version__, peft=peft.__version__, base="model/testdata/tiny/qwen2-gqa2-tied",
                   config=kw, scale=model.base_model.model.model.layers[0].self_attn.v_proj.scaling["default"], adamw=dict(ADAMW, betas=list(ADAMW["betas"])),
                   ids=ids.tolist(), weights=weights.tolist(), logprobs=lp.detach().tolist())
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
            f.write("\n")
        print(f"{d}: {len(params)} LoRA tensors, scale {ref['scale']}")


def check(lanpo_out, outdir):
    ids = torch.tensor(json.load(open(os.path.join(outdir, "default", "reference.json")))["ids"])
    peft_model = PeftModel.from_pretrained(base_model(), os.path.join(lanpo_out, "adapter"))
    peft_model.eval()
    merged = AutoModelForCausalLM.from_pretrained(os.path.join(lanpo_out, "merged"), torch_dtype=torch.float32)
    merged.eval()
    with torch.no_grad():
        out = dict(torch=torch.__version__, transformers=transformers.__version__, peft=peft.__version__, ids=ids.tolist(),
                   peft_adapter_logprobs=logprobs(peft_model, ids).tolist(),
                   merged_logprobs=logprobs(merged, ids).tolist())
    path = os.path.join(outdir, "lanpo_written.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{path}: PEFT read lanpo's adapter, transformers read lanpo's merged model")


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](*sys.argv[2:])
