#!/usr/bin/env bash
# scripts/gpu_check.sh: the whole GPU check of hvd's CUDA backend in one call, for a
# machine with an NVIDIA GPU, nvcc, cuDNN, NCCL and PyTorch but no OpenMPI, no OpenBLAS
# and no internet (the device machine). It builds with the project's Makefile, single
# process: `make CUDA=1 MPI=stub BLAS=ref` (ZLIB=none where the machine has no zlib), the
# stand-ins of scripts/gpu_check/stub/ for what the device machine lacks: a
# single-process MPI (hvd at size 1), a plain C SGEMM for the CPU reference, a zlib with
# crc32 and no gzip. So the check runs the real bench/cnn_bench and train program, built
# as everywhere else. In this order:
#   tools: make, cc, timeout and nvcc, a row each (a missing one ends the check, exit 2)
#   build: make -k, so that one broken target leaves the others to run (each program
#      that was not built gets a NOT BUILT row); also `make shared` with the libraries
#      found here (CUDA_SO_LDLIBS), a row of its own
#   0. the CPU reference (PyTorch fixtures, gradient check) with the C SGEMM, and short
#      CPU runs of cnn_bench and train (the stub MPI at work; no GPU needed)
#   GPU probe: nvidia-smi and the first CUDA initialisation, at most T_PROBE s; no device:
#      exit 2; out of time: a TIMEOUT row, and the check goes on
#   1. every layer's GPU forward/backward against the CPU reference (tests/test_cuda_layers)
#   2. whole training steps GPU vs CPU (tests/test_cuda_model_step)
#   3. hvd_allreduce/broadcast of device memory at size 1 through NCCL
#      (tests/test_cuda_hvd_allreduce), then any other tests/test_cuda_*.c, then
#      train --device gpu (resnet20, synthetic data, 3 short epochs) in fp32, with
#      --use_fp16, and with --use_fp16 --channels-last: the loss is finite and goes down
#   4. resnet50 training images/sec at batch $BATCH, our figure first: cnn_bench
#      --device gpu --use_fp16 in $DATA_FORMAT (NHWC) with cuDNN's heuristic algorithm
#      choice (no cudnnFind: a figure within its budget), then, each only if its budget
#      (T_BENCH, plus T_TORCH_PREC kept for PyTorch's run of the same precision) is still
#      free when it would start, bf16, TF32 (--allow_tf32) and fp32, with cudnnFind
#      (NN_CUDNN_FIND=1, as PyTorch's cudnn.benchmark) where their limit leaves room for
#      it; then PyTorch eager on the same GPU (scripts/gpu_check/torch_bench.py, one
#      process, channels-last, AMP for fp16 and bf16) in the precisions cnn_bench ran,
#      fp16 first, capped at T_TORCH + T_TORCH_PREC per further precision. A failed
#      NHWC run is measured in NCHW, an out-of-memory run (only "out of memory" or
#      ALLOC_FAILED in its log) at half the batch, and a failed cnn_bench is retried with
#      scripts/gpu_check/train_bench (a bare nn loop, same layout), each only from time
#      left over. Both sides are timed the same way: WARMUP untimed steps, a GPU
#      synchronize, the clock, STEPS timed steps, a GPU synchronize, the clock. PyTorch is
#      the reference, not a check: its failure is reported and does not fail the check.
#   5. the summary, last: one row per step with the seconds it took, what cuDNN refused
#      (nn's "cuDNN refused" notices), and each process's CUDA start-up time (from its
#      start to its first "CUDA: " line). Also printed when the script is stopped from
#      outside (SIGTERM, SIGINT, SIGHUP): the step that was running gets a KILLED row.
# $OUT (default build/gpu_check/out) gets few files, so that all of them come back from
# a machine that returns only a handful: summary.txt and gpu_check.log (each step's
# command, limit, exit, start-up time and last 40 log lines), both written as the check
# goes; nccl_warn.log (NCCL_DEBUG=WARN, each process's warnings under its step's name);
# logs.tar.gz, every step's whole log, written at the end (the logs themselves are in
# build/gpu_check/logs). The build goes to build/gpu_check (GPU_CHECK_BUILD_DIR).
#
# Budget: GPU_CHECK_BUDGET_S (default 300) seconds for everything, the build included.
# Each planned step has a maximum, and the maxima add up to the budget; `--plan` prints
# them (the steps in their order, each maximum and the running sum) and exits without
# building. A step may run for its maximum plus what the steps before it left unused (a
# check up to twice its maximum; the probe T_PROBE at most), never into the maxima
# planned for the steps after it: a check that overruns is cut off (TIMEOUT) and cannot
# eat the benchmark's time. The runs of step 4 beyond the first pair, and the extra runs
# (NCHW, half batch, train_bench), only use time the plan does not need. A throughput
# run cut short by its limit reports the images/sec of the steps it timed.
# HVD_STALL_CHECK_TIME_SECONDS=10 and HVD_STALL_SHUTDOWN_TIME_SECONDS=20 are exported for
# the whole check (unless already set): a NCCL collective that hangs ends in
# HVD_ERR_TIMEOUT after 20 s instead of using up its step's limit.
# Exit status: 0 all passed; 1 a check failed; 2 no GPU (or a tool or the whole build
# missing); 128+N when stopped by signal N.
# Usage: scripts/gpu_check.sh [--plan | --help]
# Environment: CUDA_HOME, CUDNN_HOME, NCCL_HOME (searched if unset), PYTHON (python3),
#   BATCH (256), STEPS (10 timed steps), WARMUP (3 untimed steps), VARIABLE_UPDATE
#   (cnn_bench's, default none: one GPU, no allreduce, as PyTorch eager; horovod adds the
#   size-1 NCCL allreduce of the gradients), DATA_FORMAT (NHWC or NCHW, default NHWC),
#   GPU_CHECK_BUDGET_S (300), GPU_CHECK_BUILD_S (90), GPU_CHECK_BUILD_DIR, CC (cc), NVCC,
#   NCCL_DEBUG (WARN), NCCL_DEBUG_FILE.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
# shellcheck source=scripts/gpu_check/lib.sh
. "$ROOT/scripts/gpu_check/lib.sh"
MODE=run
case ${1:-} in
  "") ;;
  --plan) MODE=plan ;;
  -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "gpu_check.sh: unknown argument '$1': expected --plan or --help" >&2; exit 2 ;;
