#!/usr/bin/env bash
# scripts/gpu_check.sh's logic, on a machine without a GPU (the GPU run itself is owed to
# a session lent one; this keeps its one call from being wasted):
#   1. --plan: exits 0 without building; every planned step with its maximum and the
#      running sum; the sum fits GPU_CHECK_BUDGET_S=300; the build gets 90 s; the
#      probe 30 s; among the timing steps (4.) our cnn_bench fp16 row comes first, before
#      PyTorch; a budget too small for the plan: exit 1, "does NOT fit";
#   2. scripts/gpu_check/lib.sh on sample log lines: only "out of memory" and
#      ALLOC_FAILED are out of memory ("an illegal memory access" is not); cuDNN's
#      refusal notices, each once; the start-up stamp passes every line through;
#   3. stopped by SIGTERM during the build (a stand-in make that sleeps): the build's
#      row says KILLED, the summary is printed last, exit 143, the make is gone;
#   4. a whole run against stand-in programs (a stand-in make writes them: shell scripts
#      that print what the real ones print, and the failures of a GPU): a probe that
#      outlasts its 30 s is a TIMEOUT row and the checks go on; NCCL's warnings land in
#      $OUT/nccl_warn.log under their step; a cuDNN refusal is copied into its row;
#      each process's start-up time is in the summary; the fp16 row runs first without
#      cudnnFind; an illegal memory access in NHWC is shown and measured in NCHW, not
#      retried at half the batch, while out of memory is; train_bench's fallback gets the
#      layout its row reports; PyTorch runs fp16 first; $OUT holds 4 files; `make shared`
#      is asked for with the libraries the check found;
#   5. a budget that leaves room for the planned steps only: the later cnn_bench rows
#      are SKIPPED before they start, and PyTorch measures fp16 alone;
#   6. (with nvcc) `make -n shared CUDA=1 CUDA_LDLIBS=...`: the CUDA backends link the
#      libraries CUDA_LDLIBS names, with the shared runtime for the static one.
set -u
cd "$(dirname "$0")/.." || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# ---- 1. the plan ----
GPU_CHECK_BUILD_DIR=$tmp/plan_build OUT=$tmp/plan_out GPU_CHECK_BUDGET_S=300 \
  scripts/gpu_check.sh --plan > "$tmp/plan" 2>&1
rc=$?
cat "$tmp/plan"
[ "$rc" -eq 0 ] || fail "--plan exited $rc, expected 0"
[ -e "$tmp/plan_build" ] || [ -e "$tmp/plan_out" ] && fail "--plan created the build or output folder"
# The planned rows: "  NAME  MAX  SUM".
awk '/^  step /{on = 1; next} /^  then/{on = 0} on && NF >= 3' "$tmp/plan" > "$tmp/rows"
sum=$(awk '{s += $(NF - 1)} END {print s + 0}' "$tmp/rows")
last=$(tail -1 "$tmp/rows" | awk '{print $NF}')
[ "$sum" -gt 0 ] && [ "$sum" = "$last" ] || fail "the running sum ($last) is not the sum of the maxima ($sum)"
[ "$sum" -le 300 ] || fail "the planned maxima add up to ${sum}s, over the 300 s budget"
grep -qE '^  build \(make.* 90 +[0-9]+$' "$tmp/rows" || fail "the build does not get 90 s"
grep -qE '^  GPU probe.* 30 +[0-9]+$' "$tmp/rows" || fail "the GPU probe does not get 30 s"
grep -qE '^  tools: make, cc, timeout, nvcc +1 +1$' "$tmp/rows" || fail "the tools are not checked first (1 s)"
first=$(grep -m1 '^  4\.' "$tmp/rows")
case $first in *"cnn_bench resnet50 fp16 NHWC"*heuristics*) ;;
  *) fail "the first timing step is '$first', expected cnn_bench fp16 NHWC (heuristics)" ;; esac
t_line=$(grep -n '^  4\. torch' "$tmp/rows" | cut -d: -f1)
b_line=$(grep -n '^  4\. cnn_bench' "$tmp/rows" | head -1 | cut -d: -f1)
[ -n "$t_line" ] && [ -n "$b_line" ] && [ "$b_line" -lt "$t_line" ] ||
  fail "PyTorch is not after the cnn_bench row in the plan"
