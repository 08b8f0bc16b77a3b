#!/usr/bin/env bash
# train --pipeline-stages: lenet on 2 ranks as 2 stages x 1 replica (4 micro-batches,
# 1f1b) writes the same files as the unsplit run on 1 rank (--export, --logdir's
# TensorBoard and CSV files, --checkpoint-dir), and the exported weights agree with the
# unsplit model's to 1e-5 relative after an epoch of 9 steps on the same global batches.
# The stages are printed, and the last step drawn. resnet20 (batch norm) in a pipeline trains as the unsplit model
# with gradient accumulation over the micro-batches. Only stage 0 decodes images (a bad one
# is counted once). A stage count that does not divide
# the ranks is refused with exit status 2 and a line that says why.
set -u
build=${HVD_BUILD:-build}
train=$build/train
[ -x "$train" ] || { echo "FAIL $train is not built (run make)"; exit 1; }
/usr/bin/python3 -c 'import numpy' 2>/dev/null \
  || { echo "FAIL /usr/bin/python3 has no numpy: run scripts/install-deps.sh"; exit 1; }
tmp=$(mktemp -d /tmp/test_train_pipeline.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# 160 synthetic samples: 144 for training, 9 full batches of 16 (no uneven tail).
common=(--model lenet --dataset synthetic --synthetic-samples 160 --epochs 1 --batch-size 16
        --threads 1)
compare() {  # two safetensors files: every tensor (buffers and counters too) to 1e-5
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
import numpy as np
def load(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == '__metadata__':
            continue
        s, e = v['data_offsets']
        dtype = {'F32': np.float32, 'I64': np.int64}[v['dtype']]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dtype).astype(np.float64)
    return out
u, p = load(sys.argv[1]), load(sys.argv[2])
if set(u) != set(p):
    sys.exit('FAIL tensor names differ: %s vs %s' % (sorted(u), sorted(p)))
worst = max(np.abs(p[k] - u[k]).max() / max(np.abs(u[k]).max(), 1e-12) for k in u)
if worst > 1e-5:
    sys.exit('FAIL %s differs from %s by %.3g relative' % (sys.argv[2], sys.argv[1], worst))
print('exported weights agree to %.2g relative' % worst)
PY
}
for run in unsplit pipe; do
  mkdir -p "$tmp/$run"
  if [ $run = unsplit ]; then launch=(timeout -k 5 120); extra=()
  else launch=(timeout -k 5 120 mpirun -np 2 --oversubscribe --bind-to none)
       extra=(--pipeline-stages 2 --micro-batches 4 --pipeline-schedule 1f1b); fi
  "${launch[@]}" "$train" "${common[@]}" "${extra[@]}" --export "$tmp/$run/model.safetensors" \
    --logdir "$tmp/$run/logs" --checkpoint-dir "$tmp/$run/ckpt" >"$tmp/$run.out" 2>&1 \
    || { echo "FAIL train ($run):"; cat "$tmp/$run.out"; exit 1; }
done
grep -q '^stage 1: layers' "$tmp/pipe.out" \
  || { echo "FAIL the stages are not printed:"; cat "$tmp/pipe.out"; exit 1; }
# The last step drawn: every stage ran forwards and backwards.
for s in 0 1; do
  grep -q "^  stage $s |.*F.*B.*|\$" "$tmp/pipe.out" \
    || { echo "FAIL no picture of stage $s's last step:"; cat "$tmp/pipe.out"; exit 1; }
done
a=$(cd "$tmp/unsplit" && find . -type f | sed 's/events.out.tfevents.*/events/' | sort)
b=$(cd "$tmp/pipe" && find . -type f | sed 's/events.out.tfevents.*/events/' | sort)
[ "$a" = "$b" ] || { echo "FAIL the pipeline wrote other files:"; diff <(echo "$a") <(echo "$b"); exit 1; }
compare "$tmp/unsplit/model.safetensors" "$tmp/pipe/model.safetensors" || exit 1
# Batch norm normalises per micro-batch: resnet20 as 2 stages of 4 micro-batches of 4
# trains as the unsplit model accumulating 4 batches of 4 on one rank (the lr divided by
# the 4 that accumulation multiplies it by): weights, running statistics and counters.
bn=(--model resnet20 --dataset synthetic --synthetic-samples 160 --epochs 1 --threads 1
    --momentum 0.9)
timeout -k 5 120 "$train" "${bn[@]}" --batch-size 4 --batches-per-allreduce 4 --lr 0.0025 \
  --export "$tmp/bn_acc.safetensors" >"$tmp/bn_acc.out" 2>&1 \
  || { echo "FAIL train (resnet20, accumulation):"; cat "$tmp/bn_acc.out"; exit 1; }
timeout -k 5 120 mpirun -np 2 --oversubscribe --bind-to none "$train" "${bn[@]}" \
  --batch-size 16 --pipeline-stages 2 --micro-batches 4 --export "$tmp/bn_pipe.safetensors" \
  >"$tmp/bn_pipe.out" 2>&1 \
  || { echo "FAIL train (resnet20, pipeline):"; cat "$tmp/bn_pipe.out"; exit 1; }
compare "$tmp/bn_acc.safetensors" "$tmp/bn_pipe.safetensors" || exit 1
# Only stage 0 decodes the images: a truncated JPEG among 48 training images, with
# --skip-bad-images, is counted once over the ranks (a stage 1 that decoded too would count
# it again), and the batch of 15 it leaves reaches stage 1 from stage 0.
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  d=$tmp/fm
  /usr/bin/python3 scripts/make_image_dataset.py fashion "$d" --train 48 --val 32 --size 28 \
    >/dev/null || { echo "FAIL scripts/make_image_dataset.py fashion"; exit 1; }
  first=$(find "$d/train" -name '*.jpg' | sort | head -1)
  head -c 300 "$first" >"$(dirname "$first")/zz-truncated.jpg"
  timeout -k 5 120 mpirun -np 2 --oversubscribe --bind-to none "$train" --model lenet \
    --dataset imagefolder --data-dir "$d" --epochs 1 --batch-size 16 --threads 1 \
    --validation-split 0 --skip-bad-images --pipeline-stages 2 --micro-batches 2 \
    >"$tmp/images.out" 2>&1 || { echo "FAIL train (images, pipeline):"; cat "$tmp/images.out"; exit 1; }
  grep -q -- '--skip-bad-images: 1 bad image(s) left out' "$tmp/images.out" \
    || { echo "FAIL a bad image not counted once (stage 1 decoded too?):"; cat "$tmp/images.out"; exit 1; }
else
  echo "FAIL Fashion-MNIST is missing: run scripts/install-deps.sh (dataset-fashion-mnist)"; exit 1
fi
out=$(timeout -k 5 60 mpirun -np 2 --oversubscribe --bind-to none "$train" --model lenet \
  --dataset synthetic --synthetic-samples 64 --epochs 1 --pipeline-stages 4 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'does not divide the 2 ranks' <<<"$out" \
  || { echo "FAIL 4 stages on 2 ranks: exit $rc, expected 2:"; echo "$out"; exit 1; }
echo "train --pipeline-stages writes the unsplit run's files and weights"
