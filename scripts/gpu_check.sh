#!/usr/bin/env bash
# scripts/gpu_check.sh: the whole GPU check of hvd's CUDA backend in one call, for a
# machine with an NVIDIA GPU, nvcc, cuDNN, NCCL and PyTorch but no OpenMPI, no OpenBLAS
# and no internet (the device machine). Self-contained: it builds a single-process
# variant of nn + hvd there, with two stand-ins that exist ONLY for this check and are
# clearly labelled in scripts/gpu_check/stub/: a single-process MPI (hvd at size 1) and a
# plain C SGEMM for the CPU reference. Then:
#   1. every layer's GPU forward/backward against the CPU reference (tests/test_cuda_layers)
#   2. whole training steps GPU vs CPU: mlp, lenet, resnet20, alexnet, resnet50
#      (tests/test_cuda_model_step)
#   3. hvd_allreduce/broadcast of device memory at size 1 through NCCL
#      (tests/test_cuda_hvd_allreduce)
#   4. resnet50 training images/sec at batch $BATCH, fp32 and TF32, against PyTorch eager
#      on the same GPU (channels-last, same batch; PyTorch also with AMP), with the ratio
#   5. a summary table, last.
# Logs go to $OUT (default build/gpu_check/out); binaries to build/gpu_check.
# Budget: under 8 minutes (each step gets what is left of GPU_CHECK_BUDGET_S, default 450).
# Exit status: 0 all passed; 1 a check failed; 2 no GPU (or the build failed).
# Environment: CUDA_HOME, CUDNN_HOME, NCCL_HOME (searched if unset), PYTHON (python3),
#   BATCH (256), STEPS (20), CC (cc), NVCC.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
BLD=$ROOT/build/gpu_check
OUT=${OUT:-$BLD/out}
mkdir -p "$BLD/obj" "$OUT" || exit 2
BUDGET=${GPU_CHECK_BUDGET_S:-450}
BATCH=${BATCH:-256}
STEPS=${STEPS:-20}
PY=${PYTHON:-python3}
CC=${CC:-cc}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
FAILED=0
JOBS=$(nproc 2>/dev/null || echo 4)

log() { printf '%s\n' "$*" | tee -a "$OUT/gpu_check.log"; }
row() { printf '%-44s %s\n' "$1" "$2" >> "$SUMMARY"; }
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
log "nvcc: $NVCC ($("$NVCC" --version | tail -1))"
log "include: $INC"
log "libs: $LIBS $CUDART"

# ---- build (single process: stub MPI, plain C SGEMM) ----
build() {
  local defs="-DHVD_WITH_CUDA=1 -DHVD_WITH_CUDNN=1 -DHVD_WITH_CUBLAS=1 -DHVD_WITH_NCCL=1"
  local cflags="-O2 -g -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -Wno-unused-parameter -I$ROOT/scripts/gpu_check/stub -I$ROOT $INC $defs"
  local srcs f o
  srcs=$(ls nn/*.c nn/cuda/*.c hvd/*.c collectives/*.c scripts/gpu_check/stub/*.c)
  rm -f "$BLD"/obj/*.o
  # shellcheck disable=SC2086
  printf '%s\n' $srcs | xargs -P "$JOBS" -I{} sh -c \
    'o='"$BLD"'/obj/$(echo {} | tr / _ | sed "s/\.c$/.o/"); '"$CC $cflags"' -c {} -o $o || exit 255' || return 1
  "$NVCC" -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
    -I"$ROOT" $INC $defs -c nn/cuda/kernels.cu -o "$BLD/obj/kernels.cu.o" || return 1
  rm -f "$BLD/libgpucheck.a"
  ar rcs "$BLD/libgpucheck.a" "$BLD"/obj/*.o || return 1
  for f in tests/test_cuda_layers.c tests/test_cuda_model_step.c tests/test_cuda_hvd_allreduce.c \
           scripts/gpu_check/train_bench.c tests/test_nn_layers_torch.c tests/test_nn_gradcheck.c; do
    o=$BLD/$(basename "$f" .c)
    # shellcheck disable=SC2086
    $CC $cflags "$f" "$BLD/libgpucheck.a" $LIBS "$CUDART" $RPATH -ldl -lrt -lstdc++ -lm -lpthread -o "$o" || return 1
  done
}
if run_step "build" 200 "$OUT/build.log" bash -c "$(declare -f build); BLD='$BLD' ROOT='$ROOT' CC='$CC' NVCC='$NVCC' INC='$INC' LIBS='$LIBS' CUDART='$CUDART' RPATH='$RPATH' JOBS='$JOBS' build"; then
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

# ---- 4: throughput against PyTorch ----
declare -A IPS
for prec in fp32 tf32; do
  b=$BATCH
  run_step "4. hvd resnet50 $prec batch $b" 90 "$OUT/bench_hvd_$prec.log" env NN_CUDNN_FIND=1 "$BLD/train_bench" resnet50 "$b" "$STEPS" "$prec"
  rc=$?
  if [ "$rc" -ne 0 ] && grep -qi "memory" "$OUT/bench_hvd_$prec.log"; then
    b=$((BATCH / 2))
    run_step "4. hvd resnet50 $prec batch $b (retry)" 90 "$OUT/bench_hvd_${prec}_b$b.log" env NN_CUDNN_FIND=1 "$BLD/train_bench" resnet50 "$b" "$STEPS" "$prec"
    rc=$?
    cat "$OUT/bench_hvd_${prec}_b$b.log" >> "$OUT/bench_hvd_$prec.log"
  fi
  v=$(awk '/^RESULT hvd/ {print $6}' "$OUT/bench_hvd_$prec.log" | tail -1)
  if [ -n "$v" ]; then IPS[hvd_$prec]=$v; IPS[hvd_${prec}_batch]=$b; else FAILED=1; fi
done
run_step "4. torch resnet50 fp32,tf32,amp batch $BATCH" 200 "$OUT/bench_torch.log" "$PY" scripts/gpu_check/torch_bench.py "$BATCH" "$STEPS" fp32,tf32,amp
for prec in fp32 tf32 amp; do
  v=$(awk -v p="$prec" '$1 == "RESULT" && $2 == "torch" && $4 == p {print $6}' "$OUT/bench_torch.log" | tail -1)
  [ -n "$v" ] && IPS[torch_$prec]=$v
done
for prec in fp32 tf32 amp; do
  h=${IPS[hvd_$prec]:-}; t=${IPS[torch_$prec]:-}
  hb=${IPS[hvd_${prec}_batch]:-$BATCH}
  if [ "$prec" = amp ]; then h_txt="not implemented (no mixed precision yet)"; else h_txt="${h:-failed}"; fi
  ratio="-"
  if [ -n "$h" ] && [ -n "$t" ] && [ "$hb" = "$BATCH" ]; then ratio=$(awk -v a="$h" -v b="$t" 'BEGIN {printf "%.2fx", a / b}'); fi
  row "4. resnet50 b$hb img/s $prec: hvd | torch | ratio" "${h_txt} | ${t:-failed} | $ratio"
done

finish "$FAILED"