grep -q 'planned: .*s of 300s: fits' "$tmp/plan" || fail "no 'fits' line"
GPU_CHECK_BUDGET_S=250 scripts/gpu_check.sh --plan > "$tmp/plan_small" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q 'does NOT fit' "$tmp/plan_small" ||
  fail "a 250 s budget: exit $rc, expected 1 and 'does NOT fit'"

# ---- 2. the log readers ----
. scripts/gpu_check/lib.sh
oom_case() { # EXPECTED(oom|not) LINE
  printf 'CUDA: 1 device(s), device 0: NVIDIA H100 (sm_90, 79.1 GiB)\n%s\n' "$2" > "$tmp/oom.log"
  local got=not
  gc_is_oom "$tmp/oom.log" && got=oom
  [ "$got" = "$1" ] || fail "gc_is_oom says $got for '$2', expected $1"
}
oom_case oom "nn/cuda/runtime.c:190: cudaMalloc failed: out of memory"
oom_case oom "cudnnConvolutionForward: CUDNN_STATUS_ALLOC_FAILED"
oom_case oom "CUBLAS_STATUS_ALLOC_FAILED in cublasGemmEx"
oom_case oom "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
oom_case not "nn/cuda/kernels.cu:88: kernel failed: an illegal memory access was encountered"
oom_case not "cudaErrorIllegalAddress: an illegal memory access was encountered (memory 12 GiB)"
oom_case not "Memory:      12.3 GiB device memory in use"
cat > "$tmp/ref.log" <<'EOF'
nn: CUDA: cuDNN refused batch norm in bf16 NHWC (cudnnBatchNormalizationForwardTraining: CUDNN_STATUS_NOT_SUPPORTED): nn's own kernels
ok conv
nn: CUDA: cuDNN refused SPATIAL_PERSISTENT training batch norm in fp16 NHWC (cudnnBatchNormalizationForwardTrainingEx: CUDNN_STATUS_NOT_SUPPORTED): SPATIAL
nn: CUDA: cuDNN refused batch norm in bf16 NHWC (cudnnBatchNormalizationForwardTraining: CUDNN_STATUS_NOT_SUPPORTED): nn's own kernels
EOF
got=$(gc_refusals "$tmp/ref.log")
want="batch norm in bf16 NHWC; SPATIAL_PERSISTENT training batch norm in fp16 NHWC"
[ "$got" = "$want" ] || fail "gc_refusals gave '$got', expected '$want'"
[ -z "$(gc_refusals "$tmp/oom.log")" ] || fail "gc_refusals found a refusal in a log without one"
printf 'a\nnn: CUDA: 1 device(s)\nb\nc' | gc_stamp_init "$tmp/init" "$EPOCHREALTIME" > "$tmp/copied"
[ "$(printf 'a\nnn: CUDA: 1 device(s)\nb\nc\n')" = "$(cat "$tmp/copied")" ] ||
  fail "gc_stamp_init did not pass every line through"
grep -qE '^[0-9]+\.[0-9]$' "$tmp/init" || fail "gc_stamp_init wrote no start-up time: '$(cat "$tmp/init" 2>/dev/null)'"

