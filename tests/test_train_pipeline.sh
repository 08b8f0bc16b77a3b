#!/usr/bin/env bash
# train --pipeline-stages: lenet on 2 ranks as 2 stages x 1 replica (4 micro-batches,
# 1f1b) writes the same files as the unsplit run on 1 rank (--export, --logdir's
# TensorBoard and CSV files, --checkpoint-dir), and the exported weights agree with the
# unsplit model's to 1e-5 relative after an epoch of 9 steps on the same global batches.
# The stages are printed. A model with batch norm and a stage count that does not divide
# the ranks are refused with exit status 2 and a line that says why.
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
a=$(cd "$tmp/unsplit" && find . -type f | sed 's/events.out.tfevents.*/events/' | sort)
b=$(cd "$tmp/pipe" && find . -type f | sed 's/events.out.tfevents.*/events/' | sort)
[ "$a" = "$b" ] || { echo "FAIL the pipeline wrote other files:"; diff <(echo "$a") <(echo "$b"); exit 1; }
/usr/bin/python3 - "$tmp/unsplit/model.safetensors" "$tmp/pipe/model.safetensors" <<'PY' || exit 1
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
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32).astype(np.float64)
    return out
u, p = load(sys.argv[1]), load(sys.argv[2])
if set(u) != set(p):
    sys.exit('FAIL tensor names differ: %s vs %s' % (sorted(u), sorted(p)))
worst = max(np.abs(p[k] - u[k]).max() / max(np.abs(u[k]).max(), 1e-12) for k in u)
if worst > 1e-5:
    sys.exit('FAIL exported weights differ from the unsplit run by %.3g relative' % worst)
print('exported weights agree to %.2g relative' % worst)
PY
out=$(timeout -k 5 60 mpirun -np 2 --oversubscribe --bind-to none "$train" --model resnet20 \
  --dataset synthetic --synthetic-samples 64 --epochs 1 --pipeline-stages 2 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'batch norm are not supported in a pipeline' <<<"$out" \
  || { echo "FAIL resnet20 in a pipeline: exit $rc, expected 2 and the batch-norm line:"; echo "$out"; exit 1; }
out=$(timeout -k 5 60 mpirun -np 2 --oversubscribe --bind-to none "$train" --model lenet \
  --dataset synthetic --synthetic-samples 64 --epochs 1 --pipeline-stages 4 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'does not divide the 2 ranks' <<<"$out" \
  || { echo "FAIL 4 stages on 2 ranks: exit $rc, expected 2:"; echo "$out"; exit 1; }
echo "train --pipeline-stages writes the unsplit run's files and weights"
