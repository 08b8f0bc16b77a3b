#!/usr/bin/env bash
# scripts/gpu_check.sh: the whole GPU check of hvd's CUDA backend in one call, for a
# machine with an NVIDIA GPU, nvcc, cuDNN, NCCL and PyTorch but no OpenMPI, no OpenBLAS
# and no internet (the device machine). It builds with the project's Makefile, single
# process: `make CUDA=1 MPI=stub BLAS=ref` (ZLIB=none where the machine has no zlib), the
# stand-ins of scripts/gpu_check/stub/ for what the device machine lacks: a
# single-process MPI (hvd at size 1), a plain C SGEMM for the CPU reference, a zlib with
# crc32 and no gzip. So the check runs the real bench/cnn_bench and train program, built
# as everywhere else. Then:
#   0. the CPU reference (PyTorch fixtures, gradient check) with the C SGEMM, and short
#      CPU runs of cnn_bench and train (the stub MPI at work; no GPU needed)
#   1. every layer's GPU forward/backward against the CPU reference (tests/test_cuda_layers)
#   2. whole training steps GPU vs CPU: mlp, lenet, resnet20, alexnet, resnet50
#      (tests/test_cuda_model_step)
#   3. hvd_allreduce/broadcast of device memory at size 1 through NCCL
#      (tests/test_cuda_hvd_allreduce), then any other tests/test_cuda_*.c, then
#      train --device gpu (resnet20, synthetic data, 3 short epochs) in fp32, with
#      --use_fp16, and with --use_fp16 --channels-last: the loss is finite and goes down
#   4. resnet50 training images/sec at batch $BATCH: first PyTorch eager on the same GPU
#      (scripts/gpu_check/torch_bench.py, one process: channels-last; fp32, TF32, AMP
#      fp16, AMP bf16), then bench/cnn_bench --device gpu in fp32, TF32 (--allow_tf32),
#      --use_fp16 and --use_bf16, channels last (--data_format NHWC; NCHW instead,
#      reported, if that fails), each with its ratio to PyTorch
#      (scripts/gpu_check/train_bench, a bare nn loop, only if cnn_bench fails). Both
#      are timed the same way: WARMUP untimed steps, a GPU synchronize, the clock, STEPS
#      timed steps, a GPU synchronize, the clock. PyTorch is the reference, not a check:
#      its failure is reported and does not fail the check.
#   5. a summary table, last: one row per step with the seconds it took.
# Logs go to $OUT (default build/gpu_check/out); the build to build/gpu_check (make BUILD=).
#
# Budget: GPU_CHECK_BUDGET_S (default 300) seconds for everything, the build included.
# Each step has a planned maximum, and the maxima add up to the budget:
#
#   step                                                     max s   sum
#   build (16 cores on the device machine; GPU_CHECK_BUILD_S)   45    45
#   0. CPU reference vs PyTorch fixtures, gradient check     2 x 5    55
#   0. cnn_bench lenet and train mlp on the CPU              2 x 8    71
#   GPU probe (nvidia-smi, test_cuda_layers --probe)            10    81
#   1. layers GPU vs CPU                                        15    96
#   2. training steps GPU vs CPU                                20   116
#   3. hvd_allreduce of device memory (NCCL)                    20   136
#   3. every other tests/test_cuda_*.c (2 today)            2 x 20   176
#   3. train --device gpu resnet20 fp32, fp16, fp16 NHWC    3 x 12   212
#   4. PyTorch resnet50, 4 precisions in one process            45   257
#   4. cnn_bench resnet50 fp32, tf32, fp16, bf16            4 x 10   297
#   summary, margin                                              3   300
#
# (The script computes the plan from the T_* numbers below, with the real count of
# tests and precisions.) A step may run for its maximum plus what the steps before it
# left unused (a check up to twice its maximum, a throughput run without bound), never
# into the maxima planned for the steps after it: a check that overruns is cut off
# (TIMEOUT) and cannot eat the PyTorch run's time. Only the extra runs of step 4 (NCHW
# after NHWC failed, half the batch after running out of memory, the train_bench
# fallback) take from the later precisions, which are then skipped, bf16 first. A
# throughput run cut short by its limit reports the images/sec of the steps it timed.
# HVD_STALL_CHECK_TIME_SECONDS=10 and HVD_STALL_SHUTDOWN_TIME_SECONDS=20 are exported for
# the whole check (unless already set): a NCCL collective that hangs ends in
# HVD_ERR_TIMEOUT after 20 s instead of using up its step's limit.
# Exit status: 0 all passed; 1 a check failed; 2 no GPU (or the build failed).
# Environment: CUDA_HOME, CUDNN_HOME, NCCL_HOME (searched if unset), PYTHON (python3),
#   BATCH (256), STEPS (10 timed steps), WARMUP (3 untimed steps), VARIABLE_UPDATE
#   (cnn_bench's, default none: one GPU, no allreduce, as PyTorch eager; horovod adds the
#   size-1 NCCL allreduce of the gradients), DATA_FORMAT (NHWC or NCHW, default NHWC),
#   GPU_CHECK_BUDGET_S (300), GPU_CHECK_BUILD_S (45), CC (cc), NVCC.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
BLD=$ROOT/build/gpu_check
OUT=${OUT:-$BLD/out}
mkdir -p "$BLD" "$OUT" || exit 2
BUDGET=${GPU_CHECK_BUDGET_S:-300}
BATCH=${BATCH:-256}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
VARIABLE_UPDATE=${VARIABLE_UPDATE:-none}
DATA_FORMAT=${DATA_FORMAT:-NHWC}
PRECISIONS="fp32 tf32 fp16 bf16"   # in this order: short of time, the last is skipped first
PY=${PYTHON:-python3}
CC=${CC:-cc}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
: > "$OUT/gpu_check.log"
FAILED=0
JOBS=$(nproc 2>/dev/null || echo 4)
# A NCCL hang ends in an error, not in its step's whole limit: hvd's wait for a device
# collective and its negotiation both stop after HVD_STALL_SHUTDOWN_TIME_SECONDS.
export HVD_STALL_CHECK_TIME_SECONDS=${HVD_STALL_CHECK_TIME_SECONDS:-10}
export HVD_STALL_SHUTDOWN_TIME_SECONDS=${HVD_STALL_SHUTDOWN_TIME_SECONDS:-20}

