#!/usr/bin/env bash
# A Horovod-style PyTorch script (tests/python/mnist_horovod.py: Horovod's documented
# form, only the import changed to hvd.torch) trains lenet on Fashion-MNIST at np 2 for
# 20 steps to the same weights as PyTorch DDP (gloo) on the same shards
# (tests/python/mnist_ddp.py), to 1e-5 relative, and both moved away from the start.
. "$(dirname "$0")/python_prelude.sh"
src=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -f "$src/train-images-idx3-ubyte.gz" ] ||
  { echo "FAIL: no Fashion-MNIST in $src (apt-get install dataset-fashion-mnist, or set FASHION_MNIST_DIR)"; exit 1; }
# torchvision's FashionMNIST reads the uncompressed files from ROOT/FashionMNIST/raw.
raw=$tmp/data/FashionMNIST/raw
mkdir -p "$raw"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte; do
  gzip -dc "$src/$f.gz" > "$raw/$f" || { echo "FAIL: gunzip $src/$f.gz"; exit 1; }
done
# torchvision checks the test files exist too; the scripts never read them.
: > "$raw/t10k-images-idx3-ubyte"
: > "$raw/t10k-labels-idx1-ubyte"
args=(--data-dir "$tmp/data" --steps 20 --batch-size 32)
echo "== hvd.torch, np 2"
run_np 2 tests/python/mnist_horovod.py "${args[@]}" --save "$tmp/hvd.pt" || { echo "FAIL: mnist_horovod.py"; exit 1; }
echo "== PyTorch DDP (gloo), np 2"
run_np 2 tests/python/mnist_ddp.py "${args[@]}" \
  --init-file "$tmp/ddp.init" --save "$tmp/ddp.pt" || { echo "FAIL: mnist_ddp.py"; exit 1; }
"$py" - "$tmp/hvd.pt" "$tmp/ddp.pt" <<'PY'
import sys
import torch
sys.path.insert(0, "python")
from hvd_models import get_model
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
torch.manual_seed(42)
start = get_model("lenet").state_dict()
worst, moved = 0.0, 0.0
for k in b:
    rel = ((a[k] - b[k]).abs().max() / b[k].abs().max()).item()
    worst = max(worst, rel)
    moved = max(moved, ((b[k] - start[k]).abs().max() / start[k].abs().max()).item())
    print("%-12s max |hvd - ddp| / max |ddp| = %.2e" % (k, rel))
print("largest relative difference %.2e (limit 1e-5); DDP moved the weights by up to %.2e" % (worst, moved))
sys.exit(0 if worst <= 1e-5 and moved > 1e-3 else 1)
PY
[ $? -eq 0 ] || { echo "FAIL: hvd.torch's weights differ from DDP's (or training did not move them)"; exit 1; }
echo PASS
