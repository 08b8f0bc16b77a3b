#!/usr/bin/env bash
# train --dataset idx with --train-images/--train-labels/--test-images/--test-labels: a
# user's own IDX files train.
#   - 3000 Fashion-MNIST training and 1000 test images rewritten as the user's files
#     (training set plain, test set gzip): an mlp on 2 ranks reaches > 60% in one epoch,
#     the normalisation measured on the files is printed, and the export loads strictly
#     into python/hvd_models.py's mlp;
#   - an EMNIST-letters-like set (labels 1..26, 20x20 images) trains an mlp of 27 classes;
#   - bad input stops with one "train:" line naming the file: counts that differ, train
#     and test images of other shapes, a labels file given as images, a missing file,
#     labels all 0; flag mistakes (a missing --test-labels, --train-images without
#     --dataset idx) exit 2 before anything runs.
set -u
. "$(dirname "$0")/train_prelude.sh"
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] \
  || { echo "FAIL $data is missing: run scripts/install-deps.sh (dataset-fashion-mnist)"; exit 1; }
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null \
  || { echo "FAIL /usr/bin/python3 has no torch/numpy: run scripts/install-deps.sh (python3-torch)"; exit 1; }

/usr/bin/python3 - "$data" "$tmp" <<'EOF' || { echo "FAIL writing the IDX files"; exit 1; }
import gzip, random, struct, sys
src, d = sys.argv[1:3]
def read(path):
    b = gzip.open(path).read()
    dims = struct.unpack(">%dI" % b[3], b[4:4 + 4 * b[3]])
    return list(dims), b[4 + 4 * len(dims):]
def write(path, dims, data, gz=False):
    b = bytes([0, 0, 8, len(dims)]) + struct.pack(">%dI" % len(dims), *dims) + bytes(data)
    (gzip.open if gz else open)(path, "wb").write(b)
for part, n, gz in (("train", 3000, False), ("t10k", 1000, True)):
    (_, h, w), img = read(f"{src}/{part}-images-idx3-ubyte.gz")
    _, lab = read(f"{src}/{part}-labels-idx1-ubyte.gz")
    write(f"{d}/fm-{part}-images", [n, h, w], img[:n * h * w], gz)
    write(f"{d}/fm-{part}-labels", [n], lab[:n], gz)
# Letters: labels 1..26 (class 0 unused, as EMNIST letters), 20x20, a template per class.
rng = random.Random(1)
tmpl = [[rng.randrange(0, 160) for _ in range(400)] for _ in range(27)]
for part, n in (("train", 2600), ("t10k", 520)):
    labels = [1 + i % 26 for i in range(n)]
    img = [min(255, tmpl[l][k] + rng.randrange(0, 96)) for l in labels for k in range(400)]
    write(f"{d}/let-{part}-images", [n, 20, 20], img)
    write(f"{d}/let-{part}-labels", [n], labels)
write(f"{d}/short-labels", [2999], lab[:2999])
write(f"{d}/zero-labels", [3000], [0] * 3000)
EOF

idx() {   # PREFIX [TEST_PREFIX]: the four file flags
  local t=${2:-$1}
  echo --dataset idx --train-images "$tmp/$1-train-images" --train-labels "$tmp/$1-train-labels" \
    --test-images "$tmp/$t-t10k-images" --test-labels "$tmp/$t-t10k-labels"
}
mpi2 "$train" --model mlp $(idx fm) --epochs 1 --threads 1 --optimizer adam \
  --export "$tmp/mlp.safetensors" >"$tmp/fm.log" 2>&1 || { echo "FAIL mlp on IDX files:"; cat "$tmp/fm.log"; exit 1; }
acc=$(sed -n 's/^test accuracy: \([0-9.]*\)%/\1/p' "$tmp/fm.log")
if grep -q "fm-train-images: 10 classes, 28x28 images, normalised with mean 0.28[0-9]*, std 0.35" "$tmp/fm.log" \
   && awk -v a="$acc" 'BEGIN { exit !(a > 60) }'; then
  echo "ok   mlp on the user's IDX files (plain and gzip): test accuracy $acc%"
