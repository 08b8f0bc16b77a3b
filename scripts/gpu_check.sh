#!/usr/bin/env bash
# scripts/gpu_check.sh: the whole GPU check of hvd's CUDA backend in one call, for a
# machine with an NVIDIA GPU, nvcc, cuDNN, NCCL and PyTorch but no OpenMPI, no OpenBLAS
# and no internet (the device machine). Self-contained: it builds a single-process
# variant of nn + hvd there, with stand-ins that exist ONLY for this check and are
# clearly labelled in scripts/gpu_check/stub/: a single-process MPI (hvd at size 1), a
# plain C SGEMM for the CPU reference, and (only when the machine has no zlib) a zlib
# with crc32 and no gzip for `train`. It builds the real bench/cnn_bench and the real
# train program against them. Then:
#   0. the CPU reference (PyTorch fixtures, gradient check) with the C SGEMM, and short
#      CPU runs of cnn_bench and train (the stub MPI at work; no GPU needed)
#   1. every layer's GPU forward/backward against the CPU reference (tests/test_cuda_layers)
#   2. whole training steps GPU vs CPU: mlp, lenet, resnet20, alexnet, resnet50
#      (tests/test_cuda_model_step)
#   3. hvd_allreduce/broadcast of device memory at size 1 through NCCL
#      (tests/test_cuda_hvd_allreduce), then any other tests/test_cuda_*.c, then
#      train --device gpu (resnet20, synthetic data, 3 short epochs) in fp32, with
#      --use_fp16, and with --use_fp16 --channels-last: the loss is finite and goes down
#   4. resnet50 training images/sec at batch $BATCH with bench/cnn_bench --device gpu in
#      fp32, TF32 (--allow_tf32), --use_fp16 and --use_bf16, channels last
#      (--data_format NHWC; NCHW instead, reported, if that fails), against PyTorch eager
#      on the same GPU (channels-last, same batch; fp32, TF32, AMP fp16, AMP bf16), with
#      the ratio (scripts/gpu_check/train_bench, a bare nn loop, only if cnn_bench fails)
#   5. a summary table, last.
# Logs go to $OUT (default build/gpu_check/out); binaries to build/gpu_check.
# Budget: under 8 minutes (each step gets what is left of GPU_CHECK_BUDGET_S, default 450;
# a throughput run cut short by its limit reports the images/sec of the steps it timed).
# Exit status: 0 all passed; 1 a check failed; 2 no GPU (or the build failed).
# Environment: CUDA_HOME, CUDNN_HOME, NCCL_HOME (searched if unset), PYTHON (python3),
#   BATCH (256), STEPS (20 timed steps), WARMUP (5 untimed steps), VARIABLE_UPDATE
#   (cnn_bench's, default none: one GPU, no allreduce, as PyTorch eager; horovod adds the
#   size-1 NCCL allreduce of the gradients), DATA_FORMAT (NHWC or NCHW, default NHWC),
#   CC (cc), NVCC.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
BLD=$ROOT/build/gpu_check
OUT=${OUT:-$BLD/out}
mkdir -p "$BLD/obj" "$OUT" || exit 2
BUDGET=${GPU_CHECK_BUDGET_S:-450}
BATCH=${BATCH:-256}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
VARIABLE_UPDATE=${VARIABLE_UPDATE:-none}
DATA_FORMAT=${DATA_FORMAT:-NHWC}
PY=${PYTHON:-python3}
CC=${CC:-cc}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
FAILED=0
JOBS=$(nproc 2>/dev/null || echo 4)

