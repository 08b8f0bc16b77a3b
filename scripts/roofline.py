#!/usr/bin/python3
"""scripts/roofline.py: the roofline report of nn on the CPU, one thread, layer by layer
beside PyTorch (run by scripts/roofline.sh, which builds the programs first).

  roofline.py report BUILD_DIR   measure and write the report (stdout, docs/roofline.md,
                                 docs/roofline.png)
  roofline.py counts MODEL BATCH print the layer list of MODEL with FLOPs, bytes and
                                 parameters, no timing (tests/test_roofline_counts.sh)

What the report holds:
- the ceilings, measured here by BUILD_DIR/fma_peak: single-thread FMA GFLOP/s (AVX-512 and
  AVX2; the best is "peak") and STREAM copy/triad GB/s (the best is "bandwidth");
- for resnet20 (batch 64) and resnet50 (batch 16): every layer of the network, those of
  identical shape grouped (count x), with FLOPs and a lower bound of bytes moved forward
  and backward, our time (BUILD_DIR/nn_layer_bench --shapes) and PyTorch's
  (bench/torch_layer_bench.py --shapes) on the same shapes, the speed ratio and the share
  of the peak;
- a summary (step time as the sum of the layers, FLOP-weighted % of peak of the
  convolutions, the layers that lose the most time to PyTorch), and, when the output file
  already held a report, the change per layer since then (the "before/after").

Counting conventions (per layer; E = elements of the input, 4-byte floats):
- conv and fc: forward 2*N*Cout*Hout*Wout*Cin*K*K; backward twice that (dx and dW), once
  for the network's first convolution (no dx). Bytes: x, w and y once forward; x, w, dy,
  dW (and dx) once backward.
- batch norm: 5 FLOPs per element forward (sum, sum of squares, scale and shift), 7
  backward (two sums, dx = a*dy + b*x + c); bytes 2E forward (x, y), 3E backward (x, dy, dx).
- relu: 1 per element each way; bytes 2E forward, 3E backward (y, dy, dx).
- add (residual): 1 per element forward, 3E bytes; backward is no kernel (not timed).
- max pool: K*K comparisons per output forward, 1 per output backward; x and y bytes.
- global average pool: 1 per element each way; x and y bytes.

Method: the machine is shared, so ours and PyTorch's run alternately, layer by layer (A B
B A ...), ROUNDS rounds per model; each run gives the median of REPS reps of its layer,
and the report shows the median over rounds; % of peak comes from the fastest rep (as the
peak). The peak and the bandwidth are measured before and after the layers, and the
higher of each is kept (on a virtual machine the turbo frequency moves with the
neighbours' load). Environment:
ROOFLINE_ROUNDS (5), ROOFLINE_REPS (5 for resnet20, 2 for resnet50), ROOFLINE_QUICK=1
(1 round of 1 rep, a short peak run: checks that the report runs, its figures mean little),
ROOFLINE_MODELS ("resnet20 resnet50"), ROOFLINE_OUT (docs/roofline.md), ROOFLINE_PLOT
(docs/roofline.png; empty: no plot), ROOFLINE_BASELINE (the report to compare with;
default: ROOFLINE_OUT as it was before the run), ROOFLINE_COMMAND (the command shown in
the header), ROOFLINE_TREE (what was built, for the header; default: the working tree's
commit), PYTHON (/usr/bin/python3)."""
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = {"resnet20": 64, "resnet50": 16}
T0 = time.monotonic()


# ---- the networks, as nn/models.c builds them (PyTorch's registration order) ----

class Net:
    """Collects the layers of one network: (name, kind, n, cin, h, w, cout, k, s, p, nodx)
    with kind one of conv, bn, relu, add, maxpool, gap, fc."""

    def __init__(self, n):
        self.n, self.layers = n, []

    def add(self, name, kind, c, h, w, cout=0, k=0, s=0, p=0, nodx=False):
        self.layers.append((name, kind, self.n, c, h, w, cout, k, s, p, nodx))

    def conv(self, name, x, cout, k, s, p, nodx=False):
        c, h, w = x
        self.add(name, "conv", c, h, w, cout, k, s, p, nodx)
        return (cout, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)

    def eltwise(self, name, kind, x):
        self.add(name, kind, *x)
        return x


