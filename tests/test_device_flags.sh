#!/usr/bin/env bash
# --device of build/cnn_bench and build/train on a machine without a usable GPU:
#   - --device gpu exits non-zero with ONE line naming the flag and the problem ("no
#     usable GPU", with nn_cuda_info()'s reason), also under mpirun -np 2 for train (only
#     rank 0 reports a flag error);
#   - mixed precision (--use_fp16 / --use_bf16 of cnn_bench and train, cnn_bench's
#     --allow_tf32, --data_format NHWC) on --device cpu: one line saying it needs
#     --device gpu, non-zero exit,
#     nothing trained and nothing written; both precisions at once: one line; with
#     --device gpu and no GPU: the "no usable GPU" line; --help lists the flags;
#   - in a CUDA build, rank 0 says once that there is no usable GPU and it runs on the CPU
#     (cnn_bench: on stderr, so stdout keeps the tf_cnn_benchmarks format; train: on
#     stdout), and a build without CUDA prints no such line.
# With a GPU present (nvidia-smi -L lists one) this check does not apply (the GPU paths
# are checked by scripts/gpu_check.sh): skipped. Without one, --device gpu that runs
# anyway (a silent fallback to the CPU) fails the test: it is the bug this test is for.
set -u
build=${HVD_BUILD:-build}
bench=$build/cnn_bench
train=$build/train
for b in "$bench" "$train"; do
  [ -x "$b" ] || { echo "skipped: $b not built"; exit 77; }
done
command -v mpirun >/dev/null || { echo "skipped: mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cuda=0
grep -q '^USE_CUDA=1$' "$build/config.cuda" 2>/dev/null && cuda=1

# A GPU makes --device gpu legal: nothing of this test applies. Asked of the driver's
# tool, not of the programs under test (a program that ignores --device gpu and runs on
# the CPU must fail this test, not skip it).
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]'; then
  echo "skipped: a GPU is present ($(nvidia-smi -L | head -n 1)); see scripts/gpu_check.sh"
  exit 77
fi

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_one_line NAME PATTERN... -- CMD...: non-zero exit (not a timeout), exactly one
# non-empty line of output (stdout and stderr), matching every PATTERN (fixed strings).
# With only='REGEX' set, only the lines matching REGEX count (mpirun adds its own).
expect_one_line() {
  local name=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  timeout -k 5 60 "$@" >"$tmp/out" 2>&1
  local rc=$?
  grep -E -- "${only:-.}" "$tmp/out" >"$tmp/lines"
  local n
  n=$(grep -c . "$tmp/lines")
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    fail "$name: exit status $rc"; cat "$tmp/out"; return
  fi
  if [ "$n" -ne 1 ]; then fail "$name: $n lines of output, expected 1:"; cat "$tmp/out"; return; fi
  for p in "${pats[@]}"; do
    grep -qF -- "$p" "$tmp/lines" || { fail "$name: no '$p' in: $(cat "$tmp/lines")"; return; }
  done
  echo "ok   $name: $(cat "$tmp/lines")"
}

# First, with a model small enough that a fallback to the CPU would finish at once and
# exit 0; the later --device gpu checks would then train big models on the CPU until
# their timeouts, so stop here.
expect_one_line "cnn_bench --device gpu" "cnn_bench: --device gpu" "no usable GPU" "CUDA" -- \
  "$bench" --device gpu --model trivial --batch_size 2 --num_batches 1 --num_warmup_batches 0
if [ $fails -ne 0 ]; then
  echo "cnn_bench --device gpu without a GPU must exit non-zero saying so; not going on"
  exit 1
fi
expect_one_line "cnn_bench --device gpu (defaults)" "cnn_bench: --device gpu" "no usable GPU" -- \
  "$bench" --device gpu
for f in --use_fp16 --use_bf16; do
  expect_one_line "cnn_bench $f" "cnn_bench: $f" "mixed precision needs --device gpu" -- \
    "$bench" --model lenet --batch_size 4 --num_batches 2 "$f"
done
expect_one_line "cnn_bench --use_fp16=true" "--use_fp16" "needs --device gpu" -- \
  "$bench" --use_fp16=true --device cpu
expect_one_line "cnn_bench --use_fp16 --use_bf16" "--use_fp16 and --use_bf16" "choose one" -- \
  "$bench" --device gpu --use_fp16 --use_bf16
expect_one_line "cnn_bench --allow_tf32" "--allow_tf32" "needs --device gpu" -- \
  "$bench" --allow_tf32
expect_one_line "cnn_bench --data_format NHWC" "--data_format NHWC" "needs --device gpu" -- \
  "$bench" --data_format NHWC
expect_one_line "cnn_bench --device gpu --use_fp16" "cnn_bench: --device gpu" "no usable GPU" -- \
  "$bench" --device gpu --use_fp16
