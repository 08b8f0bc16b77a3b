#!/usr/bin/python3
"""Checks that train's exports load into python/hvd_models.py's definitions:
    train_models_check.py DIR MODEL[:CLASSES:CHANNELS:SIZE] ... [keys:MODEL ...]
DIR/MODEL.safetensors (train --export) must hold exactly get_model(...)'s state_dict: the
same names in the same order (state_dict order), shapes and dtypes, and
load_state_dict(strict=True) must take it, the values arriving bit for bit.
keys:MODEL compares get_model(MODEL)'s state_dict with tests/fixtures/models/MODEL_keys.txt
instead, the list test_nn_models checks nn's model against (for the models whose exports
are hundreds of MB). Prints one line per model; exit 0 only when every model passes."""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import hvd_models  # noqa: E402

DT = {torch.float32: "F32", torch.int64: "I64"}


def header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def check_keys(name):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "models",
                        name + "_keys.txt")
    want = []
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        k, dt, *shape = line.split()
        want.append((k, dt, [int(d) for d in shape[0].split(",")] if shape else []))
    torch.manual_seed(0)
    sd = hvd_models.get_model(name).state_dict()
    got = [(k, DT[v.dtype], list(v.shape)) for k, v in sd.items()]
    if got != want:
        pairs = zip(want + [None] * len(got), got + [None] * len(want))
        w, g = next((w, g) for w, g in pairs if w != g)
        print("FAIL %s: first difference: %s has %s, hvd_models %s" % (name, path, w, g))
        return False
    print("ok   %-9s %3d tensors: names, order, shapes and dtypes equal %s" % (name, len(sd), path))
    return True


def check(d, spec):
    if spec.startswith("keys:"):
        return check_keys(spec[5:])
    parts = spec.split(":")
    name = parts[0]
    classes, channels, size = (int(p) if p else None for p in (parts[1:] + ["", "", ""])[:3])
    path = os.path.join(d, name + ".safetensors")
    torch.manual_seed(0)
    model = hvd_models.get_model(name, classes, channels, size)
    sd = model.state_dict()
    h = header(path)
    want = [(k, DT[v.dtype], list(v.shape)) for k, v in sd.items()]
    got = [(k, e["dtype"], e["shape"]) for k, e in h.items()]
    if want != got:
        for w, g in zip(want + [None] * len(got), got + [None] * len(want)):
            if w != g:
                print("FAIL %s: first difference: hvd_models %s, train's export %s" % (name, w, g))
                return False
    tensors = hvd_models.load_file(path)
    model.load_state_dict(tensors, strict=True)  # raises on anything missing or extra
    for k, v in model.state_dict().items():
        if not torch.equal(v, tensors[k]):
            print("FAIL %s: %s differs after load_state_dict" % (name, k))
            return False
    n = sum(p.numel() for p in model.parameters())
    print("ok   %-9s %3d tensors, %d parameters: names, order, shapes and dtypes equal; "
          "load_state_dict(strict=True) ok" % (name, len(sd), n))
    return True


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    torch.set_num_threads(1)
    ok = all([check(argv[1], spec) for spec in argv[2:]])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