esac
BUDGET=${GPU_CHECK_BUDGET_S:-300}
BATCH=${BATCH:-256}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
VARIABLE_UPDATE=${VARIABLE_UPDATE:-none}
DATA_FORMAT=${DATA_FORMAT:-NHWC}
PY=${PYTHON:-python3}
CC=${CC:-cc}

# The planned maximum of each step, seconds (--plan prints them with their sum).
T_TOOLS=1          # make, cc, timeout, nvcc: their versions
T_BUILD=${GPU_CHECK_BUILD_S:-90}
T_CPU_TEST=3       # each of the two CPU reference tests
T_CPU_RUN=5        # each of the two CPU program runs
T_PROBE=30         # nvidia-smi and the first CUDA initialisation; also the probe's limit
T_LAYERS=15
T_MODEL_STEP=20
T_ALLREDUCE=15
T_CUDA_TESTS=45    # all the other tests/test_cuda_*.c together, shared out evenly below
T_TRAIN=8          # each train --device gpu run
T_BENCH=15         # a cnn_bench row's budget: planned for the first, checked for the others
T_BENCH_CAP=60     # the most a cnn_bench row may run, however much time is left
T_BENCH_FIND=30    # a later row times its algorithms (cudnnFind) when its limit is this
T_TORCH=25         # PyTorch's start and its first precision
T_TORCH_PREC=10    # PyTorch's each further precision, kept free by the row that asks for it
T_END=3            # the summary, and a margin
# The timing steps in their order: our figures first, then PyTorch's reference.
TIMING_ORDER="bench torch"
BENCH_FIRST=fp16           # planned: heuristic algorithms, a figure within its budget
BENCH_MORE="bf16 tf32 fp32"  # from the time left, in this order
OTHER_CUDA_TESTS=()
for f in tests/test_cuda_*.c; do
  t=$(basename "$f" .c)
  case $t in test_cuda_layers|test_cuda_model_step|test_cuda_hvd_allreduce) continue ;; esac
  OTHER_CUDA_TESTS+=("$t")
