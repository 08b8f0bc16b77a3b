#!/usr/bin/env bash
# build/train when a write fails: log.csv on a full device (a symlink to /dev/full), the
# event file or a checkpoint over a file-size limit (ulimit -f: the disk filling up
# mid-run), stdout on a full device. Each must exit non-zero with exactly one
# "train: ..." line naming the file, and leave the existing checkpoints byte-for-byte
# untouched (no temporary file left over either). Before the checks these runs exited 0
# with a truncated file, or were killed by SIGXFSZ without a word.
set -u
. "$(dirname "$0")/train_prelude.sh"

# Runs train alone (one rank) under a file-size limit of $1 KiB; stdout goes through a
# pipe so the limit applies to the files train writes. PMIx's shared-memory store would
# itself trip over the limit: its hash store does not.
limited() {
  local kib=$1
  shift
  (
    export PMIX_MCA_gds=hash OMPI_MCA_gds=hash
    ulimit -f "$kib"
    exec timeout -k 5 60 "$@"
  ) | cat
  return "${PIPESTATUS[0]}"
}

common=(--model mlp --dataset synthetic --synthetic-samples 256 --batch-size 32 --threads 1)
"$train" "${common[@]}" --quiet --epochs 1 --checkpoint-dir "$tmp/ck" >"$tmp/out" 2>&1 \
  || { echo "FAIL making a checkpoint:"; cat "$tmp/out"; exit 1; }
sums_before=$(snapshot ck) || exit 1

# log.csv on a full device, 2 ranks: rank 0's line only, before the first epoch could
# replace the checkpoints.
mkdir "$tmp/full"
ln -s /dev/full "$tmp/full/log.csv"
expect_error "log.csv on /dev/full" "log.csv" mpi2 "$train" "${common[@]}" --epochs 3 \
  --checkpoint-dir "$tmp/ck" --logdir "$tmp/full"

# The event file reaches a 1 KiB limit after a few epochs (about 330 bytes each).
expect_error "event file over a file-size limit" "events.out.tfevents" limited 1 \
  "$train" "${common[@]}" --epochs 8 --resume "$tmp/ck/last.ckpt" --logdir "$tmp/logs"
if [ -z "$(ls "$tmp/logs"/train/events.out.tfevents.* 2>/dev/null)" ]; then
  echo "FAIL no event file was started"; fails=$((fails + 1))
fi
grep -q '^Epoch 2/8' "$tmp/out" \
  || { echo "FAIL the event-file run did not train a few epochs first:"; cat "$tmp/out"; fails=$((fails + 1)); }

# A checkpoint over the limit (the disk full mid-run): the old last.ckpt stays.
expect_error "checkpoint over a file-size limit" "$tmp/ck/last.ckpt" limited 64 \
  "$train" "${common[@]}" --epochs 3 --resume "$tmp/ck/last.ckpt" --checkpoint-dir "$tmp/ck"

# stdout on a full device.
expect_error "stdout on /dev/full" "standard output" bash -c '"$@" >/dev/full' _ \
  "$train" "${common[@]}" --epochs 1

finish "write-error cases pass" "$sums_before" ck
