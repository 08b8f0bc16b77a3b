#!/usr/bin/env bash
# plot_scaling.sh: re-makes the pictures of docs/performance.md and the tables beside them
# from saved runs, without running the benchmarks again (scripts/figures.py; to measure
# and plot in one command use scripts/figure_scaling.sh and scripts/figure_allreduce.sh,
# which save the runs this reads):
#   docs/img/scaling.png + .md          from SCALING_DIR/scaling_raw.tsv (compare_scaling.sh)
#   docs/img/allreduce_busbw.png + .md  from ALLREDUCE_LOG (compare_allreduce.sh's output)
# each table spliced into docs/performance.md between its figure markers.
# Usage: scripts/plot_scaling.sh [SCALING_DIR [ALLREDUCE_LOG]]
#   SCALING_DIR    default $HVD_BUILD/figures/scaling (HVD_BUILD: build)
#   ALLREDUCE_LOG  default $HVD_BUILD/figures/compare_allreduce.txt
set -u
cd "$(dirname "$0")/.."
build=${HVD_BUILD:-build}
dir=${1:-$build/figures/scaling}
log=${2:-$build/figures/compare_allreduce.txt}
made=0
if [ -f "$dir/scaling_raw.tsv" ]; then
  /usr/bin/python3 scripts/figures.py scaling "$dir" --batch "${BATCH:-64}" || exit 1
  made=$((made + 1))
else
  echo "plot_scaling: no $dir/scaling_raw.tsv (scripts/figure_scaling.sh makes it)" >&2
fi
if [ -f "$log" ]; then
  /usr/bin/python3 scripts/figures.py allreduce "$log" || exit 1
  made=$((made + 1))
else
  echo "plot_scaling: no $log (scripts/figure_allreduce.sh makes it)" >&2
fi
[ $made -gt 0 ] || { echo "plot_scaling: nothing to plot" >&2; exit 1; }
