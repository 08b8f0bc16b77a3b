#!/usr/bin/env bash
# scripts/compare_python.sh: the same PyTorch training script (scripts/bench_python.py,
# resnet20, batch 64, one thread per rank, synthetic data) at np 2 with hvd.torch, with
# hvd.torch at the C runtime's background priority (hvd-cnice: HVD_BACKGROUND_NICE=auto,
# nice 19 without a GPU; hvd.torch's own default is 0, docs/python.md), with PyTorch DDP
# (gloo) and with Horovod 0.28.1 (its import line only differs from hvd.torch's), run in
# turns (A B C D A B C D ...) in one invocation, and the median of each: training
# images/sec, the CPU seconds per step of hvd's background thread, and the latency of an
# 8-byte allreduce from Python.
# Usage: scripts/compare_python.sh [REPS (3)] [STEPS (20)]
# Environment: HVD_BACKGROUND_NICE (passed on to hvd.torch's ranks when set), HVD_BUILD (default build: its lib/libhvd.so.0), MODEL (resnet20), BATCH (64),
#   THREADS (1: PyTorch's intra-op threads per rank; PyTorch's own default is one per core),
#   HOROVOD_PYTHON: a python whose `import horovod.torch` works (default $HOME/hvenv/bin/python,
#   built as docs/python.md says); without one Horovod's column is left out, saying so.
set -u
cd "$(dirname "$0")/.." || exit 2
reps=${1:-3} steps=${2:-20}
build=${HVD_BUILD:-build}
model=${MODEL:-resnet20} batch=${BATCH:-64} threads=${THREADS:-1}
horovod_py=${HOROVOD_PYTHON:-$HOME/hvenv/bin/python}
[ -f "$build/lib/libhvd.so.0" ] || { echo "compare_python.sh: $build/lib/libhvd.so.0 is missing: run make first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_orte_tmpdir_base=$tmp
export HVD_LIBRARY=$PWD/$build/lib/libhvd.so.0 PYTHONPATH=$PWD/python GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
backends=(hvd hvd-cnice ddp)
if "$horovod_py" -c 'import horovod.torch' 2>/dev/null; then
  backends+=(horovod)
else
  echo "note: no Horovod ($horovod_py cannot import horovod.torch; set HOROVOD_PYTHON): hvd.torch vs DDP only"
fi
echo "np 2, $model, batch $batch, $threads thread(s) per rank, $steps timed steps, $reps runs each, in turns; $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= reps; i++)); do
  for b in "${backends[@]}"; do
    py=/usr/bin/python3 backend=${b%-cnice} nice=()
    [ "$b" = horovod ] && py=$horovod_py
    [ -n "${HVD_BACKGROUND_NICE:-}" ] && nice=(-x HVD_BACKGROUND_NICE)
    [ "$b" = hvd-cnice ] && nice=(-x HVD_BACKGROUND_NICE=auto)
    out=$(timeout -k 5 600 mpirun --oversubscribe --bind-to none -np 2 -x HVD_LIBRARY -x PYTHONPATH "${nice[@]}" \
          -x GLOO_SOCKET_IFNAME -x OMP_NUM_THREADS="$threads" "$py" scripts/bench_python.py --backend "$backend" \
          --model "$model" --batch-size "$batch" --threads "$threads" --steps "$steps" --init-file "$tmp/init.$b.$i" 2>&1)
    ips=$(sed -nE 's/.*total images\/sec: ([0-9.]+).*/\1/p' <<<"$out")
    bg=$(sed -nE 's/.*, ([0-9.]+) of it hvd.s background thread.*/\1/p' <<<"$out")
    lat=$(sed -nE 's/.*median latency ([0-9.]+) us.*/\1/p' <<<"$out")
    [ -n "$ips" ] && [ -n "$lat" ] || { echo "$out" | tail -n 20; echo "compare_python.sh: run $i of $b failed" >&2; exit 1; }
    echo "run $i  $b: $ips images/sec, background thread ${bg:-?} CPU s/step, 8-byte allreduce $lat us"
    echo "$ips" >> "$tmp/ips.$b"
    echo "${bg:-0}" >> "$tmp/bg.$b"
    echo "$lat" >> "$tmp/lat.$b"
  done
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '\n%-9s %14s %26s %22s\n' backend "images/sec" "background thread CPU s/step" "8-byte allreduce (us)"
for b in "${backends[@]}"; do
  printf '%-9s %14s %26s %22s\n' "$b" "$(median "$tmp/ips.$b")" "$(median "$tmp/bg.$b")" "$(median "$tmp/lat.$b")"
done
h=$(median "$tmp/ips.hvd")
for b in "${backends[@]:1}"; do
  awk -v a="$h" -v b="$(median "$tmp/ips.$b")" -v n="$b" 'BEGIN { printf "hvd.torch / %s images/sec: %.2fx\n", n, a / b }'
done
