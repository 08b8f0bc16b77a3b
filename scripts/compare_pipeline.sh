#!/usr/bin/env bash
# scripts/compare_pipeline.sh: pipeline model parallelism against the unsplit model, side by
# side in one run. lenet on synthetic data, one thread per rank: the unsplit model on 1 rank,
# then 2 stages on 2 ranks with M = 1, 2, 4, 8 micro-batches of the same 32-sample batch, for
# each schedule. Prints per run: images/sec, each stage's measured idle fraction (the time of
# the step's pipeline phase not spent computing, from the stages' own clocks) beside the
# bubble's theory (S-1)/(M+S-1), and the peak activation stash per stage beside the unsplit
# model's activations for the whole batch. Then, for M = 4 with each schedule, the last
# step of the run as train draws it: one line per stage, time to the right, F and B the
# forward and backward of the micro-batch whose digit starts them, '.' idle (the bubble).
# Usage: scripts/compare_pipeline.sh [BUILD_DIR]   (default build; `make` first)
# Environment: SAMPLES (training samples, default 1920), EPOCHS (default 1).
# PLOT: where the picture of those two steps goes (scripts/plot_pipeline_timeline.py: a
# Gantt chart per schedule, one row per stage), default docs/img/pipeline_timeline.svg;
# PLOT= (empty): no picture.
set -u
build=${1:-build}
train=$build/train
[ -x "$train" ] || { echo "compare_pipeline: $train is not built (run make)" >&2; exit 2; }
samples=${SAMPLES:-1920}
epochs=${EPOCHS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--model lenet --dataset synthetic --synthetic-samples "$samples" --epochs "$epochs"
        --batch-size 32 --threads 1 --validation-split 0.01)
tmp=$(mktemp -d /tmp/compare_pipeline.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
ips() { sed -n 's/.*images\/sec: .* per rank, \([0-9.]*\) total.*/\1/p' "$1"; }
"$train" "${common[@]}" >"$tmp/unsplit" 2>&1 || { cat "$tmp/unsplit"; exit 1; }
base=$(ips "$tmp/unsplit")
printf '%-6s %3s %10s %8s %24s %24s %12s\n' schedule M images/s vs-1rank \
  "stage0 idle (theory)" "stage1 idle (theory)" "peak stash"
printf '%-6s %3s %10s %8s\n' unsplit - "$base" 1.00
for sched in gpipe 1f1b; do
  for M in 1 2 4 8; do
    out=$tmp/$sched.$M
    mpirun -np 2 --bind-to none "$train" "${common[@]}" --pipeline-stages 2 --micro-batches "$M" \
      --pipeline-schedule "$sched" >"$out" 2>&1 || { cat "$out"; exit 1; }
    v=$(ips "$out")
    i0=$(sed -n 's/^pipeline stage 0: idle \([0-9.]*\)% .*theory \([0-9.]*\)%.*/\1 (\2)/p' "$out")
    i1=$(sed -n 's/^pipeline stage 1: idle \([0-9.]*\)% .*theory \([0-9.]*\)%.*/\1 (\2)/p' "$out")
    m0=$(sed -n 's/^pipeline stage 0: .*stash \([0-9.]*\) MiB/\1/p' "$out")
    m1=$(sed -n 's/^pipeline stage 1: .*stash \([0-9.]*\) MiB/\1/p' "$out")
    printf '%-6s %3s %10s %8.2f %24s %24s %12s\n' "$sched" "$M" "$v" \
      "$(echo "$v / $base" | bc -l)" "$i0" "$i1" "$m0+$m1 MiB"
  done
done
for sched in gpipe 1f1b; do
  echo "$sched, M = 4:"
  sed -n '/^pipeline: the last step/,/^  stage 1 |/p' "$tmp/$sched.4"
done
sed -n 's/^unsplit model: activations of a \([0-9]*\)-sample batch \([0-9.]*\) MiB/unsplit model: activations of the \1-sample batch: \2 MiB/p' "$out"
sed -n '/^stage [0-9]: layers/p' "$out"
plot=${PLOT-$(dirname "$0")/../docs/img/pipeline_timeline.svg}
if [ -n "$plot" ]; then   # the two M = 4 steps drawn (prints where it wrote them)
  /usr/bin/python3 "$(dirname "$0")/plot_pipeline_timeline.py" "$tmp/gpipe.4" "$tmp/1f1b.4" \
    --out "$plot" || { echo "compare_pipeline: no picture (PLOT= skips it)" >&2; exit 1; }
fi