else
  echo "FAIL mlp on IDX files: accuracy '$acc'"; grep -E '^(train|Epoch|test)' "$tmp/fm.log"; fails=$((fails + 1))
fi
PYTHONPATH=python /usr/bin/python3 -c '
import sys, hvd_models as h
h.get_model("mlp").load_state_dict(h.load_file(sys.argv[1]), strict=True)' "$tmp/mlp.safetensors" \
  && echo "ok   the export loads strictly into hvd_models mlp" || { echo "FAIL the export does not load"; fails=$((fails + 1)); }

"$train" --model mlp $(idx let) --epochs 2 --threads 1 --quiet >"$tmp/let.log" 2>&1 \
  || { echo "FAIL mlp on letters:"; cat "$tmp/let.log"; exit 1; }
acc=$(sed -n 's/^test accuracy: \([0-9.]*\)%/\1/p' "$tmp/let.log")
"$train" --model mlp $(idx let) --epochs 0 --threads 1 --max-test 1 >"$tmp/let0.log" 2>&1
if grep -q "let-train-images: 27 classes, 20x20 images" "$tmp/let0.log" && awk -v a="$acc" 'BEGIN { exit !(a > 50) }'; then
  echo "ok   mlp on 26 letters numbered 1..26 (27 classes, 20x20): test accuracy $acc%"
else
  echo "FAIL letters: accuracy '$acc'"; cat "$tmp/let0.log"; fails=$((fails + 1))
fi

# Bad files: one line naming the file, before any training.
files=(--test-images "$tmp/fm-t10k-images" --test-labels "$tmp/fm-t10k-labels")
NO_EPOCH=1 expect_error "counts differ" "$tmp/short-labels: 2999 labels, but $tmp/fm-train-images holds 3000 images" \
  mpi2 "$train" --model mlp --dataset idx --train-images "$tmp/fm-train-images" --train-labels "$tmp/short-labels" "${files[@]}"
NO_EPOCH=1 expect_error "train and test shapes differ" "$tmp/let-t10k-images: test images are 20x20, but $tmp/fm-train-images holds 28x28" \
  "$train" --model mlp $(idx fm let)
NO_EPOCH=1 expect_error "labels as images" "$tmp/fm-train-labels: not an IDX file of unsigned bytes with 3 dimension(s)" \
  "$train" --model mlp --dataset idx --train-images "$tmp/fm-train-labels" --train-labels "$tmp/fm-train-labels" "${files[@]}"
NO_EPOCH=1 expect_error "missing file" "$tmp/none: cannot open" \
  "$train" --model mlp --dataset idx --train-images "$tmp/none" --train-labels "$tmp/fm-train-labels" "${files[@]}"
NO_EPOCH=1 expect_error "labels all 0" "$tmp/zero-labels: every label is 0" \
  "$train" --model mlp --dataset idx --train-images "$tmp/fm-train-images" --train-labels "$tmp/zero-labels" \
  --test-images "$tmp/fm-train-images" --test-labels "$tmp/zero-labels"
for case in "missing --test-labels|--dataset idx needs --test-labels|--dataset idx --train-images $tmp/a --train-labels $tmp/a --test-images $tmp/a" \
            "--train-images without idx|--train-images is for --dataset idx|--dataset mnist --train-images $tmp/a"; do
  IFS='|' read -r what needle flags <<<"$case"
  # shellcheck disable=SC2086
  "$train" --model mlp $flags >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$needle" "$tmp/err"; then echo "ok   $what: exit 2, $(cat "$tmp/err")"
  else echo "FAIL $what: exit $rc, $(cat "$tmp/err")"; fails=$((fails + 1)); fi
done
[ $fails -eq 0 ] && { echo "IDX data sets pass"; exit 0; }
echo "$fails case(s) failed"
exit 1
