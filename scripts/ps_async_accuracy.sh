#!/usr/bin/env bash
# ps-async against ps-sync on Fashion-MNIST: 4 ranks x 32, 4 epochs of 32 steps of lenet,
# plain SGD, ps-async with --max-staleness 1; prints both test accuracies and their gap.
# A measurement, not a test: how stale the pushes get, and the accuracy with it, depends
# on how the machine schedules the ranks (docs/train.md, "Parameter servers").
# Usage: scripts/ps_async_accuracy.sh [BUILD_DIR]
set -u
cd "$(dirname "$0")/.." || exit 2
build=${1:-build}
train=$build/train
[ -x "$train" ] || { echo "ps_async_accuracy: $train is not built (run make)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/ps_async_accuracy.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi() { local np=$1; shift; timeout -k 5 1200 mpirun -np "$np" --oversubscribe "$@"; }
fm=(--model lenet --max-train 4096 --max-test 2000 --validation-split 0 --batch-size 32
    --epochs 4 --seed 5 --threads 1 --momentum 0 --lr 0.05)
mpi 4 "$train" "${fm[@]}" --variable-update ps-sync >"$tmp/sync.log" 2>&1 ||
  { echo "ps_async_accuracy: ps-sync failed:" >&2; cat "$tmp/sync.log" >&2; exit 1; }
mpi 4 "$train" "${fm[@]}" --variable-update ps-async --max-staleness 1 >"$tmp/async.log" 2>&1 ||
  { echo "ps_async_accuracy: ps-async failed:" >&2; cat "$tmp/async.log" >&2; exit 1; }
acc() { sed -n 's/^test accuracy: \([0-9.]*\)%$/\1/p' "$1"; }
a=$(acc "$tmp/async.log") s=$(acc "$tmp/sync.log")
grep '^parameter servers (ps-async' "$tmp/async.log"
echo "ps-sync test accuracy: $s%"
echo "ps-async test accuracy: $a% ($(awk -v a="$a" -v s="$s" 'BEGIN { printf "%+.2f", a - s }') points)"
