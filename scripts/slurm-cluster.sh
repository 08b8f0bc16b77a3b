#!/usr/bin/env bash
# scripts/slurm-cluster.sh: a real SLURM (Debian's slurm-wlm and munge) on the simulated
# hosts of scripts/netns-hosts.sh, for the tests and for trying the SLURM docs by hand.
#
#   scripts/slurm-cluster.sh up N     munged + slurmctld here, one slurmd on each of ns1..nsN;
#                                     its last line is "export SLURM_CONF=PATH"
#   scripts/slurm-cluster.sh down     stop every daemon it started, remove the hosts
#   scripts/slurm-cluster.sh status   sinfo of the cluster; exit 1 when it is not up
#
#   eval "$(scripts/slurm-cluster.sh up 2 | tail -1)"; salloc -N2 --ntasks-per-node=2 ...
#
# Everything lives under /run/hvd-slurm (configuration, munge key and socket, spool,
# logs): nothing in /etc is read or written. The configuration needs neither cgroups nor
# systemd (proctrack/linuxproc, task/none, no accounting). The controller runs in the
# root namespace at the bridge's address; slurmd nsK runs in network namespace nsK with
# the hostname nsK (its own UTS namespace) and its own TmpFS, /run/hvd-slurm/nodetmp (a
# tmpfs in a mount namespace of its own): the PMIx plugin of srun --mpi=pmix makes its
# per-step directories there, which would collide between nodes sharing one directory.
# /tmp stays shared, as the other simulated-host tools expect. slurmd is started by
# nsenter --net, not by "ip netns exec", which remounts /sys and so hides the cgroup
# mounts slurmd looks for.
#
# "up" is idempotent: it first stops what an earlier "up" left, then starts afresh.
# Needs root. HVD_SLURM_PORT (default 16817) moves the controller's port; slurmd uses
# the next one.
set -u
cd "$(dirname "$0")/.." || exit 2
hosts=scripts/netns-hosts.sh
st=/run/hvd-slurm
port=${HVD_SLURM_PORT:-16817}
subnet=${HVD_NETNS_SUBNET:-10.231.0.0/24}
base=${subnet%.0/24}

die() { echo "slurm-cluster: $*" >&2; exit 1; }

need_tools() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, daemons)"
  local t
  for t in munged slurmctld slurmd sinfo scontrol nsenter unshare; do
    command -v "$t" >/dev/null \
      || die "$t not found: apt-get install munge slurm-wlm slurm-client util-linux"
  done
}

# stop_pid FILE: ends the process whose id FILE holds (TERM, then KILL after 5 s).
stop_pid() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null)
  if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$f"
}

stop_daemons() {
  local f
  # Job steps first (slurmstepd and what it runs are children of no daemon we track).
  for f in "$st"/pid/slurmd-*; do [ -e "$f" ] && stop_pid "$f"; done
  stop_pid "$st/pid/slurmctld"
  stop_pid "$st/pid/munged"
  # A step daemon left by a killed job holds the node's namespaces: netns-hosts.sh down
  # kills what remains inside each namespace.
  return 0
}

write_config() {
  local n=$1 k
  mkdir -p "$st"/{etc,state,log,pid,run,munge,nodetmp} || die "cannot create $st"
  {
    echo "# Written by scripts/slurm-cluster.sh up $n; removed by down."
    echo "ClusterName=hvd"
    echo "SlurmctldHost=$(hostname -s)($base.254)"
    echo "SlurmctldPort=$port"
    echo "SlurmdPort=$((port + 1))"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$st/munge/munge.socket"
    echo "StateSaveLocation=$st/state"
    echo "SlurmdSpoolDir=$st/spool/%n"
    echo "TmpFS=$st/nodetmp"
    echo "SlurmctldPidFile=$st/run/slurmctld.pid"
    echo "SlurmdPidFile=$st/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$st/log/slurmctld.log"
    echo "SlurmdLogFile=$st/log/slurmd-%n.log"
    echo "SlurmctldDebug=info"
    echo "SlurmdDebug=info"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SwitchType=switch/none"
    echo "MpiDefault=none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "SlurmdParameters=config_overrides"
    echo "ReturnToService=2"
    echo "SlurmdTimeout=30"
    echo "InactiveLimit=0"
    echo "KillWait=5"
    echo "MinJobAge=30"
    echo "SchedulerParameters=sched_interval=2"
    # 4 CPUs a node whatever this machine has: jobs of 2 ranks a node fit on a laptop.
    for k in $(seq 1 "$n"); do
      echo "NodeName=ns$k NodeAddr=$base.$k CPUs=4 RealMemory=1024 State=UNKNOWN"
    done
    echo "PartitionName=hvd Nodes=ns[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
  } >"$st/etc/slurm.conf" || die "cannot write $st/etc/slurm.conf"
  for k in $(seq 1 "$n"); do mkdir -p "$st/spool/ns$k"; done
}

