#!/usr/bin/env bash
# build/train --export, then docs/train.md's PyTorch example as it stands (the python
# block after "tests/test_train_export.sh runs the next block": python/hvd_models.py's
# get_model and load_file, load_state_dict(strict=True), evaluation on the Fashion-MNIST
# test set): it must run and print the test accuracy train printed, within 0.2 points, on
# the same 10000 test images. lenet, 2 ranks, 3000 training samples.
set -u
build=${HVD_BUILD:-build}
train=$build/train
data=/usr/share/datasets/fashion-mnist
[ -x "$train" ] || { echo "FAIL $train is not built (run make)"; exit 1; }
# Not a skip: scripts/install-deps.sh (make test) installs both (python3-torch,
# dataset-fashion-mnist), so their absence is a broken install.
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null \
  || { echo "FAIL /usr/bin/python3 has no torch/numpy: run scripts/install-deps.sh (python3-torch, python3-numpy)"; exit 1; }
[ -f "$data/t10k-images-idx3-ubyte.gz" ] \
  || { echo "FAIL $data is missing: run scripts/install-deps.sh (dataset-fashion-mnist)"; exit 1; }
tmp=$(mktemp -d /tmp/test_train_export.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
timeout -k 5 200 mpirun -np 2 --oversubscribe "$train" --model lenet --dataset fashion-mnist \
  --max-train 3000 --epochs 1 --threads 1 --optimizer adam --export "$tmp/model.safetensors" \
  >"$tmp/out" 2>&1 || { echo "FAIL train:"; cat "$tmp/out"; exit 1; }
ours=$(sed -n 's/^test accuracy: \([0-9.]*\)%/\1/p' "$tmp/out")

awk '/tests\/test_train_export.sh runs the next block/ { found = 1; next }
     found && /^```python/ { on = 1; next }
     on && /^```/ { exit }
     on { print }' docs/train.md >"$tmp/eval.py"
[ -s "$tmp/eval.py" ] || { echo "FAIL no example block found in docs/train.md"; exit 1; }
(cd "$tmp" && PYTHONPATH="$OLDPWD/python${PYTHONPATH:+:$PYTHONPATH}" timeout -k 5 120 /usr/bin/python3 eval.py) \
  >"$tmp/py.out" 2>&1 || { echo "FAIL the docs example did not run:"; cat "$tmp/py.out"; exit 1; }
theirs=$(sed -n 's/^test accuracy: \([0-9.]*\)%/\1/p' "$tmp/py.out")
echo "train: $ours%, docs/train.md's PyTorch example on the exported weights: $theirs%"
[ -n "$ours" ] && [ -n "$theirs" ] || { echo "FAIL missing accuracy"; cat "$tmp/out" "$tmp/py.out"; exit 1; }
awk -v a="$ours" -v b="$theirs" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.2 && a > 50) }' \
  || { echo "FAIL accuracies differ by more than 0.2 points (or training failed)"; exit 1; }
echo "export ok"
