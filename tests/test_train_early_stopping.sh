#!/usr/bin/env bash
# build/train's callbacks end to end on 2 ranks: EarlyStopping stops when val_loss has
# not improved by --min-delta for --early-stopping-patience epochs, --restore-best-weights
# brings back the best epoch (the exported weights equal those of best.ckpt's run stopped
# there), ModelCheckpoint --save-best-only writes best.ckpt and no per-epoch files.
set -u
build=${HVD_BUILD:-build}
train=$build/train
if [ ! -x "$train" ]; then echo "skipped: $train is not built"; exit 77; fi
tmp=$(mktemp -d /tmp/test_train_early_stopping.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi2() { timeout -k 5 120 mpirun -np 2 --oversubscribe "$@"; }
common=(--model mlp --dataset synthetic --synthetic-samples 512 --batch-size 32 --seed 3 --threads 1)

# A min-delta no epoch can beat: epoch 1 is the best, the patience of 2 runs out at epoch 3.
mpi2 "$train" "${common[@]}" --epochs 10 --early-stopping-patience 2 --min-delta 100 \
  --restore-best-weights --checkpoint-dir "$tmp/ck" --save-best-only --export "$tmp/es.safetensors" \
  >"$tmp/es.log" 2>&1 || { echo "FAIL early-stopping run:"; cat "$tmp/es.log"; exit 1; }
grep -q "early stopping" "$tmp/es.log" || { echo "FAIL no early stop"; cat "$tmp/es.log"; exit 1; }
grep -q "3 epoch(s) (stopped early)" "$tmp/es.log" || { echo "FAIL did not stop after epoch 3"; cat "$tmp/es.log"; exit 1; }
grep -q "restored the best weights of epoch 1" "$tmp/es.log" || { echo "FAIL best weights not restored"; cat "$tmp/es.log"; exit 1; }
[ -f "$tmp/ck/best.ckpt" ] && [ -f "$tmp/ck/last.ckpt" ] || { echo "FAIL checkpoints missing"; ls "$tmp/ck"; exit 1; }
if ls "$tmp/ck" | grep -q '^epoch-'; then echo "FAIL per-epoch checkpoints with --save-best-only"; exit 1; fi

# The same run for one epoch exports exactly the restored weights.
mpi2 "$train" "${common[@]}" --epochs 1 --export "$tmp/one.safetensors" >"$tmp/one.log" 2>&1 \
  || { echo "FAIL one-epoch run:"; cat "$tmp/one.log"; exit 1; }
cmp "$tmp/es.safetensors" "$tmp/one.safetensors" || { echo "FAIL restored weights are not epoch 1's"; exit 1; }
a=$(grep '^test accuracy' "$tmp/es.log"); b=$(grep '^test accuracy' "$tmp/one.log")
[ "$a" = "$b" ] || { echo "FAIL $a vs $b"; exit 1; }

# Without the impossible min-delta it trains all epochs (the synthetic task keeps improving).
mpi2 "$train" "${common[@]}" --epochs 3 --early-stopping-patience 2 >"$tmp/full.log" 2>&1 \
  || { echo "FAIL plain run:"; cat "$tmp/full.log"; exit 1; }
if grep -q "stopped early" "$tmp/full.log"; then echo "FAIL stopped although val_loss improved"; cat "$tmp/full.log"; exit 1; fi
echo "early stopping, restore-best-weights and save-best-only behave as Keras"
