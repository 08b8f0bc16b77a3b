#!/usr/bin/env bash
# ONNX in and out of the programs:
# 1. lenet trained by train (1000 Fashion-MNIST images, 1 epoch) and written with
#    --export-onnx: onnxruntime, fed the first 100 test images normalised as the file's
#    metadata_props say, predicts the same classes as serve --model-file on that file
#    (REST predict, probabilities within 1e-5), and the file passes onnx.checker.
# 2. A CNN exported by torch.onnx.export (tests/onnx_reference.py's custom one: grouped,
#    dilated and 3x1 convolutions, Mul, Concat, LeakyRelu, Sigmoid, Tanh, Clip) trained
#    with --model-file at np=2 for one epoch with checkpoints, then resumed for a second:
#    the resumed run says so and does not repeat epoch 1; cnn_bench --model_file runs it.
# 3. Errors: --model-file of a file that is no ONNX model, and serve --model-file with
#    --weights, exit non-zero with a message naming the problem.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
data=/usr/share/datasets/fashion-mnist
for p in "$build/train" "$build/serve" "$build/cnn_bench"; do
  [ -x "$p" ] || { echo "FAIL: $p is not built (run make)"; exit 1; }
done
[ -f "$data/t10k-images-idx3-ubyte.gz" ] || { echo "FAIL: $data missing"; exit 1; }
/usr/bin/python3 -c 'import onnx, onnxruntime, numpy' ||
  { echo "FAIL: /usr/bin/python3 lacks onnx or onnxruntime (scripts/install-deps.sh)"; exit 1; }
tmp=$(mktemp -d /tmp/test_onnx_train_serve.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_orte_tmpdir_base=$tmp

# ---- 1. train --export-onnx, onnxruntime against serve --model-file ----
timeout -k 5 120 "$build/train" --model lenet --max-train 1000 --max-test 100 --epochs 1 \
  --threads 2 --optimizer adam --export-onnx "$tmp/lenet.onnx" >"$tmp/train.out" 2>&1 \
  || { echo "FAIL train --export-onnx:"; cat "$tmp/train.out"; exit 1; }
grep -q "exported the ONNX model to $tmp/lenet.onnx" "$tmp/train.out" ||
  { echo "FAIL train did not say where the ONNX model went:"; cat "$tmp/train.out"; exit 1; }

"$build/serve" --model-file "$tmp/lenet.onnx" --model-name lenet --normalize fashion-mnist \
  --port 0 --threads 1 >"$tmp/serve.out" 2>"$tmp/serve.err" &
pid=$!
for _ in $(seq 600); do grep -q 'listening on port' "$tmp/serve.out" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on port \([0-9]*\)$/\1/p' "$tmp/serve.out")
[ -n "$port" ] || { echo "FAIL serve --model-file did not start:"; cat "$tmp/serve.err"; exit 1; }

PYTHONPATH=scripts timeout -k 5 120 /usr/bin/python3 - "$port" "$data" "$tmp/lenet.onnx" <<'PY' || exit 1
import sys
import numpy as np
import onnx
import onnxruntime as ort
from serve_load import Client, test_images, instance

port, data, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
model = onnx.load(path)
onnx.checker.check_model(model)
meta = {p.key: p.value for p in model.metadata_props}
mean, std = float(meta["norm_mean"]), float(meta["norm_std"])
images, _ = test_images(data, 100)
sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
x = ((images - mean) / std).astype(np.float32).reshape(100, 1, 28, 28)
logits = sess.run(None, {"input": x})[0]
e = np.exp(logits - logits.max(axis=1, keepdims=True))
ort_probs = e / e.sum(axis=1, keepdims=True)
st, doc = Client(port).predict("lenet", [instance(img) for img in images])
if st != 200:
    sys.exit("FAIL serve predict: %d %s" % (st, doc))
served = np.array(doc["predictions"])
same = int((served.argmax(1) == ort_probs.argmax(1)).sum())
diff = float(np.abs(served - ort_probs).max())
print("onnxruntime and serve agree on %d of 100 classes, probabilities within %.2e" % (same, diff))
if same != 100 or diff > 1e-5:
    sys.exit("FAIL onnxruntime and serve --model-file differ")
PY
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=

# ---- 2. --model-file at np=2, checkpoints and resume; cnn_bench --model_file ----
timeout -k 5 180 /usr/bin/python3 tests/onnx_reference.py "$tmp" custom >"$tmp/ref.log" 2>&1 ||
  { echo "FAIL tests/onnx_reference.py:"; tail -20 "$tmp/ref.log"; exit 1; }
mpi2() { timeout -k 5 180 mpirun -np 2 --oversubscribe "$@"; }
flags=(--model-file "$tmp/custom.onnx" --max-train 1024 --max-test 200 --threads 1
       --checkpoint-dir "$tmp/ck")
mpi2 "$build/train" "${flags[@]}" --epochs 1 >"$tmp/np2.out" 2>&1 ||
  { echo "FAIL train --model-file at np=2:"; cat "$tmp/np2.out"; exit 1; }
grep -q "model $tmp/custom.onnx, data set fashion-mnist, 2 rank(s), 1 epoch" "$tmp/np2.out" ||
  { echo "FAIL no summary of the np=2 run:"; cat "$tmp/np2.out"; exit 1; }
mpi2 "$build/train" "${flags[@]}" --epochs 2 --resume "$tmp/ck/last.ckpt" \
  --export-onnx "$tmp/custom_trained.onnx" >"$tmp/resumed.out" 2>&1 ||
  { echo "FAIL resumed train --model-file:"; cat "$tmp/resumed.out"; exit 1; }
grep -q "resuming .* after epoch 1$" "$tmp/resumed.out" ||
  { echo "FAIL the run did not resume after epoch 1:"; cat "$tmp/resumed.out"; exit 1; }
grep -q "Epoch 1/2" "$tmp/resumed.out" && { echo "FAIL the resumed run repeated epoch 1"; exit 1; }
/usr/bin/python3 -c "import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]))" \
  "$tmp/custom_trained.onnx" || { echo "FAIL the trained custom CNN's export"; exit 1; }
timeout -k 5 120 "$build/cnn_bench" --model_file "$tmp/custom.onnx" --batch_size 8 \
  --num_batches 2 --num_warmup_batches 1 >"$tmp/bench.out" 2>&1 ||
  { echo "FAIL cnn_bench --model_file:"; cat "$tmp/bench.out"; exit 1; }
grep -q "total images/sec" "$tmp/bench.out" || { echo "FAIL cnn_bench printed no speed"; exit 1; }

# ---- 3. errors ----
printf 'not a model' >"$tmp/junk.onnx"
"$build/train" --model-file "$tmp/junk.onnx" --epochs 1 >"$tmp/junk.out" 2>&1 &&
  { echo "FAIL train accepted a junk .onnx"; exit 1; }
grep -q "junk.onnx.*not an ONNX model" "$tmp/junk.out" ||
  { echo "FAIL train's message for a junk .onnx:"; cat "$tmp/junk.out"; exit 1; }
"$build/serve" --model-file "$tmp/lenet.onnx" --weights x.safetensors >"$tmp/s.out" 2>&1 &&
  { echo "FAIL serve took --model-file with --weights"; exit 1; }
grep -q "without --weights" "$tmp/s.out" || { echo "FAIL serve's message:"; cat "$tmp/s.out"; exit 1; }
echo "PASS"