log() { printf '%s\n' "$*" | tee -a "$OUT/gpu_check.log"; }
row() { printf '%-46s %s\n' "$1" "$2" >> "$SUMMARY"; }
left() { echo $(( BUDGET - SECONDS )); }
# run_step NAME MAX_SECONDS LOGFILE CMD...: runs with a timeout of min(MAX, time left).
run_step() {
  local name=$1 max=$2 logf=$3; shift 3
  local t; t=$(left); [ "$t" -gt "$max" ] && t=$max
  if [ "$t" -lt 10 ]; then
    log "== $name: skipped, the time budget is spent"; row "$name" "SKIPPED (time budget)"
    return 124
  fi
  local cmd="$*"
  log "== $name (limit ${t}s): ${cmd:0:160}"
  local t0=$SECONDS
  timeout -k 5 "$t" "$@" > "$logf" 2>&1
  local rc=$?
  tail -n 40 "$logf" >> "$OUT/gpu_check.log"
  log "   -> exit $rc in $(( SECONDS - t0 ))s (log: $logf)"
  return $rc
}
finish() {
  {
    echo
    echo "==================== GPU check summary ===================="
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')   commit: $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    cat "$SUMMARY"
    echo "total time: ${SECONDS}s; logs: $OUT"
  } | tee -a "$OUT/gpu_check.log"
  exit "$1"
}

# ---- locate the toolkit and libraries ----
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")}
[ -x "$NVCC" ] || { log "no nvcc (set NVCC or CUDA_HOME)"; row "build" "FAIL: no nvcc"; finish 2; }
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
INC="-I$CUDA_HOME/include"
for h in cudnn.h nccl.h cublas_v2.h; do
  d=$(find_hdr "$h") || { log "header $h not found in: $SEARCH"; row "build" "FAIL: no $h"; finish 2; }
  INC="$INC -I$d"
done
LIBS=""
RPATH=""
for l in cudnn cublas cublasLt nccl; do
  f=$(find_lib "$l") || { log "library lib$l not found in: $SEARCH"; row "build" "FAIL: no lib$l"; finish 2; }
  LIBS="$LIBS $f"
  RPATH="$RPATH -Wl,-rpath,$(dirname "$f")"
done
CUDART=$(find_lib cudart_static 2>/dev/null || true)
[ -z "$CUDART" ] && for d in $SEARCH; do [ -f "$d/lib64/libcudart_static.a" ] && CUDART=$d/lib64/libcudart_static.a && break; done
[ -z "$CUDART" ] && CUDART=$(find_lib cudart)
# train needs zlib (crc32; gzip IDX files): the machine's when it has one, else the
# GPU-check-only stand-in (crc32, no gzip; the check trains on synthetic data).
if printf '#include <zlib.h>\nint main(void) { return (int)crc32(0, 0, 0); }\n' |
   $CC -x c - -lz -o "$BLD/zlib_probe" > /dev/null 2>&1; then
  ZLIB_CFLAGS=""
  ZLIB_LIBS="-lz"
  ZLIB_NOTE="zlib"
else
  ZLIB_CFLAGS="-I$ROOT/scripts/gpu_check/stub/nozlib"
  ZLIB_LIBS="$ROOT/scripts/gpu_check/stub/nozlib/zlib.c"
  ZLIB_NOTE="no zlib here: the stand-in"
fi
log "nvcc: $NVCC ($("$NVCC" --version | tail -1))"
log "include: $INC"
log "libs: $LIBS $CUDART; train: $ZLIB_NOTE"

