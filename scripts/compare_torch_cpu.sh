#!/usr/bin/env bash
# Training speed of nn against PyTorch on the CPU, side by side (a benchmark, not a test).
# For each model and thread count: REPS repetitions of ours (build/nn_train_bench) and
# PyTorch's (scripts/peers/torch_ddp_bench.py, NPROC=1), alternating A B A B, same
# model, batch and thread count; prints every run, the medians and ours/torch.
# Usage: scripts/compare_torch_cpu.sh [BUILD_DIR]
# Environment: MODELS ("lenet resnet20"), THREADS ("1 2"), BATCH (64), REPS (5),
#   STEPS_lenet (20), STEPS_resnet20 (8), PROFILE=1 (our per-layer times after each
#   model/thread pair), PEERS (scripts/peers), PYTHON (/usr/bin/python3).
# OpenBLAS's kernels follow OPENBLAS_CORETYPE where it is set (the header says which ran):
# `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE scripts/compare_torch_cpu.sh` measures
# both sides with OpenBLAS's own choice on a machine that sets them.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
MODELS=${MODELS:-"lenet resnet20"}
THREADS=${THREADS:-"1 2"}
BATCH=${BATCH:-64}
REPS=${REPS:-5}
PEERS=${PEERS:-scripts/peers}
PYTHON=${PYTHON:-/usr/bin/python3}
ours=$build/nn_train_bench

[ -x "$ours" ] || make -j2 "$ours" >/dev/null
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "compare_torch_cpu: $PYTHON has no torch (Debian's python3-torch); install it:" \
       "apt-get install python3-torch" >&2
  exit 1
fi
[ -f "$PEERS/torch_ddp_bench.py" ] || { echo "compare_torch_cpu: no $PEERS/torch_ddp_bench.py" >&2; exit 1; }

ips() { sed -n 's/^total images\/sec: *//p' | tail -n 1; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, batch $BATCH, $REPS reps alternating ours/torch"
# Both sides run under this environment's OPENBLAS_* (PyTorch too calls OpenBLAS for
# some operations); which kernels our GEMMs ran is part of the result.
echo "# our BLAS: $("$ours" --model lenet --batch 1 --steps 1 --threads 1 | sed -n 's/^BLAS: //p')"
summary=()
for model in $MODELS; do
  var=STEPS_$model; steps=${!var:-$([ "$model" = lenet ] && echo 20 || echo 8)}
  for t in $THREADS; do
    a=(); b=()
    for r in $(seq 1 "$REPS"); do
      x=$("$ours" --model "$model" --batch "$BATCH" --steps "$steps" --threads "$t" | ips)
      y=$(OMP_NUM_THREADS=$t "$PYTHON" "$PEERS/torch_ddp_bench.py" "$model" "$BATCH" "$steps" 1 "$t" 2>/dev/null | ips)
      printf '%-9s threads %d rep %d: ours %8.2f  torch %8.2f img/s\n' "$model" "$t" "$r" "$x" "$y"
      a+=("$x"); b+=("$y")
    done
    ma=$(printf '%s\n' "${a[@]}" | median); mb=$(printf '%s\n' "${b[@]}" | median)
    ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.2f", a / b}')
    summary+=("$(printf '%-9s %7d %12.2f %12.2f %8s' "$model" "$t" "$ma" "$mb" "$ratio")")
    if [ "${PROFILE:-0}" = 1 ]; then
      "$ours" --model "$model" --batch "$BATCH" --steps "$steps" --threads "$t" --profile
    fi
  done
done
echo
printf '%-9s %7s %12s %12s %8s\n' model threads "ours img/s" "torch img/s" ours/torch
printf '%s\n' "${summary[@]}"
