#!/usr/bin/env bash
# scripts/gpu_check.sh on a machine without a GPU: it must build its single-process
# programs through the Makefile (make MPI=stub BLAS=ref: nvcc kernels, nn + hvd against
# the GPU-check-only MPI stub and C SGEMM), pass
# its CPU reference checks (PyTorch fixtures and gradient check with the C SGEMM), then
# stop with exit 2 and a clear "NO GPU" line. Keeps the script from rotting while the
# sources change. Also checks that every summary row carries the seconds its step took
# and that the check runs with HVD_STALL_SHUTDOWN_TIME_SECONDS set (a NCCL hang must end
# in an error), and that $OUT holds 4 files (summary, gpu_check.log, nccl_warn.log,
# logs.tar.gz). Skipped without nvcc, and where a GPU is present (run the full check
# there: scripts/gpu_check.sh).
set -u
cd "$(dirname "$0")/.." || exit 2
nvcc=$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")
if [ ! -x "$nvcc" ]; then echo "skipped: no nvcc"; exit 77; fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "skipped: a GPU is present; run scripts/gpu_check.sh for the full check"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The build's planned 90 s are for the device machine's 16 cores; this machine may have 2,
# busy. The stall variables unset: the check must set them itself.
env -u HVD_STALL_SHUTDOWN_TIME_SECONDS -u HVD_STALL_CHECK_TIME_SECONDS -u GPU_CHECK_BUDGET_S \
  GPU_CHECK_BUILD_S=200 OUT="$out" timeout 280 scripts/gpu_check.sh > "$out/stdout" 2>&1
rc=$?
cat "$out/stdout"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
[ "$rc" -eq 2 ] || fail "gpu_check.sh exited $rc, expected 2 (no GPU)"
for t in timeout make 'cc \(' nvcc; do
  grep -qE "^tool: $t.* 0s  ok: " "$out/summary.txt" || fail "no 'ok' row for the tool $t"
done
grep -qE '^build \(make MPI=stub BLAS=ref, nvcc.* ok$' "$out/summary.txt" || fail "the build step did not pass"
# make shared, linked with the libraries the check found (CUDA_SO_LDLIBS).
grep -qE '^build: make shared \(lib\*_cuda.so\) +0s  ok$' "$out/summary.txt" ||
  fail "the shared CUDA backends (make shared) were not built"
# What a device machine returns is a handful of files from $OUT: the check leaves 4.
n=$(find "$out" -mindepth 1 -not -name stdout | wc -l)
[ "$n" -eq 4 ] || fail "\$OUT holds $n entries, expected 4: $(ls "$out")"
grep -qE '^0\. CPU reference vs PyTorch fixtures +[0-9]+s +PASS' "$out/summary.txt" ||
  fail "the CPU reference (C SGEMM) does not match the PyTorch fixtures"
grep -qE '^0\. CPU reference gradient check +[0-9]+s +PASS' "$out/summary.txt" ||
  fail "the CPU reference gradient check failed"
grep -qE '^GPU +[0-9]+s +NONE: ' "$out/summary.txt" || fail "no clear 'GPU NONE' line in the summary"
grep -q 'NO GPU: the programs built' "$out/stdout" || fail "no clear NO GPU message"
# Every row: the name in 46 columns, the step's seconds right-aligned in 5, the status.
rows=$(wc -l < "$out/summary.txt")
[ "$rows" -ge 11 ] || fail "only $rows summary rows, expected 4 tools, build, shared, 4 CPU checks and GPU"
bad=$(grep -cvE '^.{46} +[0-9]+s  [A-Za-z]' "$out/summary.txt")
[ "$bad" -eq 0 ] || fail "$bad summary row(s) without the seconds the step took"
# The summary is printed last and says which stall limits were in force.
tail -n "$((rows + 1))" "$out/stdout" | head -n "$rows" | cmp -s - "$out/summary.txt" ||
  fail "the summary rows are not the last lines printed"
grep -qE '^budget: 300s +in force: .*HVD_STALL_SHUTDOWN_TIME_SECONDS=20' "$out/stdout" ||
  fail "the summary does not show HVD_STALL_SHUTDOWN_TIME_SECONDS=20 in force"
grep -qE 'HVD_STALL_CHECK_TIME_SECONDS=[0-9]' "$out/stdout" ||
  fail "HVD_STALL_CHECK_TIME_SECONDS is not set in the check"
for p in tests/test_cuda_layers tests/test_cuda_model_step tests/test_cuda_hvd_allreduce train_bench \
         cnn_bench train; do
  [ -x "build/gpu_check/$p" ] || fail "build/gpu_check/$p was not built"
done
# One build: the check went through the Makefile with the stand-ins, not a build of its own.
grep -q 'make .*MPI=stub BLAS=ref' "$out/gpu_check.log" || fail "the check did not build through make MPI=stub BLAS=ref"
if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "gpu_check.sh builds and stops clearly without a GPU"
