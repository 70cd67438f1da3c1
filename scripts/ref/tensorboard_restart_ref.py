#!/usr/bin/env python3
"""Loads internal/tensorboard/testdata/restart/ (two events files of one run:
steps 1-4, then a resume with a SessionLog START at step 3 and steps 3-5) with
TensorBoard's EventAccumulator, which purges what the first file holds from the
restart's step on, and writes the scalars it keeps to restart.ref.json
(committed; the Go test checks them). Run by hand after regenerating the
fixture (LANPO_WRITE_FIXTURE=1 go test ./internal/tensorboard):

    pip install tensorboard
    python3 scripts/ref/tensorboard_restart_ref.py
"""
import json

import tensorboard
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator("internal/tensorboard/testdata/restart", purge_orphaned_data=True)
acc.Reload()
out = {"tensorboard": tensorboard.__version__, "scalars": {}}
for tag in acc.Tags()["scalars"]:
    out["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
with open("internal/tensorboard/testdata/restart.ref.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print(out["scalars"])
