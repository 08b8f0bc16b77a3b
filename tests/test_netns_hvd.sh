#!/usr/bin/env bash
# The hvd runtime on 2 simulated hosts x 2 ranks (network namespaces), flat and
# hierarchical (--hierarchical-allreduce = HVD_HIERARCHICAL_ALLREDUCE=1):
#   - hello_allreduce: every rank gets 1+2+3+4 = 10, and the runtime reports 2 hosts of
#     2 ranks (rank 0's --log-level info line "4 ranks on 2 hosts (local size 2);
#     hierarchical allreduce on|off": hello_allreduce itself prints only the sum);
#   - allreduce_bench --backend hvd, 8 B .. 256 KiB (x8 a row), on the same 2 hosts: the
#     same host line, one row per size with its element count and 0 wrong elements, and
#     its closing "Out of bounds values : 0 OK".
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
[ -x "$hello" ] || skip "$hello is not built (run make)"
[ -x "$bench" ] || skip "$bench is not built (run make)"
. tests/netns_prelude.sh
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# hvdrun looks for scripts/netns-rsh next to its build directory; a build elsewhere
# (make BUILD=/tmp/x) has none there, so name this tree's.
export HVD_RSH_AGENT=${HVD_RSH_AGENT:-$PWD/scripts/netns-rsh}

# hosts_line MODE OUTPUT: rank 0 says 4 ranks on 2 hosts of 2, and the mode it runs in.
hosts_line() {
  local on=off
  [ "$1" = hierarchical ] && on=on
  grep -qE "^\[hvd rank 0\] INFO: 4 ranks on 2 hosts \(local size 2\); hierarchical allreduce $on;" <<<"$2" \
    || fail "$1: no '4 ranks on 2 hosts (local size 2); hierarchical allreduce $on' line: $(grep -E 'ranks on' <<<"$2")"
}

"$hosts" up 2 || { echo "FAIL: netns-hosts.sh up 2"; exit 1; }
for mode in flat hierarchical; do
  flags=(-np 4 -H ns1:2,ns2:2 --log-level info)
  [ $mode = hierarchical ] && flags+=(--hierarchical-allreduce)
  echo "== $mode: hello_allreduce"
  out=$(timeout -k 5 90 "$hvdrun" "${flags[@]}" "$hello" 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 0 ] || fail "$mode hello_allreduce exited $rc"
  for r in 0 1 2 3; do
    grep -qE "^rank $r of 4: sum of rank\+1 = 10$" <<<"$out" || fail "$mode: rank $r did not print the sum 10"
  done
  hosts_line $mode "$out"
  grep -qi "ignored" <<<"$out" && fail "$mode: the runtime ignored a setting: $(grep -i ignored <<<"$out")"

  echo "== $mode: allreduce_bench --backend hvd"
  out=$(timeout -k 5 120 "$hvdrun" "${flags[@]}" "$bench" --backend hvd -b 8 -e 256K -f 8 \
        -n 3 -w 1 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 0 ] || fail "$mode allreduce_bench --backend hvd exited $rc"
  grep -q "^# allreduce_bench: 4 ranks, backend hvd," <<<"$out" || fail "$mode: no bench header for 4 ranks, backend hvd"
  hosts_line $mode "$out"
  # nccl-tests' rows: size count type redop root, then time algbw busbw #wrong out of
  # place and in place: 6 rows, 8 B .. 256 KiB, float sum, #wrong 0 in both halves
  rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 13 { print $1, $2, $3, $4, $9, $13 }' <<<"$out")
  want=$(for ((b = 8; b <= 262144; b *= 8)); do echo "$b $((b / 4)) float sum 0 0"; done)
  [ "$rows" = "$want" ] || fail "$mode: bench rows (size count type redop #wrong #wrong):
$rows
expected
$want"
  grep -q "^# Out of bounds values : 0 OK$" <<<"$out" || fail "$mode: no 'Out of bounds values : 0 OK'"
  grep -qi "ignored" <<<"$out" && fail "$mode: the runtime ignored a setting: $(grep -i ignored <<<"$out")"
done
echo "$failures failures"
[ "$failures" -eq 0 ]
