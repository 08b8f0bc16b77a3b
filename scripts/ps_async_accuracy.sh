#!/usr/bin/env bash
# ps-async against ps-sync on Fashion-MNIST: 4 ranks x 32, 4 epochs of 32 steps of lenet,
# plain SGD, once per seed (default 5 6 7); prints both test accuracies of every seed and
# the median of their gaps (async minus sync, in points).
#   ps-async runs with --max-staleness 1, or, with --straggler, without a bound and with
#   rank 3 a 2x straggler: it sleeps one step of the seed's ps-sync run each step
#   (--straggler-delay-ms), as scripts/compare_strategies.sh slows its rank 3.
# A measurement, not a test: how stale the pushes get, and the accuracy with it, depends
# on how the machine schedules the ranks (docs/train.md, "Parameter servers").
# Usage: scripts/ps_async_accuracy.sh [--straggler] [--seeds "5 6 7"] [BUILD_DIR]
set -u
cd "$(dirname "$0")/.." || exit 2
straggler=0 seeds="5 6 7" build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --straggler) straggler=1; shift ;;
    --seeds) seeds=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "ps_async_accuracy: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
train=$build/train
[ -x "$train" ] || { echo "ps_async_accuracy: $train is not built (run make)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/ps_async_accuracy.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi() { local np=$1; shift; timeout -k 5 1200 mpirun -np "$np" --oversubscribe "$@"; }
batch=32
fm=(--model lenet --max-train 4096 --max-test 2000 --validation-split 0 --batch-size "$batch"
    --epochs 4 --threads 1 --momentum 0 --lr 0.05)
acc() { sed -n 's/^test accuracy: \([0-9.]*\)%$/\1/p' "$1"; }
gaps=()
for seed in $seeds; do
  sync_log=$tmp/sync.$seed.log async_log=$tmp/async.$seed.log
  mpi 4 "$train" "${fm[@]}" --seed "$seed" --variable-update ps-sync >"$sync_log" 2>&1 ||
    { echo "ps_async_accuracy: ps-sync failed:" >&2; cat "$sync_log" >&2; exit 1; }
  async_flags=(--max-staleness 1)
  note="--max-staleness 1"
  if [ "$straggler" = 1 ]; then
    # One step of the sync run: its batch over the per-rank images/sec it printed.
    per_rank=$(sed -n 's/^training time: .*images\/sec: \([0-9.]*\) per rank.*/\1/p' "$sync_log")
    [ -n "$per_rank" ] || { echo "ps_async_accuracy: no images/sec in the ps-sync log" >&2; exit 1; }
    delay=$(awk -v v="$per_rank" -v b="$batch" 'BEGIN { printf "%d", b / v * 1000 }')
    async_flags=(--straggler-rank 3 --straggler-delay-ms "$delay")
    note="no staleness bound, rank 3 +$delay ms a step"
  fi
  mpi 4 "$train" "${fm[@]}" --seed "$seed" --variable-update ps-async "${async_flags[@]}" \
    >"$async_log" 2>&1 ||
    { echo "ps_async_accuracy: ps-async failed:" >&2; cat "$async_log" >&2; exit 1; }
  a=$(acc "$async_log") s=$(acc "$sync_log")
  gap=$(awk -v a="$a" -v s="$s" 'BEGIN { printf "%+.2f", a - s }')
  gaps+=("$gap")
  echo "seed $seed: ps-sync $s%, ps-async $a% ($gap points; $note)"
  grep '^parameter servers (ps-async' "$async_log"
done
median=$(printf '%s\n' "${gaps[@]}" | sort -g | awk '{ v[NR] = $1 } END {
  if (NR % 2) printf "%+.2f", v[(NR + 1) / 2]; else printf "%+.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
echo "ps-async against ps-sync, the median over seeds $seeds: $median points"
