#!/usr/bin/env bash
# build/train with an output path rank 0 cannot write: --checkpoint-dir, --logdir, or the
# directory of --export. Each is found before the first epoch (not after an epoch, or
# after all of training), with exactly one "train: ..." line naming the flag and the
# path (nothing from rank 1), a non-zero exit, and the existing checkpoints and export
# byte-for-byte untouched. Tests run as root, for whom permissions stop no write: the
# paths lie under a regular file (ENOTDIR) or in /proc/sys (no new files there).
set -u
. "$(dirname "$0")/train_prelude.sh"

# not --quiet: the epoch lines show whether training started
common=(--model mlp --dataset synthetic --synthetic-samples 256 --batch-size 32 --threads 1)
mkdir "$tmp/exp"
mpi2 "$train" "${common[@]}" --quiet --epochs 1 --checkpoint-dir "$tmp/ck" \
  --export "$tmp/exp/model.safetensors" >"$tmp/out" 2>&1 \
  || { echo "FAIL making a checkpoint and an export:"; cat "$tmp/out"; exit 1; }
sums_before=$(snapshot ck exp) || exit 1
touch "$tmp/file"
exp=(--export "$tmp/exp/model.safetensors")

NO_EPOCH=1 expect_error "--checkpoint-dir under a file" "--checkpoint-dir $tmp/file/ck" mpi2 "$train" \
  "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/file/ck" "${exp[@]}"
NO_EPOCH=1 expect_error "--checkpoint-dir that takes no files" "--checkpoint-dir /proc/sys" mpi2 "$train" \
  "${common[@]}" --epochs 2 --checkpoint-dir /proc/sys "${exp[@]}"
NO_EPOCH=1 expect_error "--logdir under a file" "--logdir $tmp/file/logs" mpi2 "$train" "${common[@]}" \
  --epochs 2 --logdir "$tmp/file/logs" --checkpoint-dir "$tmp/ck" "${exp[@]}"
NO_EPOCH=1 expect_error "--export under a file" "--export $tmp/file/model.safetensors" mpi2 "$train" \
  "${common[@]}" --epochs 2 --export "$tmp/file/model.safetensors" --checkpoint-dir "$tmp/ck"
NO_EPOCH=1 expect_error "--export in a directory that takes no files" "--export /proc/sys/m.safetensors" \
  mpi2 "$train" "${common[@]}" --epochs 2 --export /proc/sys/m.safetensors --checkpoint-dir "$tmp/ck"
NO_EPOCH=1 expect_error "--export naming a directory" "--export $tmp/exp" mpi2 "$train" "${common[@]}" \
  --epochs 2 --export "$tmp/exp" --checkpoint-dir "$tmp/ck"

finish "output-path cases pass" "$sums_before" ck exp
