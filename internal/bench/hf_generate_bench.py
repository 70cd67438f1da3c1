# Times transformers' generate() for `lanpo bench generate`: the model in
# MODEL_DIR (its weights, or, when it holds only config.json, random weights
# of that shape: speed depends on the shape), the prompt ids lanpo sampled
# from, on DEVICE in DTYPE, sampling at temperature 1 with no top-k/top-p,
# exactly NEW_TOKENS new tokens per sample (min_new_tokens: EOS never ends a
# sample). A random model is made on DEVICE directly, transformers' own
# initialization skipped where it can be and the weights filled there
# (N(0, 0.02)): a 7B model built on the CPU with random init takes minutes.
# On CUDA it synchronizes before reading the clock and reports the GPU's
# free memory at its start; on an out-of-memory error it retries with the
# prompts in 2, 4, ... sequential batches. Prints one JSON line. Needs torch
# and transformers.
import contextlib
import json
import os
import sys
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

model_dir, ids_path, device, dtype_name = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
threads, samples, new_tokens = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype_name]
torch.set_num_threads(threads)
torch.manual_seed(1)
with open(ids_path) as f:
    ids = torch.tensor(json.load(f), dtype=torch.long, device=device)


def with_dtype(fn, *args):
    # transformers 5 names the argument dtype; 4.x torch_dtype.
    try:
        return fn(*args, dtype=dtype)
    except TypeError:
        return fn(*args, torch_dtype=dtype)


def no_init():
    # transformers' switch for skipping weight init: transformers 5 keeps it
    # in transformers.initialization, 4.x in modeling_utils.
    for mod in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            return __import__(mod, fromlist=["no_init_weights"]).no_init_weights(), "skipped"
        except (ImportError, AttributeError):
            pass
    return contextlib.nullcontext(), "transformers'"


cuda = device.startswith("cuda")
if cuda:
    free0, total0 = torch.cuda.mem_get_info(torch.device(device))
t_build = time.perf_counter()
if os.path.exists(os.path.join(model_dir, "model.safetensors")):
    model, init = with_dtype(AutoModelForCausalLM.from_pretrained, model_dir), "pretrained"
else:
    ctx, init = no_init()
    with torch.device(device), ctx:
        model = with_dtype(AutoModelForCausalLM.from_config, AutoConfig.from_pretrained(model_dir))
    with torch.no_grad():
        for p in model.parameters():  # finite values, made on the device
            p.normal_(0.0, 0.02)
    model.tie_weights()  # init_weights would have tied them (a tied head shares the embedding)
model = model.to(device=device, dtype=dtype).eval()  # whichever argument name took
build_s = time.perf_counter() - t_build


def sync():
    if cuda:
        torch.cuda.synchronize()


def generate(batch, n):
    kw = dict(attention_mask=torch.ones_like(batch), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
              max_new_tokens=n, min_new_tokens=n, num_return_sequences=samples, pad_token_id=0)
    return model.generate(batch, **kw)


with torch.no_grad():
    generate(ids[:1], 2)  # warm-up
    batches, err = 1, None
    while batches <= len(ids):
        try:
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            sync()
            t0 = time.perf_counter()
            new = 0
            for chunk in torch.chunk(ids, batches):
                out = generate(chunk, new_tokens)
                new += (out.shape[1] - chunk.shape[1]) * out.shape[0]
                del out
            sync()
            ms = (time.perf_counter() - t0) * 1000
            break
        except torch.cuda.OutOfMemoryError as e:
            err = str(e).split("\n")[0]
            batches *= 2
    else:
        raise SystemExit("out of memory even one prompt at a time: %s" % err)
res = {"ms": ms, "new_tokens": int(new), "tokens_per_s": new / (ms / 1000), "batches": batches, "device": device,
       "dtype": dtype_name, "threads": torch.get_num_threads(), "torch": torch.__version__,
       "transformers": transformers.__version__}
res["build_s"], res["init"] = build_s, init
if cuda:
    res["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    res["gpu"] = torch.cuda.get_device_name()
    res["free_gib_at_start"], res["total_gib"] = free0 / 2**30, total0 / 2**30
print(json.dumps(res))
