#!/usr/bin/env bash
# Acceptance 1 of the launcher issue: the smallest user program runs on 2 ranks both
# through hvdrun and through plain mpirun, with the same output (allreduce of rank+1
# over 2 ranks: 3 on every rank).
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
bin=$build/examples/hello_allreduce
[ -x "$hvdrun" ] || { echo "SKIP: $hvdrun is not built (run make)"; exit 77; }
[ -x "$bin" ] || { echo "SKIP: $bin is not built (examples/hello_allreduce.c is not there yet)"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: mpirun is not installed"; exit 77; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

a=$(timeout -k 5 60 "$hvdrun" -np 2 "$bin" 2>&1); rc=$?
echo "hvdrun -np 2: exit $rc"; echo "$a"
[ $rc -eq 0 ] || fail "hvdrun -np 2 $bin exited $rc"
b=$(timeout -k 5 60 mpirun --allow-run-as-root -np 2 "$bin" 2>&1); rc=$?
echo "mpirun -np 2: exit $rc"; echo "$b"
[ $rc -eq 0 ] || fail "mpirun -np 2 $bin exited $rc"
[ "$(sort <<<"$a")" = "$(sort <<<"$b")" ] || fail "hvdrun and mpirun outputs differ"
# Each of the 2 ranks reports the sum 1 + 2 = 3 (as a whole word, e.g. "... = 3").
n=$(grep -cE '= *3(\.0+)?$' <<<"$a")
[ "$n" -ge 2 ] || fail "expected the sum 3 on both ranks in: $a"
echo "$failures failures"
[ "$failures" -eq 0 ]
