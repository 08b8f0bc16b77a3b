#!/usr/bin/env bash
# scripts/compare_pipeline.sh: pipeline model parallelism against the unsplit model, side by
# side in one run. resnet20 (its 9 residual blocks of similar cost cut into 2 stages of
# nearly equal measured time; lenet cuts only into 5.6 and 2.4 ms per micro-batch, so its
# second stage idles half of every step whatever the schedule) on synthetic data, one thread
# per rank, each rank pinned to its own core (taskset): the unsplit model on 1 rank, then 2
# stages on 2 ranks with M = 1, 2, 4, 8 micro-batches of the same 32-sample batch, for each
# schedule. Prints per run: images/sec and its ratio to the unsplit model's (goal with 1F1B
# at M = 4: >= 1.4), each stage's measured idle fraction (the time of the step's pipeline
# phase not spent computing, from the stages' own clocks) beside the bubble's theory
# (S-1)/(M+S-1) (goal with 1F1B: within 5 points) and beside the theory for the stages'
# measured times t_s (1 - M t_s / (sum t + (M-1) max t): what imbalance adds), the share
# of the step spent copying activations (stash, unstash, send buffers), and the peak
# activation stash per stage beside the unsplit model's activations for the whole batch.
# Then, for M = 4 with each schedule, the last step of the run as train draws it: one line
# per stage, time to the right, F and B the forward and backward of the micro-batch whose
# digit starts them, '.' idle (the bubble).
# Usage: scripts/compare_pipeline.sh [BUILD_DIR]   (default build; `make` first)
# Environment: SAMPLES (training samples, default 960), EPOCHS (default 1), MODEL (default
# resnet20), CORES (the two cores to pin the ranks to, default "0 1"; the unsplit run
# takes the first).
# PLOT: where the picture of those two steps goes (scripts/plot_pipeline_timeline.py: a
# Gantt chart per schedule, one row per stage), default docs/img/pipeline_timeline.svg;
# PLOT= (empty): no picture.
set -u
build=${1:-build}
train=$build/train
[ -x "$train" ] || { echo "compare_pipeline: $train is not built (run make)" >&2; exit 2; }
plot=${PLOT-$(dirname "$0")/../docs/img/pipeline_timeline.svg}
[ -z "$plot" ] || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null ||
  { echo "compare_pipeline: the picture needs matplotlib for /usr/bin/python3 (apt-get install -y python3-matplotlib; PLOT= skips it)" >&2; exit 2; }
samples=${SAMPLES:-960}
epochs=${EPOCHS:-1}
model=${MODEL:-resnet20}
read -r core0 core1 _ <<<"${CORES:-0 1}"
[ -n "${core1:-}" ] || { echo "compare_pipeline: CORES needs two cores (got '${CORES:-}')" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--model "$model" --dataset synthetic --synthetic-samples "$samples" --epochs "$epochs"
        --batch-size 32 --threads 1 --validation-split 0.01)
