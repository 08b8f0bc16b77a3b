#!/usr/bin/env bash
# build/train --export: the safetensors file loads strictly into the PyTorch reference
# model (tests/train_torch_eval.py) and scores the test accuracy train reported, within
# 0.2 points, on the same Fashion-MNIST test samples. lenet, 2 ranks, a small subset.
set -u
build=${HVD_BUILD:-build}
train=$build/train
data=/usr/share/datasets/fashion-mnist
if [ ! -x "$train" ]; then echo "skipped: $train is not built"; exit 77; fi
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
  echo "skipped: /usr/bin/python3 has no torch/numpy (apt-get install python3-torch)"; exit 77
fi
if [ ! -f "$data/t10k-images-idx3-ubyte.gz" ]; then echo "skipped: $data missing"; exit 77; fi
tmp=$(mktemp -d /tmp/test_train_export.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
timeout -k 5 200 mpirun -np 2 --oversubscribe "$train" --model lenet --dataset fashion-mnist \
  --max-train 3000 --max-test 1000 --epochs 1 --threads 1 --optimizer adam --export "$tmp/lenet.safetensors" \
  >"$tmp/out" 2>&1 || { echo "FAIL train:"; cat "$tmp/out"; exit 1; }
ours=$(grep '^test accuracy: ' "$tmp/out" | sed 's/test accuracy: \([0-9.]*\)%/\1/')
theirs=$(/usr/bin/python3 tests/train_torch_eval.py "$tmp/lenet.safetensors" lenet "$data" 1000 \
  | sed 's/test accuracy: \([0-9.]*\)%/\1/') || { echo "FAIL PyTorch could not load the export"; exit 1; }
echo "train: $ours%, PyTorch on the exported weights: $theirs%"
[ -n "$ours" ] && [ -n "$theirs" ] || { echo "FAIL missing accuracy"; cat "$tmp/out"; exit 1; }
awk -v a="$ours" -v b="$theirs" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.2 && a > 50) }' \
  || { echo "FAIL accuracies differ by more than 0.2 points (or training failed)"; exit 1; }
echo "export ok"