# The planned maximum of each step, seconds (the table above).
T_BUILD=${GPU_CHECK_BUILD_S:-45}
T_CPU_TEST=5       # each of the two CPU reference tests
T_CPU_RUN=8        # each of the two CPU program runs
T_PROBE=10
T_LAYERS=15
T_MODEL_STEP=20
T_ALLREDUCE=20
T_CUDA_TEST=20     # each other tests/test_cuda_*.c
T_TRAIN=12         # each train --device gpu run
T_TORCH=45
T_BENCH=10         # each cnn_bench precision
T_END=3            # the summary, and a margin
OTHER_CUDA_TESTS=()
for f in tests/test_cuda_*.c; do
  t=$(basename "$f" .c)
  case $t in test_cuda_layers|test_cuda_model_step|test_cuda_hvd_allreduce) continue ;; esac
  OTHER_CUDA_TESTS+=("$t")
done
NPREC=$(echo "$PRECISIONS" | wc -w)
# PLANNED: the maxima of the steps not yet started, the margin included.
PLANNED=$(( T_BUILD + 2 * T_CPU_TEST + 2 * T_CPU_RUN + T_PROBE + T_LAYERS + T_MODEL_STEP +
            T_ALLREDUCE + ${#OTHER_CUDA_TESTS[@]} * T_CUDA_TEST + 3 * T_TRAIN + T_TORCH +
            NPREC * T_BENCH + T_END ))

log() { printf '%s\n' "$*" | tee -a "$OUT/gpu_check.log"; }
# row NAME SECONDS STATUS: a summary line; SECONDS the step's time, "-" where none ran.
row() {
  local secs=$2
  [ "$secs" != - ] && secs=${secs}s
  printf '%-46s %5s  %s\n' "$1" "$secs" "$3" >> "$SUMMARY"
}
left() { echo $(( BUDGET - SECONDS )); }
stall_env() { env | grep '^HVD_STALL_' | sort | tr '\n' ' ' | sed 's/ $//'; }
# run_step [-u|-x] NAME MAX LOGFILE CMD...: runs CMD under a time limit, output to
# LOGFILE. The limit is MAX plus what the earlier steps left unused (at most 2 x MAX in
# all; -u: no bound, for the throughput runs), never into the maxima planned for the
# later steps nor into the final margin; when the budget is short of MAX (set lower, or
# an extra run took it), what is left. -x: an extra run outside the plan: at most MAX,
# out of the later steps' time. Sets STEP_SECS (seconds it ran) and STEP_SKIPPED (1: not
# run, less than min(MAX, 10) s left for it); returns the command's exit status (124 or
# 137: cut off by the limit; 124 when skipped).
run_step() {
  local mode=check
  case $1 in -u) mode=uncapped; shift ;; -x) mode=extra; shift ;; esac
  local name=$1 max=$2 logf=$3; shift 3
  local t room=$(( $(left) - T_END ))
  if [ "$mode" = extra ]; then
    t=$max
  else
    PLANNED=$(( PLANNED - max ))
    t=$(( $(left) - PLANNED ))   # MAX + the time the earlier steps left unused
    [ "$t" -lt "$max" ] && t=$max
    [ "$mode" = check ] && [ "$t" -gt $(( 2 * max )) ] && t=$(( 2 * max ))
  fi
  [ "$t" -gt "$room" ] && t=$room
  STEP_SECS=0
  STEP_SKIPPED=0
  local need=$max
  [ "$need" -gt 10 ] && need=10
  if [ "$t" -lt "$need" ]; then
    log "== $name: skipped, the time budget is spent (${t}s left for it)"
    STEP_SKIPPED=1
    return 124
  fi
  local cmd="$*"
  cmd=${cmd//$'\n'/ }
  log "== $name (limit ${t}s): ${cmd:0:160}"
  local t0=$SECONDS
  timeout -k 3 "$t" "$@" > "$logf" 2>&1
  local rc=$?
  STEP_SECS=$(( SECONDS - t0 ))
  tail -n 40 "$logf" >> "$OUT/gpu_check.log"
  log "   -> exit $rc in ${STEP_SECS}s (log: $logf)"
  return $rc
}
finish() {
  {
    echo
    echo "==================== GPU check summary ===================="
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')   commit: $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
    echo "gpu: $(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "budget: ${BUDGET}s   in force: $(stall_env)"
    cat "$SUMMARY"
    echo "total time: ${SECONDS}s; logs: $OUT"
  } | tee -a "$OUT/gpu_check.log"
  exit "$1"
}
log "budget ${BUDGET}s (planned maxima ${PLANNED}s); in force: $(stall_env)"

