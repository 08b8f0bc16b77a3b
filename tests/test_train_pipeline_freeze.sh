#!/usr/bin/env bash
# train --pipeline-stages with --freeze: lenet as 2 stages on 2 ranks, its convolutions
# frozen, SGD with momentum. Two epochs straight export the same weights as one epoch,
# then --resume from its checkpoint for the second: the checkpoint holds every stage's
# optimizer state (gathered from the stages over the trainable range only, which
# --freeze shortens), not the zeros rank 0 holds for the stages it does not run.
# Then 2 stages x 2 replicas with everything but fc2 frozen (so stage 0, wherever the
# cut falls, has nothing to train): the same weights as 2-way data parallelism with the
# same freeze, and stage 0 allreduces no gradients (none in rank 0's HVD_TIMELINE).
set -u
build=${HVD_BUILD:-build}
train=$build/train
[ -x "$train" ] || { echo "FAIL $train is not built (run make)"; exit 1; }
tmp=$(mktemp -d /tmp/test_train_pipeline_freeze.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--model lenet --dataset synthetic --synthetic-samples 160 --batch-size 16 --threads 1
        --momentum 0.9 --freeze 'conv*' --pipeline-stages 2 --micro-batches 2)
launch=(timeout -k 5 120 mpirun -np 2 --oversubscribe --bind-to none)
run() {  # name, then train's extra flags
  local name=$1; shift
  "${launch[@]}" "$train" "${common[@]}" "$@" >"$tmp/$name.out" 2>&1 \
    || { echo "FAIL train ($name):"; cat "$tmp/$name.out"; exit 1; }
}
run straight --epochs 2 --export "$tmp/straight.safetensors"
run first --epochs 1 --checkpoint-dir "$tmp/ckpt"
run resumed --epochs 2 --resume "$tmp/ckpt/last.ckpt" --export "$tmp/resumed.safetensors"
grep -q '^frozen: ' "$tmp/straight.out" \
  || { echo "FAIL no frozen layers reported:"; cat "$tmp/straight.out"; exit 1; }
cmp -s "$tmp/straight.safetensors" "$tmp/resumed.safetensors" \
  || { echo "FAIL resuming a frozen pipeline from its checkpoint changed the weights:"; \
       cat "$tmp/first.out" "$tmp/resumed.out"; exit 1; }
frz=(--model lenet --dataset synthetic --synthetic-samples 160 --batch-size 16 --threads 1
     --momentum 0.9 --freeze 'conv*' --freeze 'fc1*' --epochs 1)
HVD_TIMELINE="$tmp/tl.json" timeout -k 5 120 mpirun -np 4 --oversubscribe --bind-to none \
  "$train" "${frz[@]}" --pipeline-stages 2 --micro-batches 2 --export "$tmp/rep.safetensors" \
  >"$tmp/rep.out" 2>&1 || { echo "FAIL train (2 x 2, frozen):"; cat "$tmp/rep.out"; exit 1; }
"${launch[@]}" "$train" "${frz[@]}" --export "$tmp/dp.safetensors" >"$tmp/dp.out" 2>&1 \
  || { echo "FAIL train (data parallel, frozen):"; cat "$tmp/dp.out"; exit 1; }
grep -q '"tensor":"pipe.loss"' "$tmp/tl.json" \
  || { echo "FAIL rank 0's timeline has no pipeline step in it:"; head "$tmp/tl.json"; exit 1; }
n=$(grep -c 'pipe\.grads' "$tmp/tl.json")   # a set's name: "pipe.grads (process set 1)"
[ "$n" -eq 0 ] || { echo "FAIL stage 0 has only frozen layers but allreduced gradients" \
  "($n timeline events of pipe.grads)"; exit 1; }
/usr/bin/python3 - "$tmp/dp.safetensors" "$tmp/rep.safetensors" <<'PY' || exit 1
import json, struct, sys
import numpy as np
def load(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: np.frombuffer(b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]],
                             dtype=np.float32).astype(np.float64)
            for k, v in h.items() if k != '__metadata__'}
u, p = load(sys.argv[1]), load(sys.argv[2])
worst = max(np.abs(p[k] - u[k]).max() / max(np.abs(u[k]).max(), 1e-12) for k in u)
if worst > 1e-5:
    sys.exit('FAIL frozen 2 x 2 pipeline differs from data parallelism by %.3g' % worst)
PY
echo "PASS a frozen pipeline resumes exactly; frozen stages allreduce nothing"
