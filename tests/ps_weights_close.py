"""tests/ps_weights_close.py A B TOL: two safetensors files (train --export) hold the same
tensors within TOL relative (per tensor: max |a - b| / max |b|). Exit 0 when they do."""
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32)
    return out


a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
if sorted(a) != sorted(b):
    print("different tensors:", sorted(a), sorted(b))
    sys.exit(1)
worst, where = 0.0, ""
for name in a:
    scale = float(np.max(np.abs(b[name]))) or 1.0
    d = float(np.max(np.abs(a[name].astype(np.float64) - b[name]))) / scale
    if d > worst:
        worst, where = d, name
print("largest relative difference %.3g (%s)" % (worst, where))
sys.exit(0 if worst <= tol else 1)