# ---- locate the toolkit and libraries ----
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")}
[ -x "$NVCC" ] || { log "no nvcc (set NVCC or CUDA_HOME)"; row "build" - "FAIL: no nvcc"; finish 2; }
CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
PYNV=$("$PY" -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]) + "/nvidia")' 2>/dev/null)
SEARCH="${CUDNN_HOME:-} ${NCCL_HOME:-} $CUDA_HOME $CUDA_HOME/targets/x86_64-linux /usr /usr/local"
if [ -n "$PYNV" ]; then for d in "$PYNV"/*; do [ -d "$d" ] && SEARCH="$SEARCH $d"; done; fi
find_hdr() { # directory holding header $1
  local d s
  for d in $SEARCH; do
    for s in include include/x86_64-linux-gnu; do
      [ -f "$d/$s/$1" ] && { echo "$d/$s"; return 0; }
    done
  done
  return 1
}
find_lib() { # path of lib$1.so or lib$1.so.N
  local d s f
  for d in $SEARCH; do
    for s in lib64 lib lib/x86_64-linux-gnu; do
      for f in "$d/$s/lib$1.so" "$d/$s/lib$1".so.[0-9]*; do
        [ -f "$f" ] && { echo "$f"; return 0; }
      done
    done
  done
  return 1
}
INC_DIRS="$CUDA_HOME/include"
for h in cudnn.h nccl.h cublas_v2.h; do
  d=$(find_hdr "$h") || { log "header $h not found in: $SEARCH"; row "build" - "FAIL: no $h"; finish 2; }
  case " $INC_DIRS " in *" $d "*) ;; *) INC_DIRS="$INC_DIRS $d" ;; esac
done
LIBS=""
for l in cudnn cublas cublasLt nccl; do
  f=$(find_lib "$l") || { log "library lib$l not found in: $SEARCH"; row "build" - "FAIL: no lib$l"; finish 2; }
  LIBS="$LIBS $f -Wl,-rpath,$(dirname "$f")"
done
CUDART=$(find_lib cudart_static 2>/dev/null || true)
[ -z "$CUDART" ] && for d in $SEARCH; do [ -f "$d/lib64/libcudart_static.a" ] && CUDART=$d/lib64/libcudart_static.a && break; done
[ -z "$CUDART" ] && CUDART=$(find_lib cudart)
# train needs zlib (crc32; gzip IDX files): the machine's when it has one, else the
# GPU-check-only stand-in (make ZLIB=none: crc32, no gzip; the check trains on
# synthetic data).
if printf '#include <zlib.h>\nint main(void) { return (int)crc32(0, 0, 0); }\n' |
   $CC -x c - -lz -o "$BLD/zlib_probe" > /dev/null 2>&1; then
  ZLIB=system
else
  ZLIB=none
fi
command -v make > /dev/null || { log "no make here"; row "build" - "FAIL: no make"; finish 2; }
log "nvcc: $NVCC ($("$NVCC" --version | tail -1))"
log "include: $INC_DIRS"
log "libs: $LIBS $CUDART; zlib: $ZLIB"

# ---- build: the project's Makefile, single process (MPI=stub, BLAS=ref) ----
# The same build as everywhere else, with the stand-ins of scripts/gpu_check/stub for what
# the device machine lacks, sm_90 only (the device is an H100/H200), into build/gpu_check.
# What the check runs: the CUDA tests, the CPU reference tests, cnn_bench, train and the
# bare loop train_bench.
TESTS_BUILT=()
for f in tests/test_cuda_*.c tests/test_nn_layers_torch.c tests/test_nn_gradcheck.c; do
  TESTS_BUILT+=("$BLD/tests/$(basename "$f" .c)")
done
MAKE_CMD=(make -j "$JOBS" BUILD="$BLD" CUDA=1 MPI=stub BLAS=ref ZLIB="$ZLIB" CC="$CC"
  NVCC="$NVCC" CUDA_HOME="$CUDA_HOME" CUDA_INC_DIRS="$INC_DIRS" CUDA_LDLIBS="$LIBS $CUDART"
  "CUDA_ARCH=-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
  "${TESTS_BUILT[@]}" "$BLD/cnn_bench" "$BLD/train" "$BLD/train_bench")
if run_step "build" "$T_BUILD" "$OUT/build.log" "${MAKE_CMD[@]}"; then
  row "build (make MPI=stub BLAS=ref, nvcc sm_90)" "$STEP_SECS" "ok"
else
  row "build (make MPI=stub BLAS=ref, nvcc sm_90)" "$STEP_SECS" "FAIL (see build.log)"
  finish 2
fi
TB=$BLD/tests

# ---- 0: the CPU reference itself (with the C SGEMM): PyTorch fixtures, gradient check ----
check() { # NAME MAX LOG BIN [ARGS]
  local name=$1
  run_step "$@"
  local rc=$?
  if [ "$STEP_SKIPPED" = 1 ]; then row "$name" - "SKIPPED (time budget)"; FAILED=1; return; fi
  local fails; fails=$(grep -c '^FAIL' "$3" 2>/dev/null); fails=${fails:-0}
  local oks; oks=$(grep -c '^ok' "$3" 2>/dev/null); oks=${oks:-0}
  local what=""
  [ $((oks + fails)) -gt 0 ] && what=" ($oks of $((oks + fails)) comparisons ok)"
  if [ "$rc" -eq 0 ]; then row "$name" "$STEP_SECS" "PASS$what"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then row "$name" "$STEP_SECS" "TIMEOUT$what"; FAILED=1
  else row "$name" "$STEP_SECS" "FAIL (exit $rc)$what"; FAILED=1
  fi
}
check "0. CPU reference vs PyTorch fixtures" "$T_CPU_TEST" "$OUT/cpu_layers_torch.log" "$TB/test_nn_layers_torch"
check "0. CPU reference gradient check" "$T_CPU_TEST" "$OUT/cpu_gradcheck.log" "$TB/test_nn_gradcheck"

# Parsers of the programs' output (plain lines: stdout is a file here).
# bench_ips LOG: cnn_bench's "total images/sec", or, when the run was cut short, the
# images/sec of the last Step line (the mean over the steps timed so far) and "partial".
bench_ips() {
  awk -F'\t' '/^total images\/sec: / {split($0, a, ": "); total = a[2]}
    /^[0-9]+\timages\/sec: / {split($2, a, " "); last = a[2]; step = $1}
    END {if (total != "") print total; else if (last != "") print last, "partial", step}' "$1" 2>/dev/null
}
# bench_losses LOG: the total_loss column of cnn_bench's Step lines.
bench_losses() { awk -F'\t' '/^[0-9]+\timages\/sec: / {print $3}' "$1" 2>/dev/null; }
# train_losses LOG: the training loss of each of train's epoch lines.
train_losses() { sed -n 's/^Epoch [0-9]*\/[0-9]*: .* - loss \([^ ]*\) - accuracy .*/\1/p' "$1"; }
# falls LOSSES...: every value finite, and the last below the first.
falls() {
  [ $# -ge 2 ] || return 1
  printf '%s\n' "$@" | grep -qiE 'nan|inf' && return 1
  awk -v a="$1" -v b="${!#}" 'BEGIN {exit !(b + 0 < a + 0)}'
}
# smoke NAME MAX LOG KIND CMD...: runs a program; PASS when it exits 0 and its losses
# (KIND bench: Step lines; train: epoch lines) are finite and fall.
smoke() {
  local name=$1 max=$2 logf=$3 kind=$4; shift 4
  run_step "$name" "$max" "$logf" "$@"
  local rc=$? losses
  if [ "$STEP_SKIPPED" = 1 ]; then row "$name" - "SKIPPED (time budget)"; FAILED=1; return; fi
  if [ "$kind" = bench ]; then losses=$(bench_losses "$logf"); else losses=$(train_losses "$logf"); fi
  local shown
  # shellcheck disable=SC2086
  shown=$(printf '%s ' $losses | sed 's/ $//; s/ / -> /g')
  local acc; acc=$(sed -n 's/^test accuracy: /, test accuracy /p' "$logf" | tail -1)
  # shellcheck disable=SC2086
  if [ "$rc" -eq 0 ] && falls $losses; then row "$name" "$STEP_SECS" "PASS (loss $shown$acc)"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then row "$name" "$STEP_SECS" "TIMEOUT (loss ${shown:-none})"; FAILED=1
  else row "$name" "$STEP_SECS" "FAIL (exit $rc, loss ${shown:-none})"; FAILED=1
  fi
}
# The real programs on the CPU, through the stub MPI (hvd at size 1, gradient buckets).
smoke "0. cnn_bench lenet on the CPU (stub MPI)" "$T_CPU_RUN" "$OUT/cnn_bench_cpu.log" bench \
  "$BLD/cnn_bench" --model lenet --batch_size 16 --num_batches 6 --num_warmup_batches 1 \
  --display_every 2 --threads "$JOBS"
smoke "0. train mlp on the CPU (stub MPI)" "$T_CPU_RUN" "$OUT/train_cpu.log" train \
  "$BLD/train" --model mlp --dataset synthetic --synthetic-samples 1024 --epochs 3 \
  --threads "$JOBS"

# ---- is there a GPU? (nvidia-smi's output to nvidia-smi.txt, the probe's to probe.log) ----
# shellcheck disable=SC2016
run_step "GPU probe" "$T_PROBE" "$OUT/probe.log" bash -c \
  'timeout 5 nvidia-smi > "$1" 2>&1; exec "$2" --probe' probe "$OUT/nvidia-smi.txt" \
  "$TB/test_cuda_layers"
probe_rc=$?
if [ "$STEP_SKIPPED" = 1 ]; then row "GPU" - "SKIPPED (time budget)"; finish 1; fi
if [ "$probe_rc" -eq 124 ] || [ "$probe_rc" -eq 137 ]; then
  log "the GPU probe (CUDA initialisation) did not finish: see nvidia-smi.txt and probe.log"
  row "GPU" "$STEP_SECS" "TIMEOUT: the probe (CUDA initialisation) hung"
  finish 1
fi
if [ "$probe_rc" -ne 0 ] && grep -q "skipped: no CUDA device" "$OUT/probe.log"; then
  log "$(head -1 "$OUT/probe.log")"
  log "NO GPU: the programs built, but there is no usable CUDA device here; nothing was checked."
  row "GPU" "$STEP_SECS" "NONE: $(head -1 "$OUT/probe.log")"
  finish 2
fi
row "GPU" "$STEP_SECS" "$(head -1 "$OUT/probe.log")"

# ---- 1-3: correctness ----
check "1. layers GPU vs CPU (fp32, TF32)" "$T_LAYERS" "$OUT/layers.log" "$TB/test_cuda_layers"
check "2. training step GPU vs CPU (5 models)" "$T_MODEL_STEP" "$OUT/model_step.log" "$TB/test_cuda_model_step"
check "3. hvd_allreduce device memory, NCCL" "$T_ALLREDUCE" "$OUT/hvd_allreduce.log" "$TB/test_cuda_hvd_allreduce"
for t in "${OTHER_CUDA_TESTS[@]}"; do
  check "3. $t" "$T_CUDA_TEST" "$OUT/$t.log" "$TB/$t"
done

# train --device gpu, fp32 and fp16: a correctness check, so before the throughput runs.
for prec in fp32 fp16 fp16-nhwc; do
  flags=()
  case $prec in
    fp16) flags=(--use_fp16) ;;
    fp16-nhwc) flags=(--use_fp16 --channels-last) ;;
  esac
  smoke "3. train --device gpu resnet20 $prec" "$T_TRAIN" "$OUT/train_gpu_$prec.log" train \
    "$BLD/train" --device gpu --model resnet20 --dataset synthetic --synthetic-samples 4096 \
    --epochs 3 --batch-size 64 "${flags[@]}"
  if [ "$prec" != fp32 ] && [ "$STEP_SKIPPED" = 0 ] &&
     ! grep -q '^Epoch .* - loss_scale ' "$OUT/train_gpu_$prec.log"; then
    row "3. train $prec: loss scale per epoch" - "FAIL (not shown)"; FAILED=1
  fi
