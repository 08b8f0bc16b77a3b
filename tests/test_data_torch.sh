#!/usr/bin/env bash
# tests/test_data_torch.sh: the data module against its references, PIL and torchvision
# (scripts/install-deps.sh installs them for /usr/bin/python3):
#  - JPEG pixels decoded at full size equal PIL's decode of the same file within
#    libjpeg's tolerance (1 level; PIL uses libjpeg-turbo too);
#  - RandomResizedCrop's boxes have torchvision 0.14's statistics (area fraction, aspect
#    ratio, position; and the fallback rate on an image too long for the ratio range);
#  - the evaluation transform (Resize, CenterCrop, ToTensor, Normalize) of a folder of
#    photographs matches torchvision's on PIL within a small mean difference (the DCT
#    scaling decodes fewer pixels than PIL; the resampling filter is Pillow's).
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
bin=$build/tests/test_data_images
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
py=/usr/bin/python3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
"$py" scripts/make_image_dataset.py photos "$tmp/photos" --count 24 --shards 1 || { echo "FAIL: make_image_dataset.py photos"; exit 1; }
"$py" scripts/make_image_dataset.py fashion "$tmp/fashion" --train 20 --val 10 --size 56 --shards 1 || { echo "FAIL: make_image_dataset.py fashion"; exit 1; }
for w_h in "500 375" "1000 40"; do
  set -- $w_h
  "$bin" crops "$1" "$2" 20000 5 > "$tmp/crops_$1x$2.txt" || { echo "FAIL: crops"; exit 1; }
done
"$bin" eval "$tmp/photos/train" 64 "$tmp/eval.f32" > /dev/null || { echo "FAIL: eval"; exit 1; }
"$bin" eval "$tmp/photos/train" 64 "$tmp/eval_full.f32" full > /dev/null || { echo "FAIL: eval full"; exit 1; }

BIN=$bin TMP=$tmp "$py" - <<'PY'
import glob, os, subprocess, sys
import numpy as np
import torch
from PIL import Image
from torchvision import transforms

bin_, tmp = os.environ["BIN"], os.environ["TMP"]
fails = 0
def fail(msg):
    global fails
    fails += 1
    print("FAIL:", msg)

# 1. decoded pixels against PIL's
files = sorted(glob.glob(tmp + "/photos/train/*/*.jpg"))[:12] + sorted(glob.glob(tmp + "/fashion/train/*/*.jpg"))[:6]
worst = 0
for f in files:
    for ch, mode in ((3, "RGB"), (1, "L")):
        out = subprocess.run([bin_, "decode", f, str(ch), tmp + "/px.raw"], capture_output=True, text=True)
        if out.returncode != 0:
            fail("decode %s: %s" % (f, out.stderr.strip())); continue
        w, h, c = map(int, out.stdout.split())
        ours = np.fromfile(tmp + "/px.raw", dtype=np.uint8).reshape(h, w, c)
        ref = np.asarray(Image.open(f).convert(mode)).reshape(h, w, c) if Image.open(f).size == (w, h) else None
        if ref is None:
            fail("%s: %dx%d, PIL says %s" % (f, w, h, Image.open(f).size)); continue
        d = np.abs(ours.astype(int) - ref.astype(int))
        worst = max(worst, d.max())
        if d.max() > 1:
            fail("%s (%s): %d pixels differ from PIL by more than 1 (max %d)" % (f, mode, (d > 1).sum(), d.max()))
print("decode: %d files, largest difference from PIL %d" % (len(files), worst))

# 2. RandomResizedCrop statistics against torchvision's get_params
torch.manual_seed(5)
for W, H in ((500, 375), (1000, 40)):
    ours = np.loadtxt(tmp + "/crops_%dx%d.txt" % (W, H))
    img = Image.new("RGB", (W, H))
    ref = []
    for _ in range(len(ours)):
        i, j, h, w = transforms.RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3))
        ref.append((j, i, w, h))
    ref = np.array(ref, dtype=float)
    def stats(a):
        area = a[:, 2] * a[:, 3] / (W * H)
        ratio = a[:, 2] / a[:, 3]
        cx = (a[:, 0] + a[:, 2] / 2) / W
        full = np.mean((a[:, 2] == W) | (a[:, 3] == H))
        return {"area": area, "log ratio": np.log(ratio), "centre x": cx, "full side": np.array([full])}
    so, sr = stats(ours), stats(ref)
    for k in so:
        for q in (0.1, 0.5, 0.9) if len(so[k]) > 1 else (None,):
            a = so[k] if q is None else np.quantile(so[k], q)
            b = sr[k] if q is None else np.quantile(sr[k], q)
            a, b = float(np.ravel(a)[0]), float(np.ravel(b)[0])
            spread = float(np.std(sr[k])) if len(sr[k]) > 1 else 0.5
            tol = 4 * spread / np.sqrt(len(ours)) * 2 + 1e-3
            if abs(a - b) > tol:
                fail("crops %dx%d: %s quantile %s: ours %.4f, torchvision %.4f (tolerance %.4f)" % (W, H, k, q, a, b, tol))
    print("crops %dx%d: mean area ours %.4f torchvision %.4f" % (W, H, so["area"].mean(), sr["area"].mean()))

# 3. the evaluation transform against torchvision's on PIL: at full size within rounding
# (Pillow rounds to 8 bits between its two passes), with DCT scaling within what decoding
# at 1/2 .. 1/8 changes.
tf = transforms.Compose([transforms.Resize(73), transforms.CenterCrop(64), transforms.ToTensor(),
                         transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
paths = sorted(glob.glob(tmp + "/photos/train/*/*.jpg"), key=lambda p: (os.path.basename(os.path.dirname(p)), os.path.basename(p)))
ref = np.stack([tf(Image.open(p).convert("RGB")).numpy() for p in paths])
std = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(1, 3, 1, 1)
for name, mean_max, p99_max in (("eval_full", 0.5, 2.0), ("eval", 4.0, 32.0)):
    ours = np.fromfile(tmp + "/" + name + ".f32", dtype=np.float32).reshape(-1, 3, 64, 64)
    if ref.shape != ours.shape:
        fail("%s: shapes %s and %s" % (name, ours.shape, ref.shape)); continue
    d = np.abs(ours - ref) * std * 255   # in 8-bit levels
    print("%s transform: mean difference %.2f levels, 99th percentile %.2f" % (name, d.mean(), np.quantile(d, 0.99)))
    if d.mean() > mean_max or np.quantile(d, 0.99) > p99_max:
        fail("%s transform differs from torchvision's: mean %.2f levels (at most %g), 99th percentile %.2f (at most %g)" % (name, d.mean(), mean_max, np.quantile(d, 0.99), p99_max))
sys.exit(1 if fails else 0)
PY
rc=$?
[ $rc -eq 0 ] && echo "test_data_torch: ok"
exit $rc
