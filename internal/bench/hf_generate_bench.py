# Times transformers' generate() on a model directory and prompt ids that
# `lanpo bench generate` wrote (same weights, same thread count): sampling at
# temperature 1 with no top-k/top-p, exactly max_new_tokens new tokens per
# sample. Prints one JSON line. Needs torch and transformers.
import json
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM

model_dir, ids_path, threads, samples, new_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
with open(ids_path) as f:
    ids = torch.tensor(json.load(f), dtype=torch.long)
model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
kw = dict(attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
          max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_return_sequences=samples, pad_token_id=0)
with torch.no_grad():
    warm = dict(kw, attention_mask=torch.ones_like(ids[:1]), max_new_tokens=2, min_new_tokens=2, num_return_sequences=1)
    model.generate(ids[:1], **warm)  # warm-up
    t0 = time.perf_counter()
    out = model.generate(ids, **kw)
    ms = (time.perf_counter() - t0) * 1000
new = (out.shape[1] - ids.shape[1]) * out.shape[0]
print(json.dumps({"ms": ms, "new_tokens": int(new), "tokens_per_s": new / (ms / 1000), "threads": torch.get_num_threads(),
                  "torch": torch.__version__, "transformers": transformers.__version__}))