done

# ---- 4: throughput: PyTorch first (its time is planned: it runs whatever step 4 costs) ----
declare -A IPS NOTE FMT SECS
run_step -u "4. torch resnet50 ${PRECISIONS// /,} batch $BATCH" "$T_TORCH" "$OUT/bench_torch.log" \
  "$PY" scripts/gpu_check/torch_bench.py "$BATCH" "$STEPS" "${PRECISIONS// /,}" "$WARMUP"
rc=$?
measured=0
if [ "$STEP_SKIPPED" = 0 ]; then
  for prec in $PRECISIONS; do
    v=$(awk -v p="$prec" '$1 == "RESULT" && $2 == "torch" && $4 == p {print $6}' "$OUT/bench_torch.log" | tail -1)
    if [ -n "$v" ]; then IPS[torch_$prec]=$v; measured=$((measured + 1)); fi
  done
fi
# The reference, not a check: its failure is reported but does not fail the check.
name="4. torch resnet50 batch $BATCH (the reference)"
if [ "$STEP_SKIPPED" = 1 ]; then row "$name" - "SKIPPED (time budget)"
elif [ "$rc" -eq 0 ]; then row "$name" "$STEP_SECS" "ok ($measured of $NPREC precisions)"
elif [ "$rc" -eq 77 ]; then row "$name" "$STEP_SECS" "SKIPPED ($(tail -1 "$OUT/bench_torch.log"))"
elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  row "$name" "$STEP_SECS" "TIMEOUT ($measured of $NPREC precisions measured)"
else row "$name" "$STEP_SECS" "FAIL (exit $rc, $measured of $NPREC precisions measured; see bench_torch.log)"
fi

