#!/usr/bin/python3
"""scripts/plot_strategies.py: the picture of scripts/compare_strategies.sh's table, made
from the table itself, so the picture and the table of one run cannot disagree.

  plot_strategies.py TABLE [--out FILE.svg] [--title TEXT]

TABLE: the markdown table compare_strategies.sh writes (its --out FILE), or its whole
printed output (a row printed twice counts once, the last one). Columns are found by
their header names (model, straggler, strategy, images/sec, host 1 link, busiest server),
so a column added to the table does not break the picture.

Draws grouped bars, one panel per model (each with its own scale: vgg16's images/sec are
a thousandth of resnet20's): images/sec per strategy, without and with the straggler
side by side; above each bar the MB per step through host 1's link and, for the
parameter servers, through the busiest server's link. A run that failed (images/sec 0)
is a bar of height 0 marked "failed". Writes FILE.svg (default strategies.svg; SVG with
its text as text: small, diffable, searchable) and prints where.
Needs matplotlib (Debian: python3-matplotlib)."""
import argparse
import sys
import textwrap

# The strategies in the table's order, with what each means (compare_strategies.sh).
STRATEGIES = [
    ("ring", "ring allreduce"),
    ("ps-sync-1ps", "sync, 1 dedicated server"),
    ("ps-sync-coloc", "sync, colocated servers"),
    ("ps-async-coloc", "async, colocated servers"),
]
COLUMNS = {"model": "model", "straggler": "straggler", "strategy": "strategy",
           "ips": "images/sec", "link": "host 1 link", "server": "busiest server"}


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def number(text):
    """A cell's number, None for '-' or empty (bold marks '**1.2**' allowed)."""
    text = text.replace("*", "").rstrip("x").strip()
    try:
        return float(text)
    except ValueError:
        return None


def parse_table(path):
    """[{model, straggler, strategy, ips, link, server}] in the table's order."""
    where, rows = None, {}
    with open(path) as f:
        for line in f:
            if not line.startswith("|"):
                continue
            c = cells(line)
            if "strategy" in c:
                where = {}
                for key, name in COLUMNS.items():
                    hits = [i for i, h in enumerate(c) if h.startswith(name)]
                    if not hits and key != "server":
                        sys.exit("plot_strategies: %s: the table's header has no '%s' column: %s"
                                 % (path, name, line.strip()))
                    where[key] = hits[0] if hits else None
                continue
            if where is None or set(c[0]) <= set("-: "):
                continue
            if len(c) <= max(i for i in where.values() if i is not None):
                sys.exit("plot_strategies: %s: a row with %d cells, fewer than the header's: %s"
                         % (path, len(c), line.strip()))
            row = {k: c[i] if i is not None else "-" for k, i in where.items()}
            for k in ("ips", "link", "server"):
                row[k] = number(row[k])
            rows[(row["model"], row["straggler"], row["strategy"])] = row
    if not rows:
        sys.exit("plot_strategies: %s holds no table of compare_strategies.sh (a '| model | "
                 "straggler | strategy | images/sec ...' header and its rows)" % path)
    return list(rows.values())


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_strategies: matplotlib is missing (apt-get install -y python3-matplotlib)")
    # Text as text (not paths) and no date or random ids: a small file that diffs cleanly.
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "hvd", "font.size": 9})
    return plt


def annotation(row):
    if not row["ips"]:
        return "failed"
    text = "link %s" % ("%.4g MB" % row["link"] if row["link"] is not None else "-")
    if row["server"] is not None:
        text += "\nserver %.4g MB" % row["server"]
    return text


def draw_model(ax, model, rows):
    """One panel: a group of bars per strategy, one bar per straggler setting."""
    known = [s for s, _ in STRATEGIES]
    strategies = known + sorted({r["strategy"] for r in rows} - set(known))
    strategies = [s for s in strategies if any(r["strategy"] == s for r in rows)]
    settings = []
    for r in rows:
        if r["straggler"] not in settings:
            settings.append(r["straggler"])
    width = 0.8 / len(settings)
    colours = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
    top = max((r["ips"] or 0) for r in rows) or 1.0
    for j, setting in enumerate(settings):
        label = "no straggler" if setting == "none" else "2x straggler: " + setting
        for i, s in enumerate(strategies):
            row = next((r for r in rows if r["strategy"] == s and r["straggler"] == setting), None)
            if row is None:
                continue
            x = i + (j - (len(settings) - 1) / 2) * width
            bar = ax.bar(x, row["ips"] or 0, width * 0.95, color=colours[j % len(colours)],
                         label=label)
            label = None   # one legend entry per setting
            bar[0].set_gid("bar-%s-%s-%s" % (model, s, "none" if setting == "none" else "straggler"))
            ax.text(x, (row["ips"] or 0) + top * 0.02, annotation(row), ha="center",
                    va="bottom", rotation=90, fontsize=7)
    names = dict(STRATEGIES)
    ax.set_xticks(range(len(strategies)))
    ax.set_xticklabels(["%s\n(%s)" % (s, names[s]) if s in names else s for s in strategies])
    ax.set_ylim(0, top * 1.8)   # room for the labels and the legend
    ax.set_ylabel("images/sec")
    ax.set_title(model)
    ax.legend(loc="upper center", ncol=2, fontsize=8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("table", help="compare_strategies.sh's table (--out FILE) or its output")
    ap.add_argument("--out", default="strategies.svg", help="the picture (SVG)")
    ap.add_argument("--title", default="Ring against parameter servers (cnn_bench, "
                    "scripts/compare_strategies.sh)")
    args = ap.parse_args()
    rows = parse_table(args.table)
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    plt = pyplot()
    fig, axes = plt.subplots(len(models), 1, figsize=(8, 3.6 * len(models)), squeeze=False)
    for ax, model in zip(axes[:, 0], models):
        draw_model(ax, model, [r for r in rows if r["model"] == model])
    fig.suptitle(textwrap.fill(args.title, 100))
    fig.text(0.01, 0.005, "Above each bar: MB per step through host 1's link (sent + received) "
             "and, for parameter servers, through the busiest server's link.", fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    try:
        fig.savefig(args.out, metadata={"Date": None})
    except OSError as e:
        sys.exit("plot_strategies: cannot write %s: %s" % (args.out, e))
    print("plot_strategies: wrote %s (%d models, %d runs)" % (args.out, len(models), len(rows)))


if __name__ == "__main__":
    main()
