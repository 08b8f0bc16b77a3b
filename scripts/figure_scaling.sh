#!/usr/bin/env bash
# figure_scaling.sh: one command for the scaling picture (total images/sec vs ranks, ours,
# PyTorch DDP and the no-communication ceiling, per model) and its tables. Runs
# scripts/compare_scaling.sh (interleaved rounds of every configuration) and makes from
# its scaling_raw.tsv both docs/img/scaling.png and the tables beside it
# (docs/img/scaling.md, spliced into docs/performance.md), with the date, the commit and
# the machine's load in the header (scripts/figures.py).
#   usage: scripts/figure_scaling.sh            (compare_scaling.sh's environment: MODELS,
#          BATCH, STEPS, WARMUP, REPS, ...; e.g. REPS=3 STEPS=10 scripts/figure_scaling.sh)
#   env:   HVD_BUILD (build), MACHINE_NOTE ("machine shared/loaded"), FIGURES_DOCS
#          (docs/performance.md; '' leaves the docs alone)
set -u
cd "$(dirname "$0")/.."
build=${HVD_BUILD:-build}
out=$build/figures/scaling
mkdir -p "$out"
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || apt-get install -y python3-matplotlib >/dev/null ||
  { echo "figure_scaling: no matplotlib (apt-get install -y python3-matplotlib)" >&2; exit 1; }
load=$(cut -d' ' -f1-3 /proc/loadavg)
BUILD=$build scripts/compare_scaling.sh "$out" || { echo "figure_scaling: compare_scaling.sh failed" >&2; exit 1; }
echo "figure_scaling: the runs are in $out/scaling_raw.tsv"
env=""
for v in MODELS BATCH STEPS WARMUP REPS CONFIGS BUCKET_MB FIRST_BUCKET_MB; do
  [ -n "${!v:-}" ] && env="$env$v=${!v} "
done
exec /usr/bin/python3 scripts/figures.py scaling "$out" --batch "${BATCH:-64}" \
  --load-start "$load" --docs "${FIGURES_DOCS-docs/performance.md}" \
  --command "${env}scripts/figure_scaling.sh"
