#!/usr/bin/env bash
# scripts/bench_onnx.sh: what a model read from ONNX costs in cnn_bench, side by side in
# one run, one process, the same flags:
#   resnet20 (built in)  against  resnet20 written by train --export-onnx and read back
#                        with --model_file: the same layers, so the difference is the
#                        graph path's own cost (the goal: under 3%);
#   torchvision resnet18 exported by torch.onnx.export (tests/onnx_reference.py, 32x32,
#                        10 classes), beside them for scale: nn has no built-in resnet18
#                        (its resnet20 is the CIFAR one: 0.27M parameters against 11.2M).
# Usage: scripts/bench_onnx.sh [BATCH] [BATCHES] [ROUNDS]   (defaults 32 20 3)
# Each pair runs ROUNDS times alternately; the median images/sec of each is printed.
set -u
cd "$(dirname "$0")/.." || exit 2
batch=${1:-32} batches=${2:-20} rounds=${3:-3}
build=${BUILD:-build}
for p in "$build/train" "$build/cnn_bench"; do
  [ -x "$p" ] || { echo "bench_onnx: $p is not built (make)" >&2; exit 2; }
done
tmp=$(mktemp -d /tmp/bench_onnx.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

"$build/train" --model resnet20 --dataset synthetic --synthetic-samples 64 --epochs 1 \
  --export-onnx "$tmp/resnet20.onnx" >"$tmp/train.log" 2>&1 ||
  { echo "bench_onnx: train --export-onnx failed:" >&2; cat "$tmp/train.log" >&2; exit 1; }
/usr/bin/python3 tests/onnx_reference.py "$tmp" resnet18 >"$tmp/ref.log" 2>&1 ||
  { echo "bench_onnx: exporting torchvision's resnet18 failed:" >&2; tail "$tmp/ref.log" >&2; exit 1; }

speed() {  # cnn_bench's total images/sec for the model flags given
  "$build/cnn_bench" "$@" --batch_size "$batch" --num_batches "$batches" --num_warmup_batches 2 \
    2>&1 | sed -n 's/^total images\/sec: \([0-9.]*\)$/\1/p'
}
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

declare -A runs
cases=("resnet20|--model resnet20" "resnet20.onnx|--model_file $tmp/resnet20.onnx"
       "resnet18.onnx (torchvision)|--model_file $tmp/resnet18.onnx")
for ((r = 0; r < rounds; r++)); do
  for c in "${cases[@]}"; do
    name=${c%%|*}
    # shellcheck disable=SC2086
    runs[$name]+="$(speed ${c#*|}) "
  done
done
printf '%-28s %12s   %s\n' model images/sec "(batch $batch, $batches timed batches, median of \
$rounds rounds; each round's in brackets; $(date -u +%Y-%m-%d))"
for c in "${cases[@]}"; do
  name=${c%%|*}
  printf '%-28s %12s   [%s]\n' "$name" "$(tr ' ' '\n' <<<"${runs[$name]}" | grep . | median)" \
    "${runs[$name]% }"
done
