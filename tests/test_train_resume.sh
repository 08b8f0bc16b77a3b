#!/usr/bin/env bash
# Exact resume: a 2-rank run killed with SIGKILL in mid-epoch and resumed from its last
# checkpoint ends with the same weights, byte for byte, as the uninterrupted run with
# the same seed and ranks (exported safetensors compared with cmp). SGD with momentum,
# warm-up and a cosine schedule, so optimizer state, epoch and lr all have to carry over.
# The kill is a real SIGKILL that rank 0 sends itself at a chosen global step
# (HVD_TRAIN_TEST_KILL_AT_STEP), so the test does not depend on timing.
set -u
build=${HVD_BUILD:-build}
train=$build/train
if [ ! -x "$train" ]; then echo "skipped: $train is not built"; exit 77; fi
tmp=$(mktemp -d /tmp/test_train_resume.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi2() { timeout -k 5 120 mpirun -np 2 --oversubscribe "$@"; }

# 1024 synthetic samples, 10% held out: 922 train, 461 per rank, 15 steps of 32 per epoch.
common=(--model mlp --dataset synthetic --synthetic-samples 1024 --batch-size 32 --epochs 4
        --seed 7 --threads 1 --lr 0.02 --warmup-epochs 1 --lr-schedule cosine --bucket-mb 0.5)

mpi2 "$train" "${common[@]}" --checkpoint-dir "$tmp/ck_full" --export "$tmp/full.safetensors" \
  >"$tmp/full.log" 2>&1 || { echo "FAIL uninterrupted run:"; cat "$tmp/full.log"; exit 1; }

# Killed in epoch 3 (0-based 2), step 7 of 15: last.ckpt then holds 2 finished epochs.
HVD_TRAIN_TEST_KILL_AT_STEP=37 mpi2 -x HVD_TRAIN_TEST_KILL_AT_STEP "$train" "${common[@]}" \
  --checkpoint-dir "$tmp/ck" --export "$tmp/killed.safetensors" >"$tmp/killed.log" 2>&1
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
  echo "FAIL the killed run exited with $rc"; cat "$tmp/killed.log"; exit 1
fi
if [ -e "$tmp/killed.safetensors" ]; then echo "FAIL the killed run finished"; exit 1; fi
grep -q "Epoch 2/4" "$tmp/killed.log" || { echo "FAIL the killed run did not finish epoch 2"; cat "$tmp/killed.log"; exit 1; }
if grep -q "Epoch 3/4" "$tmp/killed.log"; then echo "FAIL the kill came after epoch 3"; exit 1; fi
ls "$tmp/ck"
if ls "$tmp/ck" | grep -q tmp; then echo "FAIL a temporary checkpoint file was left behind"; exit 1; fi
cmp "$tmp/ck/last.ckpt" "$tmp/ck/epoch-002.ckpt" || { echo "FAIL last.ckpt is not epoch 2's"; exit 1; }

mpi2 "$train" "${common[@]}" --checkpoint-dir "$tmp/ck" --resume "$tmp/ck/last.ckpt" \
  --export "$tmp/resumed.safetensors" >"$tmp/resumed.log" 2>&1 \
  || { echo "FAIL resumed run:"; cat "$tmp/resumed.log"; exit 1; }
grep -q "resuming .* after epoch 2" "$tmp/resumed.log" || { echo "FAIL resume message"; cat "$tmp/resumed.log"; exit 1; }
if grep -q "Epoch [12]/4" "$tmp/resumed.log"; then echo "FAIL the resumed run repeated epochs"; exit 1; fi

if ! cmp "$tmp/full.safetensors" "$tmp/resumed.safetensors"; then
  echo "FAIL resumed weights differ from the uninterrupted run"
  tail -n 4 "$tmp/full.log" "$tmp/resumed.log"
  exit 1
fi
full_acc=$(grep '^test accuracy' "$tmp/full.log")
res_acc=$(grep '^test accuracy' "$tmp/resumed.log")
[ "$full_acc" = "$res_acc" ] || { echo "FAIL $full_acc vs $res_acc"; exit 1; }
echo "resumed run matches the uninterrupted one bit for bit ($full_acc)"
