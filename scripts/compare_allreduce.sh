#!/usr/bin/env bash
# Allreduce side by side, float32 sum, np ranks on this machine: our ring
# (build/allreduce_bench --backend ring), the MPI library through the same program
# (--backend mpi), MPI_Sendrecv one-way bandwidth (--backend sendrecv), the hvd runtime
# (--backend hvd, when the bench has it), the MPI peer (scripts/peers) and Gloo
# through PyTorch. Runs every program once per repetition, interleaved (A B A B), and
# prints each one's median busbw (GB/s) per size, then the ratios the goals are about.
# allreduce_bench prints nccl-tests' two halves: the in-place busbw is the one taken
# (the peers reduce in place), the out-of-place one for sendrecv (a send and a receive
# buffer; in place it is MPI_Sendrecv_replace, which copies through a buffer of its own).
# scripts/figure_allreduce.sh runs this and makes the docs' table and picture from it.
#   usage: scripts/compare_allreduce.sh [-np N] [-reps R] [-b MIN] [-e MAX] [--no-gloo]
#   env:   HVD_BUILD (default build), PEERS (default scripts/peers)
set -u
cd "$(dirname "$0")/.."
build=${HVD_BUILD:-build}
peers=${PEERS:-scripts/peers}
np=2; reps=3; lo=1048576; hi=268435456; gloo=1
while [ $# -gt 0 ]; do
  case "$1" in
    -np) np=$2; shift 2 ;;
    -reps) reps=$2; shift 2 ;;
    -b) lo=$2; shift 2 ;;
    -e) hi=$2; shift 2 ;;
    --no-gloo) gloo=0; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "compare_allreduce.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

bench=$build/allreduce_bench
[ -x "$bench" ] || make -j2 BUILD="$build" "$bench" >/dev/null || { echo "cannot build $bench" >&2; exit 2; }
peer=$build/mpi_allreduce_peer
if [ ! -x "$peer" ] || [ "$peers/mpi_allreduce_peer.c" -nt "$peer" ]; then
  mpicc -O2 "$peers/mpi_allreduce_peer.c" -o "$peer" || { echo "cannot build $peer" >&2; exit 2; }
fi
if [ $gloo = 1 ] && ! /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  echo "# Gloo skipped: /usr/bin/python3 has no torch (apt-get install python3-torch)"; gloo=0
fi

names="ring mpi sendrecv hvd mpi_peer"
[ $gloo = 1 ] && names="$names gloo"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run_one() { # name rep -> rows "size busbw" in $out/name.rep
  local name=$1 f=$out/$1.$2
  case $name in
    mpi_peer) timeout 600 mpirun -np "$np" "$peer" "$lo" "$hi" ;;
    gloo) timeout 600 /usr/bin/python3 "$peers/gloo_allreduce_peer.py" "$np" "$lo" "$hi" ;;
    # Same method as the peers: best of 3 timed loops of 20 iterations below 32 MiB, 5
    # from 32 MiB up; the in-place half (column 12), out of place for sendrecv (8).
    *) local mid=33554432
       if [ "$lo" -lt $mid ]; then
         timeout 600 mpirun -np "$np" "$bench" -b "$lo" -e $(( hi < mid ? hi : mid / 2 )) -n 20 -w 3 --reps 3 --backend "$name"
       fi
       if [ "$hi" -ge $mid ]; then
         timeout 600 mpirun -np "$np" "$bench" -b $(( lo > mid ? lo : mid )) -e "$hi" -n 5 -w 1 --reps 3 --backend "$name"
       fi ;;
  esac 2>"$f.err" | awk -v c="$([ "$name" = sendrecv ] && echo 8 || echo 12)" '
    $1 ~ /^[0-9]+$/ { print $1, (NF == 13 ? $c : $7) }' >"$f"   # NF 8: the peers' columns
  [ -s "$f" ] || { echo "# $name failed:"; sed 's/^/#   /' "$f.err" | tail -5; }
}
for rep in $(seq 1 "$reps"); do
  for name in $names; do run_one "$name" "$rep"; done
done

echo "# allreduce float32 sum, np=$np, busbw GB/s, median of $reps runs each ($(date -u +%F\ %H:%M) UTC, $(nproc) cores)"
for n in $names; do cat "$out/$n".[0-9] "$out/$n".[0-9][0-9] 2>/dev/null; done | awk '{print $1}' | sort -n -u >"$out/sizes"
median() { # name size
  cat "$out/$1".[0-9] "$out/$1".[0-9][0-9] 2>/dev/null | awk -v s="$2" '$1 == s { print $2 }' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
printf '%12s' size; for n in $names; do printf '%10s' "$n"; done
printf '%10s%10s%12s%10s\n' ring/mpi ring/gloo ring/sendrv hvd/mpi
while read -r s; do
  printf '%12s' "$s"
  declare -A m=()
  for n in $names; do m[$n]=$(median "$n" "$s"); printf '%10s' "${m[$n]}"; done
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
  printf '%10s%10s%12s%10s\n' "$(ratio "${m[ring]}" "${m[mpi_peer]}")" "$(ratio "${m[ring]}" "${m[gloo]:--}")" \
    "$(ratio "${m[ring]}" "${m[sendrecv]}")" "$(ratio "${m[hvd]:--}" "${m[mpi_peer]}")"
  unset m
done <"$out/sizes"
echo "# goals: ring/mpi >= 1 at every size; ring/gloo >= 4; ring/sendrv >= 0.70 at 64 MiB;"
echo "#        hvd/mpi >= 1 at 1-4 MiB (hvd: the whole runtime, mpi: the MPI peer)"
