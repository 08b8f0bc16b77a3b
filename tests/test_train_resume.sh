#!/usr/bin/env bash
# Exact resume: a 2-rank run killed with SIGKILL in mid-epoch and resumed from its last
# checkpoint ends with the same weights, byte for byte, as the uninterrupted run with
# the same seed and ranks (exported safetensors compared with cmp). Three cases:
#  - mlp, SGD with momentum, warm-up and a cosine schedule: optimizer state, epoch and
#    lr have to carry over;
#  - resnet20 (batch norm: running statistics and num_batches_tracked), Adam, augmentation;
#  - alexnet (dropout: the mask counter has to carry over).
# The kill is a real SIGKILL that rank 0 sends itself at a chosen global step
# (HVD_TRAIN_TEST_KILL_AT_STEP), so the test does not depend on timing.
# Then the same three with --checkpoint-every-steps (mid-epoch checkpoints: the step in
# the epoch, the epoch's metrics so far, every rank's batch-norm statistics) and
# --resume auto: the resumed run goes on from the step of the last mid-epoch checkpoint
# and ends bit for bit as the uninterrupted run, its epoch lines (loss, accuracy,
# val_loss, val_accuracy, lr) the same too.
set -u
build=${HVD_BUILD:-build}
train=$build/train
if [ ! -x "$train" ]; then echo "skipped: $train is not built"; exit 77; fi
tmp=$(mktemp -d /tmp/test_train_resume.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi2() { timeout -k 5 120 mpirun -np 2 --oversubscribe "$@"; }

# Epoch lines without timings: "Epoch E/N loss ... - lr X".
epoch_lines() { grep '^Epoch' "$1" | sed 's/:.* - loss/ loss/; s/ - [0-9.]* img\/s.*//'; }

# check_case NAME KILL_STEP DONE_EPOCHS EPOCHS FLAGS...: kill at global step KILL_STEP,
# which lies inside epoch DONE_EPOCHS + 1 (1-based), of a run of EPOCHS epochs.
# With every=N (and at_step=S, the step of that epoch the last mid-epoch checkpoint
# holds) in the environment of the call: checkpoints every N steps, --resume auto.
check_case() {
  local name=$1 kill=$2 done=$3 epochs=$4
  shift 4
  local mid=() resume=(--resume "$tmp/$name/ck/last.ckpt") at="after epoch $done"
  if [ "${every:-0}" -gt 0 ]; then
    mid=(--checkpoint-every-steps "$every"); resume=(--resume auto)
    at="after epoch $done and step $at_step of epoch $((done + 1))"
  fi
  local d=$tmp/$name
  mkdir -p "$d"
  mpi2 "$train" "$@" --epochs "$epochs" --checkpoint-dir "$d/ck_full" --export "$d/full.safetensors" \
    >"$d/full.log" 2>&1 || { echo "FAIL $name: uninterrupted run:"; cat "$d/full.log"; exit 1; }
  HVD_TRAIN_TEST_KILL_AT_STEP=$kill mpi2 -x HVD_TRAIN_TEST_KILL_AT_STEP "$train" "$@" \
    --epochs "$epochs" --checkpoint-dir "$d/ck" "${mid[@]}" --export "$d/killed.safetensors" >"$d/killed.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
    echo "FAIL $name: the killed run exited with $rc"; cat "$d/killed.log"; exit 1
  fi
  [ -e "$d/killed.safetensors" ] && { echo "FAIL $name: the killed run finished"; exit 1; }
  grep -q "Epoch $done/$epochs" "$d/killed.log" || { echo "FAIL $name: epoch $done not finished before the kill"; cat "$d/killed.log"; exit 1; }
  grep -q "Epoch $((done + 1))/$epochs" "$d/killed.log" && { echo "FAIL $name: the kill came after epoch $((done + 1))"; exit 1; }
  ls "$d/ck" | grep -q tmp && { echo "FAIL $name: a temporary checkpoint file was left behind"; exit 1; }
  if [ ${#mid[@]} -eq 0 ]; then
    cmp "$d/ck/last.ckpt" "$d/ck/epoch-$(printf %03d "$done").ckpt" || { echo "FAIL $name: last.ckpt is not epoch $done's"; exit 1; }
  fi

  mpi2 "$train" "$@" --epochs "$epochs" --checkpoint-dir "$d/ck" "${mid[@]}" "${resume[@]}" \
    --export "$d/resumed.safetensors" >"$d/resumed.log" 2>&1 \
    || { echo "FAIL $name: resumed run:"; cat "$d/resumed.log"; exit 1; }
  grep -q "resuming .* $at\$" "$d/resumed.log" || { echo "FAIL $name: no 'resuming ... $at':"; cat "$d/resumed.log"; exit 1; }
  grep -q "Epoch $done/$epochs" "$d/resumed.log" && { echo "FAIL $name: the resumed run repeated an epoch"; exit 1; }
  if ! diff <(epoch_lines "$d/full.log" | tail -n $((epochs - done))) <(epoch_lines "$d/resumed.log"); then
    echo "FAIL $name: the resumed run's epoch lines differ from the uninterrupted run's"; exit 1
  fi
  if ! cmp "$d/full.safetensors" "$d/resumed.safetensors"; then
    echo "FAIL $name: resumed weights differ from the uninterrupted run"
    tail -n 4 "$d/full.log" "$d/resumed.log"
    exit 1
  fi
  local a b
  a=$(grep '^test accuracy' "$d/full.log"); b=$(grep '^test accuracy' "$d/resumed.log")
  [ "$a" = "$b" ] || { echo "FAIL $name: $a vs $b"; exit 1; }
  echo "$name: resumed run matches the uninterrupted one bit for bit ($a)"
}

# 1024 synthetic samples, 10% held out: 922 train, 461 per rank, 15 steps of 32 per epoch;
# step 37 is step 7 of epoch 3.
check_case mlp_sgd 37 2 4 --model mlp --dataset synthetic --synthetic-samples 1024 --batch-size 32 \
  --seed 7 --threads 1 --lr 0.02 --warmup-epochs 1 --lr-schedule cosine --bucket-mb 0.5
# 160 samples: 144 train, 72 per rank, 5 steps of 16; step 6 is step 1 of epoch 2.
check_case resnet20_adam 6 1 3 --model resnet20 --dataset synthetic --synthetic-samples 160 \
  --batch-size 16 --seed 5 --threads 1 --optimizer adam --augment
# Dropout (alexnet): nn's mask counter must carry over. 24 samples: 22 train, 11 per
# rank, 3 steps of 4; step 5 is step 2 of epoch 2.
check_case alexnet_dropout 5 1 3 --model alexnet --dataset synthetic --synthetic-samples 24 \
  --batch-size 4 --seed 3 --threads 1 --lr 0.001

# Mid-epoch: the same runs with a checkpoint every few steps. mlp: 15 steps an epoch,
# every 4: the kill at step 37 finds the checkpoint of global step 36, step 6 of epoch 3.
every=4 at_step=6 check_case mlp_sgd_mid 37 2 4 --model mlp --dataset synthetic \
  --synthetic-samples 1024 --batch-size 32 --seed 7 --threads 1 --lr 0.02 --warmup-epochs 1 \
  --lr-schedule cosine --bucket-mb 0.5
# resnet20 (each rank's own batch-norm statistics): 5 steps an epoch, every 2: the kill
# at step 9 (9 steps done) finds the checkpoint of 8 steps, step 3 of epoch 2.
every=2 at_step=3 check_case resnet20_adam_mid 9 1 3 --model resnet20 --dataset synthetic \
  --synthetic-samples 160 --batch-size 16 --seed 5 --threads 1 --optimizer adam --augment
# alexnet: 3 steps an epoch, every 1: the kill at step 5 finds step 2 of epoch 2.
every=1 at_step=2 check_case alexnet_dropout_mid 5 1 3 --model alexnet --dataset synthetic \
  --synthetic-samples 24 --batch-size 4 --seed 3 --threads 1 --lr 0.001
