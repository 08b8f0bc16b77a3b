#!/usr/bin/env bash
# scripts/bench_onnx.sh: what a model read from ONNX costs in cnn_bench against the same
# network built in. torchvision's resnet18 (3x224x224, 1000 classes) exported by
# torch.onnx.export (tests/onnx_reference.py's export: training mode, batch norm kept)
# and run with --model_file, against nn's built-in resnet18 (--model resnet18: the same
# layers, names and shapes), so the difference is the graph path's own cost (the goal:
# under 3%). One process at a time, the same flags, in turns (A B A B ...); prints each
# side's median images/sec, every round's figure, and the ratio.
# Usage: scripts/bench_onnx.sh [BATCH] [BATCHES] [ROUNDS]   (defaults 16 5 3: about 2
# minutes on 2 idle cores). Environment: BUILD (default build), THREADS (cnn_bench
# --threads, default all cores).
set -u
cd "$(dirname "$0")/.." || exit 2
batch=${1:-16} batches=${2:-5} rounds=${3:-3}
build=${BUILD:-build}
[ -x "$build/cnn_bench" ] || { echo "bench_onnx: $build/cnn_bench is not built (make)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/bench_onnx.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

/usr/bin/python3 - "$tmp/resnet18.onnx" >"$tmp/export.log" 2>&1 <<'PY' ||
import sys
sys.path.insert(0, "tests")
import torch, torchvision
from onnx_reference import export
torch.manual_seed(1)
export(torchvision.models.resnet18(num_classes=1000), (3, 224, 224), sys.argv[1])
PY
  { echo "bench_onnx: exporting torchvision's resnet18 failed:" >&2; tail "$tmp/export.log" >&2; exit 1; }

speed() {  # cnn_bench's total images/sec for the model flags given
  "$build/cnn_bench" "$@" --batch_size "$batch" --num_batches "$batches" \
    --num_warmup_batches 2 ${THREADS:+--threads "$THREADS"} 2>&1 |
    sed -n 's/^total images\/sec: \([0-9.]*\)$/\1/p'
}
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

builtin="" onnx=""
for ((r = 0; r < rounds; r++)); do
  a=$(speed --model resnet18) b=$(speed --model_file "$tmp/resnet18.onnx")
  if [ -z "$a" ] || [ -z "$b" ]; then echo "bench_onnx: cnn_bench gave no figure (round $r)" >&2; exit 1; fi
  builtin+="$a " onnx+="$b "
done
mb=$(tr ' ' '\n' <<<"$builtin" | grep . | median)
mo=$(tr ' ' '\n' <<<"$onnx" | grep . | median)
printf '%-36s %12s   %s\n' "resnet18, 3x224x224, 1000 classes" images/sec "(batch $batch, \
$batches timed batches, median of $rounds rounds in turns; $(date -u +%Y-%m-%d))"
printf '%-36s %12s   [%s]\n' "built in (--model resnet18)" "$mb" "${builtin% }"
printf '%-36s %12s   [%s]\n' "torchvision ONNX (--model_file)" "$mo" "${onnx% }"
awk -v b="$mb" -v o="$mo" 'BEGIN {printf "the ONNX graph costs %+.1f%% (ONNX / built in = %.3f; goal: under 3%%)\n", (b / o - 1) * 100, o / b}'
