#!/usr/bin/env python3
"""Reads internal/tensorboard/testdata/fixture.tfevents with TensorBoard's own
event loader and writes what it finds to fixture.ref.json (committed; the Go
test compares it with what it wrote). Run by hand after regenerating the
fixture (LANPO_WRITE_FIXTURE=1 go test ./internal/tensorboard):

    pip install tensorboard
    python3 scripts/ref/tensorboard_ref.py
"""
import json

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
import tensorboard

PATH = "internal/tensorboard/testdata/fixture.tfevents"

out = {"tensorboard": tensorboard.__version__, "file_version": None, "scalars": []}
for ev in EventFileLoader(PATH).Load():
    if ev.HasField("file_version"):
        out["file_version"] = ev.file_version
    for v in ev.summary.value:
        # The loader upgrades simple_value scalars to the tensor form
        # TensorBoard's scalar plugin reads.
        value = v.simple_value if v.HasField("simple_value") else float(v.tensor.float_val[0])
        out["scalars"].append({"step": ev.step, "wall_time": ev.wall_time, "tag": v.tag, "value": value})
with open("internal/tensorboard/testdata/fixture.ref.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print(len(out["scalars"]), "scalars,", out["file_version"])
