#!/usr/bin/env bash
# The roofline report of nn on the CPU (issue 20), from one command: builds the programs it
# needs in BUILD_DIR (bench/fma_peak.c: the measured peak and bandwidth;
# bench/nn_layer_bench.c: our per-layer times; bench/nn_train_bench.c: the model's layer
# names), then scripts/roofline.py measures resnet20 (batch 64) and resnet50 (batch 16)
# layer by layer, one thread, ours and PyTorch's (bench/torch_layer_bench.py) alternately,
# and writes the markdown report to stdout and docs/roofline.md, the plot to
# docs/roofline.png (skipped with a message without matplotlib). A benchmark, not a test;
# about 10 minutes on a 2-core machine.
# Usage: scripts/roofline.sh [BUILD_DIR]   (default build)
# Environment (see scripts/roofline.py): ROOFLINE_ROUNDS, ROOFLINE_REPS,
#   ROOFLINE_QUICK=1 (a few seconds' check that it runs), ROOFLINE_MODELS, ROOFLINE_OUT,
#   ROOFLINE_PLOT, ROOFLINE_BASELINE, PYTHON (/usr/bin/python3, which has torch).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "roofline: $PYTHON has no torch (Debian's python3-torch); install it:" \
       "apt-get install python3-torch, or set PYTHON" >&2
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "roofline: make -j2 BUILD=$build (fma_peak, nn_layer_bench, nn_train_bench)" >&2
make -j2 BUILD="$build" "$build/fma_peak" "$build/nn_layer_bench" "$build/nn_train_bench" \
  >"$log" 2>&1 ||
  { cat "$log" >&2; echo "roofline: building the benchmarks in $build failed" >&2; exit 1; }
export PYTHON
export ROOFLINE_COMMAND=${ROOFLINE_COMMAND:-"scripts/roofline.sh $build"}
"$PYTHON" scripts/roofline.py report "$build"
