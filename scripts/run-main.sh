#!/usr/bin/env bash
# The main job (`make run`): train lenet on Fashion-MNIST on 2 ranks to >= 90% test
# accuracy. Adam (lr 0.001 per rank, 0.002 after scaling by the 2 ranks) with a cosine
# decay over 3 epochs; extra flags are passed on to build/train (e.g. --logdir runs/).
set -euo pipefail
build=${1:-build}
shift || true
cd "$(dirname "$0")/.."
if [ ! -x "$build/train" ]; then
  echo "run-main: $build/train is not built yet (run make)" >&2
  exit 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun -np 2 --oversubscribe "$build/train" --model lenet --dataset fashion-mnist \
  --epochs 3 --optimizer adam --lr 0.001 --lr-schedule cosine "$@"
