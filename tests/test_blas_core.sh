#!/usr/bin/env bash
# OpenBLAS's kernel choice (nn_blas_fix_misdetected_core, called first in every program
# that runs nn): on a CPU with AVX2 and FMA the matrix products run AVX2-or-better
# kernels even where OpenBLAS does not know the CPU model (it then falls back to its
# SSE3 Prescott kernels, 5-9x slower); the program started again keeps its arguments; a
# user's own OPENBLAS_CORETYPE is kept; a program started through the loader (ld.so
# ./prog, where /proc/self/exe is the loader) is not started again. The test hook
# NN_TEST_BLAS_ASSUME_CORE makes nn take OpenBLAS's choice to be Prescott, so the path
# that starts the program again runs on CPUs OpenBLAS knows too. On a CPU without AVX2
# only the user's choice and the loader are checked.
set -u
build=${HVD_BUILD:-build}
bench=$build/nn_train_bench
[ -x "$bench" ] || { echo "FAIL: $bench is not built (make BUILD=$build)"; exit 1; }
fail=0
run_bench() { # run_bench [VAR=VALUE...] [LOADER]: the bench's output, clean environment
  env -u OPENBLAS_CORETYPE -u NN_BLAS_CORE_SET -u NN_TEST_BLAS_ASSUME_CORE "$@" "$bench" \
    --model mlp --batch 4 --steps 1 --warmup 0 2>&1
}
avx2_kernels='OpenBLAS (Haswell|SkylakeX|Cooperlake|SapphireRapids|Zen|Excavator) kernels'

line=$(run_bench | grep '^BLAS:')
echo "default: $line"
case "$line" in
  *"does not name its kernels"*)
    echo "FAIL: nn is not linked with OpenBLAS (install-deps installs Debian's, with DYNAMIC_ARCH)"
    exit 1 ;;
esac
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  if echo "$line" | grep -Eqi "$avx2_kernels"; then
    echo "ok: AVX2 kernels on a CPU with AVX2"
  else
    echo "FAIL: the CPU has AVX2 and FMA but the products run: $line"; fail=1
  fi
  out=$(run_bench NN_TEST_BLAS_ASSUME_CORE=Prescott)
  echo "$out" | sed 's/^/  forced: /'
  if echo "$out" | grep -Eq "^BLAS: $avx2_kernels \(OPENBLAS_CORETYPE=[A-Za-z]*, set by nn" &&
     echo "$out" | grep -q '^total images/sec: '; then
    echo "ok: started again with better kernels, its arguments kept"
  else
    echo "FAIL: with OpenBLAS's choice taken as Prescott the program did not start again" \
      "with AVX2 kernels and its arguments"; fail=1
  fi
fi
line=$(run_bench OPENBLAS_CORETYPE=Prescott | grep '^BLAS:')
echo "user's choice: $line"
if echo "$line" | grep -q 'OpenBLAS Prescott kernels (OPENBLAS_CORETYPE=Prescott)$'; then
  echo "ok: OPENBLAS_CORETYPE set by the user is kept"
else
  echo "FAIL: OPENBLAS_CORETYPE=Prescott was not kept: $line"; fail=1
fi
loader=$(readelf -l "$bench" 2>/dev/null | sed -n 's/.*interpreter: \(.*\)\]/\1/p')
if [ -n "$loader" ] && [ -x "$loader" ]; then
  out=$(run_bench NN_TEST_BLAS_ASSUME_CORE=Prescott "$loader")
  if echo "$out" | grep -q '^total images/sec: '; then
    echo "ok: started through the loader ($loader), it runs with its arguments"
  else
    echo "FAIL: started through the loader it did not run:"; echo "$out" | head -5; fail=1
  fi
fi
exit $fail
