#!/usr/bin/env bash
# Runs build/tests/test_coll_mpi in real MPI processes, np = 1..4, each under a timeout
# so a deadlock fails instead of hanging the suite.
set -u
cd "$(dirname "$0")/.."
bin=${HVD_BUILD:-build}/tests/test_coll_mpi
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
command -v mpirun >/dev/null || { echo "skip: mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
rc=0
for np in 1 2 3 4; do
  echo "== np=$np"
  timeout -k 5 120 mpirun -np "$np" "$bin" || { echo "np=$np failed (exit $?)"; rc=1; }
done
exit $rc
