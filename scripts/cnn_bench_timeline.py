#!/usr/bin/env python3
"""Merge HVD_TIMELINE's file with cnn_bench's --trace_file (rank 0's compute phases)
into one Chrome trace, and print, for one timed step, when each gradient bucket's
allreduce ran relative to that step's backward pass.

usage: cnn_bench_timeline.py HVD_TIMELINE.json COMPUTE.json MERGED.json [STEP]
  STEP: the timed step to print (default: the last)

The timeline counts microseconds from hvd_init; the compute trace uses CLOCK_MONOTONIC.
They are lined up on the broadcast of init.params: cnn_bench's "broadcast init.params"
event ends just after the runtime's BROADCAST event of that tensor ends."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timeline_load import load  # noqa: E402  (a killed run's timeline loads too)


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    timeline, _ = load(sys.argv[1])
    compute = json.load(open(sys.argv[2]))
    tl_end = [e["ts"] + e["dur"] for e in timeline
              if e.get("name") == "BROADCAST" and e.get("args", {}).get("tensor") == "init.params"]
    anchor = [e["ts"] + e["dur"] for e in compute if e.get("cat") == "anchor"]
    if not tl_end or not anchor:
        sys.exit("cnn_bench_timeline: no init.params broadcast in both files "
                 "(run cnn_bench with --variable_update horovod and HVD_TIMELINE set)")
    shift = tl_end[0] - anchor[0]
    for e in compute:
        if "ts" in e:
            e["ts"] += shift
    json.dump(timeline + compute, open(sys.argv[3], "w"))

    rows = {e["tid"]: e["args"]["name"] for e in timeline
            if e.get("ph") == "M" and e.get("name") == "thread_name"}
    steps = sorted({e["cat"] for e in compute if e.get("cat", "").startswith("step ")},
                   key=lambda c: int(c.split()[1]))
    step = "step " + sys.argv[4] if len(sys.argv) == 5 else steps[-1]
    phases = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in compute if e.get("cat") == step}
    if "backward" not in phases:
        sys.exit("cnn_bench_timeline: no %s in %s" % (step, sys.argv[2]))
    t0 = phases["forward"][0]
    print("%s of rank 0, ms from its start:" % step)
    for name in ("forward", "backward", "allreduce wait", "optimizer"):
        a, b = phases[name]
        print("  %-16s %8.1f .. %8.1f" % (name, (a - t0) / 1e3, (b - t0) / 1e3))
    bw0, bw1 = phases["backward"]
    end = phases["optimizer"][1]
    inside = 0
    ops = [e for e in timeline if e.get("ph") == "X" and e.get("name") == "ALLREDUCE"
           and t0 <= e["ts"] <= end and rows.get(e["tid"], "").startswith("grad.bucket.")]
    for e in sorted(ops, key=lambda e: e["ts"]):
        a, b = e["ts"], e["ts"] + e["dur"]
        where = "during backward" if b <= bw1 else ("starts in backward" if a < bw1 else "after backward")
        inside += b <= bw1
        print("  %-16s %8.1f .. %8.1f  ALLREDUCE %s" % (rows[e["tid"]], (a - t0) / 1e3,
                                                      (b - t0) / 1e3, where))
    print("%d of %d bucket allreduces finished while backward was still running" %
          (inside, len(ops)))


if __name__ == "__main__":
    main()
