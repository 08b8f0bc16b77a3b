#!/usr/bin/python3
"""make_image_dataset.py: image data sets for hvd's image input (docs/data.md), offline.

  make_image_dataset.py fashion OUT [--train N] [--val N] [--size S] [--shards K]
      Fashion-MNIST (the IDX files of /usr/share/datasets/fashion-mnist) upscaled to
      S x S (default 56) and written as JPEG: OUT/train/CLASS/*.jpg and OUT/val/CLASS/*.jpg
      (ImageFolder), OUT/train.txt and OUT/val.txt (list files: "path label"), and
      TFRecords OUT/train-0000K-of-0000N and OUT/validation-* holding tf.train.Example
      records as tf_cnn_benchmarks reads ImageNet (image/encoded, image/class/label
      1-based), and OUT/idx/ the same images as IDX files (28x28, unchanged): the first
      N training and N test images, all sources in one order (class by class).
  make_image_dataset.py photos OUT [--count N] [--seed X] [--size WxH]
      Realistic photographs at ImageNet's typical size (about 500x375, or WxH, portrait or
      landscape): random crops and rescales of the natural images that ship with
      scikit-image, JPEG quality 75..95, OUT/train/CLASS/*.jpg (one class per source
      image) and TFRecords OUT/train-*.

The TFRecord writer is this file's (a record: length, masked CRC32C of the length, data,
masked CRC32C of the data; the Example encoded with protobuf's wire format), so no
TensorFlow is needed. Needs PIL, numpy and scikit-image (scripts/install-deps.sh).
"""
import argparse
import gzip
import io
import os
import struct
import sys

import numpy as np
from PIL import Image

# ---- CRC32C and TFRecord ----
_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_record(f, data):
    head = struct.pack("<Q", len(data))
    f.write(head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data)))


# ---- tf.train.Example in protobuf's wire format ----
def _varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, payload):   # a length-delimited field
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _feature_bytes(value):  # Feature.bytes_list (1) -> BytesList.value (1)
    return _field(1, _field(1, value))


def _feature_int64(value):  # Feature.int64_list (3) -> Int64List.value (1, packed)
    return _field(3, _field(1, _varint(value)))


def example(jpeg, label, height, width):
    feats = [("image/encoded", _feature_bytes(jpeg)), ("image/format", _feature_bytes(b"JPEG")),
             ("image/class/label", _feature_int64(label)), ("image/height", _feature_int64(height)),
             ("image/width", _feature_int64(width))]
    # Features.feature (1) is a map: entries with key (1) and value (2).
    entries = b"".join(_field(1, _field(1, k.encode()) + _field(2, v)) for k, v in feats)
    return _field(1, entries)   # Example.features (1)


