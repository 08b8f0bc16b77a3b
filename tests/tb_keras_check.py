#!/usr/bin/env python3
"""Checks train's --logdir against the layout and values Keras's TensorBoard callback
writes:
    tb_keras_check.py LOGDIR EPOCHS STEPS UPDATE_FREQ HISTOGRAM_FREQ EXPORT
  - LOGDIR holds log.csv and the runs train/ and validation/, one event file each;
  - train: epoch_loss, epoch_accuracy, epoch_learning_rate (and epoch_images_per_sec) at
    steps 0..EPOCHS-1 (Keras counts epochs from 0); validation: epoch_loss and
    epoch_accuracy at the same steps, so TensorBoard overlays the two runs' curves; the
    values are log.csv's;
  - wall times are floats (not whole seconds) that never go back;
  - with UPDATE_FREQ > 0: batch_loss and batch_accuracy in train at every UPDATE_FREQ-th
    global batch (EPOCHS * STEPS batches), the epoch's running mean over all ranks, so the
    value at an epoch's last batch is that epoch's epoch_loss;
  - with HISTOGRAM_FREQ > 0: a histogram of every weight (the export's parameter names)
    at the epochs Keras writes them (epoch % HISTOGRAM_FREQ == 0), num = its elements,
    the buckets summing to num, bucket limits increasing to max; those of the last epoch
    have the min, max, sum and sum of squares of EXPORT's weights.
Reads the files with TensorBoard's own EventAccumulator when the tensorboard package is
installed (and then also checks that TensorBoard's plugins list the scalar and histogram
tags), else with tests/tfevents_reader.py. Exit 0 when everything holds."""
import csv
import glob
import json
import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    READER = "TensorBoard's EventAccumulator"
except ImportError:
    ea = None
    import tfevents_reader
    READER = "tests/tfevents_reader.py"

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond


def read_run(run_dir):
    """{'scalars': {tag: [(step, wall, value)]}, 'histograms': {tag: [(step, wall, dict)]}}"""
    out = {"scalars": {}, "histograms": {}}
    if ea is not None:
        acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0})
        acc.Reload()
        tags = acc.Tags()
        for t in tags["scalars"]:
            out["scalars"][t] = [(e.step, e.wall_time, e.value) for e in acc.Scalars(t)]
        for t in tags["histograms"]:
            out["histograms"][t] = [(e.step, e.wall_time, {
                "min": e.histogram_value.min, "max": e.histogram_value.max,
                "num": e.histogram_value.num, "sum": e.histogram_value.sum,
                "sum_squares": e.histogram_value.sum_squares,
                "bucket_limit": list(e.histogram_value.bucket_limit),
                "bucket": list(e.histogram_value.bucket)}) for e in acc.Histograms(t)]
        # What TensorBoard's dashboards read: the plugin accumulator after data_compat.
        pacc = pea.EventAccumulator(run_dir)
        pacc.Reload()
        for plugin, kind in (("scalars", "scalars"), ("histograms", "histograms")):
            active = plugin in pacc.ActivePlugins()
            shown = set(pacc.PluginTagToContent(plugin)) if active else set()
            check(shown == set(out[kind]), "%s: TensorBoard's %s plugin lists %s, expected %s"
                  % (run_dir, plugin, sorted(shown), sorted(out[kind])))
        return out
    files = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    for ev in tfevents_reader.read_events(files[0]):
        for tag, v in ev["scalars"]:
            out["scalars"].setdefault(tag, []).append((ev.get("step", 0), ev["wall_time"], v))
        for tag, h in ev["histograms"]:
            out["histograms"].setdefault(tag, []).append((ev.get("step", 0), ev["wall_time"], h))
    return out


