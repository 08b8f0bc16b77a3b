#!/usr/bin/env bash
# Hierarchical allreduce vs the flat ring on several ranks: 2 fake hosts x 2 ranks, and
# 2 fake hosts x 3 ranks (a local size that does not divide the short lengths).
# The fake hosts are cut out of one machine by rank (see test_coll_hierarchical.c);
# tests/test_netns_hierarchical.sh runs the same program on real (namespace) hosts.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
bin=$build/tests/test_coll_hierarchical
if [ ! -x "$bin" ]; then echo "SKIP: $bin is not built (run make)"; exit 77; fi
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not installed"; exit 77; fi
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
status=0
echo "== 4 ranks: 2 hosts x 2"
HVD_TEST_LOCAL_SIZE=2 timeout -k 5 60 "${mpi[@]}" -x HVD_TEST_LOCAL_SIZE -np 4 "$bin" || status=1
echo "== 6 ranks: 2 hosts x 3"
HVD_TEST_LOCAL_SIZE=3 timeout -k 5 60 "${mpi[@]}" -x HVD_TEST_LOCAL_SIZE -np 6 "$bin" || status=1
exit $status
