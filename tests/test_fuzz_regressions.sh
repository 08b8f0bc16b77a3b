#!/usr/bin/env bash
# Replays the committed fuzz inputs through the fuzz harnesses of the build under test
# ($HVD_BUILD/fuzz/fuzz_NAME: tests/fuzz/*.c with tests/fuzz/replay.c's main, no
# libFuzzer, no clang needed): every seed of tests/fuzz/corpus/NAME/ and every input
# that once crashed a harness, tests/fuzz/crashes-found/NAME/ (each with a note saying
# what it found, where, and whether it is fixed). Every input must run through: in the
# sanitizer build (make SANITIZE=address,undefined test) an input that reaches a memory
# error, undefined behaviour or a leak fails here, in the plain build a crash or a failed
# harness check does. `make fuzz` looks for new inputs (docs/testing.md).
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
. tests/sanitize/options.sh
shopt -s nullglob
fails=0; runs=0
for src in tests/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c)
  bin=$build/fuzz/$name
  if [ ! -x "$bin" ]; then echo "FAIL: $bin is not built (run make)"; fails=$((fails + 1)); continue; fi
  inputs=()
  for f in tests/fuzz/corpus/"$name"/* tests/fuzz/crashes-found/"$name"/*; do
    case "$f" in *.md) continue ;; esac
    [ -f "$f" ] && inputs+=("$f")
  done
  [ ${#inputs[@]} -gt 0 ] || { echo "FAIL: $name has no seeds in tests/fuzz/corpus/$name"; fails=$((fails + 1)); continue; }
  bad=0
  for f in "${inputs[@]}"; do
    runs=$((runs + 1))
    out=$(timeout -k 5 60 "$bin" "$f" 2>&1 >/dev/null)
    rc=$?
    if [ $rc -ne 0 ]; then
      fails=$((fails + 1)); bad=$((bad + 1))
      echo "FAIL: $name $f (exit $rc)${f/#tests\/fuzz\/crashes-found*/; note: $f.md}"
      grep -m 1 -A 12 -E '==ERROR|runtime error|SUMMARY|Assertion|Aborted' <<<"$out" | sed 's/^/    /'
    fi
  done
  [ $bad -eq 0 ] && echo "ok   $name: ${#inputs[@]} inputs"
done
echo "$runs inputs replayed, $fails failed"
[ $fails -eq 0 ]