done
# Each gets its share of T_CUDA_TESTS (at least 10 s), so that a new test file does not
# push the plan past the budget unnoticed (--plan and test_gpu_check_plan.sh add it up).
T_CUDA_TEST=$(( ${#OTHER_CUDA_TESTS[@]} > 0 ? T_CUDA_TESTS / ${#OTHER_CUDA_TESTS[@]} : T_CUDA_TESTS ))
[ "$T_CUDA_TEST" -lt 10 ] && T_CUDA_TEST=10
N_BUILD="build (make MPI=stub BLAS=ref, nvcc sm_90)"
N_BENCH_FIRST="4. cnn_bench resnet50 $BENCH_FIRST $DATA_FORMAT b$BATCH (heuristics)"
N_TORCH="4. torch resnet50 batch $BATCH (the reference)"

# plan_steps: "MAX|NAME" of each planned step, in the order they run; the margin last.
plan_steps() {
  echo "$T_TOOLS|tools: make, cc, timeout, nvcc"
  echo "$T_BUILD|$N_BUILD"
  echo "$T_CPU_TEST|0. CPU reference vs PyTorch fixtures"
  echo "$T_CPU_TEST|0. CPU reference gradient check"
  echo "$T_CPU_RUN|0. cnn_bench lenet on the CPU (stub MPI)"
  echo "$T_CPU_RUN|0. train mlp on the CPU (stub MPI)"
  echo "$T_PROBE|GPU probe (nvidia-smi, first CUDA init)"
  echo "$T_LAYERS|1. layers GPU vs CPU (fp32, TF32)"
  echo "$T_MODEL_STEP|2. training step GPU vs CPU (5 models)"
  echo "$T_ALLREDUCE|3. hvd_allreduce device memory, NCCL"
  local t
  for t in "${OTHER_CUDA_TESTS[@]}"; do echo "$T_CUDA_TEST|3. $t"; done
  for t in fp32 fp16 fp16-nhwc; do echo "$T_TRAIN|3. train --device gpu resnet20 $t"; done
  for t in $TIMING_ORDER; do
    case $t in
      bench) echo "$T_BENCH|$N_BENCH_FIRST" ;;
      torch) echo "$T_TORCH|$N_TORCH" ;;
    esac
  done
  echo "$T_END|summary, margin"
}
print_plan() {
  local sum=0 max name p
  echo "GPU check plan: GPU_CHECK_BUDGET_S=$BUDGET"
  printf '  %-58s %5s %5s\n' step "max s" sum
  while IFS='|' read -r max name; do
    sum=$((sum + max))
    printf '  %-58s %5d %5d\n' "$name" "$max" "$sum"
  done < <(plan_steps)
  echo "  then, each only if its budget is free when it would start (cnn_bench + PyTorch):"
  for p in $BENCH_MORE; do
    printf '  %-58s %5s\n' "4. cnn_bench resnet50 $p $DATA_FORMAT b$BATCH (+ torch $p)" \
      "$T_BENCH+$T_TORCH_PREC"
  done
  if [ "$sum" -le "$BUDGET" ]; then
    echo "planned: ${sum}s of ${BUDGET}s: fits"
  else
    echo "planned: ${sum}s of ${BUDGET}s: does NOT fit (raise GPU_CHECK_BUDGET_S or lower a step's maximum)"
    return 1
  fi
}
if [ "$MODE" = plan ]; then print_plan; exit; fi
# PLANNED: the maxima of the planned steps not yet started, the margin included.
PLANNED=$(plan_steps | awk -F'|' '{s += $1} END {print s}')

BLD=${GPU_CHECK_BUILD_DIR:-$ROOT/build/gpu_check}
OUT=${OUT:-$BLD/out}
LOGS=$BLD/logs
rm -rf "$LOGS"
mkdir -p "$BLD" "$OUT" "$LOGS" || exit 2
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
: > "$OUT/gpu_check.log"
: > "$OUT/nccl_warn.log"
FAILED=0
JOBS=$(nproc 2>/dev/null || echo 4)
# A NCCL hang ends in an error, not in its step's whole limit: hvd's wait for a device
# collective and its negotiation both stop after HVD_STALL_SHUTDOWN_TIME_SECONDS.
export HVD_STALL_CHECK_TIME_SECONDS=${HVD_STALL_CHECK_TIME_SECONDS:-10}
export HVD_STALL_SHUTDOWN_TIME_SECONDS=${HVD_STALL_SHUTDOWN_TIME_SECONDS:-20}
# NCCL's warnings, one file per process (%p), gathered after each step into nccl_warn.log.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export NCCL_DEBUG_FILE=${NCCL_DEBUG_FILE:-$LOGS/nccl.%p.log}
# Line-buffered output, so that a process's "CUDA: " line is seen (and timed) when printed.
STDBUF=()
command -v stdbuf > /dev/null && STDBUF=(stdbuf -oL -eL)
INIT_TIMES=""
RESERVE=0            # seconds a slack-only step leaves free for a later one
STEP_NAME="" STEP_T0=0 STEP_PIDF=$LOGS/.step_pid

log() { printf '%s\n' "$*" | tee -a "$OUT/gpu_check.log"; }
# row NAME SECONDS STATUS: a summary line; SECONDS the step's time, "-" where none ran.
row() {
  local secs=$2
  [ "$secs" != - ] && secs=${secs}s
  printf '%-46s %5s  %s\n' "$1" "$secs" "$3" >> "$SUMMARY"
}
left() { echo $(( BUDGET - SECONDS )); }
stall_env() { env | grep '^HVD_STALL_' | sort | tr '\n' ' ' | sed 's/ $//'; }
FINISHED=0
print_summary() {
  FINISHED=1
  trap - TERM INT HUP
  tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . 2> /dev/null
  {
    echo
    echo "==================== GPU check summary ===================="
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')   commit: $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
    echo "gpu: $(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "budget: ${BUDGET}s   in force: $(stall_env) NCCL_DEBUG=$NCCL_DEBUG"
    echo "CUDA start-up per process (start to its CUDA line):${INIT_TIMES:- none seen}"
    cat "$SUMMARY"
    echo "total time: ${SECONDS}s; logs: $OUT (summary.txt, gpu_check.log, nccl_warn.log, logs.tar.gz)"
  } | tee -a "$OUT/gpu_check.log"
}
finish() { print_summary; exit "$1"; }
# A bug of this script that ends it (an unset variable under set -u) still leaves a
# summary that says so, not an empty reply.
# shellcheck disable=SC2317  # reached through the trap below
on_exit() {
  local rc=$?
  [ "$FINISHED" = 1 ] && return
  row "${STEP_NAME:-gpu_check.sh}" 0 "FAIL: gpu_check.sh ended unexpectedly (exit $rc; see gpu_check.log)"
  print_summary
}
trap on_exit EXIT
# Stopped from outside: end the step in flight (timeout runs it in a process group of
# its own, out of reach of a signal to ours), say so in its row, print the summary.
# shellcheck disable=SC2317  # reached through the traps below
on_signal() {
  local pid
  pid=$(cat "$STEP_PIDF" 2> /dev/null)
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2> /dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2> /dev/null || break; sleep 0.3; done
    # timeout leads its process group; a SIGKILL to it alone would not reach the program.
    kill -KILL -- "-$pid" 2> /dev/null || kill -KILL "$pid" 2> /dev/null
  fi
  local secs=0
  [ -n "$STEP_NAME" ] && secs=$((SECONDS - STEP_T0))
  log "stopped by SIG$1 during: ${STEP_NAME:-(between steps)}"
  row "${STEP_NAME:-(between steps)}" "$secs" "KILLED: the check was stopped from outside (SIG$1)"
  finish $((128 + $2))
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT
trap 'on_signal HUP 1' HUP

# run_step [-s] [-c CAP] [-n NEED] NAME MAX LOGFILE CMD...: runs CMD under a time limit,
# output to LOGFILE. A planned step's limit is MAX plus what the earlier steps left
# unused, at most CAP (default 2 x MAX), never into the maxima planned for the later
# steps nor into the final margin; when the budget is short of MAX, what is left. -s: a
# step outside the plan: only the time the plan does not need, less RESERVE, at most
# CAP. Not run when the limit is under NEED (default min(MAX, 10)). The command sees its
# limit as GC_STEP_LIMIT_S. Sets STEP_SECS (seconds it ran), STEP_SKIPPED (1: not run)
# and STEP_INIT (seconds from its start to its first "CUDA: " line, empty if none);
# returns the command's exit status (124 or 137: cut off by the limit; 124 when skipped).
run_step() {
  local slack_only=0 cap="" need=""
  while :; do
    case $1 in
      -s) slack_only=1; shift ;;
      -c) cap=$2; shift 2 ;;
      -n) need=$2; shift 2 ;;
      *) break ;;
    esac
  done
  local name=$1 max=$2 logf=$3; shift 3
  [ -z "$cap" ] && cap=$((2 * max))
  if [ -z "$need" ]; then need=$max; [ "$need" -gt 10 ] && need=10; fi
  local t
  if [ "$slack_only" = 1 ]; then
    t=$(( $(left) - PLANNED - RESERVE ))
  else
    PLANNED=$(( PLANNED - max ))
    t=$(( $(left) - PLANNED ))   # MAX + the time the earlier steps left unused
    [ "$t" -lt "$max" ] && t=$max
  fi
  [ "$t" -gt "$cap" ] && t=$cap
  local room=$(( $(left) - T_END ))
  [ "$t" -gt "$room" ] && t=$room
  STEP_SECS=0 STEP_SKIPPED=0 STEP_INIT=""
  if [ "$t" -lt "$need" ]; then
    log "== $name: skipped, the time budget is spent (${t}s left for it, ${need}s needed)"
    STEP_SKIPPED=1
    return 124
  fi
  local cmd="$*"
  cmd=${cmd//$'\n'/ }
  log "== $name (limit ${t}s): ${cmd:0:160}"
  STEP_NAME=$name STEP_T0=$SECONDS
  local start=${EPOCHREALTIME:-0} rcf=$LOGS/.step_rc initf=$LOGS/.step_init
  rm -f "$rcf" "$initf" "$STEP_PIDF"
  {
    GC_STEP_LIMIT_S=$t timeout -k 3 "$t" "${STDBUF[@]}" "$@" 2>&1 &
    echo $! > "$STEP_PIDF"
    wait $!
    echo $? > "$rcf"
  } | gc_stamp_init "$initf" "$start" > "$logf" &
  wait $!
  local rc
  rc=$(cat "$rcf" 2> /dev/null || echo 137)
  rm -f "$STEP_PIDF"
  STEP_NAME=""
  STEP_SECS=$(( SECONDS - STEP_T0 ))
  STEP_INIT=$(cat "$initf" 2> /dev/null)
  tail -n 40 "$logf" >> "$OUT/gpu_check.log"
  local nccl="" f
  for f in "$LOGS"/nccl.*.log; do
    [ -s "$f" ] && nccl="$nccl$(printf '== %s (%s)\n' "$name" "$(basename "$f")"; cat "$f")"$'\n'
    rm -f "$f"
  done
  [ -n "${nccl:-}" ] && printf '%s' "$nccl" >> "$OUT/nccl_warn.log" && log "   NCCL warnings: see nccl_warn.log"
  log "   -> exit $rc in ${STEP_SECS}s${STEP_INIT:+, CUDA start-up ${STEP_INIT}s} (log: $(basename "$logf"))"
  return "$rc"
}
# note_init NAME: the last step's CUDA start-up time, under NAME, for the summary.
note_init() {
  if [ -n "$STEP_INIT" ]; then INIT_TIMES="$INIT_TIMES $1 ${STEP_INIT}s;"; fi
}
# extras LOG: what a row adds from its log: every cuDNN refusal (nn's notices).
extras() {
  local r
  r=$(gc_refusals "$1")
  if [ -n "$r" ]; then printf ' [cuDNN refused: %s]' "$r"; fi
}
log "budget ${BUDGET}s (planned maxima ${PLANNED}s); in force: $(stall_env) NCCL_DEBUG=$NCCL_DEBUG"

