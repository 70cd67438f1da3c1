# Times math-verify (PyPI math-verify) on the (pred, gold) pairs that
# `lanpo bench verify` wrote, one pair at a time on one thread, the way RL
# trainers call it: verify(parse("\boxed{" + gold + "}"), parse(pred)).
# Prints one JSON line with the verdicts so lanpo can report agreement.
import json
import sys
import time
from importlib.metadata import version

from math_verify import parse, verify

with open(sys.argv[1], encoding="utf-8") as f:
    pairs = json.load(f)
t0 = time.perf_counter()
verdicts = []
for pred, gold in pairs:
    try:
        verdicts.append(bool(verify(parse("\\boxed{" + gold + "}"), parse(pred))))
    except Exception:
        verdicts.append(False)
s = time.perf_counter() - t0
print(json.dumps({"seconds": s, "verdicts": verdicts, "math_verify": version("math-verify")}))
