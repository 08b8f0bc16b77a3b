#!/usr/bin/env bash
# The hierarchical allreduce on real (simulated) hosts: 2 network namespaces x 2 ranks,
# started by hvdrun -H ns1:2,ns2:2, so the local level runs over shared memory and the
# cross level over TCP between namespaces; results bit-equal to the flat ring (see
# test_coll_hierarchical.c). Needs root and network namespaces; skips otherwise.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
bin=$build/tests/test_coll_hierarchical
hosts=scripts/netns-hosts.sh
skip() { echo "SKIP: $*"; exit 77; }
[ -x "$hvdrun" ] || skip "$hvdrun is not built (run make)"
[ -x "$bin" ] || skip "$bin is not built (run make)"
. tests/netns_prelude.sh

"$hosts" up 2 || { echo "FAIL: netns-hosts.sh up 2"; exit 1; }
out=$(timeout -k 5 90 "$hvdrun" -np 4 -H ns1:2,ns2:2 "$bin" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: test_coll_hierarchical on ns1:2,ns2:2 exited $rc"; exit 1; }
# The program must have seen two real hosts, not cut fake ones out of one.
grep -q "^world 4 = 2 real hosts x 2 local ranks" <<<"$out" \
  || { echo "FAIL: the ranks did not see 2 hosts x 2 ranks"; exit 1; }
grep -q "^PASS: 0 failures" <<<"$out" || { echo "FAIL: no PASS line"; exit 1; }
echo "ok"