def export_weights(path):
    """The float32 tensors of a safetensors file as lists of floats (no numpy needed)."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__" or e["dtype"] != "F32" or "running_" in name:
            continue
        b, t = e["data_offsets"]
        out[name] = struct.unpack("<%df" % ((t - b) // 4), data[8 + n + b:8 + n + t])
    return out


def close(a, b, rel=1e-6, abs_=1e-5):
    return abs(a - b) <= abs_ + rel * abs(b)


def steps_of(events):
    return [s for s, _, _ in events]


def main(argv):
    if len(argv) != 7:
        print(__doc__)
        return 2
    logdir, export = argv[1], argv[6]
    epochs, steps, freq, hfreq = (int(a) for a in argv[2:6])
    entries = sorted(os.listdir(logdir))
    check(entries == ["log.csv", "train", "validation"],
          "%s holds %s, expected log.csv, train, validation" % (logdir, entries))
    for run in ("train", "validation"):
        files = os.listdir(os.path.join(logdir, run))
        check(len(files) == 1 and files[0].startswith("events.out.tfevents."),
              "%s/%s holds %s, expected one event file" % (logdir, run, files))
    if failures:
        return report()
    tr = read_run(os.path.join(logdir, "train"))
    va = read_run(os.path.join(logdir, "validation"))
    rows = list(csv.DictReader(open(os.path.join(logdir, "log.csv"))))
    epoch_steps = list(range(epochs))

    # Epoch scalars: the same tags in both runs (the overlay), Keras's 0-based steps,
    # log.csv's values.
    want_train = {"epoch_loss": "loss", "epoch_accuracy": "accuracy",
                  "epoch_learning_rate": "learning_rate", "epoch_images_per_sec": "images_per_sec"}
    want_val = {"epoch_loss": "val_loss", "epoch_accuracy": "val_accuracy"}
    train_tags = set(want_train) | ({"batch_loss", "batch_accuracy"} if freq > 0 else set())
    check(set(tr["scalars"]) == train_tags,
          "train scalars %s, expected %s" % (sorted(tr["scalars"]), sorted(train_tags)))
    check(set(va["scalars"]) == set(want_val),
          "validation scalars %s, expected %s" % (sorted(va["scalars"]), sorted(want_val)))
    for run, want in ((tr, want_train), (va, want_val)):
        for tag, col in want.items():
            got = run["scalars"].get(tag, [])
            if not check(steps_of(got) == epoch_steps,
                         "%s steps %s, expected %s" % (tag, steps_of(got), epoch_steps)):
                continue
            for (step, _, v), row in zip(got, rows):
                tol = 0.01 if col == "images_per_sec" else 1e-5
                check(close(v, float(row[col]), abs_=tol),
                      "%s at step %d is %r, log.csv's %s is %s" % (tag, step, v, col, row[col]))

    # Wall times: floats with their fraction, never going back.
    walls = [w for run in (tr, va) for kind in ("scalars", "histograms")
             for evs in run[kind].values() for _, w, _ in evs]
    check(any(w != math.floor(w) for w in walls),
          "every wall time is a whole second: %s" % walls[:4])
    for run in (tr, va):
        for tag, evs in run["scalars"].items():
            ws = [w for _, w, _ in evs]
            check(ws == sorted(ws), "%s: wall times go back: %s" % (tag, ws))

    # Per-batch scalars (Keras's update_freq): every freq-th global batch, the running mean.
    if freq > 0:
        want_steps = [b for b in range(1, epochs * steps + 1) if b % freq == 0]
        epoch_loss = {s: v for s, _, v in tr["scalars"].get("epoch_loss", [])}
        for tag in ("batch_loss", "batch_accuracy"):
            got = steps_of(tr["scalars"].get(tag, []))
            check(got == want_steps, "%s at steps %s, expected %s" % (tag, got, want_steps))
        for s, _, v in tr["scalars"].get("batch_loss", []):
            if s % steps == 0:
                e = s // steps - 1
                check(v == epoch_loss.get(e), "batch_loss at the last batch of epoch %d is %r, "
                      "epoch_loss %r" % (e, v, epoch_loss.get(e)))

    # Histograms (Keras's histogram_freq): every weight, at epochs e % hfreq == 0.
    weights = export_weights(export)
    if hfreq > 0:
        hist_steps = [e for e in range(epochs) if e % hfreq == 0]
        check(set(tr["histograms"]) == set(weights), "histogram tags %s, expected the weights %s"
              % (sorted(tr["histograms"]), sorted(weights)))
        check(not va["histograms"], "histograms in the validation run")
        for tag, evs in tr["histograms"].items():
            check(steps_of(evs) == hist_steps,
                  "%s histograms at %s, expected %s" % (tag, steps_of(evs), hist_steps))
            for s, _, h in evs:
                lim, cnt = h["bucket_limit"], h["bucket"]
                n = len(weights.get(tag, ()))
                check(h["num"] == n and sum(cnt) == n and len(lim) == len(cnt)
                      and lim == sorted(lim) and lim[-1] == h["max"] and h["min"] <= h["max"],
                      "%s at %d: num %s, buckets %s, limits %s, expected %d values"
                      % (tag, s, h["num"], cnt, lim, n))
            if evs and evs[-1][0] == epochs - 1 and tag in weights:
                # The last epoch's weights are the export's: its statistics, to the
                # rounding of a sum in double.
                w, h = weights[tag], evs[-1][2]
                scale = math.fsum(abs(x) for x in w) + 1e-30
                want = {"min": (min(w), 0), "max": (max(w), 0),
                        "sum": (math.fsum(w), 1e-10 * scale),
                        "sum_squares": (math.fsum(x * x for x in w), 0)}
                for k, (v, tol) in want.items():
                    check(close(h[k], v, rel=1e-10, abs_=tol),
                          "%s at the last epoch: %s %r, the export's %r" % (tag, k, h[k], v))
    elif tr["histograms"]:
        check(False, "histograms without --histogram-freq")
    return report()


def report():
    for f in failures:
        print("FAIL " + f)
    if not failures:
        print("Keras layout ok (read with %s)" % READER)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
