#!/usr/bin/python3
"""scripts/plot_pipeline_timeline.py: one pipeline step as a Gantt chart, from train's own
output, one panel per run (scripts/compare_pipeline.sh passes GPipe's and 1F1B's at M = 4).

  plot_pipeline_timeline.py LOG... [--out FILE.svg]

LOG: the output of `train --pipeline-stages S --micro-batches M --pipeline-schedule ...`
(rank 0 prints the plan line "pipeline: S stages x R replicas, M micro-batches of N,
SCHEDULE", the chart of the last step of replica 0 and the stages' idle shares).

The chart is train's: "pipeline: the last step of replica 0, T ms" and one line per stage
of 72 columns, time to the right, each computation drawn as its micro-batch's digit then
F (forward) or B (backward) letters, '.' idle (hvd's timeline holds the collectives only,
not the stages' computations). Each panel here has one row per stage (replica 0's stage s
is rank s), each computation a coloured box labelled with its micro-batch, idle time
blank; times are the chart's, to one column (T / 72). A computation shorter than a column
can be hidden by the next one in train's chart: the script says how many of a stage's
2 M computations it found when some are missing, and draws those it found.

Writes FILE.svg (default pipeline_timeline.svg; SVG with its text as text: small,
diffable, searchable) and prints where. Needs matplotlib (Debian: python3-matplotlib)."""
import argparse
import re
import sys
import textwrap

PLAN = re.compile(r"^pipeline: (\d+) stages x (\d+) replicas, (\d+) micro-batches of (\d+), (\S+)")
STEP = re.compile(r"^pipeline: the last step of replica 0, ([0-9.]+) ms")
ROW = re.compile(r"^  stage (\d+) \|([^|]*)\|$")
IDLE = re.compile(r"^pipeline stage (\d+): idle ([0-9.]+)% .*theory ([0-9.]+)%")
COLOURS = {"F": "#4c72b0", "B": "#dd8452"}
NAMES = {"F": "forward", "B": "backward"}


def parse_row(line, micro_batches):
    """[(kind, micro, first column, columns)] of one stage's chart line, in time order.
    A box is a digit and the letters after it; one of a single column (its digit only)
    is a forward if this micro-batch's forward has not been seen yet, else a backward."""
    boxes, seen_f = [], set()
    i = 0
    while i < len(line):
        if not line[i].isdigit():
            i += 1
            continue
        j = i + 1
        while j < len(line) and line[j] in "FB":
            j += 1
        micro = int(line[i])
        kind = line[i + 1] if j > i + 1 else ("B" if micro in seen_f else "F")
        if kind == "F":
            seen_f.add(micro)
        boxes.append((kind, micro, i, j - i))
        i = j
    return boxes


def parse_log(path):
    """{schedule, stages, micro_batches, step_ms, columns, rows: [[boxes]], idle: {s: (m, t)}}"""
    run = {"rows": {}, "idle": {}, "step_ms": None, "schedule": None}
    with open(path) as f:
        lines = f.read().splitlines()
    for k, line in enumerate(lines):
        m = PLAN.match(line)
        if m:
            run.update(stages=int(m.group(1)), micro_batches=int(m.group(3)),
                       schedule=m.group(5))
        m = STEP.match(line)
        if m:
            run["step_ms"] = float(m.group(1))
            run["rows"] = {}
            for row in lines[k + 1:]:
                r = ROW.match(row)
                if not r:
                    break
                run["columns"] = len(r.group(2))
                run["rows"][int(r.group(1))] = r.group(2)
        m = IDLE.match(line)
        if m:
            run["idle"][int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    if run["schedule"] is None:
        sys.exit("plot_pipeline_timeline: %s has no line 'pipeline: S stages x R replicas, M "
                 "micro-batches of N, SCHEDULE': not the output of train --pipeline-stages" % path)
    if run["step_ms"] is None or len(run["rows"]) != run["stages"]:
        sys.exit("plot_pipeline_timeline: %s has no chart of the last step with %d stage lines "
                 "('pipeline: the last step of replica 0, T ms' and '  stage s |...|'; train "
                 "prints it at the end of a run without --quiet)" % (path, run["stages"]))
    if run["micro_batches"] > 10:
        sys.exit("plot_pipeline_timeline: %s: %d micro-batches; train's chart names a "
                 "micro-batch by its last digit only, so at most 10 can be told apart"
                 % (path, run["micro_batches"]))
    run["boxes"] = [parse_row(run["rows"][s], run["micro_batches"]) for s in range(run["stages"])]
    return run


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_pipeline_timeline: matplotlib is missing "
                 "(apt-get install -y python3-matplotlib)")
    # Text as text (not paths) and no date or random ids: a small file that diffs cleanly.
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "hvd", "font.size": 9})
    return plt


