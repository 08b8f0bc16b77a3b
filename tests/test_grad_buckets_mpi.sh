#!/usr/bin/env bash
# Gradient buckets across real MPI ranks: tests/test_grad_buckets.c (layout, float32
# exact average, fp16 within float16 tolerance, overlap on and off) at np=2 and np=3.
set -u
build=${HVD_BUILD:-build}
bin=$build/tests/test_grad_buckets
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
command -v mpirun >/dev/null || { echo "skip: mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
for np in 2 3; do
  out=$(timeout -k 5 60 mpirun -np $np "$bin" 2>&1)
  rc=$?
  echo "$out"
  if [ $rc -ne 0 ]; then echo "FAIL: np=$np exited $rc"; exit 1; fi
  n=$(grep -c "of $np: grad buckets OK" <<<"$out")
  if [ "$n" -ne $np ]; then echo "FAIL: np=$np: $n of $np ranks reported OK"; exit 1; fi
done
echo "grad buckets OK at np=2 and np=3"
