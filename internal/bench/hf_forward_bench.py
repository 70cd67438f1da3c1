# Times transformers' forward (logits) on a model directory and token ids that
# `lanpo bench forward` wrote, with the same thread count; prints one JSON line.
# Run by lanpo with --hf-python; needs torch and transformers.
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM

model_dir, ids_path, threads, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
with open(ids_path) as f:
    ids = torch.tensor(json.load(f), dtype=torch.long)
try:  # transformers 5 names the argument dtype; 4.x torch_dtype
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
except TypeError:
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
mask = torch.ones_like(ids)
times = []
with torch.no_grad():
    model(input_ids=ids, attention_mask=mask).logits
    for _ in range(reps):
        t0 = time.perf_counter()
        model(input_ids=ids, attention_mask=mask).logits
        times.append((time.perf_counter() - t0) * 1000)
print(json.dumps({"median_ms": statistics.median(times), "threads": torch.get_num_threads(),
                  "torch": torch.__version__, "transformers": transformers.__version__,
                  "attn_implementation": model.config._attn_implementation}))