# ---- build (single process: stub MPI, plain C SGEMM) ----
build() {
  local defs="-DHVD_WITH_CUDA=1 -DHVD_WITH_CUDNN=1 -DHVD_WITH_CUBLAS=1 -DHVD_WITH_NCCL=1"
  local cflags="-O2 -g -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -Wno-unused-parameter -I$ROOT/scripts/gpu_check/stub -I$ROOT $INC $defs"
  local srcs f
  srcs=$(ls nn/*.c nn/cuda/*.c hvd/*.c collectives/*.c scripts/gpu_check/stub/*.c)
  rm -f "$BLD"/obj/*.o
  # shellcheck disable=SC2086
  printf '%s\n' $srcs | xargs -P "$JOBS" -I{} sh -c \
    'o='"$BLD"'/obj/$(echo {} | tr / _ | sed "s/\.c$/.o/"); '"$CC $cflags"' -c {} -o $o || exit 255' || return 1
  # Every nn/cuda/*.cu and hvd/*.cu, as the Makefile.
  for f in nn/cuda/*.cu hvd/*.cu; do
    # shellcheck disable=SC2086
    "$NVCC" -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
      -I"$ROOT" $INC $defs -c "$f" -o "$BLD/obj/$(echo "$f" | tr / _).o" &
  done
  wait_all || return 1
  rm -f "$BLD/libgpucheck.a"
  ar rcs "$BLD/libgpucheck.a" "$BLD"/obj/*.o || return 1
  local link="$BLD/libgpucheck.a $LIBS $CUDART $RPATH -ldl -lrt -lstdc++ -lm -lpthread"
  # The tests (every tests/test_cuda_*.c, the CPU reference checks) and the fallback
  # throughput loop: one source each.
  for f in tests/test_cuda_*.c scripts/gpu_check/train_bench.c tests/test_nn_layers_torch.c \
           tests/test_nn_gradcheck.c; do
    # shellcheck disable=SC2086
    $CC $cflags "$f" $link -o "$BLD/$(basename "$f" .c)" &
  done
  # The real programs: bench/cnn_bench, and train with its examples/train_*.c.
  # shellcheck disable=SC2086
  $CC $cflags bench/cnn_bench.c $link -o "$BLD/cnn_bench" &
  # shellcheck disable=SC2086
  $CC $cflags $ZLIB_CFLAGS examples/train.c examples/train_*.c $ZLIB_LIBS $link -o "$BLD/train" &
  wait_all || return 1
}
# wait_all: waits for every background job of the shell; fails if any failed.
wait_all() {
  local rc=0 p
  for p in $(jobs -p); do wait "$p" || rc=1; done
  return $rc
}
if run_step "build" 200 "$OUT/build.log" bash -c "$(declare -f build wait_all); BLD='$BLD' ROOT='$ROOT' CC='$CC' NVCC='$NVCC' INC='$INC' LIBS='$LIBS' CUDART='$CUDART' RPATH='$RPATH' JOBS='$JOBS' ZLIB_CFLAGS='$ZLIB_CFLAGS' ZLIB_LIBS='$ZLIB_LIBS' build"; then
  row "build (nvcc sm_90, stub MPI, C SGEMM)" "ok"
else
  row "build (nvcc sm_90, stub MPI, C SGEMM)" "FAIL (see build.log)"
  finish 2
fi

# ---- 0: the CPU reference itself (with the C SGEMM): PyTorch fixtures, gradient check ----
check() { # NAME MAX LOG BIN [ARGS]
  local name=$1
  run_step "$@"
  local rc=$?
  local fails; fails=$(grep -c '^FAIL' "$3" 2>/dev/null); fails=${fails:-0}
  local oks; oks=$(grep -c '^ok' "$3" 2>/dev/null); oks=${oks:-0}
  local what=""
  [ $((oks + fails)) -gt 0 ] && what=" ($oks of $((oks + fails)) comparisons ok)"
  if [ "$rc" -eq 0 ]; then row "$name" "PASS$what"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then row "$name" "TIMEOUT$what"; FAILED=1
  else row "$name" "FAIL (exit $rc)$what"; FAILED=1
  fi
}
check "0. CPU reference vs PyTorch fixtures" 60 "$OUT/cpu_layers_torch.log" "$BLD/test_nn_layers_torch"
check "0. CPU reference gradient check" 60 "$OUT/cpu_gradcheck.log" "$BLD/test_nn_gradcheck"

# Parsers of the programs' output (plain lines: stdout is a file here).
# bench_ips LOG: cnn_bench's "total images/sec", or, when the run was cut short, the
# images/sec of the last Step line (the mean over the steps timed so far) and "partial".
bench_ips() {
  awk -F'\t' '/^total images\/sec: / {split($0, a, ": "); total = a[2]}
    /^[0-9]+\timages\/sec: / {split($2, a, " "); last = a[2]; step = $1}
    END {if (total != "") print total; else if (last != "") print last, "partial", step}' "$1" 2>/dev/null
}
# bench_losses LOG: the total_loss column of cnn_bench's Step lines.
bench_losses() { awk -F'\t' '/^[0-9]+\timages\/sec: / {print $3}' "$1"; }
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
  if [ "$kind" = bench ]; then losses=$(bench_losses "$logf"); else losses=$(train_losses "$logf"); fi
  # shellcheck disable=SC2086
  local shown; shown=$(printf '%s ' $losses | sed 's/ $//; s/ / -> /g')
  local acc; acc=$(sed -n 's/^test accuracy: /, test accuracy /p' "$logf" | tail -1)
  # shellcheck disable=SC2086
  if [ "$rc" -eq 0 ] && falls $losses; then row "$name" "PASS (loss $shown$acc)"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then row "$name" "TIMEOUT (loss ${shown:-none})"; FAILED=1
  else row "$name" "FAIL (exit $rc, loss ${shown:-none})"; FAILED=1
  fi
}
# The real programs on the CPU, through the stub MPI (hvd at size 1, gradient buckets).
smoke "0. cnn_bench lenet on the CPU (stub MPI)" 60 "$OUT/cnn_bench_cpu.log" bench \
  "$BLD/cnn_bench" --model lenet --batch_size 16 --num_batches 6 --num_warmup_batches 1 \
  --display_every 2 --threads "$JOBS"
smoke "0. train mlp on the CPU (stub MPI)" 60 "$OUT/train_cpu.log" train \
  "$BLD/train" --model mlp --dataset synthetic --synthetic-samples 1024 --epochs 3 \
  --threads "$JOBS"

# ---- is there a GPU? ----
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
if ! "$BLD/test_cuda_layers" --probe > "$OUT/probe.log" 2>&1 && grep -q "skipped: no CUDA device" "$OUT/probe.log"; then
  log "$(head -1 "$OUT/probe.log")"
  log "NO GPU: the programs built, but there is no usable CUDA device here; nothing was checked."
  row "GPU" "NONE: $(head -1 "$OUT/probe.log")"
  finish 2
fi
row "GPU" "$(head -1 "$OUT/probe.log")"

# ---- 1-3: correctness ----
check "1. layers GPU vs CPU (fp32, TF32)" 60 "$OUT/layers.log" "$BLD/test_cuda_layers"
check "2. training step GPU vs CPU (5 models)" 150 "$OUT/model_step.log" "$BLD/test_cuda_model_step"
check "3. hvd_allreduce device memory, NCCL" 60 "$OUT/hvd_allreduce.log" "$BLD/test_cuda_hvd_allreduce"
for f in tests/test_cuda_*.c; do
  t=$(basename "$f" .c)
  case $t in test_cuda_layers|test_cuda_model_step|test_cuda_hvd_allreduce) continue ;; esac
  check "3. $t" 60 "$OUT/$t.log" "$BLD/$t"
done

# train --device gpu, fp32 and fp16: a correctness check, so before the throughput runs
# that may use up the time budget.
for prec in fp32 fp16 fp16-nhwc; do
  flags=()
  case $prec in
    fp16) flags=(--use_fp16) ;;
    fp16-nhwc) flags=(--use_fp16 --channels-last) ;;
  esac
  smoke "3. train --device gpu resnet20 $prec" 60 "$OUT/train_gpu_$prec.log" train \
    "$BLD/train" --device gpu --model resnet20 --dataset synthetic --synthetic-samples 4096 \
    --epochs 3 --batch-size 64 "${flags[@]}"
  if [ "$prec" != fp32 ] && ! grep -q '^Epoch .* - loss_scale ' "$OUT/train_gpu_$prec.log"; then
    row "3. train $prec: loss scale per epoch" "FAIL (not shown)"; FAILED=1
  fi
done

# ---- 4: throughput of cnn_bench against PyTorch ----
declare -A IPS NOTE FMT
PRECISIONS="fp32 tf32 fp16 bf16"
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
  # cudnn.benchmark does in its own.
  bench_cmd=(env NN_CUDNN_FIND=1 "$BLD/cnn_bench" --device gpu --model resnet50
             --num_batches "$STEPS" --num_warmup_batches "$WARMUP" --display_every 5
             --variable_update "$VARIABLE_UPDATE" "${flags[@]}")
  fmt=$DATA_FORMAT
  # No log left from an earlier check: a run skipped for the time budget writes none.
  rm -f "$logf"
  run_step "4. cnn_bench resnet50 $prec $fmt batch $b" 90 "$logf" "${bench_cmd[@]}" \
    --data_format "$fmt" --batch_size "$b"
  rc=$?
  # Channels last is the fast path and the newer one: if it ran and failed, say so and
  # measure NCHW instead (not when it was skipped for the time budget: no log).
  if [ "$rc" -ne 0 ] && [ "$fmt" = NHWC ] && [ -f "$logf" ] &&
     [ -z "$(bench_ips "$logf")" ] && ! grep -qsi "memory" "$logf"; then
    row "4. cnn_bench resnet50 $prec NHWC" "FAIL (exit $rc, see $(basename "$logf")); NCHW measured instead"
    FAILED=1
    fmt=NCHW
    logf=$OUT/bench_cnn_${prec}_nchw.log
    rm -f "$logf"
    run_step "4. cnn_bench resnet50 $prec $fmt batch $b" 90 "$logf" "${bench_cmd[@]}" \
      --data_format "$fmt" --batch_size "$b"
    rc=$?
  fi
  if [ "$rc" -ne 0 ] && grep -qsi "memory" "$logf"; then
    b=$((BATCH / 2))
    run_step "4. cnn_bench resnet50 $prec $fmt batch $b (retry)" 90 \
      "$OUT/bench_cnn_${prec}_b$b.log" "${bench_cmd[@]}" --data_format "$fmt" --batch_size "$b"
    rc=$?
    cat "$OUT/bench_cnn_${prec}_b$b.log" >> "$logf"
  fi
  read -r v partial step < <(bench_ips "$logf")
  note=""
  if [ -n "${partial:-}" ]; then
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
  if [ "$prec" = fp16 ]; then
    ls=$(sed -n 's/^loss scale: \([^ ]*\) (\([0-9]*\) of \([0-9]*\) steps.*/loss scale \1, \2 of \3 steps skipped/p' "$logf" | tail -1)
    [ -n "$ls" ] && note="$note ($ls)"
  fi
  if [ -z "$v" ]; then
    # cnn_bench failed: does nn's bare loop run, without hvd?
    FAILED=1
    run_step "4. train_bench resnet50 $prec batch $b (fallback)" 60 "$OUT/bench_bare_$prec.log" \
      env NN_CUDNN_FIND=1 "$BLD/train_bench" resnet50 "$b" "$STEPS" "$prec"
    v=$(awk '/^RESULT hvd/ {print $6}' "$OUT/bench_bare_$prec.log" | tail -1)
    if [ -n "$v" ]; then note=" (cnn_bench FAILED, exit $rc; this is train_bench, nn without hvd)"
    else note=" (cnn_bench FAILED, exit $rc; train_bench too)"
    fi
  fi
  IPS[hvd_$prec]=$v
  IPS[hvd_${prec}_batch]=$b
  NOTE[$prec]="$note"
  FMT[$prec]=$fmt
done
run_step "4. torch resnet50 ${PRECISIONS// /,} batch $BATCH" 240 "$OUT/bench_torch.log" \
  "$PY" scripts/gpu_check/torch_bench.py "$BATCH" "$STEPS" "${PRECISIONS// /,}" "$WARMUP"
for prec in $PRECISIONS; do
  v=$(awk -v p="$prec" '$1 == "RESULT" && $2 == "torch" && $4 == p {print $6}' "$OUT/bench_torch.log" | tail -1)
  [ -n "$v" ] && IPS[torch_$prec]=$v
done
for prec in $PRECISIONS; do
  h=${IPS[hvd_$prec]:-}; t=${IPS[torch_$prec]:-}
  hb=${IPS[hvd_${prec}_batch]:-$BATCH}
  ratio="-"
  if [ -n "$h" ] && [ -n "$t" ] && [ "$hb" = "$BATCH" ]; then ratio=$(awk -v a="$h" -v b="$t" 'BEGIN {printf "%.2fx", a / b}'); fi
  case $prec in fp16|bf16) what="$prec, torch AMP" ;; *) what=$prec ;; esac
  row "4. resnet50 b$hb img/s ($what)" "cnn_bench ${FMT[$prec]:-} ${h:-failed} | torch channels-last ${t:-failed} | ratio $ratio${NOTE[$prec]}"
done

finish "$FAILED"
