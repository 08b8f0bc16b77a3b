#!/usr/bin/env bash
# train --pipeline-stages with --freeze: lenet as 2 stages on 2 ranks, its convolutions
# frozen, SGD with momentum. Two epochs straight export the same weights as one epoch,
# then --resume from its checkpoint for the second: the checkpoint holds every stage's
# optimizer state (gathered from the stages over the trainable range only, which
# --freeze shortens), not the zeros rank 0 holds for the stages it does not run.
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
echo "PASS a frozen pipeline resumes exactly"
