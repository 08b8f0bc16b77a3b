#!/usr/bin/env bash
# A cut link ends the job with a clear error, never a hang (issue: no hang, ever).
# 2 simulated hosts x 2 ranks (network namespaces ns1, ns2) allreduce 1 MiB in a loop
# under hvdrun (test_hvd_liveness's "loop" mode) with HVD_PEER_TIMEOUT_SECONDS=3; then
# ns2's link is cut (its veth peer in the root namespace goes down). Checked:
#   - both ranks on ns1 report HVD_ERR_PEER_LOST naming the two ranks of host ns2;
#   - hvdrun exits non-zero within the peer timeout + 5 s of the cut, even though
#     mpirun cannot reach ns2's daemon any more (hvdrun's --abort-timeout ends it);
#   - no process of the job is left, on either host.
# Needs root and network namespaces; skips otherwise. Removes its hosts on every exit.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
prog=$PWD/$build/tests/test_hvd_liveness
hosts=scripts/netns-hosts.sh
skip() { echo "SKIP: $*"; exit 77; }
[ -x "$hvdrun" ] && [ -x "$prog" ] || { echo "FAIL: $hvdrun or $prog is not built (run make)"; exit 1; }
netns_tmp=$(mktemp -d /tmp/test_netns_liveness.XXXXXX)
tmp=$netns_tmp
. tests/netns_prelude.sh
export HVD_RSH_AGENT=${HVD_RSH_AGENT:-$PWD/scripts/netns-rsh}
"$hosts" up 2 >"$tmp/up.log" 2>&1 || { echo "FAIL: cannot bring up 2 hosts:"; cat "$tmp/up.log"; exit 1; }
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

timeout -k 5 120 "$hvdrun" -np 4 -H ns1:2,ns2:2 --abort-timeout 2 \
  -x HVD_PEER_TIMEOUT_SECONDS=3 "$prog" loop >"$tmp/run.log" 2>&1 &
job=$!
# Cut once the loop runs on all four ranks (each says so after its first allreduce), and
# a second more, so the cut falls inside a collective.
for _ in $(seq 300); do
  [ "$(grep -c 'the loop runs' "$tmp/run.log" 2>/dev/null)" -ge 4 ] && break
  grep -q 'HVD_ERR' "$tmp/run.log" 2>/dev/null && break
  sleep 0.1
done
grep -c 'the loop runs' "$tmp/run.log" | grep -qx 4 || bad "the loop did not run on all 4 ranks before the cut"
sleep 1
ip link set hvd2 down
cut=$(date +%s.%N)
wait $job
rc=$?
took=$(echo "$(date +%s.%N) - $cut" | bc)
ip link set hvd2 up 2>/dev/null
echo "hvdrun exit $rc, $took s after the cut"
grep -E '^rank [0-9]:|^hvdrun:' "$tmp/run.log"
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || bad "hvdrun exit status $rc"
# The survivors end within the timeout + 5 s; hvdrun then gives mpirun its abort timeout
# (2 s) and its own SIGTERM-to-SIGKILL grace (2 s).
for r in 0 1; do
  at=$(sed -n "s/^rank $r exits at \([0-9.]*\)$/\1/p" "$tmp/run.log")
  [ -n "$at" ] || { bad "rank $r on ns1 did not exit by itself"; continue; }
  after=$(echo "$at - $cut" | bc)
  echo "rank $r exited $after s after the cut"
  awk -v t="$after" 'BEGIN { exit !(t <= 3 + 5) }' || bad "rank $r exited $after s after the cut (limit 8 s)"
done
awk -v t="$took" 'BEGIN { exit !(t <= 3 + 5 + 2 + 2) }' || bad "hvdrun ended $took s after the cut (limit 12 s)"
n=$(grep -cE '^rank [01]: HVD_ERR_PEER_LOST: lost 2 rank\(s\): rank 2 \(host ns2\), rank 3 \(host ns2\)' "$tmp/run.log")
[ "$n" -eq 2 ] || { bad "$n of the 2 ranks on ns1 named the ranks of host ns2:"; cat "$tmp/run.log"; }
sleep 1
for ns in ns1 ns2; do
  if ip netns pids "$ns" 2>/dev/null | xargs -r ps -o pid=,args= -p 2>/dev/null | grep -q test_hvd_liveness; then
    bad "a rank is still running on $ns"
    ip netns pids "$ns" | xargs -r kill -9 2>/dev/null
  fi
done
pgrep -f "$prog loop" >/dev/null && { bad "a rank is still running"; pkill -9 -f "$prog loop"; }
[ $fails -eq 0 ] && echo "cut link: the job ended naming host ns2" && exit 0
exit 1
