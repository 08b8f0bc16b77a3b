#!/usr/bin/env bash
# build/train with an output path rank 0 cannot write: --checkpoint-dir, --logdir, or the
# directory of --export. Each is found before the first epoch (not after an epoch, or
# after all of training), with exactly one "train: ..." line naming the flag and the
# path (nothing from rank 1), a non-zero exit, and the existing checkpoints and export
# byte-for-byte untouched. Tests run as root, for whom permissions stop no write: the
# paths lie under a regular file (ENOTDIR) or in /proc/sys (no new files there).
set -u
build=${HVD_BUILD:-build}
train=$build/train
if [ ! -x "$train" ]; then echo "skipped: $train is not built"; exit 77; fi
tmp=$(mktemp -d /tmp/test_train_output_paths.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fails=0
mpi2() { timeout -k 5 60 mpirun -np 2 --oversubscribe "$@"; }

# expect_early_error WHAT NEEDLE CMD...: non-zero exit, one "train:" line on stderr
# containing NEEDLE, and no epoch trained (stdout has no "Epoch" line).
expect_early_error() {
  local what=$1 needle=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(grep -c '^train: ' "$tmp/err")
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "FAIL $what: exit status $rc"; cat "$tmp/err"; fails=$((fails + 1))
  elif [ "$lines" -ne 1 ]; then
    echo "FAIL $what: $lines 'train:' lines on stderr:"; cat "$tmp/err"; fails=$((fails + 1))
  elif grep -q '^Epoch' "$tmp/out"; then
    echo "FAIL $what: trained $(grep -c '^Epoch' "$tmp/out") epoch(s) before: $(grep '^train: ' "$tmp/err")"
    fails=$((fails + 1))
  elif ! grep '^train: ' "$tmp/err" | grep -qF -- "$needle"; then
    echo "FAIL $what: the message does not name '$needle':"; grep '^train: ' "$tmp/err"; fails=$((fails + 1))
  else
    echo "ok   $what: $(grep '^train: ' "$tmp/err")"
  fi
}

# not --quiet: the epoch lines show whether training started
common=(--model mlp --dataset synthetic --synthetic-samples 256 --batch-size 32 --threads 1)
mkdir "$tmp/exp"
mpi2 "$train" "${common[@]}" --quiet --epochs 1 --checkpoint-dir "$tmp/ck" \
  --export "$tmp/exp/model.safetensors" >"$tmp/out" 2>&1 \
  || { echo "FAIL making a checkpoint and an export:"; cat "$tmp/out"; exit 1; }
sums_before=$(cd "$tmp" && md5sum ck/* exp/*)
touch "$tmp/file"
exp=(--export "$tmp/exp/model.safetensors")

expect_early_error "--checkpoint-dir under a file" "--checkpoint-dir $tmp/file/ck" mpi2 "$train" \
  "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/file/ck" "${exp[@]}"
expect_early_error "--checkpoint-dir that takes no files" "--checkpoint-dir /proc/sys" mpi2 "$train" \
  "${common[@]}" --epochs 2 --checkpoint-dir /proc/sys "${exp[@]}"
expect_early_error "--logdir under a file" "--logdir $tmp/file/logs" mpi2 "$train" "${common[@]}" \
  --epochs 2 --logdir "$tmp/file/logs" --checkpoint-dir "$tmp/ck" "${exp[@]}"
expect_early_error "--export under a file" "--export $tmp/file/model.safetensors" mpi2 "$train" \
  "${common[@]}" --epochs 2 --export "$tmp/file/model.safetensors" --checkpoint-dir "$tmp/ck"
expect_early_error "--export in a directory that takes no files" "--export /proc/sys/m.safetensors" \
  mpi2 "$train" "${common[@]}" --epochs 2 --export /proc/sys/m.safetensors --checkpoint-dir "$tmp/ck"
expect_early_error "--export naming a directory" "--export $tmp/exp" mpi2 "$train" "${common[@]}" \
  --epochs 2 --export "$tmp/exp" --checkpoint-dir "$tmp/ck"

sums_after=$(cd "$tmp" && md5sum ck/* exp/*)
if [ "$sums_before" != "$sums_after" ]; then
  echo "FAIL existing checkpoints or export changed:"; diff <(echo "$sums_before") <(echo "$sums_after")
  fails=$((fails + 1))
else
  echo "ok   existing checkpoints and export untouched"
fi

[ $fails -eq 0 ] && echo "all output-path cases pass" && exit 0
echo "$fails case(s) failed"
exit 1
