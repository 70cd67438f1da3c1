#!/usr/bin/env python3
"""A reward program for reward/command_test.go: it misbehaves on markers
in a response, and otherwise scores 1 for response == answer.

SLEEP     never replies          EXIT       exits with status 3
GARBAGE   a line that is no JSON SHORT      one verdict too few
NOREWARD  a verdict without reward  NAN     reward NaN
ERROR     {"error": ...}         TWICE      replies twice
SPAWN     starts `sleep 600` in its group, reason: its pid
PID       reason: this program's pid   ARGV  reason: its argv[1:] as JSON
"""
import json
import os
import subprocess
import sys
import time

print("misbehave.py started, pid %d" % os.getpid(), file=sys.stderr, flush=True)


def out(obj):
    print(json.dumps(obj), flush=True)


for line in sys.stdin:
    reqs = json.loads(line)["requests"]
    marks = {r["response"] for r in reqs}
    verdicts = [{"reward": 1.0 if r["response"] == r.get("answer") else 0.0,
                 "correct": r["response"] == r.get("answer")} for r in reqs]
    if "SLEEP" in marks:
        time.sleep(3600)
    if "EXIT" in marks:
        print("exiting on EXIT", file=sys.stderr, flush=True)
        sys.exit(3)
    if "GARBAGE" in marks:
        print("this is not json", flush=True)
        continue
    if "SHORT" in marks:
        verdicts = verdicts[:-1]
    if "ERROR" in marks:
        out({"error": "cannot score this batch"})
        continue
    for r, v in zip(reqs, verdicts):
        if r["response"] == "NOREWARD":
            del v["reward"]
        elif r["response"] == "NAN":
            v["reward"] = float("nan")
        elif r["response"] == "PID":
            v["reason"] = str(os.getpid())
        elif r["response"] == "ARGV":
            v["reason"] = json.dumps(sys.argv[1:])
        elif r["response"] == "SPAWN":
            v["reason"] = str(subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL).pid)
    if "TWICE" in marks:  # both in one write: the second is there at once
        print(json.dumps({"verdicts": verdicts}) + "\n" + json.dumps({"verdicts": verdicts}), flush=True)
        continue
    out({"verdicts": verdicts})