# ---- tools: a row each, before anything takes time ----
tool_row() { # NAME OK(0|1) TEXT
  if [ "$2" = 0 ]; then row "tool: $1" 0 "ok: $3"; else row "tool: $1" 0 "FAIL: $3"; TOOLS_BAD=1; fi
  log "tool $1: $3"
}
TOOLS_BAD=0
if command -v timeout > /dev/null; then
  tool_row timeout 0 "$(timeout --version 2>&1 | head -1)"
  TO=(timeout 5)
else
  tool_row timeout 1 "not found in PATH (GNU coreutils' timeout limits every step)"
  TO=()
fi
if command -v make > /dev/null; then tool_row make 0 "$("${TO[@]}" make --version 2>&1 | head -1)"
else tool_row make 1 "not found in PATH (GNU make builds everything)"; fi
if command -v "$CC" > /dev/null; then tool_row "cc ($CC)" 0 "$("${TO[@]}" "$CC" --version 2>&1 | head -1)"
else tool_row "cc ($CC)" 1 "CC=$CC not found (set CC to a C11 compiler)"; fi
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")}
if [ -x "$NVCC" ]; then tool_row nvcc 0 "$NVCC ($("${TO[@]}" "$NVCC" --version 2>&1 | tail -1))"
else tool_row nvcc 1 "no nvcc at $NVCC nor in PATH (set NVCC or CUDA_HOME)"; fi
PLANNED=$(( PLANNED - T_TOOLS ))
[ "$TOOLS_BAD" = 0 ] || finish 2

# ---- locate the toolkit and libraries ----
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
  d=$(find_hdr "$h") || { log "header $h not found in: $SEARCH"; row "build" 0 "FAIL: no $h (set CUDNN_HOME or NCCL_HOME)"; finish 2; }
  case " $INC_DIRS " in *" $d "*) ;; *) INC_DIRS="$INC_DIRS $d" ;; esac
done
LIBS=""
for l in cudnn cublas cublasLt nccl; do
  f=$(find_lib "$l") || { log "library lib$l not found in: $SEARCH"; row "build" 0 "FAIL: no lib$l (set CUDNN_HOME or NCCL_HOME)"; finish 2; }
  LIBS="$LIBS $f -Wl,-rpath,$(dirname "$f")"
