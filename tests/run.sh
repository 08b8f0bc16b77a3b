#!/usr/bin/env bash
# Test runner. Runs every test program build/tests/test_* and every script
# tests/test_*.sh, each under a time limit, and closes with "N passed, N failed, N skipped".
# A test passes with exit 0, is skipped with exit 77 (it prints why, and only a missing
# GPU or root is a reason: see skip_ok), fails otherwise; a test source that was not
# built, or a script without its executable bit, fails too.
# Usage: tests/run.sh [BUILD_DIR] [NAME_FILTER]   (NAME_FILTER: an extended regex, e.g. a
# name or part of one, or '^test_(hvd|coll)'; a sanitizer build's options: tests/sanitize/)
set -u
build=${1:-build}
filter=${2:-}
# Tests left out of this run (an extended regex; make sets it for the sanitizer builds).
exclude=${HVD_TEST_EXCLUDE:-}
limit=${HVD_TEST_TIME_LIMIT:-300}
cd "$(dirname "$0")/.."
export HVD_BUILD=$build
# OpenMPI refuses root without these; tests start many ranks on few cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
logdir=$build/test-logs
# Sanitizer runtime options and suppressions (no effect on a build without sanitizers).
. tests/sanitize/options.sh
mkdir -p "$logdir"

# A skip is for what a machine may lack that no install step can bring: a GPU, root (or
# what root may do here). Any other reason to skip (a program not built, a package not
# installed: make test builds and installs them) counts as a failure.
skip_ok='no CUDA device|without CUDA|GPU is present|usable GPU|need(s)? root|not permitted here'

passed=0; failed=0; skipped=0; failures=()
fail_unrunnable() { # NAME WHY
  failed=$((failed + 1)); failures+=("$1"); echo "FAIL  $1: $2"
}
# Every test source is counted: one that was not built, or a script that cannot be run,
# fails instead of vanishing from the count.
for src in tests/test_*.c; do
  name=$(basename "$src" .c)
  [ -n "$filter" ] && ! [[ "$name" =~ $filter ]] && continue
  [ -x "$build/tests/$name" ] || fail_unrunnable "$name" "$src was not built ($build/tests/$name missing: run make)"
done
for t in "$build"/tests/test_* tests/test_*.sh; do
  name=$(basename "$t")
  case "$name" in *.d|*.o) continue ;; esac
  [ -n "$filter" ] && ! [[ "$name" =~ $filter ]] && continue
  if [ -n "$exclude" ] && [[ "$name" =~ $exclude ]]; then
    printf 'NOTE  %-40s not run in this build (HVD_TEST_EXCLUDE)\n' "$name"; continue
  fi
  if [ ! -x "$t" ]; then
    [ -e "$t" ] && fail_unrunnable "$name" "$t is not executable (chmod +x)"
    continue
  fi
  start=$(date +%s)
  timeout -k 10 "$limit" "$t" >"$logdir/$name.log" 2>&1 </dev/null
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); printf 'PASS  %-40s (%ds)\n' "$name" "$secs"
  elif [ $rc -eq 77 ] && tail -n 1 "$logdir/$name.log" | grep -qiE "$skip_ok"; then
    skipped=$((skipped + 1)); printf 'SKIP  %-40s %s\n' "$name" "$(tail -n 1 "$logdir/$name.log")"
  elif [ $rc -eq 77 ]; then
    failed=$((failed + 1)); failures+=("$name")
    echo "FAIL  $name: skipped for a reason other than a missing GPU or root: $(tail -n 1 "$logdir/$name.log")"
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