start_munge() {
  # A key of our own, readable only by root, as munged insists.
  if [ ! -s "$st/munge/munge.key" ]; then
    dd if=/dev/urandom of="$st/munge/munge.key" bs=1024 count=1 status=none \
      || die "cannot write the munge key"
  fi
  chmod 700 "$st/munge"; chmod 400 "$st/munge/munge.key"
  munged --force --socket="$st/munge/munge.socket" --key-file="$st/munge/munge.key" \
    --pid-file="$st/pid/munged" --log-file="$st/log/munged.log" \
    --seed-file="$st/munge/munged.seed" >"$st/log/munged.out" 2>&1 \
    || die "munged did not start: $(tail -n 3 "$st/log/munged.out" "$st/log/munged.log" 2>/dev/null)"
}

# start_slurmd K: slurmd of host nsK, in its network namespace, with its hostname and
# its own TmpFS; in the foreground (-D) in the background, so that its pid is known.
start_slurmd() {
  local k=$1 ns=ns$1
  setsid nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private \
    sh -c 'hostname "$1" && mount -t tmpfs -o mode=1777 tmpfs "$2" && exec slurmd -D -N "$1"' \
    slurmd-"$ns" "$ns" "$st/nodetmp" </dev/null >"$st/log/slurmd-$ns.out" 2>&1 &
  echo $! >"$st/pid/slurmd-$ns"
}

up() {
  local n=$1 k
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] \
    || die "up N: N='$n' must be a number from 1 to 64"
  stop_daemons
  # A failed start leaves no daemon behind (the logs stay in $st/log).
  trap 'stop_daemons; "$hosts" down >/dev/null' EXIT
  "$hosts" up "$n" >/dev/null || die "scripts/netns-hosts.sh up $n failed"
  rm -rf "$st"
  write_config "$n"
  export SLURM_CONF=$st/etc/slurm.conf
  start_munge
  setsid slurmctld -D -i </dev/null >"$st/log/slurmctld.out" 2>&1 &
  echo $! >"$st/pid/slurmctld"
  for k in $(seq 1 "$n"); do start_slurmd "$k"; done
  # Ready when every node is idle (30 s at most: on a loaded machine the slurmds
  # register within a few seconds).
  local idle=0 _
  for _ in $(seq 150); do
    idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    [ "$idle" -eq "$n" ] && break
    for f in "$st/pid/slurmctld" "$st"/pid/slurmd-ns*; do
      kill -0 "$(cat "$f")" 2>/dev/null || {
        die "$(basename "$f") exited at start: $(tail -n 5 "$st/log/$(basename "$f").out" 2>/dev/null)"
      }
    done
    sleep 0.2
  done
  [ "$idle" -eq "$n" ] || die "only $idle of $n nodes idle after 30 s: $(sinfo -N 2>&1 | tail -n +2 | tr '\n' ';') (logs: $st/log)"
  trap - EXIT
  echo "slurm-cluster: up: slurmctld on $(hostname -s) ($base.254:$port), slurmd on ns[1-$n]"
  echo "export SLURM_CONF=$SLURM_CONF"
}

down() {
  if [ "$(id -u)" -ne 0 ]; then echo "slurm-cluster: down: not root, nothing to do"; return 0; fi
  stop_daemons
  "$hosts" down >/dev/null
  rm -rf "$st"
  echo "slurm-cluster: down"
  return 0
}

status() {
  [ -f "$st/etc/slurm.conf" ] || { echo "slurm-cluster: not up"; return 1; }
  SLURM_CONF=$st/etc/slurm.conf sinfo -N || return 1
  echo "export SLURM_CONF=$st/etc/slurm.conf"
}

case "${1:-}" in
  up) [ $# -eq 2 ] || die "usage: $0 up N"; need_tools; up "$2" ;;
  down) down ;;
  status) status ;;
  -h|--help|help) sed -n '2,/^set -u/p' "$0" | sed -n 's/^# \{0,1\}//p' ;;
  *) echo "usage: $0 up N | down | status" >&2; exit 2 ;;
esac
