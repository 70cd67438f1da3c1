#!/usr/bin/env python3
"""Tiny random Qwen2/Qwen3 checkpoints and Hugging Face reference outputs for model/ tests.

Run by hand in an environment with torch and transformers (e.g. torch==2.1.0, transformers==4.51.3);
the outputs are committed under model/testdata/tiny/<name>/:

    python3 scripts/ref/tiny_models.py model/testdata/tiny

Each model directory is a normal HF checkpoint (config.json, model.safetensors, generation_config.json)
plus reference.json: a left-padded batch (input_ids, attention_mask, position_ids), the fp32 logits at
every position, the log-probabilities of each next token, and the same logits computed in bf16.
"""
import json
import os
import sys

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

MODELS = {
    # q/k/v bias, tied embeddings, GQA ratio 2
    "qwen2-gqa2-tied": (Qwen2Config, Qwen2ForCausalLM, dict(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, use_sliding_window=False)),
    # q/k norm, untied head, odd head count, GQA ratio 1, explicit head_dim != hidden/heads
    "qwen3-mha-untied": (Qwen3Config, Qwen3ForCausalLM, dict(
        vocab_size=101, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=3,
        num_key_value_heads=3, head_dim=16, max_position_embeddings=64, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=False, attention_bias=False)),
    # odd head count with GQA ratio 3
    "qwen3-gqa3": (Qwen3Config, Qwen3ForCausalLM, dict(
        vocab_size=89, hidden_size=36, intermediate_size=56, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, head_dim=12, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, attention_bias=False)),
}


def batch(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = [7, 4, 1]
    t = max(lengths)
    ids = torch.zeros(len(lengths), t, dtype=torch.long)
    mask = torch.zeros(len(lengths), t, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, t - n:] = torch.randint(1, vocab, (n,), generator=g)  # left padding with id 0
        mask[i, t - n:] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, pos


def main(out):
    for name, (cfg_cls, model_cls, kw) in MODELS.items():
        torch.manual_seed(sum(map(ord, name)))
        cfg = cfg_cls(**kw, torch_dtype="float32")
        model = model_cls(cfg).eval()
        # Random init gives tiny weights and near-uniform outputs; widen them so
        # the test sees real differences between tokens and positions.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("norm.weight"):
                    p.copy_(1 + 0.1 * torch.randn_like(p))
                else:
                    p.copy_(0.2 * torch.randn_like(p))
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        ids, mask, pos = batch(cfg.vocab_size, 1)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
            logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
            bf = model_cls.from_pretrained(d, torch_dtype=torch.bfloat16).eval()
            logits_bf16 = bf(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
        ref = {
            "input_ids": ids.tolist(), "attention_mask": mask.tolist(), "position_ids": pos.tolist(),
            "logits": logits.tolist(), "next_token_logprobs": logp.tolist(), "logits_bf16": logits_bf16.tolist(),
            "transformers": __import__("transformers").__version__, "torch": torch.__version__,
        }
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f)
        print(name, sum(p.numel() for p in model.parameters()), "parameters")


if __name__ == "__main__":
    main(sys.argv[1])
