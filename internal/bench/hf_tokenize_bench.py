# Times Hugging Face tokenizers (Rust, PyPI `tokenizers`) encoding the texts
# that `lanpo bench tokenize` wrote, with the same tokenizer.json: one cold
# pass, then warm passes, single-threaded (one encode call per text) and
# parallel (encode_batch on all cores). Prints one JSON line, with a SHA-256
# of the ids so lanpo can check it produced the same ones.
import hashlib
import json
import sys
import time

import tokenizers
from tokenizers import Tokenizer

tok_path, texts_path, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(texts_path, encoding="utf-8") as f:
    texts = json.load(f)
tok = Tokenizer.from_file(tok_path)


def single():
    return [tok.encode(t, add_special_tokens=False).ids for t in texts]


t0 = time.perf_counter()
ids = single()
cold = time.perf_counter() - t0
best = float("inf")
for _ in range(reps):
    t0 = time.perf_counter()
    single()
    best = min(best, time.perf_counter() - t0)
par = float("inf")
for _ in range(reps):
    t0 = time.perf_counter()
    tok.encode_batch(texts, add_special_tokens=False)
    par = min(par, time.perf_counter() - t0)
h = hashlib.sha256()
for row in ids:
    h.update((",".join(map(str, row)) + "\n").encode())
print(json.dumps({"cold_s": cold, "single_s": best, "parallel_s": par, "tokens": sum(map(len, ids)),
                  "ids_sha256": h.hexdigest(), "tokenizers": tokenizers.__version__}))
