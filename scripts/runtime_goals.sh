#!/usr/bin/env bash
# The runtime's three speed goals, side by side in one run (a benchmark, not a test):
#   1. latency: an 8-byte blocking hvd_allreduce at np=2, response cache on (default) and
#      off, beside MPI_Allreduce in the same processes (scripts/hvd_latency.c; goal <= 8 us);
#   2. bandwidth: 1-4 MiB busbw of hvd_allreduce against the MPI peer's MPI_Allreduce
#      (scripts/compare_allreduce.sh; goal >= 1.0x);
#   3. scaling: cnn_bench lenet at np=2 against the same run without communication
#      (--variable_update none, the ceiling), one thread per rank
#      (scripts/compare_scaling.sh; goal >= 0.95); beside it the ceiling's replicas with a
#      barrier after every step (--variable_update barrier), which splits the gap into
#      what synchronising costs on this machine and what the gradients cost.
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
# barrier2: the ceiling's independent replicas, waiting for each other after every step:
# what the ranks' skew alone costs any synchronous scheme on this machine, so that
# ours/barrier is what the gradient communication itself costs.
CONFIGS="ours2 none2 barrier2" MODELS=lenet REPS=$reps STEPS=${SCALING_STEPS:-40} BUILD=$build \
  scripts/compare_scaling.sh "$out" >/dev/null 2>&1
awk -F'\t' 'NR > 1 && $1 == "lenet" {print $2, $4}' "$out/scaling_raw.tsv" | sort -k1,1 -s |
  awk '{print "  " $0}'
# A failed run has images/sec "nan" (compare_scaling says why on stderr): left out.
col() { awk -F'\t' -v c="$1" '$2 == c && $4 != "nan" {print $4}' "$out/scaling_raw.tsv" | median; }
o=$(col ours2)
n=$(col none2)
b=$(col barrier2)
if [ -z "$o" ] || [ -z "$n" ] || [ -z "$b" ]; then
  echo "runtime_goals: a configuration of part 3 gave no figure" >&2
  exit 1
fi
# Paired: each round runs ours, the ceiling and the barrier run back to back, so the
# ratios within a round see the same phase of a shared machine; the medians of those
# ratios are shown beside the ratios of the medians (the goal's figure).
paired() { # A B: median over rounds of A/B
  awk -F'\t' -v a="$1" -v b="$2" '$4 == "nan" {next} $2 == a {x[$3] = $4} $2 == b {y[$3] = $4}
    END {for (r in x) if (r in y && y[r] + 0 > 0) print x[r] / y[r]}' "$out/scaling_raw.tsv" |
    median
}
printf '| measure | ratio of the medians | median of the rounds'"'"' ratios |\n|---|---:|---:|\n'
awk -v o="$o" -v n="$n" -v p="$(paired ours2 none2)" \
  'BEGIN { printf "| ours/ceiling (goal >= 0.95) | %.3f | %.3f |\n", o / n, p }'
awk -v b="$b" -v n="$n" -v p="$(paired barrier2 none2)" \
  'BEGIN { printf "| barrier/ceiling (the skew) | %.3f | %.3f |\n", b / n, p }'
awk -v o="$o" -v b="$b" -v p="$(paired ours2 barrier2)" \
  'BEGIN { printf "| ours/barrier (the gradients) | %.3f | %.3f |\n", o / b, p }'
echo "medians: ours $o, ceiling $n, barrier $b img/s; goal: ours/ceiling >= 0.95"
