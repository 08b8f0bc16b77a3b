#!/usr/bin/env bash
# OpenBLAS's kernel choice (nn_blas_fix_misdetected_core, called first in every program
# that runs nn): on a CPU with AVX2 and FMA the matrix products run AVX2-or-better
# kernels even where OpenBLAS does not know the CPU model (it then falls back to its
# SSE3 Prescott kernels, 5-9x slower), and a user's own OPENBLAS_CORETYPE is kept. Run
# on a CPU without AVX2, only the second half applies.
set -u
build=${HVD_BUILD:-build}
bench=$build/nn_train_bench
[ -x "$bench" ] || { echo "FAIL: $bench is not built (make BUILD=$build)"; exit 1; }
fail=0
blas_line() { # blas_line [VAR=VALUE]: the bench's BLAS line in a clean environment
  env -u OPENBLAS_CORETYPE -u NN_BLAS_CORE_SET "$@" "$bench" --model mlp --batch 4 --steps 1 \
    --warmup 0 2>&1 | grep '^BLAS:'
}

line=$(blas_line)
echo "default: $line"
case "$line" in
  *"does not name its kernels"*) echo "skip: this BLAS is not OpenBLAS with DYNAMIC_ARCH"; exit 77 ;;
esac
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  if echo "$line" | grep -Eqi 'OpenBLAS (Haswell|SkylakeX|Cooperlake|SapphireRapids|Zen|Excavator) kernels'; then
    echo "ok: AVX2 kernels on a CPU with AVX2"
  else
    echo "FAIL: the CPU has AVX2 and FMA but the products run: $line"; fail=1
  fi
fi
line=$(blas_line OPENBLAS_CORETYPE=Prescott)
echo "user's choice: $line"
if echo "$line" | grep -q 'OpenBLAS Prescott kernels (OPENBLAS_CORETYPE=Prescott)$'; then
  echo "ok: OPENBLAS_CORETYPE set by the user is kept"
else
  echo "FAIL: OPENBLAS_CORETYPE=Prescott was not kept: $line"; fail=1
fi
exit $fail