done
CUDART=""
for d in $SEARCH; do [ -f "$d/lib64/libcudart_static.a" ] && CUDART=$d/lib64/libcudart_static.a && break; done
CUDART_SO=$(find_lib cudart)
[ -z "$CUDART" ] && CUDART=$CUDART_SO
# The shared libraries (make shared) link the shared runtime: the libraries found here,
# not the Makefile's -L$(CUDA_HOME)/lib64 -lcudnn... (the wheels' folders hold no
# unversioned libcudnn.so for -l to find).
SO_LIBS=""
[ -n "$CUDART_SO" ] && SO_LIBS="$LIBS $CUDART_SO -Wl,-rpath,$(dirname "$CUDART_SO") -lstdc++"
# PROTOBUF=none: the device machine has no protobuf-c (nothing the check runs parses
# protobuf messages). IMAGES=none: nor libjpeg-turbo or libpng (nothing it runs reads
# image files).
# train needs zlib (crc32; gzip IDX files): the machine's when it has one, else the
# GPU-check-only stand-in (make ZLIB=none: crc32, no gzip; the check trains on
# synthetic data).
if printf '#include <zlib.h>\nint main(void) { return (int)crc32(0, 0, 0); }\n' |
   "${TO[@]}" "$CC" -x c - -lz -o "$BLD/zlib_probe" > /dev/null 2>&1; then
  ZLIB=system
else
  ZLIB=none
fi
log "include: $INC_DIRS"
log "libs: $LIBS $CUDART; shared: ${SO_LIBS:-(no shared libcudart)}; zlib: $ZLIB"

# ---- build: the project's Makefile, single process (MPI=stub, BLAS=ref) ----
# The same build as everywhere else, with the stand-ins of scripts/gpu_check/stub for what
# the device machine lacks, sm_90 only (the device is an H100/H200), into $BLD; -k: one
# target that does not build leaves the others to run. What the check runs: the CUDA
# tests, the CPU reference tests, cnn_bench, train and the bare loop train_bench.
TB=$BLD/tests
PROGS=()
for f in tests/test_cuda_*.c tests/test_nn_layers_torch.c tests/test_nn_gradcheck.c; do
  PROGS+=("$TB/$(basename "$f" .c)")
done
PROGS+=("$BLD/cnn_bench" "$BLD/train" "$BLD/train_bench")
MAKE_CMD=(make -k -j "$JOBS" BUILD="$BLD" CUDA=1 MPI=stub BLAS=ref ZLIB="$ZLIB" PROTOBUF=none IMAGES=none CC="$CC"
  NVCC="$NVCC" CUDA_HOME="$CUDA_HOME" CUDA_INC_DIRS="$INC_DIRS" CUDA_LDLIBS="$LIBS $CUDART"
  "CUDA_ARCH=-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90")
[ -n "$SO_LIBS" ] && MAKE_CMD+=(CUDA_SO_LDLIBS="$SO_LIBS")
MAKE_CMD+=("${PROGS[@]}")
[ -n "$SO_LIBS" ] && MAKE_CMD+=(shared)
run_step "$N_BUILD" "$T_BUILD" "$LOGS/build.log" "${MAKE_CMD[@]}"
rc=$?
missing=""
for p in "${PROGS[@]}"; do [ -x "$p" ] || missing="$missing $(basename "$p")"; done
if [ "$rc" -eq 0 ] && [ -z "$missing" ]; then
  row "$N_BUILD" "$STEP_SECS" "ok"
else
  FAILED=1
  what="FAIL (exit $rc)"
  { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && what="TIMEOUT"
  row "$N_BUILD" "$STEP_SECS" "$what${missing:+; not built:$missing}; $(gc_first_error "$LOGS/build.log")"
fi
if [ -z "$SO_LIBS" ]; then
  row "build: make shared (lib*_cuda.so)" 0 "SKIPPED: no shared libcudart found"
elif [ -f "$BLD/lib/libnn_cuda.so.0.1" ] && [ -f "$BLD/lib/libhvd_cuda.so.0.1" ]; then
  row "build: make shared (lib*_cuda.so)" 0 "ok"
else
  row "build: make shared (lib*_cuda.so)" 0 "FAIL: libnn_cuda.so or libhvd_cuda.so not built (see build.log)"
  FAILED=1
fi
# Without the probe program nothing on the GPU can run.
[ -x "$TB/test_cuda_layers" ] || { log "test_cuda_layers was not built: nothing to run on the GPU"; finish 2; }

# ---- 0: the CPU reference itself (with the C SGEMM): PyTorch fixtures, gradient check ----
# not_built NAME MAX BIN: a row for a program the build did not make (its planned time
# is released). Returns 0 when BIN is missing.
not_built() {
  [ -x "$3" ] && return 1
  PLANNED=$(( PLANNED - $2 ))
  row "$1" 0 "NOT BUILT ($(basename "$3"); see build.log)"
  FAILED=1
}
# timed_out RC: the step was cut off by its limit.
timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }
# timeout_text: what a cut-off step's row says about its start-up.
timeout_text() {
  if [ -n "$STEP_INIT" ]; then echo "TIMEOUT (CUDA start-up ${STEP_INIT}s)"
  else echo "TIMEOUT (no CUDA line: start-up unfinished or no output)"; fi
}
check() { # NAME MAX LOG BIN [ARGS]
  local name=$1
  not_built "$1" "$2" "$4" && return
  run_step "$@"
  local rc=$?
  note_init "$(basename "$4")"
  if [ "$STEP_SKIPPED" = 1 ]; then row "$name" - "SKIPPED (time budget)"; FAILED=1; return; fi
  local fails; fails=$(grep -c '^FAIL' "$3" 2>/dev/null); fails=${fails:-0}
  local oks; oks=$(grep -c '^ok' "$3" 2>/dev/null); oks=${oks:-0}
  local what=""
  [ $((oks + fails)) -gt 0 ] && what=" ($oks of $((oks + fails)) comparisons ok)"
  what="$what$(extras "$3")"
  if [ "$rc" -eq 0 ]; then row "$name" "$STEP_SECS" "PASS$what"
  elif timed_out "$rc"; then row "$name" "$STEP_SECS" "$(timeout_text)$what"; FAILED=1
  else row "$name" "$STEP_SECS" "FAIL (exit $rc)$what: $(gc_first_error "$3")"; FAILED=1
  fi
}
check "0. CPU reference vs PyTorch fixtures" "$T_CPU_TEST" "$LOGS/cpu_layers_torch.log" "$TB/test_nn_layers_torch"
check "0. CPU reference gradient check" "$T_CPU_TEST" "$LOGS/cpu_gradcheck.log" "$TB/test_nn_gradcheck"

