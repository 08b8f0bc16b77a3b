#!/usr/bin/env bash
# The test knob HVD_TEST_HIERARCHICAL_ONE_HOST=1 (hvd/init.c) keeps hierarchical mode on
# with a single host, so that the single-GPU check (tests/test_cuda_hvd_allreduce) runs
# the two-level device path. Here, on the CPU: with the knob, 1, 2 and 3 ranks on one
# host report hierarchical mode on and test_hvd_hierarchical's allreduces (every op,
# fused and not) are exact; without it the setting is ignored on one host.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
bin=$build/tests/test_hvd_hierarchical
if [ ! -x "$bin" ]; then echo "SKIP: $bin is not built (run make)"; exit 77; fi
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not installed"; exit 77; fi
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
for np in 1 2 3; do
  HVD_TEST_HIERARCHICAL_ONE_HOST=1 HVD_HIERARCHICAL_ALLREDUCE=1 HVD_LOG_LEVEL=info \
    timeout -k 5 60 "${mpi[@]}" -x HVD_TEST_HIERARCHICAL_ONE_HOST -x HVD_HIERARCHICAL_ALLREDUCE \
    -x HVD_LOG_LEVEL -np "$np" "$bin" rank > "$out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    cat "$out"; echo "FAIL: np=$np with the knob exited $rc"; status=1
  elif ! grep -q "$np ranks on 1 hosts (local size $np); hierarchical allreduce on" "$out"; then
    cat "$out"; echo "FAIL: np=$np with the knob: hierarchical mode not reported on"; status=1
  else
    echo "ok   np=$np, one host, knob: hierarchical on, results exact"
  fi
done
HVD_HIERARCHICAL_ALLREDUCE=1 HVD_LOG_LEVEL=info timeout -k 5 60 "${mpi[@]}" \
  -x HVD_HIERARCHICAL_ALLREDUCE -x HVD_LOG_LEVEL -np 2 "$bin" rank > "$out" 2>&1
if [ $? -ne 0 ] || ! grep -q "ignored: all ranks are on one host" "$out"; then
  cat "$out"; echo "FAIL: without the knob the setting must be ignored on one host"; status=1
else
  echo "ok   np=2, one host, no knob: hierarchical setting ignored"
fi
exit $status