# ---- writers ----
def jpeg_bytes(img, quality):
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def write_split(out, folder, tf_prefix, shards, samples, class_names):
    """samples: list of (jpeg bytes, label 0-based, height, width)."""
    lines = []
    for i, (data, label, _, _) in enumerate(samples):
        d = os.path.join(out, folder, class_names[label])
        os.makedirs(d, exist_ok=True)
        name = "%s/%s/%06d.jpg" % (folder, class_names[label], i)
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        lines.append("%s %d\n" % (name, label))
    with open(os.path.join(out, folder + ".txt"), "w") as f:
        f.writelines(lines)
    for s in range(shards):   # contiguous: the shards in name order hold the samples in order
        path = os.path.join(out, "%s-%05d-of-%05d" % (tf_prefix, s, shards))
        with open(path, "wb") as f:
            for data, label, h, w in samples[s * len(samples) // shards:(s + 1) * len(samples) // shards]:
                write_record(f, example(data, label + 1, h, w))


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


FASHION_CLASSES = ["0-tshirt", "1-trouser", "2-pullover", "3-dress", "4-coat", "5-sandal",
                   "6-shirt", "7-sneaker", "8-bag", "9-boot"]


def write_idx(path, arrays, labels):
    with open(path + "-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, len(arrays), 28, 28) + np.stack(arrays).tobytes())
    with open(path + "-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, len(labels)) + bytes(labels))


def fashion(args):
    d = args.idx_dir
    sets = [("train", "train", "train", args.train), ("val", "validation", "t10k", args.val)]
    os.makedirs(os.path.join(args.out, "idx"), exist_ok=True)
    for folder, tf_prefix, idx, count in sets:
        images = read_idx(os.path.join(d, idx + "-images-idx3-ubyte.gz"))[:count]
        labels = read_idx(os.path.join(d, idx + "-labels-idx1-ubyte.gz"))[:count]
        # Class by class (stable), the order ImageFolder lists them: the list files, the
        # TFRecords and OUT/idx/ (the same images as IDX files, unchanged) keep it too, so
        # the four sources give train the same samples in the same order.
        order = sorted(range(len(labels)), key=lambda i: int(labels[i]))
        write_idx(os.path.join(args.out, "idx", idx), [images[i] for i in order],
                  [int(labels[i]) for i in order])
        samples = []
        for i in order:
            big = Image.fromarray(images[i], "L").resize((args.size, args.size), Image.NEAREST)   # each pixel 2x2: the DCT scaling to 1/2 gives it back
            samples.append((jpeg_bytes(big, args.quality), int(labels[i]), args.size, args.size))
        write_split(args.out, folder, tf_prefix, args.shards if folder == "train" else 1,
                    samples, FASHION_CLASSES)


def photo_sources():
    import skimage.data
    names = ["astronaut", "chelsea", "coffee", "rocket", "camera", "coins", "moon", "page",
             "text", "clock", "hubble_deep_field", "immunohistochemistry", "grass", "gravel",
             "brick", "colorwheel", "horse", "cat", "motorcycle_left"]
    out = []
    for n in names:
        fn = getattr(skimage.data, n, None)
        try:
            img = np.asarray(fn()) if fn else None
        except Exception:   # not bundled (some need a download): left out
            img = None
        if img is None or img.ndim < 2 or min(img.shape[:2]) < 64:
            continue
        if img.dtype != np.uint8:
            img = (255 * (img.astype(np.float64) / max(img.max(), 1))).astype(np.uint8)
        if img.ndim == 3 and img.shape[2] == 4:
            img = img[:, :, :3]
        out.append((n, Image.fromarray(img).convert("RGB")))
    if not out:
        sys.exit("make_image_dataset.py: scikit-image's bundled images are missing "
                 "(install python3-skimage: scripts/install-deps.sh)")
    return out


def photos(args):
    rng = np.random.default_rng(args.seed)
    sources = photo_sources()
    class_names = [n for n, _ in sources]
    samples = []
    for i in range(args.count):
        label = i % len(sources)
        img = sources[label][1]
        w, h = (args.width, args.height) if rng.random() < 0.75 else (args.height, args.width)
        w = int(w * rng.uniform(0.9, 1.1))
        h = int(h * rng.uniform(0.9, 1.1))
        # A random crop of the source covering a third to all of it, then rescaled.
        f = rng.uniform(0.35, 1.0)
        cw, ch = max(16, int(img.width * f)), max(16, int(img.height * f))
        x, y = rng.integers(0, img.width - cw + 1), rng.integers(0, img.height - ch + 1)
        crop = img.crop((int(x), int(y), int(x) + cw, int(y) + ch)).resize((w, h), Image.BICUBIC)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        samples.append((jpeg_bytes(crop, int(rng.integers(75, 96))), label, h, w))
    write_split(args.out, "train", "train", args.shards, samples, class_names)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="kind", required=True)
    f = sub.add_parser("fashion")
    f.add_argument("out")
    f.add_argument("--idx-dir", default="/usr/share/datasets/fashion-mnist")
    f.add_argument("--train", type=int, default=2000)
    f.add_argument("--val", type=int, default=500)
    f.add_argument("--size", type=int, default=56)
    f.add_argument("--quality", type=int, default=95)
    f.add_argument("--shards", type=int, default=2)
    ph = sub.add_parser("photos")
    ph.add_argument("out")
    ph.add_argument("--count", type=int, default=200)
    ph.add_argument("--seed", type=int, default=1)
    ph.add_argument("--shards", type=int, default=2)
    ph.add_argument("--size", default="500x375", help="WxH of a landscape photo (portrait: HxW)")
    args = p.parse_args()
    if args.kind == "photos":
        try:
            args.width, args.height = (int(v) for v in args.size.lower().split("x"))
            if not (64 <= args.width <= 8192 and 64 <= args.height <= 8192):
                raise ValueError
        except ValueError:
            sys.exit(f"make_image_dataset.py: --size {args.size}: expected WxH, each 64..8192 "
                     "(e.g. 500x375)")
    os.makedirs(args.out, exist_ok=True)
    fashion(args) if args.kind == "fashion" else photos(args)


if __name__ == "__main__":
    main()
