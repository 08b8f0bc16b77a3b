#!/usr/bin/env bash
# The runtime's three speed goals, side by side in one run (a benchmark, not a test):
#   1. latency: an 8-byte blocking hvd_allreduce at np=2, response cache on (default) and
#      off, beside MPI_Allreduce in the same processes (scripts/hvd_latency.c; goal <= 8 us);
#   2. bandwidth: 1-4 MiB busbw of hvd_allreduce against the MPI peer's MPI_Allreduce
#      (scripts/compare_allreduce.sh; goal >= 1.0x);
#   3. scaling: cnn_bench lenet at np=2 against the same run without communication
#      (--variable_update none, the ceiling), one thread per rank
#      (scripts/compare_scaling.sh; goal >= 0.95).
# Each part alternates its configurations REPS times and prints medians, so a slow phase
# of a shared machine hits all of them alike; run it on an otherwise idle machine.
# Usage: scripts/runtime_goals.sh [BUILD_DIR]        (default build)
# Environment: REPS (5), LAT_ITERS (20000), SCALING_STEPS (40).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${REPS:-5}
iters=${LAT_ITERS:-20000}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

make -j2 BUILD="$build" "$build/libhvd.a" "$build/libutil.a" "$build/hvd.pc" \
  "$build/allreduce_bench" "$build/cnn_bench" >/dev/null
# hvd_latency links the static libraries and what hvd.pc says they need (MPI, and the
# CUDA libraries of a CUDA build).
libs=$(sed -n 's/^Libs: *//p' "$build/hvd.pc" | sed 's/-L${prefix} //; s/-lhvd //')
# shellcheck disable=SC2086
mpicc -O2 -I. scripts/hvd_latency.c "$build/libhvd.a" "$build/libutil.a" $libs \
  -o "$build/hvd_latency"

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $(nproc) cores," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "## 1. 8-byte blocking allreduce, np=2 (best of 5 loops of $iters per run; $reps runs alternating)"
mpi=(); on=(); off=()
for r in $(seq 1 "$reps"); do
  for cap in 1024 0; do
    line=$(HVD_CACHE_CAPACITY=$cap mpirun -np 2 "$build/hvd_latency" 8 "$iters")
    m=$(sed -n 's/.*MPI_Allreduce \([0-9.]*\) us.*/\1/p' <<<"$line")
    h=$(sed -n 's/.*hvd_allreduce \([0-9.]*\) us.*/\1/p' <<<"$line")
    mpi+=("$m")
    if [ "$cap" = 0 ]; then off+=("$h"); else on+=("$h"); fi
    echo "  run $r cache $cap: hvd $h us, MPI_Allreduce $m us"
  done
done
printf '| method | median us | runs |\n|---|---:|---|\n'
printf '| hvd_allreduce, cache on | %s | %s |\n' "$(printf '%s\n' "${on[@]}" | median)" "${on[*]}"
printf '| hvd_allreduce, cache off | %s | %s |\n' "$(printf '%s\n' "${off[@]}" | median)" "${off[*]}"
printf '| MPI_Allreduce | %s | %s |\n' "$(printf '%s\n' "${mpi[@]}" | median)" "${mpi[*]}"
echo "goal: hvd_allreduce <= 8 us"

echo
echo "## 2. 1-4 MiB busbw, hvd against the MPI peer (np=2, $reps reps alternating)"
HVD_BUILD=$build scripts/compare_allreduce.sh -np 2 -reps "$reps" -b 1048576 -e 4194304 --no-gloo

echo
echo "## 3. cnn_bench lenet, np=2, against the no-communication ceiling ($reps reps alternating)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
CONFIGS="ours2 none2" MODELS=lenet REPS=$reps STEPS=${SCALING_STEPS:-40} BUILD=$build \
  scripts/compare_scaling.sh "$out" >/dev/null 2>&1
awk -F'\t' 'NR > 1 && $1 == "lenet" && ($2 == "ours2" || $2 == "none2") {print $2, $4}' \
  "$out/scaling_raw.tsv" | sort -k1,1 -s | awk '{print "  " $0}'
o=$(awk -F'\t' '$2 == "ours2" {print $4}' "$out/scaling_raw.tsv" | median)
n=$(awk -F'\t' '$2 == "none2" {print $4}' "$out/scaling_raw.tsv" | median)
# Paired: each round runs ours then the ceiling back to back, so the ratio within a round
# sees the same phase of a shared machine; the median of those ratios is shown beside the
# ratio of the medians (the goal's figure).
p=$(awk -F'\t' '$2 == "ours2" {o[$3] = $4} $2 == "none2" {n[$3] = $4}
      END {for (r in o) if (r in n && n[r] > 0) print o[r] / n[r]}' "$out/scaling_raw.tsv" | median)
awk -v o="$o" -v n="$n" -v p="$p" 'BEGIN { printf "| lenet np=2 | ours %.1f img/s | ceiling %.1f img/s | ours/ceiling %.3f | median of the rounds'"'"' ratios %.3f |\n", o, n, o / n, p }'
echo "goal: ours/ceiling >= 0.95"