def resnet20(n):
    """scripts/peers/torch_models.py ResNet20: BasicBlocks 16-32-64, 1x1 conv downsample."""
    net = Net(n)
    x = net.conv("conv1", (3, 32, 32), 16, 3, 1, 1, nodx=True)
    net.eltwise("bn1", "bn", x)
    net.eltwise("relu", "relu", x)
    cin = 16
    for st, (width, stride) in enumerate(((16, 1), (32, 2), (64, 2))):
        for b in range(3):
            p = f"layer{st + 1}.{b}"
            s = stride if b == 0 else 1
            y = net.conv(p + ".conv1", x, width, 3, s, 1)
            net.eltwise(p + ".bn1", "bn", y)
            net.eltwise(p + ".relu1", "relu", y)
            y = net.conv(p + ".conv2", y, width, 3, 1, 1)
            net.eltwise(p + ".bn2", "bn", y)
            if s != 1 or x[0] != width:
                sc = net.conv(p + ".downsample.0", x, width, 1, s, 0)
                net.eltwise(p + ".downsample.1", "bn", sc)
            net.eltwise(p + ".add", "add", y)
            x = net.eltwise(p + ".relu2", "relu", y)
        cin = width
    net.add("avgpool", "gap", *x)
    net.add("fc", "fc", x[0], 1, 1, 10)
    assert cin == 64
    return net.layers


