#!/usr/bin/env bash
# python/hvd_models.py's get_model(name) holds exactly the state_dict train exports, for
# every built-in model: train --epochs 0 --export of mlp, lenet, resnet20 and trivial (as
# built for synthetic data: 10 classes) and of resnet20 and lenet as built for other data
# (1-channel 28x28, 27 classes of 20x20: conv1, fc1 and fc follow the data), each loaded by
# tests/train_models_check.py with load_state_dict(strict=True) after comparing names,
# order, shapes and dtypes; resnet50, resnet101, vgg16 and alexnet (exports of 94 to 537
# MB) against tests/fixtures/models/*_keys.txt, the lists test_nn_models holds nn to.
set -u
build=${HVD_BUILD:-build}
train=$build/train
[ -x "$train" ] || { echo "FAIL $train is not built (run make)"; exit 1; }
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null \
  || { echo "FAIL /usr/bin/python3 has no torch/numpy: run scripts/install-deps.sh (python3-torch)"; exit 1; }
tmp=$(mktemp -d /tmp/test_train_torch_models.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

export_model() {   # NAME [train flags...]: writes $tmp/NAME.safetensors at initialisation
  local name=$1
  shift
  timeout -k 5 60 "$train" --model "$name" --epochs 0 --batch-size 1 --max-test 1 --threads 1 \
    --quiet --export "$tmp/$name.safetensors" "$@" >"$tmp/$name.log" 2>&1 \
    || { echo "FAIL train --model $name --epochs 0 --export:"; cat "$tmp/$name.log"; exit 1; }
}
for m in mlp lenet resnet20 trivial; do export_model "$m" --dataset synthetic --synthetic-samples 16; done
/usr/bin/python3 tests/train_models_check.py "$tmp" mlp lenet resnet20 trivial:10 \
  keys:resnet50 keys:resnet101 keys:vgg16 keys:alexnet || exit 1

# Models built for other data: a 1-channel resnet20 (Fashion-MNIST's shape) and a lenet of
# 27 classes on 20x20 images (EMNIST letters numbers its classes 1..26), via --dataset idx.
/usr/bin/python3 - "$tmp" <<'EOF' || { echo "FAIL writing IDX files"; exit 1; }
import struct, sys
d = sys.argv[1]
def idx(path, dims, data):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, len(dims)]) + struct.pack(">%dI" % len(dims), *dims) + bytes(data))
for name, h, top in (("a", 28, 9), ("b", 20, 26)):
    idx(f"{d}/{name}-images", [16, h, h], [(i * 7) % 256 for i in range(16 * h * h)])
    idx(f"{d}/{name}-labels", [16], [1 + (5 * i) % top for i in range(16)])
EOF
idx_flags() { echo --dataset idx --train-images "$tmp/$1-images" --train-labels "$tmp/$1-labels" \
  --test-images "$tmp/$1-images" --test-labels "$tmp/$1-labels" --validation-split 0; }
export_model resnet20 $(idx_flags a)
export_model lenet $(idx_flags b)
/usr/bin/python3 tests/train_models_check.py "$tmp" resnet20:10:1:28 lenet:27:1:20 || exit 1
echo "hvd_models matches train's exports of every built-in model"
