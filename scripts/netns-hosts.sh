#!/usr/bin/env bash
# scripts/netns-hosts.sh: the project's simulated hosts on one machine.
#
#   scripts/netns-hosts.sh up N [--rate RATE]   N hosts ns1..nsN (RATE e.g. 10gbit)
#   scripts/netns-hosts.sh down                 remove them (always succeeds)
#   scripts/netns-hosts.sh status               list them; exit 1 when none are up
#
# Each host is a network namespace nsK with its own loopback and one interface hvd0 at
# 10.231.0.K/24; their peers (hvdK) hang on the bridge hvdbr0 (10.231.0.254) in the
# root namespace, where mpirun runs. A process started through scripts/netns-rsh runs
# inside nsK with the hostname nsK (its own UTS namespace), so MPI sees N hosts:
# ranks of one host talk over shared memory, ranks of different hosts over TCP through
# the bridge. --rate shapes both directions of every host's link with a token bucket
# (tc tbf), e.g. 10gbit for a 10 GbE cluster.
#
# "up" is idempotent: it creates what is missing, fixes what differs, and removes hosts
# beyond N. Needs root, iproute2 (ip, tc) and util-linux (unshare).
# HVD_NETNS_SUBNET=A.B.C.0/24 moves the subnet (hvdrun reads the same variable).
set -u
prefix_net=${HVD_NETNS_SUBNET:-10.231.0.0/24}
case "$prefix_net" in
  *.0/24) base=${prefix_net%.0/24} ;;
  *) echo "netns-hosts: HVD_NETNS_SUBNET='$prefix_net': expected A.B.C.0/24" >&2; exit 2 ;;
esac
bridge=hvdbr0
state=/run/hvd-netns

die() { echo "netns-hosts: $*" >&2; exit 1; }

need_tools() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces and a bridge)"
  command -v ip >/dev/null || die "ip not found: apt-get install iproute2"
  command -v unshare >/dev/null || die "unshare not found: apt-get install util-linux"
}

# The namespaces this script made: the state directory, plus any nsK whose peer hvdK
# exists (in case the state directory was lost).
our_hosts() {
  {
    [ -d "$state" ] && ls "$state" 2>/dev/null | grep -E '^ns[0-9]+$'
    ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: hvd\([0-9]*\)@.*/ns\1/p'
  } | sort -u -V
}

remove_host() {
  local ns=$1 k=${1#ns}
  if [ -e "/run/netns/$ns" ]; then
    # Processes still inside (an orted left by a killed job) would keep it alive.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  fi
  ip link del "hvd$k" 2>/dev/null
  rm -f "$state/$ns"
  return 0
}

shape() {   # shape NS RATE: tbf on both ends of the host's link ("" removes it)
  local ns=$1 rate=$2 k=${1#ns}
  if [ -z "$rate" ]; then
    ip netns exec "$ns" tc qdisc del dev hvd0 root 2>/dev/null
    tc qdisc del dev "hvd$k" root 2>/dev/null
    return 0
  fi
  # burst: about 1 ms at the rate, so the bucket does not starve between timer ticks.
  ip netns exec "$ns" tc qdisc replace dev hvd0 root tbf rate "$rate" burst 1mb latency 50ms \
    || die "tc tbf on $ns/hvd0 failed (rate '$rate')"
  tc qdisc replace dev "hvd$k" root tbf rate "$rate" burst 1mb latency 50ms \
    || die "tc tbf on hvd$k failed (rate '$rate')"
}

up() {
  local n=$1 rate=$2
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] \
    || die "up N: N='$n' must be a number from 1 to 250"
  if [ -n "$rate" ]; then command -v tc >/dev/null || die "tc not found: apt-get install iproute2"; fi
  mkdir -p "$state"
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge || die "cannot create bridge $bridge"
  fi
  ip addr replace "$base.254/24" dev "$bridge" || die "cannot address $bridge"
  ip link set "$bridge" up || die "cannot bring $bridge up"
  for k in $(seq 1 "$n"); do
    local ns=ns$k
    if [ ! -e "/run/netns/$ns" ]; then
      ip netns add "$ns" || die "ip netns add $ns failed"
    fi
    touch "$state/$ns"
    if ! ip netns exec "$ns" ip link show hvd0 >/dev/null 2>&1; then
      ip link del "hvd$k" 2>/dev/null
      ip link add "hvd$k" type veth peer name hvd0 netns "$ns" \
        || die "cannot create the veth pair hvd$k/$ns:hvd0"
    fi
    ip link set "hvd$k" master "$bridge" up || die "cannot attach hvd$k to $bridge"
    ip netns exec "$ns" ip link set lo up || die "cannot bring lo up in $ns"
    ip netns exec "$ns" ip addr replace "$base.$k/24" dev hvd0 || die "cannot address $ns"
    ip netns exec "$ns" ip link set hvd0 up || die "cannot bring hvd0 up in $ns"
    shape "$ns" "$rate"
  done
  # Hosts beyond N from an earlier, larger "up".
  for ns in $(our_hosts); do
    [ "${ns#ns}" -gt "$n" ] && remove_host "$ns"
  done
  echo "netns-hosts: up: $(seq -s ' ' -f 'ns%g' 1 "$n") on $bridge ($base.0/24)${rate:+, links shaped to $rate}"
}

down() {
  if [ "$(id -u)" -ne 0 ]; then echo "netns-hosts: down: not root, nothing to do"; return 0; fi
  for ns in $(our_hosts); do remove_host "$ns"; done
  ip link del "$bridge" 2>/dev/null
  rmdir "$state" 2>/dev/null
  echo "netns-hosts: down"
  return 0
}

status() {
  local hosts
  hosts=$(our_hosts)
  if [ -z "$hosts" ]; then echo "netns-hosts: no hosts are up"; return 1; fi
  for ns in $hosts; do
    local addr qd
    addr=$(ip netns exec "$ns" ip -4 -o addr show dev hvd0 2>/dev/null | awk '{print $4}')
    qd=$(ip netns exec "$ns" tc qdisc show dev hvd0 2>/dev/null | awk '$2=="tbf"{print "tbf rate " $8}')
    echo "$ns ${addr:-(no address)} ${qd:-(unshaped)}"
  done
  ip -4 -o addr show dev "$bridge" 2>/dev/null | awk '{print "bridge " $2 " " $4}'
  return 0
}

cmd=${1:-}
case "$cmd" in
  up)
    shift
    [ $# -ge 1 ] || die "usage: $0 up N [--rate RATE]"
    n=$1; shift; rate=""
    while [ $# -gt 0 ]; do
      case "$1" in
        --rate) [ $# -ge 2 ] || die "--rate needs a value such as 10gbit"; rate=$2; shift 2 ;;
        --rate=*) rate=${1#--rate=}; shift ;;
        *) die "unknown argument '$1' (usage: $0 up N [--rate RATE])" ;;
      esac
    done
    need_tools
    up "$n" "$rate" ;;
  down) down ;;
  status) status ;;
  -h|--help|help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) echo "usage: $0 up N [--rate RATE] | down | status" >&2; exit 2 ;;
esac