def resnet50(n):
    """torchvision resnet50 (v1.5: the stride on the 3x3 conv), 224x224 input."""
    net = Net(n)
    x = net.conv("conv1", (3, 224, 224), 64, 7, 2, 3, nodx=True)
    net.eltwise("bn1", "bn", x)
    net.eltwise("relu", "relu", x)
    net.add("maxpool", "maxpool", *x, 0, 3, 2, 1)
    x = (x[0], (x[1] + 2 - 3) // 2 + 1, (x[2] + 2 - 3) // 2 + 1)
    for st, blocks in enumerate((3, 4, 6, 3)):
        planes = 64 << st
        for b in range(blocks):
            p = f"layer{st + 1}.{b}"
            s = 2 if b == 0 and st > 0 else 1
            y = net.conv(p + ".conv1", x, planes, 1, 1, 0)
            net.eltwise(p + ".bn1", "bn", y)
            net.eltwise(p + ".relu1", "relu", y)
            y = net.conv(p + ".conv2", y, planes, 3, s, 1)
            net.eltwise(p + ".bn2", "bn", y)
            net.eltwise(p + ".relu2", "relu", y)
            y = net.conv(p + ".conv3", y, planes * 4, 1, 1, 0)
            net.eltwise(p + ".bn3", "bn", y)
            if s != 1 or x[0] != planes * 4:
                sc = net.conv(p + ".downsample.0", x, planes * 4, 1, s, 0)
                net.eltwise(p + ".downsample.1", "bn", sc)
            net.eltwise(p + ".add", "add", y)
            x = net.eltwise(p + ".relu3", "relu", y)
    net.add("avgpool", "gap", *x)
    net.add("fc", "fc", x[0], 1, 1, 1000)
    return net.layers


MODELS = {"resnet20": resnet20, "resnet50": resnet50}


# ---- FLOPs, bytes and parameters of one layer (conventions in the docstring) ----

def out_hw(layer):
    _, kind, _, _, h, w, _, k, s, p, _ = layer
    if kind in ("conv", "maxpool"):
        return (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    return (1, 1) if kind in ("gap", "fc") else (h, w)


def counts(layer):
    """(forward FLOPs, backward FLOPs, forward bytes, backward bytes, parameters)."""
    _, kind, n, c, h, w, cout, k, s, p, nodx = layer
    e = n * c * h * w
    ho, wo = out_hw(layer)
    if kind in ("conv", "fc"):
        kk = k * k if kind == "conv" else 1
        y = n * cout * ho * wo
        wt = cout * c * kk
        f = 2 * y * c * kk
        return (f, f if nodx else 2 * f, 4 * (e + wt + y),
                4 * (e + wt + y + wt + (0 if nodx else e)),
                wt + (cout if kind == "fc" else 0))
    if kind == "bn":
        return 5 * e, 7 * e, 8 * e, 12 * e, 2 * c
    if kind == "relu":
        return e, e, 8 * e, 12 * e, 0
    if kind == "add":
        return e, 0, 12 * e, 0, 0
    if kind == "maxpool":
        y = n * c * ho * wo
        return y * k * k, y, 4 * (e + y), 4 * (y + e), 0
    if kind == "gap":
        return e, e, 4 * (e + n * c), 4 * (n * c + e), 0
    raise ValueError(f"unknown layer kind {kind}")


def label(layer):
    """The shape in words, which also identifies a group across reports."""
    _, kind, _, c, h, w, cout, k, s, p, nodx = layer
    if kind == "conv":
        return f"conv {c}->{cout} {k}x{k} s{s} {h}x{w}" + (" (no dx)" if nodx else "")
    if kind == "fc":
        return f"fc {c}->{cout}"
    if kind == "maxpool":
        return f"maxpool {k}x{k} s{s} {c}x{h}x{w}"
    return f"{kind} {c}x{h}x{w}"


def groups(layers):
    """Layers of identical kind and shape as one group: [label, layer, names] in order of
    first appearance."""
    out, at = [], {}
    for layer in layers:
        key = label(layer)
        if key not in at:
            at[key] = len(out)
            out.append([key, layer, []])
        out[at[key]][2].append(layer[0])
    return out


# ---- measuring ----

def run(cmd, env=None):
    """stdout of cmd; exits with its stderr when it fails."""
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"roofline: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stderr}")
    return r.stdout


BLAS_SEEN = []  # "# BLAS: ..." of our layer bench (which kernels ran our GEMMs)


def parse_times(text):
    """{id: (median fwd ms, median bwd ms, fastest fwd ms, fastest bwd ms)} from a layer
    bench's --shapes output."""
    out = {}
    for line in text.splitlines():
        if line.startswith("# BLAS: ") and not BLAS_SEEN:
            BLAS_SEEN.append(line[len("# BLAS: "):].strip())
        f = line.split()
        if len(f) == 5 and not line.startswith("#") and f[0] != "layer":
            out[f[0]] = tuple(float(v) for v in f[1:])
    return out


def measure(build, model, grp, rounds, reps, env, python, log):
    """Per group id, one list per round each: our median forward ms, backward, fastest
    forward, fastest backward, then the same four of PyTorch's.

    The alternation is layer by layer (ours, PyTorch's, PyTorch's, ours, ...): the load
    of a shared machine changes within seconds, and a whole resnet50 pass takes half a
    minute. Ours runs as one nn_layer_bench per layer (it starts in milliseconds);
    PyTorch's as one torch_layer_bench.py --stdin for the model (its import takes
    seconds), fed one layer at a time."""
    with tempfile.TemporaryDirectory(prefix="roofline.") as tmp:
        shapes = os.path.join(tmp, model + ".shapes")
        lines = {}
        for i, (_, L, _) in enumerate(grp):
            gid = f"{model}.{i:02d}"  # fixed width: --filter on it matches that layer only
            lines[gid] = (f"{gid} " + " ".join(str(v) for v in L[1:10]) +
                          (" nodx" if L[10] else ""))
        with open(shapes, "w") as f:
            f.write(f"# {model}, batch {BATCH[model]}: "
                    "ID KIND N C_IN H W C_OUT K STRIDE PAD [nodx]\n")
            f.write("\n".join(lines.values()) + "\n")
        # One untimed round per layer: the first touch of fresh buffers and the first
        # call's setup stay out; a second costs resnet50 about 10 s a pass.
        common = ["--threads", "1", "--reps", str(reps), "--warmup", "1"]
        ours_cmd = [os.path.join(build, "nn_layer_bench")] + common + ["--shapes", shapes]
        torch_cmd = [python, "bench/torch_layer_bench.py"] + common + ["--stdin"]
        peer = subprocess.Popen(torch_cmd, cwd=ROOT, env=env, text=True, bufsize=1,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)

        def torch_layer(gid):
            peer.stdin.write(lines[gid] + "\n")
            peer.stdin.flush()
            while True:
                out = peer.stdout.readline()
                if not out:
                    sys.exit(f"roofline: {' '.join(torch_cmd)} ended (exit {peer.wait()}) "
                             f"before timing {gid}")
                t = parse_times(out)
                if gid in t:
                    return t[gid]

        def ours_layer(gid):
            t = parse_times(run(ours_cmd + ["--filter", gid], env))
            if gid not in t:
                sys.exit(f"roofline: {' '.join(ours_cmd)} --filter {gid} printed no time")
            return t[gid]

        res = {gid: tuple([] for _ in range(8)) for gid in lines}
        try:
            for r in range(rounds):
                for i, gid in enumerate(lines):
                    # Who goes first alternates too, so neither always runs on the
                    # other's leftovers in the cache.
                    sides = ((0, ours_layer), (4, torch_layer))
                    for side, timer in (sides if (r + i) % 2 == 0 else sides[::-1]):
                        t = timer(gid)
                        for j in range(4):
                            res[gid][side + j].append(t[j])
                log(f"roofline: {model} round {r + 1}/{rounds} done, "
                    f"{time.monotonic() - T0:.0f} s since the start")
        finally:
            peer.stdin.close()
            rc = peer.wait()
        if rc != 0:
            sys.exit(f"roofline: {' '.join(torch_cmd)} failed (exit {rc})")
    return res


def peak_and_bandwidth(build, quick):
    cmd = [os.path.join(build, "fma_peak")]
    if quick:
        cmd += ["--reps", "100", "--stream-reps", "2"]
    out = run(cmd)
    vals = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 3 and not line.startswith("#"):
            vals[f[0]] = float(f[1])
    for key in ("peak", "bandwidth", "stream_copy", "stream_triad"):
        if key not in vals:
            sys.exit(f"roofline: {' '.join(cmd)} printed no '{key}' line:\n{out}")
    return vals


def model_layer_names(build, model, env):
    """The layer names of our model, from nn_train_bench --profile (batch 1, one step):
    a check that the list above still matches nn/models.c."""
    out = run([os.path.join(build, "nn_train_bench"), "--model", model, "--batch", "1",
               "--steps", "1", "--warmup", "0", "--threads", "1", "--profile"], env)
    names, inside = set(), False
    for line in out.splitlines():
        f = line.split()
        if f[:1] == ["layer"]:
            inside = True
        elif inside and f and f[0] == "all":
            break
        elif inside and len(f) >= 3:
            names.add(f[0])
    return names


# ---- the report ----

def med(v):
    return statistics.median(v) if v else float("nan")


def build_rows(model, grp, res):
    rows = []
    for i, (lab, L, names) in enumerate(grp):
        ff, fb, bf, bb, params = counts(L)
        v = res[f"{model}.{i:02d}"]
        # Medians (over rounds) of the median reps: the times and the speed ratios. The
        # fastest rep of all rounds: the % of peak, as the peak is fma_peak's best run.
        of, ob, tf, tb = med(v[0]), med(v[1]), med(v[4]), med(v[5])
        mo, mt = min(v[2]) + min(v[3]), min(v[6]) + min(v[7])
        rows.append(dict(label=lab, kind=L[1], count=len(names), names=names, ff=ff, fb=fb,
                         bf=bf, bb=bb, of=of, ob=ob, tf=tf, tb=tb, mo=mo, mt=mt))
    return rows


def pct_peak(flops, ms, peak):
    return 100.0 * flops / (ms * 1e-3) / 1e9 / peak if ms > 0 else float("nan")


def fmt_names(names):
    return names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1})"