# smoke NAME MAX LOG KIND CMD...: runs a program; PASS when it exits 0 and its losses
# (KIND bench: Step lines; train: epoch lines) are finite and fall.
smoke() {
  local name=$1 max=$2 logf=$3 kind=$4; shift 4
  not_built "$name" "$max" "$1" && return
  run_step "$name" "$max" "$logf" "$@"
  local rc=$? losses
  note_init "$(basename "$logf" .log)"
  if [ "$STEP_SKIPPED" = 1 ]; then row "$name" - "SKIPPED (time budget)"; FAILED=1; return; fi
  if [ "$kind" = bench ]; then losses=$(bench_losses "$logf"); else losses=$(train_losses "$logf"); fi
  local shown
  # shellcheck disable=SC2086
  shown=$(printf '%s ' $losses | sed 's/ $//; s/ / -> /g')
  local acc; acc=$(sed -n 's/^test accuracy: /, test accuracy /p' "$logf" | tail -1)
  local x; x=$(extras "$logf")
  # shellcheck disable=SC2086
  if [ "$rc" -eq 0 ] && falls $losses; then row "$name" "$STEP_SECS" "PASS (loss $shown$acc)$x"
  elif timed_out "$rc"; then row "$name" "$STEP_SECS" "$(timeout_text) (loss ${shown:-none})$x"; FAILED=1
  else row "$name" "$STEP_SECS" "FAIL (exit $rc, loss ${shown:-none})$x: $(gc_first_error "$logf")"; FAILED=1
  fi
}
# The real programs on the CPU, through the stub MPI (hvd at size 1, gradient buckets).
smoke "0. cnn_bench lenet on the CPU (stub MPI)" "$T_CPU_RUN" "$LOGS/cnn_bench_cpu.log" bench \
  "$BLD/cnn_bench" --model lenet --batch_size 16 --num_batches 6 --num_warmup_batches 1 \
  --display_every 2 --threads "$JOBS"
smoke "0. train mlp on the CPU (stub MPI)" "$T_CPU_RUN" "$LOGS/train_cpu.log" train \
  "$BLD/train" --model mlp --dataset synthetic --synthetic-samples 1024 --epochs 3 \
  --threads "$JOBS"

# ---- is there a GPU? (nvidia-smi's output to nvidia-smi.txt, the probe's to probe.log) ----
# At most T_PROBE s: a first CUDA initialisation can be slow. Out of time is a row, and
# the checks go on (each shows its own start-up time); no device ends the check.
# shellcheck disable=SC2016
run_step -c "$T_PROBE" "GPU probe (nvidia-smi, first CUDA init)" "$T_PROBE" "$LOGS/probe.log" bash -c \
  's=$SECONDS; timeout 8 nvidia-smi > "$1" 2>&1; echo "nvidia-smi: exit $? in $((SECONDS - s))s";
   exec "$2" --probe' probe "$LOGS/nvidia-smi.txt" "$TB/test_cuda_layers"
probe_rc=$?
note_init probe
cuda_line=$(grep -m1 'CUDA: ' "$LOGS/probe.log" 2>/dev/null)
if [ "$STEP_SKIPPED" = 1 ]; then
  row "GPU" - "SKIPPED (time budget)"; FAILED=1
elif timed_out "$probe_rc"; then
  log "the GPU probe did not finish in ${STEP_SECS}s: see nvidia-smi.txt and probe.log; the checks go on"
  row "GPU" "$STEP_SECS" "$(timeout_text): ${cuda_line:-CUDA initialisation unfinished}; the checks go on"
  FAILED=1
elif [ "$probe_rc" -ne 0 ] && grep -q "skipped: no CUDA device" "$LOGS/probe.log"; then
  log "$cuda_line"
  log "NO GPU: the programs built, but there is no usable CUDA device here; nothing was checked."
  row "GPU" "$STEP_SECS" "NONE: $cuda_line"
  finish 2
else
  row "GPU" "$STEP_SECS" "${cuda_line:-exit $probe_rc, no CUDA line (see probe.log)}${STEP_INIT:+; start-up ${STEP_INIT}s}"
fi

# ---- 1-3: correctness ----
check "1. layers GPU vs CPU (fp32, TF32)" "$T_LAYERS" "$LOGS/layers.log" "$TB/test_cuda_layers"
check "2. training step GPU vs CPU (5 models)" "$T_MODEL_STEP" "$LOGS/model_step.log" "$TB/test_cuda_model_step"
check "3. hvd_allreduce device memory, NCCL" "$T_ALLREDUCE" "$LOGS/hvd_allreduce.log" "$TB/test_cuda_hvd_allreduce"
for t in "${OTHER_CUDA_TESTS[@]}"; do
  check "3. $t" "$T_CUDA_TEST" "$LOGS/$t.log" "$TB/$t"
done

