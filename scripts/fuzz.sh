#!/usr/bin/env bash
# scripts/fuzz.sh BUILD SECONDS: runs each libFuzzer harness BUILD/fuzz/fuzz_* (make fuzz
# builds them with clang, ASan and UBSan) for SECONDS, FUZZ_JOBS at a time (default 2),
# each on its own working corpus (BUILD/fuzz/work/NAME, grown from the seeds in
# tests/fuzz/corpus/NAME, which stay as they are). Prints one line per harness (runs,
# runs per second, corpus, result) and exits non-zero when a harness crashed, leaked,
# timed out or ran out of memory: the input that did it is in BUILD/fuzz/crashes/NAME/
# and the log in BUILD/fuzz/logs/NAME.log. Save such an input as
# tests/fuzz/crashes-found/NAME/<what> (make test replays it: tests/test_fuzz_regressions.sh).
set -u
cd "$(dirname "$0")/.." || exit 2
build=${1:-build-fuzz}
seconds=${2:-30}
jobs=${FUZZ_JOBS:-2}
. tests/sanitize/options.sh
# libFuzzer checks for leaks after every new input: the fast unwinder there (the slow one
# is for the test suite's suppressions of OpenMPI; no harness starts MPI).
export ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=1
shopt -s nullglob
harnesses=()
for b in "$build"/fuzz/fuzz_*; do [ -x "$b" ] && harnesses+=("$b"); done
if [ ${#harnesses[@]} -eq 0 ]; then
  echo "fuzz.sh: no harnesses in $build/fuzz (run make fuzz)" >&2
  exit 2
fi
mkdir -p "$build/fuzz/logs"

run_one() {   # run_one BINARY: the fuzzer's log to logs/NAME.log, exit status to logs/NAME.rc
  local bin=$1 name
  name=$(basename "$bin")
  local work=$build/fuzz/work/$name crashes=$build/fuzz/crashes/$name
  mkdir -p "$work" "$crashes"
  [ -d "tests/fuzz/corpus/$name" ] && cp -n tests/fuzz/corpus/"$name"/* "$work"/ 2>/dev/null
  # -close_fd_mask=3: the parsers' messages and usage texts stay out of the log (the
  # fuzzer and the sanitizers still report); -timeout: one input over 10 s is a hang;
  # -rss_limit_mb: more is a memory bug (the default malloc limit follows it).
  timeout -k 10 $((seconds + 60)) "$bin" -max_total_time="$seconds" -print_final_stats=1 \
    -close_fd_mask=3 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crashes/" \
    "$work" > "$build/fuzz/logs/$name.log" 2>&1
  echo $? > "$build/fuzz/logs/$name.rc"
}

start=$(date +%s)
for bin in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_one "$bin" &
done
wait

failed=0
printf '%-28s %10s %8s %7s  %s\n' harness runs 'runs/s' corpus result
for bin in "${harnesses[@]}"; do
  name=$(basename "$bin")
  log=$build/fuzz/logs/$name.log
  rc=$(cat "$build/fuzz/logs/$name.rc" 2>/dev/null || echo 1)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  corpus=$(find "$build/fuzz/work/$name" -type f | wc -l)
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    failed=$((failed + 1))
    what=$(grep -m 1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [a-z-]+[^ ]*|runtime error: .*|SUMMARY: .*' "$log" | head -n 1)
    input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    result="FAILED (exit $rc): ${what:-see $log}${input:+; input: $input}"
  fi
  printf '%-28s %10s %8s %7s  %s\n' "$name" "${runs:-?}" "${rate:-?}" "$corpus" "$result"
done
if [ $failed -gt 0 ]; then
  for bin in "${harnesses[@]}"; do
    name=$(basename "$bin")
    [ "$(cat "$build/fuzz/logs/$name.rc")" -eq 0 ] && continue
    echo "---- $name ($build/fuzz/logs/$name.log)"
    grep -A 30 -m 1 -E '==ERROR|runtime error|ERROR: libFuzzer' "$build/fuzz/logs/$name.log" | head -40
  done
fi
echo "fuzz: ${#harnesses[@]} harnesses, ${seconds} s each, $((${#harnesses[@]} - failed)) clean, $failed failed ($(( $(date +%s) - start )) s)"
# The test runner's closing line (a harness is one test), for .ci/run's sum.
echo "$((${#harnesses[@]} - failed)) passed, $failed failed, 0 skipped"
[ $failed -eq 0 ]
