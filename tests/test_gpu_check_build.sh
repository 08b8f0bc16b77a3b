#!/usr/bin/env bash
# scripts/gpu_check.sh on a machine without a GPU: it must build its single-process
# programs (nvcc kernels, nn + hvd against the GPU-check-only MPI stub and C SGEMM), pass
# its CPU reference checks (PyTorch fixtures and gradient check with the C SGEMM), then
# stop with exit 2 and a clear "NO GPU" line. Keeps the script from rotting while the
# sources change. Skipped without nvcc, and where a GPU is present (run the full check
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
OUT=$out timeout 300 scripts/gpu_check.sh > "$out/stdout" 2>&1
rc=$?
cat "$out/stdout"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
[ "$rc" -eq 2 ] || fail "gpu_check.sh exited $rc, expected 2 (no GPU)"
grep -qE '^build \(nvcc.* ok$' "$out/summary.txt" || fail "the build step did not pass"
grep -qE '^0\. CPU reference vs PyTorch fixtures +PASS' "$out/summary.txt" ||
  fail "the CPU reference (C SGEMM) does not match the PyTorch fixtures"
grep -qE '^0\. CPU reference gradient check +PASS' "$out/summary.txt" ||
  fail "the CPU reference gradient check failed"
grep -qE '^GPU +NONE: ' "$out/summary.txt" || fail "no clear 'GPU NONE' line in the summary"
grep -q 'NO GPU: the programs built' "$out/stdout" || fail "no clear NO GPU message"
for p in test_cuda_layers test_cuda_model_step test_cuda_hvd_allreduce train_bench; do
  [ -x "build/gpu_check/$p" ] || fail "build/gpu_check/$p was not built"
done
if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "gpu_check.sh builds and stops clearly without a GPU"