# train --device gpu, fp32 and fp16: a correctness check, so before the throughput runs.
for prec in fp32 fp16 fp16-nhwc; do
  flags=()
  case $prec in
    fp16) flags=(--use_fp16) ;;
    fp16-nhwc) flags=(--use_fp16 --channels-last) ;;
  esac
  smoke "3. train --device gpu resnet20 $prec" "$T_TRAIN" "$LOGS/train_gpu_$prec.log" train \
    "$BLD/train" --device gpu --model resnet20 --dataset synthetic --synthetic-samples 4096 \
    --epochs 3 --batch-size 64 "${flags[@]}"
  if [ "$prec" != fp32 ] && [ "$STEP_SKIPPED" = 0 ] && [ -f "$LOGS/train_gpu_$prec.log" ] &&
     ! grep -q '^Epoch .* - loss_scale ' "$LOGS/train_gpu_$prec.log"; then
    row "3. train $prec: loss scale per epoch" - "FAIL (not shown)"; FAILED=1
  fi
done

# ---- 4: throughput, our figures first ----
declare -A IPS NOTE FMT SECS ALGO
TORCH_PRECS=""
# bench_row PREC FIRST(1|0): cnn_bench resnet50 in PREC; the first row is planned and uses
# cuDNN's heuristics; a later one runs only if T_BENCH (and T_TORCH_PREC for PyTorch's
# run of PREC) is free, and times its algorithms when its limit allows cudnnFind.
bench_row() {
  local prec=$1 first=$2 flags=() b=$BATCH fmt=$DATA_FORMAT algo=heuristics
  case $prec in
    tf32) flags=(--allow_tf32) ;;
    fp16) flags=(--use_fp16) ;;
    bf16) flags=(--use_bf16) ;;
  esac
  local logf=$LOGS/bench_cnn_$prec.log opts=() rc skipped secs
  if [ "$first" = 1 ]; then
    opts=(-c "$T_BENCH_CAP")
  else
    RESERVE=$T_TORCH_PREC
    opts=(-s -n "$T_BENCH" -c "$T_BENCH_CAP")
    [ $(( $(left) - PLANNED - RESERVE )) -ge "$T_BENCH_FIND" ] && algo=cudnnFind
  fi
  local find_env=(env -u NN_CUDNN_FIND)
  [ "$algo" = cudnnFind ] && find_env=(env NN_CUDNN_FIND=1)
  # --optimizer momentum: a momentum buffer as the PyTorch peer's SGD(momentum=0.9) keeps
  # (cnn_bench's default sgd is tf_cnn_benchmarks' plain gradient descent).
  local bench_cmd=("${find_env[@]}" "$BLD/cnn_bench" --device gpu --model resnet50
                   --optimizer momentum
                   --num_batches "$STEPS" --num_warmup_batches "$WARMUP" --display_every 5
                   --variable_update "$VARIABLE_UPDATE" "${flags[@]}")
  local name="4. cnn_bench resnet50 $prec $fmt b$b ($algo)"
  [ "$first" = 1 ] && name=$N_BENCH_FIRST
  # No log left from an earlier check: a run skipped for the time budget writes none.
  rm -f "$logf"
  if [ ! -x "$BLD/cnn_bench" ]; then
    [ "$first" = 1 ] && PLANNED=$(( PLANNED - T_BENCH ))
    rc=127 skipped=0 secs=0
    : > "$logf"
  else
    run_step "${opts[@]}" "$name" "$T_BENCH" "$logf" "${bench_cmd[@]}" --data_format "$fmt" --batch_size "$b"
    rc=$? skipped=$STEP_SKIPPED secs=$STEP_SECS
    note_init "cnn_bench_$prec"
  fi
  if [ "$skipped" = 1 ]; then
    RESERVE=0
    IPS[hvd_$prec]="" NOTE[$prec]=" (cnn_bench SKIPPED: needs ${T_BENCH}s + ${T_TORCH_PREC}s for PyTorch; the time budget is spent)"
    FMT[$prec]=$fmt SECS[$prec]=- ALGO[$prec]=""
    return
  fi
  # Channels last is the fast path and the newer one: if it ran and failed (not out of
  # time, not out of memory), say why and measure NCHW instead.
  if [ "$rc" -ne 0 ] && ! timed_out "$rc" && [ "$fmt" = NHWC ] && [ -x "$BLD/cnn_bench" ] &&
     [ -z "$(bench_ips "$logf")" ] && ! gc_is_oom "$logf"; then
    row "4. cnn_bench resnet50 $prec NHWC" "$secs" "FAIL (exit $rc: $(gc_first_error "$logf"))$(extras "$logf"); NCHW measured instead"
    FAILED=1
    fmt=NCHW
    cp "$logf" "$LOGS/bench_cnn_${prec}_nhwc.log"
    run_step -s -c "$T_BENCH" "4. cnn_bench resnet50 $prec $fmt batch $b" "$T_BENCH" "$logf" \
      "${bench_cmd[@]}" --data_format "$fmt" --batch_size "$b"
    rc=$?
    secs=$((secs + STEP_SECS))
  fi
  if [ "$rc" -ne 0 ] && gc_is_oom "$logf"; then
    b=$((BATCH / 2))
    run_step -s -c "$T_BENCH" "4. cnn_bench resnet50 $prec $fmt batch $b (retry)" "$T_BENCH" \
      "$LOGS/bench_cnn_${prec}_b$b.log" "${bench_cmd[@]}" --data_format "$fmt" --batch_size "$b"
    rc=$?
    secs=$((secs + STEP_SECS))
    [ -f "$LOGS/bench_cnn_${prec}_b$b.log" ] && cat "$LOGS/bench_cnn_${prec}_b$b.log" >> "$logf"
  fi
  local v="" partial="" step="" note=""
  [ -f "$logf" ] && read -r v partial step < <(bench_ips "$logf")
  if [ -n "$partial" ]; then
    if timed_out "$rc"; then
      note=" (cut short by the time limit: the first $step timed steps)"
    else
      note=" (FAILED: exit $rc after $step timed steps: $(gc_first_error "$logf"))"; FAILED=1
    fi
  fi
  local losses; losses=$(bench_losses "$logf")
  # shellcheck disable=SC2086
  if [ -n "$v" ] && printf '%s\n' $losses | grep -qiE 'nan|inf'; then
    note="$note (loss not finite: $(printf '%s ' $losses))"; FAILED=1
  fi
  if [ "$prec" = fp16 ] && [ -f "$logf" ]; then
    local ls
    ls=$(sed -n 's/^loss scale: \([^ ]*\) (\([0-9]*\) of \([0-9]*\) steps.*/loss scale \1, \2 of \3 steps skipped/p' "$logf" | tail -1)
    [ -n "$ls" ] && note="$note ($ls)"
  fi
  if [ -z "$v" ] && timed_out "$rc"; then
    # Out of time before its first Step line: nothing measured, nothing known broken.
    note=" (cnn_bench $(timeout_text) before its first Step line)"; FAILED=1
  elif [ -z "$v" ]; then
    # cnn_bench failed: does nn's bare loop run, without hvd, in the same layout?
    FAILED=1
    local why; why=$(gc_first_error "$logf")
    [ "$rc" -eq 127 ] && why="not built"
    local bare=$LOGS/bench_bare_$prec.log
    rm -f "$bare"
    if [ -x "$BLD/train_bench" ]; then
      run_step -s -c "$T_BENCH" "4. train_bench resnet50 $prec $fmt batch $b (fallback)" "$T_BENCH" \
        "$bare" "${find_env[@]}" "$BLD/train_bench" resnet50 "$b" "$STEPS" "$prec" "$fmt"
      secs=$((secs + STEP_SECS))
    fi
    v=$(awk '/^RESULT hvd/ {print $6}' "$bare" 2>/dev/null | tail -1)
    if [ -n "$v" ]; then note=" (cnn_bench FAILED, exit $rc: $why; this is train_bench, nn without hvd)"
    else note=" (cnn_bench FAILED, exit $rc: $why; train_bench too: $(gc_first_error "$bare"))"
    fi
    note="$note$(extras "$bare")"
  fi
  IPS[hvd_$prec]=$v
  IPS[hvd_${prec}_batch]=$b
  NOTE[$prec]="$note$(extras "$logf")"
  FMT[$prec]=$fmt
  SECS[$prec]=$secs
  ALGO[$prec]=$algo
  TORCH_PRECS="$TORCH_PRECS${TORCH_PRECS:+,}$prec"
  RESERVE=0   # (kept until here: a later row's extra runs leave PyTorch's share free too)
}
# torch_step: PyTorch in the precisions cnn_bench ran (fp16 at least), one process,
# capped: its start and first precision, and T_TORCH_PREC for each further one.
torch_step() {
  [ -z "$TORCH_PRECS" ] && TORCH_PRECS=$BENCH_FIRST
  local n; n=$(echo "$TORCH_PRECS" | tr ',' '\n' | wc -l)
  local logf=$LOGS/bench_torch.log
  rm -f "$logf"
  run_step -c $(( T_TORCH + (n - 1) * T_TORCH_PREC )) "$N_TORCH" "$T_TORCH" "$logf" \
    "$PY" scripts/gpu_check/torch_bench.py "$BATCH" "$STEPS" "$TORCH_PRECS" "$WARMUP"
  local rc=$? measured=0 prec v
  note_init torch
  if [ "$STEP_SKIPPED" = 0 ]; then
    for prec in ${TORCH_PRECS//,/ }; do
      v=$(awk -v p="$prec" '$1 == "RESULT" && $2 == "torch" && $4 == p {print $6}' "$logf" | tail -1)
      if [ -n "$v" ]; then IPS[torch_$prec]=$v; measured=$((measured + 1)); fi
    done
  fi
  # The reference, not a check: its failure is reported but does not fail the check.
  local s="$measured of $n precisions measured"
  if [ "$STEP_SKIPPED" = 1 ]; then row "$N_TORCH" - "SKIPPED (time budget)"
  elif [ "$rc" -eq 0 ]; then row "$N_TORCH" "$STEP_SECS" "ok ($s: $TORCH_PRECS)"
  elif [ "$rc" -eq 77 ]; then row "$N_TORCH" "$STEP_SECS" "SKIPPED ($(tail -1 "$logf"))"
  elif timed_out "$rc"; then row "$N_TORCH" "$STEP_SECS" "$(timeout_text) ($s)"
  else row "$N_TORCH" "$STEP_SECS" "FAIL (exit $rc, $s: $(gc_first_error "$logf"))"
  fi
}
for what in $TIMING_ORDER; do
  case $what in
    bench)
      bench_row "$BENCH_FIRST" 1
      for prec in $BENCH_MORE; do bench_row "$prec" 0; done
      ;;
    torch) torch_step ;;
  esac
done
for prec in $BENCH_FIRST $BENCH_MORE; do
  h=${IPS[hvd_$prec]:-}; t=${IPS[torch_$prec]:-}
  hb=${IPS[hvd_${prec}_batch]:-$BATCH}
  ratio="-"
  if [ -n "$h" ] && [ -n "$t" ] && [ "$hb" = "$BATCH" ]; then ratio=$(awk -v a="$h" -v b="$t" 'BEGIN {printf "%.2fx", a / b}'); fi
  case $prec in fp16|bf16) what="$prec, torch AMP" ;; *) what=$prec ;; esac
  row "4. resnet50 b$hb img/s ($what)" "${SECS[$prec]:--}" "cnn_bench ${FMT[$prec]:-} ${ALGO[$prec]:-} ${h:-none} | torch channels-last ${t:-none} | ratio $ratio${NOTE[$prec]:-}"
done

finish "$FAILED"
