#!/usr/bin/env bash
# cnn_bench --variable_update parameter_server (tf_cnn_benchmarks' spelling): 3 ranks,
#  - --num_ps 1 --cross_replica_sync true: rank 0 serves only; the first worker (rank 1)
#    prints the Step lines, whose loss is a number (a server's would be nan) and goes
#    down; the closing line names sync, dedicated, staleness 0;
#  - --num_ps 0 --cross_replica_sync false --max_staleness 1 with a straggler (rank 2,
#    30 ms a step): colocated async, staleness at most 1; its total images/sec the sum
#    of the workers' own rates (sync's: every rank's steps over the wall time);
#  - --cross_replica_sync maybe and --num_ps 3 fail with a message naming them.
set -u
build=${HVD_BUILD:-build}
bin=$build/cnn_bench
[ -x "$bin" ] || { echo "FAIL: $bin is not built (run make)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d /tmp/test_cnn_bench_ps.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
run() { timeout -k 5 600 mpirun -np 3 --oversubscribe "$bin" --model lenet --batch_size 8 \
          --num_batches 6 --num_warmup_batches 1 --display_every 2 --threads 1 \
          --optimizer momentum --variable_update parameter_server "$@" </dev/null; }

run --num_ps 1 --cross_replica_sync true >"$tmp/sync.log" 2>&1 || { fail "sync run:"; cat "$tmp/sync.log"; }
losses=$(awk -F'\t' '/^[0-9]+\timages\/sec/ {print $3}' "$tmp/sync.log" | tr '\n' ' ')
if ! awk -v l="$losses" 'BEGIN { n = split(l, a, " "); if (n < 3) exit 1;
      for (i = 1; i <= n; i++) if (a[i] !~ /^[0-9.]+$/) exit 1; exit !(a[n] < a[1]) }'; then
  fail "sync: Step losses '$losses': expected numbers going down (printed by a worker)"
fi
grep -q '^parameter servers: sync, dedicated; busiest server link [0-9.]* MB per step (in + out), staleness max 0$' "$tmp/sync.log" ||
  fail "sync: no closing line 'parameter servers: sync, dedicated; ...': $(grep '^parameter' "$tmp/sync.log")"
grep -q '^total images/sec: [0-9.]*$' "$tmp/sync.log" || fail "sync: no total images/sec"

run --num_ps 0 --cross_replica_sync false --max_staleness 1 --straggler_rank 2 \
  --straggler_delay_ms 30 >"$tmp/async.log" 2>&1 || { fail "async run:"; cat "$tmp/async.log"; }
st=$(sed -n 's/^parameter servers: async, colocated; .* staleness max \([0-9]*\)$/\1/p' "$tmp/async.log")
[ -n "$st" ] && [ "$st" -le 1 ] || fail "async: staleness max '$st' (bound 1): $(grep '^parameter' "$tmp/async.log")"
# Async's total is the sum of the workers' own rates (each timed to its own last step),
# never below the rate until every worker was done (timed after the closing barrier).
own=$(sed -n 's/^total images\/sec: \([0-9.]*\)$/\1/p' "$tmp/async.log")
all=$(sed -n "s/.*the sum of the workers' own; until every worker was done: \([0-9.]*\)$/\1/p" "$tmp/async.log")
[ -n "$own" ] && [ -n "$all" ] && awk -v o="$own" -v a="$all" 'BEGIN { exit !(o >= a) }' ||
  fail "async: total images/sec '$own' is not the workers' own rates (until all done: '$all')"
grep -q "sum of the workers' own" "$tmp/sync.log" && fail "sync: total images/sec was a sum of own rates"

run --cross_replica_sync maybe >"$tmp/bad1.log" 2>&1 && fail "--cross_replica_sync maybe was accepted"
grep -q "cross_replica_sync" "$tmp/bad1.log" || fail "--cross_replica_sync maybe: the message does not name it"
run --num_ps 3 >"$tmp/bad2.log" 2>&1 && fail "--num_ps 3 of 3 ranks was accepted"
grep -q "num_ps 3" "$tmp/bad2.log" || fail "--num_ps 3: the message does not name it"

[ $fails -eq 0 ] && echo PASS || echo "FAIL ($fails)"
[ $fails -eq 0 ]