expect_one_line "cnn_bench --device gpu --use_bf16" "cnn_bench: --device gpu" "no usable GPU" -- \
  "$bench" --device gpu --use_bf16 --model resnet50 --batch_size 256
expect_one_line "train --device gpu" "train: --device gpu" "no usable GPU" "CUDA" -- \
  "$train" --device gpu --dataset synthetic
only='^train: ' expect_one_line "train --device gpu, 2 ranks" "train: --device gpu" "no usable GPU" -- \
  mpirun -np 2 "$train" --device gpu --dataset synthetic
expect_one_line "train --device tpu" "--device" "tpu" -- "$train" --device tpu
# Mixed precision on the CPU: refused before any data is loaded or file written.
for f in --use_fp16 --use-fp16 --use_bf16 --use-bf16; do
  rm -rf "$tmp/ck" "$tmp/log"
  expect_one_line "train $f" "train: --use-" "mixed precision needs --device gpu" -- \
    "$train" --model mlp --dataset synthetic --synthetic-samples 256 --epochs 1 \
    --checkpoint-dir "$tmp/ck" --logdir "$tmp/log" --export "$tmp/model.safetensors" "$f"
  for p in "$tmp/ck" "$tmp/log" "$tmp/model.safetensors"; do
    [ -e "$p" ] && fail "train $f: $p was written"
  done
done
only='^train: ' expect_one_line "train --use_fp16, 2 ranks" "train: --use-fp16" "needs --device gpu" -- \
  mpirun -np 2 "$train" --dataset synthetic --use_fp16
expect_one_line "train --channels-last" "--channels-last" "needs --device gpu" -- \
  "$train" --dataset synthetic --channels-last
expect_one_line "train --use_fp16 --use_bf16" "--use-fp16 and --use-bf16" "choose one" -- \
  "$train" --device gpu --dataset synthetic --use_fp16 --use_bf16
expect_one_line "train --device gpu --use_fp16" "train: --device gpu" "no usable GPU" -- \
  "$train" --device gpu --dataset synthetic --use_fp16
expect_one_line "train --device gpu --use-bf16" "train: --device gpu" "no usable GPU" -- \
  "$train" --device gpu --dataset synthetic --use-bf16
# --help documents them.
"$bench" --help >"$tmp/help" 2>&1
for f in --use_fp16 --use_bf16 --allow_tf32; do
  grep -q -- "$f" "$tmp/help" || fail "cnn_bench --help does not list $f"
done
"$train" --help >"$tmp/help" 2>&1
for f in --use-fp16 --use-bf16; do
  grep -q -- "$f" "$tmp/help" || fail "train --help does not list $f"
done

# The CPU fallback line: once, from rank 0, and only in a CUDA build.
want=$cuda
timeout -k 5 120 mpirun -np 2 "$bench" --model lenet --batch_size 4 --num_batches 2 \
  --num_warmup_batches 1 --threads 1 >"$tmp/bench.out" 2>"$tmp/bench.err"
rc=$?
if [ $rc -ne 0 ]; then
  fail "cnn_bench on 2 ranks exited $rc"; cat "$tmp/bench.out" "$tmp/bench.err"
else
  n=$(grep -c '^cnn_bench: CUDA: no device .*; running on CPU$' "$tmp/bench.err")
  [ "$n" -eq "$want" ] || { fail "cnn_bench: $n CPU-fallback lines on stderr, expected $want:"; cat "$tmp/bench.err"; }
  grep -q 'CUDA' "$tmp/bench.out" && fail "cnn_bench: CUDA line on stdout (breaks the format)"
  [ "$(head -n 1 "$tmp/bench.out")" = "Model:       lenet" ] \
    || fail "cnn_bench: stdout does not start with the info block: $(head -n 1 "$tmp/bench.out")"
  grep -q "^Devices:     \['cpu:0', 'cpu:1'\]$" "$tmp/bench.out" || fail "cnn_bench: Devices line"
  [ "$n" -eq "$want" ] && echo "ok   cnn_bench: $n CPU-fallback line(s) on stderr, stdout format starts intact"
fi
timeout -k 5 120 mpirun -np 2 "$train" --model mlp --dataset synthetic --synthetic-samples 256 \
  --epochs 1 --threads 1 >"$tmp/train.out" 2>"$tmp/train.err"
rc=$?
if [ $rc -ne 0 ]; then
  fail "train on 2 ranks exited $rc"; cat "$tmp/train.out" "$tmp/train.err"
else
  n=$(grep -c '^train: CUDA: no device .*; running on CPU$' "$tmp/train.out")
  [ "$n" -eq "$want" ] || { fail "train: $n CPU-fallback lines on stdout, expected $want:"; cat "$tmp/train.out"; }
  grep -q '^test accuracy: ' "$tmp/train.out" || fail "train: no test accuracy line"
  [ "$n" -eq "$want" ] && echo "ok   train: $n CPU-fallback line(s) on stdout"
fi

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "device flags OK (CUDA build: $cuda)"
