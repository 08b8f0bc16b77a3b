#!/usr/bin/env bash
# A few cases of scripts/mutation_check.sh in make test: the checkpoint writer writing in
# place, parameter slices left unaligned, hostfile slots not summed. Each must be caught
# by its test; the whole list (scripts/mutation_check.sh with no argument) takes several
# minutes and is run by hand, but every expression of it must still apply (--stale).
# The launcher's case first: its test is a script, for which everything is rebuilt (only
# hvdrun then); the two C tests' cases then rebuild their library and test program only.
set -u
cd "$(dirname "$0")/.." || exit 1
build=${HVD_BUILD:-build}
out=$(BUILD=$build scripts/mutation_check.sh hosts-slots-not-summed ckpt-write-in-place \
      param-slices-unaligned 2>&1)
rc=$?
printf '%s\n' "$out"
fails=0
[ "$rc" -eq 0 ] || { echo "FAIL: mutation_check.sh exited $rc"; fails=$((fails + 1)); }
for m in ckpt-write-in-place param-slices-unaligned hosts-slots-not-summed; do
  printf '%s\n' "$out" | grep -qE "^$m +[^ ]+ +caught by " ||
    { echo "FAIL: mutation $m was not reported caught"; fails=$((fails + 1)); }
done
printf '%s\n' "$out" | grep -q "^mutation check: 3 mutations: 3 caught, 0 not caught" ||
  { echo "FAIL: no summary line with 3 of 3 caught"; fails=$((fails + 1)); }
# Every other mutation of the list must at least still apply: a sed expression that no
# longer changes its file (the code moved on) would make the hand-run list fail.
stale=$(scripts/mutation_check.sh --stale 2>&1) ||
  { printf '%s\n' "$stale" | grep -E 'STALE|stale$'; echo "FAIL: stale mutations (fix their expressions in scripts/mutation_check.sh)"; fails=$((fails + 1)); }
[ "$fails" -eq 0 ] && echo "mutation check: the sampled mutations are caught, and none of the list is stale"
[ "$fails" -eq 0 ]
