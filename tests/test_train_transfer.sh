#!/usr/bin/env bash
# The transfer experiment of docs/train.md, smaller: lenet pretrained on Fashion-MNIST
# classes 0-4 (4000 images, one epoch), then a new 5-class head on classes 5-9 from 500
# training images with the convolutional base frozen (--init-skip 'fc2.*' --freeze
# 'conv*'), against the same model from scratch with the same steps (2 epochs of batch
# 32): the pretrained one reaches the higher test accuracy (1000 test images), and its
# export holds the pretrained convolutions bit for bit (the base came from the file and
# stayed frozen). The split: scripts/fashion_mnist_split.py. Under a sanitizer
# (HVD_TEST_SANITIZER, set by make SANITIZE=... test), which looks for memory errors, not
# figures: the base trains on 500 images, and the run from scratch and the accuracy
# comparison are left out (the same loading, skipping and freezing at an eighth of the
# work).
set -u
. tests/train_prelude.sh
src=/usr/share/datasets/fashion-mnist
[ -f "$src/train-images-idx3-ubyte.gz" ] ||
  { echo "FAIL $src/train-images-idx3-ubyte.gz missing (scripts/install-deps.sh installs dataset-fashion-mnist)"; exit 1; }
/usr/bin/python3 scripts/fashion_mnist_split.py "$src" "$tmp" >/dev/null || exit 1
idx() { echo --dataset idx --train-images "$tmp/$1-train-images" --train-labels "$tmp/$1-train-labels" \
  --test-images "$tmp/$1-test-images" --test-labels "$tmp/$1-test-labels"; }
common=(--model lenet --batch-size 32 --threads 2 --validation-split 0 --max-test 1000 --quiet)
accuracy() { sed -n 's/^test accuracy: \([0-9.]*\)%$/\1/p' "$tmp/$1.out"; }
run() {  # NAME ARGS...
  local name=$1
  shift
  timeout -k 5 200 "$train" "${common[@]}" "$@" >"$tmp/$name.out" 2>&1 ||
    { echo "FAIL train $*:"; cat "$tmp/$name.out"; exit 1; }
}
base_train=4000
[ -n "${HVD_TEST_SANITIZER:-}" ] && base_train=500
run base $(idx base) --max-train "$base_train" --epochs 1 --export "$tmp/base.safetensors"
run transfer $(idx new) --epochs 2 --init-weights "$tmp/base.safetensors" --init-skip 'fc2.*' \
  --freeze 'conv*' --export "$tmp/transfer.safetensors"
PYTHONPATH=$PWD/python /usr/bin/python3 - "$tmp/base.safetensors" "$tmp/transfer.safetensors" <<'PYEOF' || exit 1
import sys, torch
from hvd_models import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
bad = [k for k in a if k.startswith("conv") and not torch.equal(a[k], b[k])]
if bad:
    sys.exit("FAIL the transferred model's %s are not the pretrained ones" % ", ".join(bad))
print("ok   the transferred model holds the pretrained, frozen convolutions")
PYEOF
[ -n "${HVD_TEST_SANITIZER:-}" ] && exit 0
run scratch $(idx new) --epochs 2
b=$(accuracy base) a=$(accuracy transfer) s=$(accuracy scratch)
echo "base task (classes 0-4) $b%; new task (classes 5-9, 500 images): pretrained $a%, from scratch $s%"
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$a') > float('$s') else 1)" 2>/dev/null ||
  { echo "FAIL the pretrained model ($a%) did not beat the one from scratch ($s%)"; exit 1; }
echo "ok   the pretrained base wins"