# ---- stand-ins: a CUDA toolkit tree, make, the programs, python ----
fake=$tmp/cuda
mkdir -p "$fake/bin" "$fake/include" "$fake/lib64" "$tmp/bin" "$tmp/rec"
for h in cudnn.h nccl.h cublas_v2.h; do : > "$fake/include/$h"; done
for l in cudnn cublas cublasLt nccl cudart; do : > "$fake/lib64/lib$l.so"; done
printf '#!/bin/sh\necho "Cuda compilation tools, Build cuda_stub"\n' > "$fake/bin/nvcc"
# The programs: one script, which acts by the name it is called by.
cat > "$tmp/prog" <<'EOF'
#!/usr/bin/env bash
me=$(basename "$0"); rec=$STUB_REC
dev="CUDA: 1 device(s), device 0: Stub GPU (sm_90, 80.0 GiB)"
has() { local k=$1; shift; case " $* " in *" $k "*) return 0 ;; esac; return 1; }
arg() { local k=$1; shift; while [ $# -gt 1 ]; do [ "$1" = "$k" ] && { echo "$2"; return; }; shift; done; }
steps() { printf '%s\timages/sec: %s +/- 0.0 (jitter = 0.0)\t%s\n' 1 "$1" 7.0 5 "$1" 6.5 10 "$1" 6.0; echo "total images/sec: $1"; }
case $me in
  test_cuda_layers)
    echo "$dev"
    if [ "${1:-}" = --probe ]; then sleep "${STUB_PROBE_SLEEP:-0}"; exit 0; fi
    echo "ok conv"; exit 0 ;;
  test_cuda_model_step)
    echo "$dev"
    echo "nn: CUDA: cuDNN refused batch norm in bf16 NHWC (cudnnBatchNormalizationForwardTraining: CUDNN_STATUS_NOT_SUPPORTED): nn's own kernels" >&2
    echo "ok resnet50 step"; exit 0 ;;
  test_cuda_hvd_allreduce)
    echo "$dev"
    f=${NCCL_DEBUG_FILE//%p/$$}; f=${f//%h/host}
    echo "host:$$ NCCL WARN stub warning at level $NCCL_DEBUG" > "$f"
    echo "ok allreduce"; exit 0 ;;
  test_*) echo "ok $me"; exit 0 ;;
  train)
    has --device "$@" && echo "train: $dev"
    ls=""; has --use_fp16 "$@" && ls=" - loss_scale 65536"
    for e in 1 2 3; do echo "Epoch $e/3: 1s - loss $((4 - e)).5 - accuracy 0.5$ls"; done; exit 0 ;;
  cnn_bench)
    if ! has gpu "$@"; then steps 100; exit 0; fi
    echo "cnn_bench: $dev" >&2
    p=fp32; has --use_fp16 "$@" && p=fp16; has --use_bf16 "$@" && p=bf16; has --allow_tf32 "$@" && p=tf32
    fmt=$(arg --data_format "$@"); b=$(arg --batch_size "$@")
    echo "$p $fmt $b find=${NN_CUDNN_FIND:-unset}" >> "$rec/cnn_bench"
    case $p/$fmt/$b in
      bf16/NHWC/*) echo "nn/cuda/kernels.cu:88: an illegal memory access was encountered"; exit 1 ;;
      bf16/NCHW/256|tf32/*) echo "nn/cuda/runtime.c:190: cudaMalloc failed: out of memory"; exit 1 ;;
    esac
    steps 1000; [ "$p" = fp16 ] && echo "loss scale: 32768 (1 of 13 steps skipped for inf/NaN gradients)"
    exit 0 ;;
  train_bench)
    echo "$dev"; echo "$*" >> "$rec/train_bench"
    echo "layout: ${5:-NCHW}"; echo "RESULT hvd $1 $4 $2 500.0"; exit 0 ;;
  python)
    [ "$1" = -c ] && exit 1   # no nvidia wheels here
    echo "$*" >> "$rec/torch"
    echo "torch 2.11.0, cuDNN 91000, Stub GPU"
    for p in ${4//,/ }; do echo "RESULT torch resnet50 $p $2 2000.0"; done; exit 0 ;;
esac
echo "stub: unknown program $me" >&2; exit 2
EOF
chmod +x "$fake/bin/nvcc" "$tmp/prog"
cp "$tmp/prog" "$tmp/bin/python"
# make: --version; STUB_MAKE_SLEEP=1: sleeps (a build in progress); else writes each
# program asked for, and `shared`'s libraries.
cat > "$tmp/bin/make" <<'EOF'
#!/usr/bin/env bash
[ "${1:-}" = --version ] && { echo "GNU Make 4.3 (stub)"; exit 0; }
if [ "${STUB_MAKE_SLEEP:-0}" = 1 ]; then echo $$ > "$STUB_REC/make.pid"; exec sleep 120; fi
printf '%s\n' "$@" > "$STUB_REC/make.args"
for a in "$@"; do
  case $a in
    BUILD=*) bld=${a#BUILD=} ;;
    shared) mkdir -p "$bld/lib"; touch "$bld/lib/libnn_cuda.so.0.1" "$bld/lib/libhvd_cuda.so.0.1" ;;
    /*) mkdir -p "$(dirname "$a")"; cp "$STUB_PROG" "$a" ;;
  esac
done
echo "make: stub build done"
EOF
chmod +x "$tmp/bin/make"
run_check() { # NAME [VAR=VALUE...]: scripts/gpu_check.sh against the stand-ins, in the background
  local n=$1; shift
  env "$@" PATH="$tmp/bin:$PATH" NVCC="$fake/bin/nvcc" CUDA_HOME="$fake" PYTHON="$tmp/bin/python" \
    STUB_REC="$tmp/rec" STUB_PROG="$tmp/prog" GPU_CHECK_BUILD_DIR="$tmp/$n/build" OUT="$tmp/$n/out" \
    timeout 200 scripts/gpu_check.sh > "$tmp/$n.stdout" 2>&1 &
  CHECK_PID=$!
}

# ---- 3. SIGTERM during the build ----
run_check killed STUB_MAKE_SLEEP=1
for _ in $(seq 1 300); do [ -s "$tmp/rec/make.pid" ] && break; sleep 0.2; done
make_pid=$(cat "$tmp/rec/make.pid" 2>/dev/null)
[ -n "$make_pid" ] || fail "the stand-in make never started"
kill -TERM "$CHECK_PID"
wait "$CHECK_PID"
rc=$?
cat "$tmp/killed.stdout"
[ "$rc" -eq 143 ] || fail "stopped by SIGTERM: exit $rc, expected 143"
sum_file=$tmp/killed/out/summary.txt
grep -qE '^build \(make.* KILLED: the check was stopped from outside \(SIGTERM\)' "$sum_file" 2>/dev/null ||
  fail "no KILLED row for the build in the summary"
rows=$(wc -l < "$sum_file" 2>/dev/null || echo 0)
[ "$rows" -ge 5 ] && tail -n "$((rows + 1))" "$tmp/killed.stdout" | head -n "$rows" | cmp -s - "$sum_file" ||
  fail "the summary was not printed last when the check was stopped"
sleep 1
[ -n "$make_pid" ] && kill -0 "$make_pid" 2>/dev/null && { fail "the build (make) still runs after the check was stopped"; kill "$make_pid"; }

# ---- 4. a whole run against the stand-ins, the probe outlasting its 30 s ----
rm -f "$tmp/rec"/*
run_check full STUB_PROBE_SLEEP=40
wait "$CHECK_PID"
rc=$?
cat "$tmp/full.stdout"
s=$tmp/full/out/summary.txt
g=$tmp/full/out/gpu_check.log
[ "$rc" -eq 1 ] || fail "the stand-in run exited $rc, expected 1 (checks failed)"
grep -qE '^GPU +[0-9]+s +TIMEOUT .*the checks go on' "$s" || fail "no TIMEOUT row for the probe"
grep -qE '^1\. layers GPU vs CPU.* PASS' "$s" || fail "the checks did not go on after the probe's timeout"
grep -qE '^2\. training step.*PASS.*\[cuDNN refused: batch norm in bf16 NHWC\]' "$s" ||
  fail "the cuDNN refusal was not copied into step 2's row"
grep -q '^== 3. hvd_allreduce' "$tmp/full/out/nccl_warn.log" && grep -q 'NCCL WARN stub warning at level WARN' "$tmp/full/out/nccl_warn.log" ||
  fail "NCCL's warnings (NCCL_DEBUG=WARN) are not in \$OUT/nccl_warn.log under their step"
grep -qE '^CUDA start-up per process .*test_cuda_layers [0-9.]+s;.*cnn_bench_fp16 [0-9.]+s;.*torch [0-9.]+s;' "$tmp/full.stdout" ||
  fail "the summary does not give each process's CUDA start-up time"
first4=$(grep -m1 '^== 4\.' "$g")
case $first4 in *"cnn_bench resnet50 fp16 NHWC b256 (heuristics)"*) ;; *) fail "the first timing run is '$first4'" ;; esac
grep -n '^== 4\.' "$g" | tail -1 | grep -q 'torch resnet50' || fail "PyTorch did not run after the cnn_bench rows"
head -1 "$tmp/rec/cnn_bench" | grep -qx 'fp16 NHWC 256 find=unset' ||
  fail "the first cnn_bench run was '$(head -1 "$tmp/rec/cnn_bench")', expected fp16 NHWC 256 without cudnnFind"
grep -q '^bf16 NHWC 128' "$tmp/rec/cnn_bench" && fail "an illegal memory access was retried at half the batch"
grep -q '^bf16 NCHW 128' "$tmp/rec/cnn_bench" || fail "out of memory (bf16 NCHW) was not retried at half the batch"
grep -qE '^4\. cnn_bench resnet50 bf16 NHWC .*FAIL .*illegal memory access.*NCHW measured instead' "$s" ||
  fail "the bf16 NHWC row does not show the illegal memory access"
grep -qE '^4\. resnet50 b128 img/s \(bf16.*cnn_bench NCHW .* 1000' "$s" || fail "no bf16 figure from NCHW at batch 128"
grep -qx 'resnet50 128 10 tf32 NHWC' "$tmp/rec/train_bench" ||
  fail "train_bench's fallback ran '$(cat "$tmp/rec/train_bench" 2>/dev/null)', expected the NHWC layout of its row"
grep -qE '^4\. resnet50 b128 img/s \(tf32\).*cnn_bench NHWC .* 500\.0 .*train_bench' "$s" ||
  fail "the tf32 row does not report train_bench's NHWC figure"
grep -qE '^4\. resnet50 b256 img/s \(fp16, torch AMP\).*ratio 0\.50x' "$s" || fail "no fp16 ratio against PyTorch"
grep -q ' 256 10 fp16,' "$tmp/rec/torch" || fail "PyTorch did not measure fp16 first: '$(cat "$tmp/rec/torch")'"
n=$(find "$tmp/full/out" -mindepth 1 | wc -l)
[ "$n" -eq 4 ] || fail "\$OUT holds $n entries, expected 4 (summary, gpu_check.log, nccl_warn.log, logs.tar.gz)"
tar -tzf "$tmp/full/out/logs.tar.gz" | grep -q 'bench_cnn_bf16.log' || fail "logs.tar.gz lacks the step logs"
# make shared links the libraries the check found, with the shared runtime.
grep -qx "CUDA_SO_LDLIBS=.*$fake/lib64/libcudnn.so .*$fake/lib64/libcudart.so .*" "$tmp/rec/make.args" &&
  grep -qx shared "$tmp/rec/make.args" ||
  fail "make shared was not asked for with the libraries found: $(grep CUDA_SO "$tmp/rec/make.args")"

# ---- 5. a budget with room for the planned steps only: the later rows are not started ----
rm -f "$tmp/rec"/*
run_check small GPU_CHECK_BUDGET_S=40
wait "$CHECK_PID"
cat "$tmp/small.stdout"
s=$tmp/small/out/summary.txt
grep -qE '^4\. resnet50 b256 img/s \(fp16, torch AMP\).* 1000 \| torch channels-last 2000' "$s" ||
  fail "a 40 s budget: no fp16 figures"
for p in bf16 tf32 fp32; do
  grep -qE "^4\\. resnet50 b256 img/s \\($p.*cnn_bench SKIPPED: needs 15s \\+ 10s" "$s" ||
    fail "a 40 s budget: the $p row was not skipped for its budget"
done
[ "$(wc -l < "$tmp/rec/cnn_bench")" -eq 1 ] || fail "a 40 s budget: cnn_bench ran $(wc -l < "$tmp/rec/cnn_bench") times, expected once"
grep -q ' 256 10 fp16 3$' "$tmp/rec/torch" || fail "a 40 s budget: PyTorch ran '$(cat "$tmp/rec/torch")', expected fp16 alone"

# ---- 6. the Makefile: the shared CUDA backends link what CUDA_LDLIBS names ----
if command -v nvcc > /dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
  make -n shared CUDA=1 BUILD="$tmp/mk" \
    CUDA_LDLIBS="/w/nvidia/cudnn/lib/libcudnn.so.9 -Wl,-rpath,/w/nvidia/cudnn/lib /c/lib64/libcudart_static.a" \
    > "$tmp/make_n" 2>&1
  grep -E -- '-o [^ ]*/lib/libnn_cuda\.so\.0\.1' "$tmp/make_n" > "$tmp/so_link"
  grep -q '/w/nvidia/cudnn/lib/libcudnn.so.9 .*/c/lib64/libcudart.so ' "$tmp/so_link" &&
    ! grep -q 'libcudart_static' "$tmp/so_link" ||
    fail "make shared does not link the CUDA_LDLIBS libraries with the shared runtime: $(cat "$tmp/so_link")"
else
  echo "(no nvcc: the Makefile's CUDA_SO_LDLIBS is not checked here)"
fi

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "gpu_check.sh: plan, log readers, SIGTERM summary and the stand-in run as expected"
