#!/usr/bin/env bash
# Test runner. Runs every test program build/tests/test_* and every script
# tests/test_*.sh, each under a time limit, and closes with "N passed, N failed, N skipped".
# A test passes with exit 0, is skipped with exit 77 (it prints why), fails otherwise.
# Usage: tests/run.sh [BUILD_DIR] [NAME_FILTER]
set -u
build=${1:-build}
filter=${2:-}
limit=${HVD_TEST_TIME_LIMIT:-300}
cd "$(dirname "$0")/.."
export HVD_BUILD=$build
# OpenMPI refuses root without these; tests start many ranks on few cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
logdir=$build/test-logs
mkdir -p "$logdir"

passed=0; failed=0; skipped=0; failures=()
for t in "$build"/tests/test_* tests/test_*.sh; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  case "$name" in *.d|*.o) continue ;; esac
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  start=$(date +%s)
  timeout -k 10 "$limit" "$t" >"$logdir/$name.log" 2>&1 </dev/null
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); printf 'PASS  %-40s (%ds)\n' "$name" "$secs"
  elif [ $rc -eq 77 ]; then
    skipped=$((skipped + 1)); printf 'SKIP  %-40s %s\n' "$name" "$(tail -n 1 "$logdir/$name.log")"
  else
    failed=$((failed + 1)); failures+=("$name")
    [ $rc -eq 124 ] && echo "FAIL  $name: no result within ${limit}s (killed)" || echo "FAIL  $name (exit $rc)"
    tail -n 25 "$logdir/$name.log" | sed 's/^/      /'
  fi
done
echo
[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
