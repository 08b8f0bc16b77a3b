#!/usr/bin/env bash
# The main job (`make run`): train lenet on Fashion-MNIST on 2 ranks.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
if [ ! -x "$build/train" ]; then
  echo "run-main: $build/train is not built yet (examples/train.c is missing)" >&2
  exit 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun -np 2 --oversubscribe "$build/train" --model lenet --dataset fashion-mnist --epochs 2