# ---- 4: cnn_bench in each precision ----
for prec in $PRECISIONS; do
  case $prec in
    fp32) flags=() ;;
    tf32) flags=(--allow_tf32) ;;
    fp16) flags=(--use_fp16) ;;
    bf16) flags=(--use_bf16) ;;
  esac
  b=$BATCH
  logf=$OUT/bench_cnn_$prec.log
  # NN_CUDNN_FIND=1: convolution algorithms timed (cudnnFind) in the warm-up, as PyTorch's
  # cudnn.benchmark does in its own. --optimizer momentum: a momentum buffer as the
  # PyTorch peer's SGD(momentum=0.9) keeps (cnn_bench's default sgd is tf_cnn_benchmarks'
  # plain gradient descent).
  bench_cmd=(env NN_CUDNN_FIND=1 "$BLD/cnn_bench" --device gpu --model resnet50
             --optimizer momentum
             --num_batches "$STEPS" --num_warmup_batches "$WARMUP" --display_every 5
             --variable_update "$VARIABLE_UPDATE" "${flags[@]}")
  fmt=$DATA_FORMAT
  # No log left from an earlier check: a run skipped for the time budget writes none.
  rm -f "$logf"
  run_step -u "4. cnn_bench resnet50 $prec $fmt batch $b" "$T_BENCH" "$logf" "${bench_cmd[@]}" \
    --data_format "$fmt" --batch_size "$b"
  rc=$?
  skipped=$STEP_SKIPPED
  secs=$STEP_SECS
  # Channels last is the fast path and the newer one: if it ran and failed (not out of
  # time, not out of memory), say so and measure NCHW instead.
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && [ "$fmt" = NHWC ] &&
     [ -f "$logf" ] && [ -z "$(bench_ips "$logf")" ] && ! grep -qsi "memory" "$logf"; then
    row "4. cnn_bench resnet50 $prec NHWC" "$secs" "FAIL (exit $rc, see $(basename "$logf")); NCHW measured instead"
    FAILED=1
    fmt=NCHW
    logf=$OUT/bench_cnn_${prec}_nchw.log
    rm -f "$logf"
    run_step -x "4. cnn_bench resnet50 $prec $fmt batch $b" "$T_BENCH" "$logf" "${bench_cmd[@]}" \
      --data_format "$fmt" --batch_size "$b"
    rc=$?
    skipped=$STEP_SKIPPED
    secs=$((secs + STEP_SECS))
  fi
  if [ "$rc" -ne 0 ] && grep -qsi "memory" "$logf"; then
    b=$((BATCH / 2))
    run_step -x "4. cnn_bench resnet50 $prec $fmt batch $b (retry)" "$T_BENCH" \
      "$OUT/bench_cnn_${prec}_b$b.log" "${bench_cmd[@]}" --data_format "$fmt" --batch_size "$b"
    rc=$?
    secs=$((secs + STEP_SECS))
    [ -f "$OUT/bench_cnn_${prec}_b$b.log" ] && cat "$OUT/bench_cnn_${prec}_b$b.log" >> "$logf"
  fi
  v="" partial="" step=""
  [ -f "$logf" ] && read -r v partial step < <(bench_ips "$logf")
  note=""
  if [ -n "$partial" ]; then
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      note=" (cut short by the time limit: the first $step timed steps)"
    else
      note=" (FAILED: exit $rc after $step timed steps)"; FAILED=1
    fi
  fi
  losses=$(bench_losses "$logf")
  # shellcheck disable=SC2086
  if [ -n "$v" ] && printf '%s\n' $losses | grep -qiE 'nan|inf'; then
    note="$note (loss not finite: $(printf '%s ' $losses))"; FAILED=1
  fi
  if [ "$prec" = fp16 ] && [ -f "$logf" ]; then
    ls=$(sed -n 's/^loss scale: \([^ ]*\) (\([0-9]*\) of \([0-9]*\) steps.*/loss scale \1, \2 of \3 steps skipped/p' "$logf" | tail -1)
    [ -n "$ls" ] && note="$note ($ls)"
  fi
  if [ -z "$v" ] && [ "$skipped" = 1 ]; then
    note=" (cnn_bench SKIPPED: the time budget is spent)"
  elif [ -z "$v" ] && { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; }; then
    # Out of time before its first Step line: nothing measured, nothing known broken.
    note=" (cnn_bench TIMEOUT before its first Step line)"; FAILED=1
  elif [ -z "$v" ]; then
    # cnn_bench failed: does nn's bare loop run, without hvd?
    FAILED=1
    run_step -x "4. train_bench resnet50 $prec batch $b (fallback)" "$T_BENCH" \
      "$OUT/bench_bare_$prec.log" env NN_CUDNN_FIND=1 "$BLD/train_bench" resnet50 "$b" "$STEPS" "$prec"
    secs=$((secs + STEP_SECS))
    v=$(awk '/^RESULT hvd/ {print $6}' "$OUT/bench_bare_$prec.log" 2>/dev/null | tail -1)
    if [ -n "$v" ]; then note=" (cnn_bench FAILED, exit $rc; this is train_bench, nn without hvd)"
    else note=" (cnn_bench FAILED, exit $rc; train_bench too)"
    fi
  fi
  IPS[hvd_$prec]=$v
  IPS[hvd_${prec}_batch]=$b
  NOTE[$prec]="$note"
  FMT[$prec]=$fmt
  SECS[$prec]=$secs
  [ "$skipped" = 1 ] && [ "$secs" -eq 0 ] && SECS[$prec]=-
done
for prec in $PRECISIONS; do
  h=${IPS[hvd_$prec]:-}; t=${IPS[torch_$prec]:-}
  hb=${IPS[hvd_${prec}_batch]:-$BATCH}
  ratio="-"
  if [ -n "$h" ] && [ -n "$t" ] && [ "$hb" = "$BATCH" ]; then ratio=$(awk -v a="$h" -v b="$t" 'BEGIN {printf "%.2fx", a / b}'); fi
  case $prec in fp16|bf16) what="$prec, torch AMP" ;; *) what=$prec ;; esac
  row "4. resnet50 b$hb img/s ($what)" "${SECS[$prec]:--}" "cnn_bench ${FMT[$prec]:-} ${h:-none} | torch channels-last ${t:-none} | ratio $ratio${NOTE[$prec]}"
done

finish "$FAILED"