def draw_run(ax, run):
    """One panel: a row per stage (stage 0 on top), a box per computation."""
    S, M = run["stages"], run["micro_batches"]
    per_column = run["step_ms"] / run["columns"]
    for s, boxes in enumerate(run["boxes"]):
        y = S - 1 - s
        ax.barh(y, run["step_ms"], 0.8, left=0, color="none", edgecolor="#bbbbbb", lw=0.5)
        for kind, micro, first, width in boxes:
            bar = ax.barh(y, width * per_column, 0.8, left=first * per_column,
                          color=COLOURS[kind], edgecolor="white", lw=0.5)
            bar[0].set_gid("box-%s-stage%d-%s%d" % (run["schedule"], s, kind, micro))
            ax.text((first + width / 2) * per_column, y, str(micro), ha="center",
                    va="center", color="white", fontsize=8, fontweight="bold")
        if len(boxes) != 2 * M:
            print("plot_pipeline_timeline: %s, stage %d: %d of its %d computations found in "
                  "train's chart (the others were shorter than one column, %.2f ms, and "
                  "hidden by the next)"
                  % (run["schedule"], s, len(boxes), 2 * M, per_column))
    ax.set_yticks(range(S))
    labels = []
    for s in reversed(range(S)):
        label = "stage %d\n(rank %d)" % (s, s)
        if s in run["idle"]:
            label += "\nidle %.1f%%" % run["idle"][s][0]
        labels.append(label)
    ax.set_yticklabels(labels)
    theory = 100.0 * (S - 1) / (M + S - 1)
    ax.set_title("%s, S = %d, M = %d: the last step, %.1f ms (idle: the run's share per "
                 "stage; bubble theory %.1f%%)" % (run["schedule"], S, M, run["step_ms"], theory),
                 fontsize=9)
    ax.set_ylim(-0.6, S - 0.4)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+", help="train's output with --pipeline-stages, one per panel")
    ap.add_argument("--out", default="pipeline_timeline.svg", help="the picture (SVG)")
    ap.add_argument("--title", default="One pipeline step per schedule (train, lenet; "
                    "scripts/compare_pipeline.sh)")
    args = ap.parse_args()
    runs = [parse_log(p) for p in args.logs]
    plt = pyplot()
    height = sum(0.6 * r["stages"] + 0.9 for r in runs) + 0.8
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, height), sharex=True, squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        draw_run(ax, run)
    axes[-1, 0].set_xlabel("ms from the step's start (train's chart: one column = 1/%d of the "
                           "step)" % runs[-1]["columns"])
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    fig.legend(handles, [NAMES[k] for k in COLOURS] + [], loc="lower center", ncol=2,
               fontsize=8, title="the number in a box: its micro-batch; blank: idle",
               title_fontsize=8)
    fig.suptitle(textwrap.fill(args.title, 100))
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    try:
        fig.savefig(args.out, metadata={"Date": None})
    except OSError as e:
        sys.exit("plot_pipeline_timeline: cannot write %s: %s" % (args.out, e))
    print("plot_pipeline_timeline: wrote %s (%s)" % (
        args.out, ", ".join("%s M = %d" % (r["schedule"], r["micro_batches"]) for r in runs)))


if __name__ == "__main__":
    main()
