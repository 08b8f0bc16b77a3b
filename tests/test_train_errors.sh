#!/usr/bin/env bash
# build/train's failure paths: bad flags and values, corrupt and truncated data files,
# a corrupt checkpoint, a checkpoint of another model, rank 0 failing alone (its --logdir,
# a checkpoint mid-run). Each must exit non-zero with exactly one "train: ..." line
# naming the flag or file (with 2 ranks: rank 0's line, nothing from rank 1 about the
# runtime rank 0 shut down), and leave existing checkpoints byte-for-byte untouched.
# (Output paths: test_train_output_paths.sh; failed writes: test_train_write_errors.sh.)
set -u
. "$(dirname "$0")/train_prelude.sh"

# flags (single process: stderr holds only our line)
expect_error "unknown flag" "unknown flag --epoch (did you mean --epochs?)" "$train" --epoch 3
expect_error "missing value" "--batch-size" "$train" --batch-size
expect_error "bad integer" "--epochs" "$train" --epochs three
expect_error "negative batch" "--batch-size" "$train" --batch-size=-4
expect_error "bad choice" "--dataset" "$train" --dataset imagenet
expect_error "bad optimizer" "--optimizer" "$train" --optimizer lamb
expect_error "bad number" "--lr" "$train" --lr 0.1x
expect_error "bool with value" "--augment" "$train" --augment=yes
expect_error "stray argument" "lenet" "$train" lenet
expect_error "unknown model" "--model" "$train" --model lenet5 --dataset synthetic
"$train" --help >"$tmp/help" 2>&1 || { echo "FAIL --help exits non-zero"; fails=$((fails + 1)); }
for f in --model --dataset --data-dir --epochs --batch-size --lr --optimizer --seed --threads \
         --export --warmup-epochs --lr-schedule --early-stopping-patience --min-delta --monitor \
         --restore-best-weights --checkpoint-dir --save-best-only --resume --logdir --augment \
         --bucket-mb --device; do
  grep -q -- "$f" "$tmp/help" || { echo "FAIL --help does not list $f"; fails=$((fails + 1)); }
done

# data files: a copy of the real Fashion-MNIST directory, then one file damaged at a time
src=/usr/share/datasets/fashion-mnist
# make test installs the data set (scripts/install-deps.sh): its absence is a failure
if [ ! -f "$src/train-images-idx3-ubyte.gz" ]; then
  echo "FAIL $src/train-images-idx3-ubyte.gz missing (scripts/install-deps.sh installs dataset-fashion-mnist)"
  fails=$((fails + 1))
else
  mkdir "$tmp/fm"
  cp "$src"/*.gz "$tmp/fm/"
  f=$tmp/fm/t10k-labels-idx1-ubyte.gz
  head -c 3000 "$src/t10k-labels-idx1-ubyte.gz" >"$f"
  expect_error "truncated labels" "$f" mpi2 "$train" --data-dir "$tmp/fm" --epochs 1
  cp "$src/t10k-labels-idx1-ubyte.gz" "$f"
  f=$tmp/fm/train-images-idx3-ubyte.gz
  # corrupt the deflate stream in the middle
  size=$(stat -c %s "$f")
  printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc status=none
  expect_error "corrupt images" "$f" mpi2 "$train" --data-dir "$tmp/fm" --epochs 1
  cp "$src/train-images-idx3-ubyte.gz" "$f"
  rm "$tmp/fm/t10k-images-idx3-ubyte.gz"
  expect_error "missing file" "t10k-images-idx3-ubyte" mpi2 "$train" --data-dir "$tmp/fm" --epochs 1
fi

# checkpoints: make real ones, then break copies of them
common=(--dataset synthetic --synthetic-samples 256 --batch-size 32 --threads 1 --quiet)
mpi2 "$train" --model mlp "${common[@]}" --epochs 1 --checkpoint-dir "$tmp/ck" >"$tmp/out" 2>&1 \
  || { echo "FAIL making a checkpoint:"; cat "$tmp/out"; exit 1; }
[ -f "$tmp/ck/last.ckpt" ] || { echo "FAIL no $tmp/ck/last.ckpt"; exit 1; }
mpi2 "$train" --model lenet "${common[@]}" --epochs 1 --checkpoint-dir "$tmp/ck_lenet" >"$tmp/out" 2>&1 \
  || { echo "FAIL making a lenet checkpoint:"; cat "$tmp/out"; exit 1; }
sums_before=$(snapshot ck ck_lenet) || exit 1

cp "$tmp/ck/last.ckpt" "$tmp/corrupt.ckpt"
dd if=/dev/urandom of="$tmp/corrupt.ckpt" bs=1 seek=5000 count=4 conv=notrunc status=none
expect_error "corrupt checkpoint" "$tmp/corrupt.ckpt" mpi2 "$train" --model mlp "${common[@]}" \
  --epochs 2 --resume "$tmp/corrupt.ckpt" --checkpoint-dir "$tmp/ck"
head -c 10000 "$tmp/ck/last.ckpt" >"$tmp/short.ckpt"
expect_error "truncated checkpoint" "$tmp/short.ckpt" mpi2 "$train" --model mlp "${common[@]}" \
  --epochs 2 --resume "$tmp/short.ckpt" --checkpoint-dir "$tmp/ck"
expect_error "checkpoint of another model" "$tmp/ck_lenet/last.ckpt" mpi2 "$train" --model mlp \
  "${common[@]}" --epochs 2 --resume "$tmp/ck_lenet/last.ckpt" --checkpoint-dir "$tmp/ck"
expect_error "checkpoint of another data set" "$tmp/ck/last.ckpt" mpi2 "$train" --model mlp \
  --dataset fashion-mnist --max-train 512 --epochs 2 --resume "$tmp/ck/last.ckpt" --checkpoint-dir "$tmp/ck"
expect_error "missing checkpoint" "$tmp/none.ckpt" mpi2 "$train" --model mlp "${common[@]}" \
  --epochs 2 --resume "$tmp/none.ckpt" --checkpoint-dir "$tmp/ck"

# (a setup failure of rank 0 alone, its --logdir: test_train_output_paths.sh)
# a failure of rank 0 alone mid-run: a directory stands where epoch 2's checkpoint goes
mkdir -p "$tmp/ck_mid/epoch-002.ckpt"
expect_error "checkpoint failing mid-run" "epoch-002.ckpt" mpi2 "$train" --model mlp "${common[@]}" \
  --epochs 3 --checkpoint-dir "$tmp/ck_mid"

finish "error cases pass" "$sums_before" ck ck_lenet
