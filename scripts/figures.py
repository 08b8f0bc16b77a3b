#!/usr/bin/python3
"""scripts/figures.py: the pictures of docs/performance.md and the tables beside them,
each pair made here from the same parsed numbers, so a picture and its table cannot
disagree. The scripts/figure_*.sh run the benchmark and then this; on its own it
re-makes a pair from a saved run.

  figures.py allreduce LOG     LOG: scripts/compare_allreduce.sh's output
                               -> docs/img/allreduce_busbw.png and .md
  figures.py scaling DIR       DIR: scripts/compare_scaling.sh's scaling_raw.tsv
                               -> docs/img/scaling.png and .md
  figures.py training LOGDIR   LOGDIR: train --logdir's log.csv (and train.out, its stdout)
                               -> docs/img/training_curves.png and .md

Options: --img DIR (docs/img), --docs FILE (docs/performance.md: the table and the
picture's link go between its "<!-- figure:NAME begin -->" and "<!-- figure:NAME end -->"
lines; --docs '' leaves the docs alone), --command (the command to show in the table's
header), --load-start (the load average when the run began), --note (what the machine was
doing, from the MACHINE_NOTE environment variable; default "machine shared/loaded").
Prints where it wrote each file. Needs matplotlib (Debian: python3-matplotlib)."""
import argparse
import csv
import datetime
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def provenance(args, data_path):
    """The table's first line: when (the data file's time: when the run ended), where,
    which commit, how loaded. Made right after the run (the figure_*.sh pass
    --load-start) it is also kept in DATA.provenance, which a later re-plot of the same
    data (plot_scaling.sh) reuses rather than naming the commit and load of its own time."""
    kept = data_path + ".provenance"
    if not args.load_start and os.path.exists(kept):
        with open(kept) as f:
            return f.read().strip()
    def git(*a):
        try:
            return subprocess.run(["git", "-C", ROOT] + list(a), capture_output=True,
                                  text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " with uncommitted changes"
    with open("/proc/loadavg") as f:
        load_end = " ".join(f.read().split()[:3])
    when = datetime.datetime.fromtimestamp(os.path.getmtime(data_path), datetime.timezone.utc)
    when = when.strftime("%Y-%m-%d %H:%M UTC")
    load = "load average %s at the start, %s at the end" % (args.load_start, load_end) \
        if args.load_start else "load average %s when plotted" % load_end
    line = "Measured %s on %s (%d cores), commit %s; %s (%s)." % (
        when, os.uname().nodename, os.cpu_count(), commit, args.note, load)
    if args.command:
        line += " Command: `%s`." % args.command
    if args.load_start:
        with open(kept, "w") as f:
            f.write(line + "\n")
    return line


def md_table(header, rows, align):
    """A markdown table; align: 'l' or 'r' per column."""
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def write_pair(args, name, alt, fig, table_md):
    """Writes NAME.png and NAME.md (the table, with the picture's link) and splices the
    same text into the docs between the figure's markers."""
    os.makedirs(args.img, exist_ok=True)
    png = os.path.join(args.img, name + ".png")
    fig.savefig(png, dpi=100, bbox_inches="tight")
    docs_dir = os.path.dirname(os.path.abspath(args.docs)) if args.docs else args.img
    link = os.path.relpath(os.path.abspath(png), docs_dir)
    text = "%s\n\n![%s](%s)\n" % (table_md, alt, link)
    md = os.path.join(args.img, name + ".md")
    with open(md, "w") as f:
        f.write(text)
    print("figures: wrote %s and %s" % (png, md))
    if not args.docs:
        return
    begin, end = "<!-- figure:%s begin -->" % name, "<!-- figure:%s end -->" % name
    with open(args.docs) as f:
        doc = f.read()
    i, j = doc.find(begin), doc.find(end)
    if i < 0 or j < i:
        sys.exit("figures: %s has no '%s' ... '%s' lines; add them where the table goes, "
                 "or pass --docs ''" % (args.docs, begin, end))
    doc = doc[:i + len(begin)] + "\n" + text + doc[j:]
    with open(args.docs, "w") as f:
        f.write(doc)
    print("figures: updated %s between %s and %s" % (args.docs, begin, end))


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        sys.exit("figures: matplotlib is missing (apt-get install -y python3-matplotlib)")


def fmt(v, digits=2):
    return "-" if v is None else "%.*f" % (digits, v)


def ratio(a, b, digits=2):
    return "-" if a is None or b is None or b == 0 else "%.*f" % (digits, a / b)


# ---- allreduce busbw vs size (scripts/compare_allreduce.sh) ----
ALLREDUCE_NAMES = {"hvd": "ours: hvd runtime (hvd_allreduce)", "ring": "ours: bare ring",
                   "mpi": "MPI_Allreduce (allreduce_bench)", "mpi_peer": "MPI_Allreduce (peer)",
                   "gloo": "Gloo (PyTorch)", "sendrecv": "MPI_Sendrecv one way (reference)"}


def parse_compare_allreduce(path):
    """{name: {size: busbw}} and the comment line, from compare_allreduce.sh's table."""
    series, cols, comment = {}, None, ""
    for line in open(path):
        tok = line.split()
        if line.startswith("# allreduce"):
            comment = line[2:].strip()
        if not tok or tok[0].startswith("#"):
            continue
        if tok[0] == "size":
            cols = tok[1:]
            continue
        if cols and tok[0].isdigit() and len(tok) == len(cols) + 1:
            for name, v in zip(cols, tok[1:]):
                if "/" in name or v == "-":
                    continue
                series.setdefault(name, {})[int(tok[0])] = float(v)
    if not series:
        sys.exit("figures: no table of scripts/compare_allreduce.sh in %s" % path)
    return series, comment


def size_label(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return "%d %s" % (b // k, unit)
    return "%d B" % b


def figure_allreduce(args):
    series, comment = parse_compare_allreduce(args.input)
    names = [n for n in ("hvd", "ring", "mpi", "mpi_peer", "gloo", "sendrecv") if n in series]
    sizes = sorted({s for n in names for s in series[n]})
    get = lambda n, s: series.get(n, {}).get(s)
    header = ["size"] + names + ["hvd / mpi_peer", "hvd / gloo", "hvd / sendrecv"]
    rows = [[size_label(s)] + [fmt(get(n, s)) for n in names] +
            [ratio(get("hvd", s), get("mpi_peer", s)), ratio(get("hvd", s), get("gloo", s), 1),
             ratio(get("hvd", s), get("sendrecv", s))] for s in sizes]
    table = "%s busbw in GB/s: %s.\n\n%s" % (
        provenance(args, args.input), comment, md_table(header, rows, "l" + "r" * (len(header) - 1)))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n in names:
        xs = [s for s in sizes if get(n, s) is not None]
        ax.plot([s / 1048576 for s in xs], [get(n, s) for s in xs], marker="o",
                linestyle="--" if n == "sendrecv" else "-", label=ALLREDUCE_NAMES.get(n, n))
    ax.set_xscale("log", base=2)
    ax.set_xticks([s / 1048576 for s in sizes])
    ax.set_xticklabels([size_label(s) for s in sizes], rotation=45, fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(comment, fontsize=8)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    write_pair(args, "allreduce_busbw", "allreduce busbw vs size", fig, table)


# ---- training throughput vs ranks (scripts/compare_scaling.sh) ----
SCALING_CONFIGS = ["ours1", "ours2", "none2", "nooverlap2", "fp16_2", "torch1", "torch2"]


def figure_scaling(args):
    raw = os.path.join(args.input, "scaling_raw.tsv")
    vals, hid, cost, reps = {}, {}, {}, set()
    with open(raw) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            key = (r["model"], r["config"])
            reps.add(r["rep"])
            if r["images_per_sec"] != "nan":
                ips = float(r["images_per_sec"])
                vals.setdefault(key, []).append(ips)
                if r["blocked_ms"] != "nan":
                    # share of the step blocked on communication: blocked / step time,
                    # the step time from the total (ranks x batch / total images/sec)
                    ranks = 1 if r["config"].endswith("1") else 2
                    step_ms = 1e3 * ranks * args.batch / ips
                    cost.setdefault(key, []).append(100 * float(r["blocked_ms"]) / step_ms)
            if r["hidden_pct"] != "nan":
                hid.setdefault(key, []).append(float(r["hidden_pct"]))
    models = list(dict.fromkeys(m for m, _ in vals))
    if not models:
        sys.exit("figures: no runs in %s" % raw)
    med = lambda d, k: statistics.median(d[k]) if k in d else None
    t1 = md_table(["model", "ours np=1", "ours np=2", "none np=2 (ceiling)", "np=2 no overlap",
                   "np=2 fp16 allreduce", "PyTorch np=1", "PyTorch DDP np=2"],
                  [[m] + [fmt(med(vals, (m, c)), 1) for c in SCALING_CONFIGS] for m in models],
                  "l" + "r" * 7)
    rows = []
    for m in models:
        g = lambda c: med(vals, (m, c))
        eff = lambda c: None if g(c) is None or g("ours1") is None else g(c) / 2 / g("ours1")
        blocked = [med(cost, (m, c)) for c in ("ours2", "nooverlap2", "fp16_2")]
        rows.append([m, ratio(g("ours2"), g("torch2")), ratio(eff("ours2"), eff("none2")),
                     ratio(g("ours2"), g("nooverlap2")), ratio(g("fp16_2"), g("ours2")),
                     fmt(med(hid, (m, "ours2")), 0) + "%",
                     ", ".join(fmt(b, 1) + "%" for b in blocked)])
    t2 = md_table(["model", "ours / DDP at np=2", "scaling efficiency ours / none",
                   "overlap on / off", "fp16 allreduce on / off",
                   "communication hidden behind backward",
                   "step blocked on communication (ours, no overlap, fp16)"], rows, "l" + "r" * 6)
    table = "%s Total images/sec, batch %d per rank, one thread per rank, median of %d " \
            "alternating rounds.\n\n%s\n\n%s" % (provenance(args, raw), args.batch, len(reps), t1, t2)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, m in zip(axes[0], models):
        # at 1 rank the ceiling is ours at 1 rank
        for label, cfgs, style in (("no communication (ceiling)", ("ours1", "none2"), ":"),
                                   ("ours (hvd, horovod)", ("ours1", "ours2"), "-"),
                                   ("PyTorch DDP (Gloo)", ("torch1", "torch2"), "--")):
            pts = [(r, med(vals, (m, c))) for r, c in zip((1, 2), cfgs)]
            pts = [(r, v) for r, v in pts if v is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", linestyle=style,
                    label=label)
        ax.set_title(m)
        ax.set_xlabel("ranks")
        ax.set_xticks([1, 2])
        ax.set_ylabel("total images/sec")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    write_pair(args, "scaling", "images/sec vs ranks", fig, table)


# ---- training curves (train --logdir's log.csv) ----
def figure_training(args):
    csv_path = os.path.join(args.input, "log.csv")
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit("figures: %s has no epochs" % csv_path)
    ep = [int(r["epoch"]) for r in rows]
    col = lambda k: [float(r[k]) for r in rows]
    test = ""
    out = os.path.join(args.input, "train.out")
    if os.path.exists(out):
        text = open(out).read()
        tl = re.search(r"^test loss: (\S+)", text, re.M)
        ta = re.search(r"^test accuracy: (\S+)", text, re.M)
        head = re.search(r"^train: (\S+ on \S+, \d+ rank\(s\).*)$", text, re.M)
        if head:
            test += " Run: %s." % head.group(1)
        if tl and ta:
            test += " After the last epoch: test loss %s, test accuracy %s." % (tl.group(1), ta.group(1))
    table = "%s%s\n\n%s" % (provenance(args, csv_path), test, md_table(
        ["epoch", "loss", "accuracy", "val_loss", "val_accuracy", "learning rate",
         "images/sec", "seconds"],
        [[r["epoch"], "%.4f" % float(r["loss"]), "%.4f" % float(r["accuracy"]),
          "%.4f" % float(r["val_loss"]), "%.4f" % float(r["val_accuracy"]),
          "%.3g" % float(r["learning_rate"]), "%.0f" % float(r["images_per_sec"]),
          "%.1f" % float(r["seconds"])] for r in rows], "r" * 8))
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, name in ((a1, "loss", "loss"), (a2, "accuracy", "accuracy")):
        ax.plot(ep, col(key), marker="o", label="train")
        ax.plot(ep, col("val_" + key), marker="s", linestyle="--", label="validation")
        ax.set_xlabel("epoch")
        ax.set_ylabel(name)
        ax.set_xticks(ep)
        ax.grid(True, alpha=0.3)
        ax.legend()
    a1.set_title("loss per epoch")
    a2.set_title("accuracy per epoch")
    write_pair(args, "training_curves", "loss and accuracy vs epoch, train and validation",
               fig, table)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("figure", choices=["allreduce", "scaling", "training"])
    p.add_argument("input")
    p.add_argument("--img", default=os.path.join(ROOT, "docs", "img"))
    p.add_argument("--docs", default=os.path.join(ROOT, "docs", "performance.md"))
    p.add_argument("--command", default="")
    p.add_argument("--load-start", default="")
    p.add_argument("--note", default=os.environ.get("MACHINE_NOTE", "machine shared/loaded"))
    p.add_argument("--batch", type=int, default=int(os.environ.get("BATCH", "64")),
                   help="scaling: batch per rank of the runs (compare_scaling's BATCH)")
    args = p.parse_args()
    {"allreduce": figure_allreduce, "scaling": figure_scaling,
     "training": figure_training}[args.figure](args)


if __name__ == "__main__":
    main()
