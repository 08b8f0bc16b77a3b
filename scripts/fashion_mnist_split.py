#!/usr/bin/python3
"""The transfer-learning experiment's data (docs/train.md): Fashion-MNIST split by class
into two tasks, as IDX files that train --dataset idx reads.
    fashion_mnist_split.py SRC_DIR OUT_DIR [NEW_TRAIN]
SRC_DIR holds Fashion-MNIST's four files (train-images-idx3-ubyte.gz, ...). Writes to
OUT_DIR:
    base-{train,test}-{images,labels}   classes 0-4 (T-shirt, trouser, pullover, dress,
                                        coat), labels as they are
    new-{train,test}-{images,labels}    classes 5-9 (sandal, shirt, sneaker, bag, ankle
                                        boot) as labels 0-4; the training set only its
                                        first NEW_TRAIN images (default 500)
Standard library only."""
import gzip
import os
import struct
import sys


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        sys.exit("%s: not an IDX file of unsigned bytes" % path)
    ndim = data[3]
    dims = struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim])
    per = 1
    for d in dims[1:]:
        per *= d
    body = data[4 + 4 * ndim:]
    if len(body) != dims[0] * per:
        sys.exit("%s: %d bytes of data, the header says %d" % (path, len(body), dims[0] * per))
    return dims, [body[i * per:(i + 1) * per] for i in range(dims[0])]


def write_idx(path, dims, items):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, len(dims)]) + struct.pack(">%dI" % len(dims), len(items), *dims[1:]))
        f.write(b"".join(items))


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    src, out = argv[0], argv[1]
    new_train = int(argv[2]) if len(argv) == 3 else 500
    os.makedirs(out, exist_ok=True)
    for part, prefix in (("train", "train"), ("test", "t10k")):
        idims, images = read_idx(os.path.join(src, prefix + "-images-idx3-ubyte.gz"))
        ldims, labels = read_idx(os.path.join(src, prefix + "-labels-idx1-ubyte.gz"))
        if len(images) != len(labels):
            sys.exit("%s: %d images, %d labels" % (src, len(images), len(labels)))
        base = [i for i, l in enumerate(labels) if l[0] < 5]
        new = [i for i, l in enumerate(labels) if l[0] >= 5]
        if part == "train":
            new = new[:new_train]
        for task, idx, shift in (("base", base, 0), ("new", new, 5)):
            write_idx(os.path.join(out, "%s-%s-images" % (task, part)), idims, [images[i] for i in idx])
            write_idx(os.path.join(out, "%s-%s-labels" % (task, part)), ldims,
                      [bytes([labels[i][0] - shift]) for i in idx])
            print("%s/%s-%s-*: %d images" % (out, task, part, len(idx)))


if __name__ == "__main__":
    main(sys.argv[1:])
