#!/usr/bin/env python3
"""Loads weights that build/train exported (--export FILE.safetensors) into the PyTorch
reference model and prints its test accuracy on the same test samples train used, as
"test accuracy: NN.NN%". Reads safetensors and IDX by hand (no extra packages).
Usage: train_torch_eval.py FILE MODEL DATA_DIR MAX_TEST
LeNet is scripts/peers/torch_models.py's, the reference definition."""
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "peers"))
from torch_models import LeNet  # noqa: E402


class MLP(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def load_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[8 + n + b:8 + n + e], dtype=DTYPES[info["dtype"]])
        out[name] = torch.from_numpy(arr.copy().reshape(info["shape"]))
    return out


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def main():
    path, model_name, data_dir, max_test = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    model = {"lenet": LeNet, "mlp": MLP}[model_name]()
    model.load_state_dict(load_safetensors(path), strict=True)
    model.eval()
    images = read_idx(data_dir + "/t10k-images-idx3-ubyte.gz")[:max_test]
    labels = read_idx(data_dir + "/t10k-labels-idx1-ubyte.gz")[:max_test]
    mean, std = (0.1307, 0.3081) if "fashion" not in data_dir and "mnist" in data_dir else (0.2860, 0.3530)
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - mean) / std
    x = x.reshape(len(images), 1, 28, 28)
    with torch.no_grad():
        pred = model(x).argmax(1).numpy()
    print("test accuracy: %.2f%%" % (100.0 * (pred == labels).mean()))


if __name__ == "__main__":
    main()