def layer_table(rows, peak, bw):
    """The full markdown table of one model."""
    out = ["| # | layer | first of | count | GFLOP fwd | GFLOP bwd | MB fwd | MB bwd | "
           "FLOP/B | ours fwd ms | ours bwd ms | torch fwd ms | torch bwd ms | "
           "speed ours/torch | ours % peak | torch % peak | ours % roof |",
           "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, r in enumerate(rows):
        fl, by = r["ff"] + r["fb"], r["bf"] + r["bb"]
        ours, torch = r["of"] + r["ob"], r["tf"] + r["tb"]
        ai = fl / by
        roof = min(peak, ai * bw)  # GFLOP/s attainable at this intensity
        ach = fl / (r["mo"] * 1e-3) / 1e9 if r["mo"] > 0 else float("nan")
        out.append(
            f"| {i + 1} | {r['label']} | {fmt_names(r['names'])} | {r['count']} | "
            f"{r['ff'] / 1e9:.3f} | {r['fb'] / 1e9:.3f} | {r['bf'] / 1e6:.1f} | "
            f"{r['bb'] / 1e6:.1f} | {ai:.1f} | {r['of']:.3f} | {r['ob']:.3f} | "
            f"{r['tf']:.3f} | {r['tb']:.3f} | {torch / ours:.2f} | "
            f"{pct_peak(fl, r['mo'], peak):.1f} | {pct_peak(fl, r['mt'], peak):.1f} | "
            f"{100 * ach / roof:.0f} |")
    return out


def totals(rows, peak):
    """Step sums (count-weighted ms) and FLOP-weighted % of peak of the convolutions."""
    t = dict(of=0.0, ob=0.0, tf=0.0, tb=0.0, cflop=0.0, cours=0.0, cours_min=0.0,
             ctorch_min=0.0, flop=0.0)
    for r in rows:
        c = r["count"]
        for k in ("of", "ob", "tf", "tb"):
            t[k] += c * r[k]
        t["flop"] += c * (r["ff"] + r["fb"])
        if r["kind"] == "conv":
            t["cflop"] += c * (r["ff"] + r["fb"])
            t["cours"] += c * (r["of"] + r["ob"])
            t["cours_min"] += c * r["mo"]
            t["ctorch_min"] += c * r["mt"]
    # FLOP-weighted mean of per-layer % of peak = all conv FLOPs over all conv time.
    t["conv_ours_pct"] = pct_peak(t["cflop"], t["cours_min"], peak)
    t["conv_torch_pct"] = pct_peak(t["cflop"], t["ctorch_min"], peak)
    return t


def worst(rows, k=5):
    """The groups that lose the most step time to PyTorch, largest loss first."""
    lost = [(r["count"] * ((r["of"] + r["ob"]) - (r["tf"] + r["tb"])), r) for r in rows]
    return [x for x in sorted(lost, key=lambda x: -x[0]) if x[0] > 0][:k]


def read_baseline(path):
    """The data block of an earlier report, or None."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"<!-- roofline-data\n(.*?)\n-->", text, re.S)
    if not m:
        return None
    try:
        return json.loads(m.group(1))
    except ValueError:
        return None


def before_after(base, data):
    """Per layer: our ms before and now, the change, and the speed against PyTorch then
    and now (the ratio is the steadier figure on a shared machine)."""
    out = [f"## Before/after: change since the report of {base.get('date', '?')}", "",
           f"Previous command: `{base.get('command', '?')}`; peak then "
           f"{base.get('peak', float('nan')):.1f} GFLOP/s, now {data['peak']:.1f}. Time is "
           "count x (forward + backward); a speed below 1.00 means PyTorch is faster. On a "
           "shared machine the speed against PyTorch (measured alternately) is the steadier "
           "figure.", "",
           "| model | ours step ms before | now | PyTorch ms before | now | "
           "speed ours/torch before | now |", "|---|---:|---:|---:|---:|---:|---:|"]
    for model, rows in data["models"].items():
        old = base.get("models", {}).get(model)
        if not old:
            continue
        sums = [sum(r["count"] * r[k] for r in d.values())
                for d in (old, rows) for k in ("ours", "torch")]
        out.append(f"| {model} | {sums[0]:.1f} | {sums[2]:.1f} | {sums[1]:.1f} | "
                   f"{sums[3]:.1f} | {sums[1] / sums[0]:.2f} | {sums[3] / sums[2]:.2f} |")
    out += ["", "| model | layer | count | ours ms before | ours ms now | change | "
            "speed ours/torch before | now |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for model, rows in data["models"].items():
        old = base.get("models", {}).get(model, {})
        for lab, r in rows.items():
            o = old.get(lab)
            if not o:
                out.append(f"| {model} | {lab} | {r['count']} | - | "
                           f"{r['count'] * r['ours']:.2f} | new | - | "
                           f"{r['torch'] / r['ours']:.2f} |")
                continue
            b, a = o["count"] * o["ours"], r["count"] * r["ours"]
            out.append(f"| {model} | {lab} | {r['count']} | {b:.2f} | {a:.2f} | "
                       f"{100 * (a - b) / b:+.0f}% | {o['torch'] / o['ours']:.2f} | "
                       f"{r['torch'] / r['ours']:.2f} |")
    return out


def plot(path, results, peak, avx2, bw):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("roofline: matplotlib is missing (Debian: python3-matplotlib); no plot",
              file=sys.stderr)
        return False
    fig, axes = plt.subplots(1, len(results), figsize=(6.5 * len(results), 5), squeeze=False)
    for ax, (model, rows) in zip(axes[0], results.items()):
        ais = [(r["ff"] + r["fb"]) / (r["bf"] + r["bb"]) for r in rows if r["kind"] == "conv"]
        lo, hi = min(ais + [1.0]) / 2, max(ais + [peak / bw]) * 2
        xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
        ax.plot(xs, [min(peak, x * bw) for x in xs], "k-",
                label=f"roofline: {peak:.0f} GFLOP/s FMA, {bw:.1f} GB/s")
        if avx2:
            ax.axhline(avx2, color="gray", ls="--", lw=0.8, label=f"AVX2 FMA {avx2:.0f} GFLOP/s")
        first = True
        for i, r in enumerate(rows):
            if r["kind"] != "conv":
                continue
            fl = r["ff"] + r["fb"]
            ai = fl / (r["bf"] + r["bb"])
            go = fl / (r["mo"] * 1e-3) / 1e9  # fastest reps, as the peak
            gt = fl / (r["mt"] * 1e-3) / 1e9
            ax.plot([ai, ai], [go, gt], color="lightgray", lw=0.8, zorder=1)
            ax.scatter([ai], [go], color="tab:blue", marker="o", zorder=2,
                       label="nn (ours)" if first else None)
            ax.scatter([ai], [gt], color="tab:orange", marker="x", zorder=2,
                       label="PyTorch" if first else None)
            ax.annotate(str(i + 1), (ai, go), textcoords="offset points", xytext=(4, 3),
                        fontsize=7, color="tab:blue")  # the row # of the table
            first = False
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity, FLOP/byte (forward + backward, lower-bound bytes)")
        ax.set_ylabel("GFLOP/s, 1 thread")
        ax.set_title(f"{model}, batch {BATCH[model]}: convolutions (table row #), fwd + bwd")
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def report(build):
    quick = os.environ.get("ROOFLINE_QUICK", "0") == "1"
    models = os.environ.get("ROOFLINE_MODELS", "resnet20 resnet50").split()
    out_path = os.environ.get("ROOFLINE_OUT", os.path.join(ROOT, "docs/roofline.md"))
    plot_path = os.environ.get("ROOFLINE_PLOT", os.path.join(ROOT, "docs/roofline.png"))
    base_path = os.environ.get("ROOFLINE_BASELINE", out_path)
    python = os.environ.get("PYTHON", "/usr/bin/python3")
    command = os.environ.get("ROOFLINE_COMMAND", "scripts/roofline.py report " + build)
    for m in models:
        if m not in MODELS:
            sys.exit(f"roofline: ROOFLINE_MODELS: unknown model {m}; expected some of "
                     f"{' '.join(MODELS)}")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    log = lambda s: print(s, file=sys.stderr, flush=True)
    base = read_baseline(base_path)
    load0 = os.getloadavg()
    start = datetime.datetime.now(datetime.timezone.utc)

    log("roofline: measuring the peak and the bandwidth (fma_peak)")
    pb_start = peak_and_bandwidth(build, quick)
    results, warnings, rounds_of = {}, [], {}
    for model in models:
        layers = MODELS[model](BATCH[model])
        names = model_layer_names(build, model, env)
        ours = {L[0] for L in layers}
        if names != ours:
            warnings.append(f"{model}: the layer list here differs from nn's model "
                            f"(only here: {sorted(ours - names)[:6]}, only in nn: "
                            f"{sorted(names - ours)[:6]}); update scripts/roofline.py")
        grp = groups(layers)
        # More rounds of fewer reps: the finer the alternation, the better both sides share
        # the same load. A resnet50 round takes about a minute on a loaded 2-core machine.
        r20 = model == "resnet20"
        rounds = int(os.environ.get("ROOFLINE_ROUNDS", "1" if quick else "5"))
        reps = int(os.environ.get("ROOFLINE_REPS", "1" if quick else "5" if r20 else "2"))
        if rounds < 1 or reps < 1:
            sys.exit(f"roofline: ROOFLINE_ROUNDS={rounds}, ROOFLINE_REPS={reps}: expected 1 "
                     "or more each")
        rounds_of[model] = (rounds, reps)
        log(f"roofline: {model} batch {BATCH[model]}: {len(layers)} layers in {len(grp)} "
            f"shapes, {rounds} rounds of {reps} reps, ours and PyTorch alternately")
        res = measure(build, model, grp, rounds, reps, env, python, log)
        results[model] = build_rows(model, grp, res)
    log("roofline: measuring the peak and the bandwidth again (fma_peak)")
    pb_end = peak_and_bandwidth(build, quick)
    pb = {k: max(v, pb_end.get(k, v)) for k, v in pb_start.items()}
    peak, bw, avx2 = pb["peak"], pb["bandwidth"], pb.get("fma_avx2")
    load1 = os.getloadavg()
    end = datetime.datetime.now(datetime.timezone.utc)

    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    import torch  # only for its version in the header
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True).stdout.strip()
    tree = os.environ.get("ROOFLINE_TREE") or (
        f"working tree of commit {git}" if git else "a tree outside git")
    lines = [
        "# Roofline: nn against PyTorch per layer, one CPU thread", "",
        f"Made by `{command}` on {start:%Y-%m-%d %H:%M} UTC ({(end - start).seconds // 60} min), "
        f"{tree}{' (QUICK mode: 1 rep, figures are rough)' if quick else ''}.",
        f"CPU: {cpu}, {os.cpu_count()} logical CPUs; load average (1/5/15 min) "
        f"{load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f} at the start, "
        f"{load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f} at the end. "
        f"PyTorch {torch.__version__}; OPENBLAS_NUM_THREADS=1, torch.set_num_threads(1). "
        f"Our GEMMs: {BLAS_SEEN[0] if BLAS_SEEN else 'BLAS not reported'}.",
        f"Peak, measured by `{build}/fma_peak` (FMA microbenchmark, 1 thread, best run; "
        f"the higher of a run before and one after the layers): "
        f"**{peak:.1f} GFLOP/s** (AVX-512 {pb.get('fma_avx512', float('nan')):.1f}, "
        f"AVX2 {pb.get('fma_avx2', float('nan')):.1f}; before {pb_start['peak']:.1f}, after "
        f"{pb_end['peak']:.1f}). Memory bandwidth (STREAM, 1 thread, arrays 4x the "
        f"last-level cache): **{bw:.1f} GB/s** (copy {pb['stream_copy']:.1f}, "
        f"triad {pb['stream_triad']:.1f}; before {pb_start['bandwidth']:.1f}, after "
        f"{pb_end['bandwidth']:.1f}); ridge point {peak / bw:.1f} FLOP/byte.",
        "Method: for each model, " + ", ".join(
            f"{m} {r} rounds of {n} reps" for m, (r, n) in rounds_of.items()) +
        ", ours and PyTorch's alternately layer by layer on the same shapes (A B B A ...), "
        "each run the median of its reps; shown: the median over rounds. "
        f"Layers of identical shape are timed once and counted `count` times. Bytes are a "
        f"lower bound (inputs, weights, outputs once); FLOP/B = (fwd + bwd FLOPs) / (fwd + bwd "
        f"bytes). Times and speed ours/torch (= torch time / our time; above 1: we are "
        f"faster) are medians; % peak = (fwd + bwd FLOPs) / (fastest fwd + bwd rep of all "
        f"rounds) / peak, since the peak too is a best run (on a loaded machine medians "
        f"would understate it); % roof: the same against min(peak, FLOP/B x bandwidth); "
        f"the plot shows the same fastest reps. % roof above 100 means the layer's data "
        f"stayed in cache (faster than the DRAM bandwidth). Counting conventions: "
        f"`scripts/roofline.py`.", ""]
    for w in warnings:
        lines += [f"**Warning**: {w}", ""]

    summary = ["## Summary", "",
               "| model | batch | ours step ms (fwd+bwd) | PyTorch ms | speed ours/torch | "
               "conv % peak ours (fastest reps) | conv % peak PyTorch | conv share of our time |",
               "|---|---:|---:|---:|---:|---:|---:|---:|"]
    worst_lines = ["", "Layers losing the most time to PyTorch (count x (ours - torch), "
                   "largest first):", ""]
    data = {"date": f"{start:%Y-%m-%d %H:%M} UTC", "command": command, "peak": peak,
            "bandwidth": bw, "models": {}}
    for model, rows in results.items():
        t = totals(rows, peak)
        ours, torch_ms = t["of"] + t["ob"], t["tf"] + t["tb"]
        summary.append(
            f"| {model} | {BATCH[model]} | {ours:.1f} ({t['of']:.1f}+{t['ob']:.1f}) | "
            f"{torch_ms:.1f} ({t['tf']:.1f}+{t['tb']:.1f}) | {torch_ms / ours:.2f} | "
            f"{t['conv_ours_pct']:.1f} | {t['conv_torch_pct']:.1f} | "
            f"{100 * t['cours'] / ours:.0f}% |")
        ws = worst(rows)
        if not ws:
            worst_lines.append(f"- {model}: none, every layer is at least as fast as PyTorch's")
        for lost, r in ws:
            worst_lines.append(
                f"- {model} {r['label']} x{r['count']} ({fmt_names(r['names'])}): "
                f"{lost:.2f} ms lost, speed {(r['tf'] + r['tb']) / (r['of'] + r['ob']):.2f} "
                f"(fwd {r['tf'] / r['of']:.2f}, bwd "
                f"{r['tb'] / r['ob'] if r['ob'] > 0 else float('nan'):.2f})")
        data["models"][model] = {
            r["label"]: {"count": r["count"], "ours": round(r["of"] + r["ob"], 4),
                         "torch": round(r["tf"] + r["tb"], 4)} for r in rows}
    lines += summary + worst_lines + [""]
    plot_ok = plot_path and plot(plot_path, results, peak, avx2, bw)
    if plot_ok:
        lines += [f"![roofline]({os.path.relpath(plot_path, os.path.dirname(out_path))})", ""]
    for model, rows in results.items():
        lines += [f"## {model}, batch {BATCH[model]}", ""] + layer_table(rows, peak, bw) + [""]
    if base:
        lines += before_after(base, data) + [""]
    lines += ["<!-- roofline-data", json.dumps(data, indent=None, sort_keys=True), "-->"]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if out_path:
        with open(out_path, "w") as f:
            f.write(text)
        log(f"roofline: wrote {out_path}" + (f" and {plot_path}" if plot_ok else ""))


def print_counts(model, batch):
    """The layer list with FLOPs, bytes and parameters, and the totals."""
    if model not in MODELS:
        sys.exit(f"roofline: unknown model {model}; expected one of {' '.join(MODELS)}")
    layers = MODELS[model](batch)
    tot = [0] * 5
    print(f"# {model} batch {batch}: name shape fwd_flops bwd_flops fwd_bytes bwd_bytes params")
    for L in layers:
        c = counts(L)
        tot = [a + b for a, b in zip(tot, c)]
        print(L[0], label(L).replace(" ", "_"), *c)
    print("total", f"{len(layers)}_layers", *tot)


def main():
    a = sys.argv[1:]
    if a[:1] == ["report"] and len(a) == 2:
        report(a[1])
    elif a[:1] == ["counts"] and len(a) == 3:
        print_counts(a[1], int(a[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
