#!/usr/bin/env bash
# The hvd runtime on 2 simulated hosts x 2 ranks (network namespaces), flat and
# hierarchical (--hierarchical-allreduce = HVD_HIERARCHICAL_ALLREDUCE=1):
#   - hello_allreduce: every rank gets 1+2+3+4 = 10, and reports 2 hosts (cross size);
#   - allreduce_bench --backend hvd, 8 B .. 4 MiB: zero wrong elements (it exits
#     non-zero otherwise).
# In hierarchical mode the runtime must not report that it ignored the setting.
# Needs root and network namespaces; skips otherwise. Removes its hosts on every exit.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
hello=$build/examples/hello_allreduce
bench=$build/allreduce_bench
hosts=scripts/netns-hosts.sh
skip() { echo "SKIP: $*"; exit 77; }
[ -x "$hvdrun" ] || skip "$hvdrun is not built (run make)"
[ -x "$hello" ] || skip "$hello is not built (examples/hello_allreduce.c is not there yet)"
. tests/netns_prelude.sh
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$hosts" up 2 || { echo "FAIL: netns-hosts.sh up 2"; exit 1; }
for mode in flat hierarchical; do
  flags=(-np 4 -H ns1:2,ns2:2 --log-level info)
  [ $mode = hierarchical ] && flags+=(--hierarchical-allreduce)
  echo "== $mode: hello_allreduce"
  out=$(timeout -k 5 90 "$hvdrun" "${flags[@]}" "$hello" 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 0 ] || fail "$mode hello_allreduce exited $rc"
  n=$(grep -cE '= *10(\.0+)?$' <<<"$out")
  [ "$n" -ge 4 ] || fail "$mode: expected the sum 10 on all 4 ranks"
  grep -qi "ignored" <<<"$out" && fail "$mode: the runtime ignored a setting: $(grep -i ignored <<<"$out")"
  if [ -x "$bench" ] && "$bench" --help 2>/dev/null | grep -qE '^ +hvd +'; then
    echo "== $mode: allreduce_bench --backend hvd"
    out=$(timeout -k 5 120 "$hvdrun" "${flags[@]}" "$bench" --backend hvd -b 8 -e 4194304 -f 8 \
          -n 3 -w 1 2>&1); rc=$?
    echo "$out"
    [ $rc -eq 0 ] || fail "$mode allreduce_bench --backend hvd exited $rc"
    grep -qi "ignored" <<<"$out" && fail "$mode: the runtime ignored a setting"
  else
    echo "($bench has no hvd backend yet: the runtime is checked with hello_allreduce only)"
  fi
done
echo "$failures failures"
[ "$failures" -eq 0 ]