tmp=$(mktemp -d /tmp/compare_pipeline.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# Rank r of mpirun on the r-th of CORES.
printf '#!/bin/sh\nif [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then c=%s; else c=%s; fi\nexec taskset -c "$c" "$@"\n' \
  "$core0" "$core1" >"$tmp/pin"
chmod +x "$tmp/pin"
taskset -c "$core0" true || { echo "compare_pipeline: cannot pin to core $core0 (set CORES)" >&2; exit 2; }
# Idle theory for stage s of the run's measured stage times (the plan's ms per micro-batch).
stage_theory() {
  sed -n 's/^stage \([0-9]*\): layers .*, \([0-9.]*\) ms per micro-batch/\1 \2/p' "$1" |
    awk -v s="$2" -v M="$3" '{ t[$1] = $2; sum += $2; if ($2 > max) max = $2 }
      END { if (max > 0) printf "%.1f", 100 * (1 - M * t[s] / (sum + (M - 1) * max)) }'
}
ips() { sed -n 's/.*images\/sec: .* per rank, \([0-9.]*\) total.*/\1/p' "$1"; }
taskset -c "$core0" "$train" "${common[@]}" >"$tmp/unsplit" 2>&1 || { cat "$tmp/unsplit"; exit 1; }
base=$(ips "$tmp/unsplit")
echo "$model, synthetic, batch 32, SAMPLES=$samples; ranks pinned to cores $core0 and $core1"
echo "idle: measured (bubble theory (S-1)/(M+S-1), theory for these stages' times); copy: activations copied"
printf '%-6s %3s %10s %8s %22s %22s %12s %14s\n' schedule M images/s vs-1rank \
  "stage0 idle" "stage1 idle" "copy s0/s1" "peak stash"
printf '%-6s %3s %10s %8s\n' unsplit - "$base" 1.00
for sched in gpipe 1f1b; do
  for M in 1 2 4 8; do
    out=$tmp/$sched.$M
    mpirun -np 2 --bind-to none "$tmp/pin" "$train" "${common[@]}" --pipeline-stages 2 --micro-batches "$M" \
      --pipeline-schedule "$sched" >"$out" 2>&1 || { cat "$out"; exit 1; }
    v=$(ips "$out")
    i0=$(sed -n 's/^pipeline stage 0: idle \([0-9.]*\)% .*theory \([0-9.]*\)%.*/\1 (\2/p' "$out")
    i1=$(sed -n 's/^pipeline stage 1: idle \([0-9.]*\)% .*theory \([0-9.]*\)%.*/\1 (\2/p' "$out")
    i0="$i0, $(stage_theory "$out" 0 "$M"))"
    i1="$i1, $(stage_theory "$out" 1 "$M"))"
    c0=$(sed -n 's/^pipeline stage 0: .*copying activations \([0-9.]*\)%.*/\1/p' "$out")
    c1=$(sed -n 's/^pipeline stage 1: .*copying activations \([0-9.]*\)%.*/\1/p' "$out")
    m0=$(sed -n 's/^pipeline stage 0: .*stash \([0-9.]*\) MiB/\1/p' "$out")
    m1=$(sed -n 's/^pipeline stage 1: .*stash \([0-9.]*\) MiB/\1/p' "$out")
    printf '%-6s %3s %10s %8.2f %22s %22s %12s %14s\n' "$sched" "$M" "$v" \
      "$(echo "$v / $base" | bc -l)" "$i0" "$i1" "$c0/$c1%" "$m0+$m1 MiB"
  done
done
# The work one batch costs beyond the unsplit model's: smaller micro-batches and the
# stash's copies (the stages' planned times, measured alone on this machine).
sed -n 's/^stage [0-9]*: layers .*, \([0-9.]*\) ms per micro-batch (\([0-9.]*\) of it.*/\1 \2/p' \
  "$tmp/1f1b.4" | awk -v ips="$base" '{ t += $1; c += $2 }
    END { if (ips > 0) printf "compute per 32-sample batch: unsplit %.1f ms (its images/sec); " \
          "1f1b, M = 4: the stages %.1f ms (4 micro-batches, %.1f ms of it copying)\n",
          32000 / ips, 4 * t, 4 * c }'
for sched in gpipe 1f1b; do
  echo "$sched, M = 4:"
  sed -n '/^pipeline: the last step/,/^  stage 1 |/p' "$tmp/$sched.4"
done
sed -n 's/^unsplit model: activations of a \([0-9]*\)-sample batch \([0-9.]*\) MiB/unsplit model: activations of the \1-sample batch: \2 MiB/p' "$out"
sed -n '/^stage [0-9]: layers/p' "$out"
if [ -n "$plot" ]; then   # the two M = 4 steps drawn (prints where it wrote them)
  /usr/bin/python3 "$(dirname "$0")/plot_pipeline_timeline.py" "$tmp/gpipe.4" "$tmp/1f1b.4" \
    --out "$plot" || { echo "compare_pipeline: no picture (PLOT= skips it)" >&2; exit 1; }
fi
