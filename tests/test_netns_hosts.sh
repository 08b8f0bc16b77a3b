#!/usr/bin/env bash
# The simulated hosts: scripts/netns-hosts.sh up/status/down (idempotent, shaping,
# shrinking), the rsh agent (hostname per host), and rank placement on 2 hosts x 2 ranks
# both through hvdrun -H ns1:2,ns2:2 and through plain mpirun with the agent.
# Needs root and network namespaces; skips otherwise. Removes its hosts on every exit.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
hosts=scripts/netns-hosts.sh
skip() { echo "SKIP: $*"; exit 77; }
[ -x "$hvdrun" ] || skip "$hvdrun is not built (run make)"
. tests/netns_prelude.sh
tmp=$(mktemp -d)
netns_tmp=$tmp
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$hosts" down >/dev/null
"$hosts" status >/dev/null && fail "status says hosts are up after down"
"$hosts" up 3 || { echo "FAIL: up 3"; exit 1; }
"$hosts" up 2 --rate 10gbit || fail "up 2 --rate 10gbit after up 3"
st=$("$hosts" status)
echo "$st"
want="ns1 10.231.0.1/24 tbf rate 10Gbit
ns2 10.231.0.2/24 tbf rate 10Gbit
bridge hvdbr0 10.231.0.254/24"
[ "$st" = "$want" ] || fail "status after up 3, up 2 --rate:
$st
expected
$want"
[ -e /run/netns/ns3 ] && fail "up 2 after up 3 left ns3 behind"
"$hosts" up 2 >/dev/null || fail "up 2 again (idempotent) failed"
[ "$("$hosts" status | head -n 2)" = "ns1 10.231.0.1/24 (unshaped)
ns2 10.231.0.2/24 (unshaped)" ] || fail "up 2 without --rate did not remove the shaping: $("$hosts" status)"

# The agent: the host's own hostname and address.
out=$(scripts/netns-rsh ns2 'hostname; ip -4 -o addr show dev hvd0 | awk "{print \$4}"')
[ "$out" = "ns2
10.231.0.2/24" ] || fail "netns-rsh ns2: got '$out'"
out=$(scripts/netns-rsh ns9 true 2>&1); rc=$?
[ $rc -ne 0 ] && [[ "$out" == *"host ns9 is not up"* ]] || fail "netns-rsh to a missing host: rc $rc, '$out'"

# Ranks on the hosts: rank, local rank, hostname.
cat > "$tmp/where.sh" <<'EOF2'
#!/bin/sh
echo "rank $OMPI_COMM_WORLD_RANK local $OMPI_COMM_WORLD_LOCAL_RANK host $(hostname)"
EOF2
chmod +x "$tmp/where.sh"
want="rank 0 local 0 host ns1
rank 1 local 1 host ns1
rank 2 local 0 host ns2
rank 3 local 1 host ns2"
# Only the ranks' lines are compared: under load OpenMPI's rsh launcher may warn that
# setpgid failed (its child had already started the agent), which changes nothing.
ranks_only() { grep -v '^\[[^]]*\] plm:rsh: Warning: setpgid(' | sort; }
out=$(timeout -k 5 60 "$hvdrun" -np 4 -H ns1:2,ns2:2 "$tmp/where.sh" 2>&1 | ranks_only)
[ "$out" = "$want" ] || fail "hvdrun -H ns1:2,ns2:2:
$out
expected
$want"
out=$(timeout -k 5 60 mpirun --allow-run-as-root -np 4 -H ns1:2,ns2:2 \
      --mca plm_rsh_agent "$PWD/scripts/netns-rsh" --mca oob_tcp_if_include 10.231.0.0/24 \
      --mca btl_tcp_if_include 10.231.0.0/24 "$tmp/where.sh" 2>&1 | ranks_only)
[ "$out" = "$want" ] || fail "plain mpirun with the agent:
$out
expected
$want"

"$hosts" down >/dev/null
"$hosts" down >/dev/null || fail "a second down failed"
ls /run/netns 2>/dev/null | grep -qE '^ns[0-9]+$' && fail "namespaces left after down: $(ls /run/netns)"
ip link show hvdbr0 >/dev/null 2>&1 && fail "bridge hvdbr0 left after down"
echo "$failures failures"
[ "$failures" -eq 0 ]
