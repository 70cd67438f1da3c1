#!/usr/bin/env python3
"""Reference safetensors files for model/ tests, written by Python's safetensors.

Run by hand (pip install safetensors numpy), output is committed:

    python3 scripts/ref/safetensors_fixture.py model/testdata
        writes ref.safetensors (by safetensors.numpy.save_file) and ref.json (the values)
    python3 scripts/ref/safetensors_fixture.py --check FILE
        loads a file (e.g. one lanpo wrote) with safetensors and prints its tensors
"""
import json
import os
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file


def tensors():
    rng = np.random.default_rng(7)
    return {
        "model.embed_tokens.weight": rng.standard_normal((5, 3)).astype(np.float32),
        "model.layers.0.self_attn.q_proj.bias": rng.standard_normal(4).astype(np.float16),
        "lm_head.weight": rng.standard_normal((2, 3)).astype(np.float64),
        "position_ids": np.arange(6, dtype=np.int64).reshape(2, 3),
        "counts": np.array([1, -2, 3], dtype=np.int32),
        "flags": np.array([True, False, True]),
        "bytes": np.array([0, 255, 7], dtype=np.uint8),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "scalar": np.array(2.5, dtype=np.float32),
        "a<b>&c": np.array([1.0], dtype=np.float32),  # a name JSON-escaped differently by Go and serde
    }


def write(out):
    t = tensors()
    save_file(t, os.path.join(out, "ref.safetensors"), metadata={"format": "pt"})
    desc = {k: {"dtype": str(v.dtype), "shape": list(v.shape), "values": v.astype(np.float64).ravel().tolist()}
            for k, v in t.items()}
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(desc, f, indent=1, sort_keys=True)


def check(path):
    with safe_open(path, framework="numpy") as f:
        print("metadata", f.metadata())
        for k in f.keys():
            v = f.get_tensor(k)
            print(k, v.dtype, list(v.shape), v.ravel()[:6].tolist())


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        write(sys.argv[1])
