#!/usr/bin/env bash
# scripts/compare_strategies.sh: the ring against parameter servers, side by side in one
# run, as the field compares them (tf_cnn_benchmarks' --variable_update).
#
#   scripts/compare_strategies.sh [--models "resnet20 vgg16"] [--batches N] [--batch B]
#                                 [--rate 1gbit] [--out FILE]
#
# Two simulated hosts of two ranks each (network namespaces hvdps1 and hvdps2 on a bridge
# of their own, hvdpsbr0, 10.232.7.0/24, the links shaped with tc tbf to --rate both
# ways; made here and removed at exit), cnn_bench on the CPU with every strategy:
#   ring           --variable_update horovod
#   ps-sync-1ps    --variable_update parameter_server --num_ps 1 (rank 0 serves only)
#   ps-sync-coloc  --variable_update parameter_server --num_ps 0 (every rank serves a shard)
#   ps-async-coloc --variable_update parameter_server --num_ps 0 --cross_replica_sync false
# for each model, then all again with rank 3 a 2x straggler (--straggler_delay_ms set to
# the ring's own step time). Prints one table (images/sec, the busiest server link's
# bytes per step, the largest staleness) and writes it to FILE (default: stdout only).
# Needs root (namespaces, tc), OpenMPI and build/cnn_bench.
set -u
cd "$(dirname "$0")/.." || exit 2
models="resnet20 vgg16" batches=5 batch=16 rate=1gbit out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_strategies: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench=${HVD_BUILD:-build}/cnn_bench
[ -x "$bench" ] || { echo "compare_strategies: $bench is not built (run make)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "compare_strategies: needs root (network namespaces, tc)" >&2; exit 2; }
command -v tc >/dev/null || { echo "compare_strategies: tc not found (apt-get install iproute2)" >&2; exit 2; }

net=10.232.7 br=hvdpsbr0
hosts_down() {   # what an earlier run may have left, too
  for k in 1 2; do
    for pid in $(ip netns pids "hvdps$k" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "hvdps$k" 2>/dev/null
    ip link del "hvdpsv$k" 2>/dev/null
  done
  ip link del "$br" 2>/dev/null
}
hosts_down
tmp=$(mktemp -d /tmp/compare_strategies.XXXXXX)
trap 'hosts_down; rm -rf "$tmp"' EXIT
set -e
ip link add "$br" type bridge
ip addr add "$net.254/24" dev "$br"
ip link set "$br" up
for k in 1 2; do
  ip netns add "hvdps$k"
  ip link add "hvdpsv$k" type veth peer name eth0 netns "hvdps$k"
  ip link set "hvdpsv$k" master "$br" up
  ip netns exec "hvdps$k" ip link set lo up
  ip netns exec "hvdps$k" ip addr add "$net.$k/24" dev eth0
  ip netns exec "hvdps$k" ip link set eth0 up
  ip netns exec "hvdps$k" tc qdisc replace dev eth0 root tbf rate "$rate" burst 1mb latency 50ms
  tc qdisc replace dev "hvdpsv$k" root tbf rate "$rate" burst 1mb latency 50ms
done
set +e
# The rsh agent: the command inside the host's namespace, with its hostname.
cat >"$tmp/rsh" <<'RSH'
#!/bin/sh
host=$1; shift
case "$host" in hvdps[12]) ;; *) echo "rsh: $host is not a benchmark host" >&2; exit 255 ;; esac
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$1" && shift && eval "$*"' rsh "$host" "$@"
RSH
chmod +x "$tmp/rsh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# vgg16's 553 MB of weights take seconds through a 1 Gbit/s link, during which a rank
# busy in the broadcast answers no heartbeat: a long peer timeout (the default 10 s ended
# every vgg16 run of 2026-12-05 in the initial broadcast).
peer_timeout=${HVD_PEER_TIMEOUT_SECONDS:-300}
run() {   # run LOG FLAGS...: cnn_bench on 2 hosts x 2 ranks
  local log=$1; shift
  timeout -k 5 1200 mpirun -np 4 -H hvdps1:2,hvdps2:2 --oversubscribe --bind-to none \
    --mca plm_rsh_agent "$tmp/rsh" --mca oob_tcp_if_include "$net.0/24" \
    --mca btl_tcp_if_include "$net.0/24" -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
    -x HVD_PEER_TIMEOUT_SECONDS="$peer_timeout" \
    "$PWD/$bench" --batch_size "$batch" --num_batches "$batches" --num_warmup_batches 2 \
    --display_every 1000 --threads 1 "$@" >"$log" 2>&1 </dev/null
}
ips() { sed -n 's/^total images\/sec: \([0-9.]*\)/\1/p' "$1"; }
link() { sed -n 's/.*busiest server link \([0-9.]*\) MB per step.*/\1/p' "$1"; }
stale() { sed -n 's/.*staleness max \([0-9]*\).*/\1/p' "$1"; }

declare -A flags=(
  [ring]="--variable_update horovod"
  [ps-sync-1ps]="--variable_update parameter_server --num_ps 1"
  [ps-sync-coloc]="--variable_update parameter_server --num_ps 0"
  [ps-async-coloc]="--variable_update parameter_server --num_ps 0 --cross_replica_sync false"
)
order="ring ps-sync-1ps ps-sync-coloc ps-async-coloc"
table="$tmp/table"
{
  echo "| model | straggler | strategy | images/sec | vs ring | busiest server link, MB/step | max staleness |"
  echo "|---|---|---|---|---|---|---|"
} >"$table"
for model in $models; do
  delay=0
  for straggle in no yes; do
    ring_ips=""
    for s in $order; do
      log="$tmp/$model.$straggle.$s.log"
      extra=()
      [ "$straggle" = yes ] && extra=(--straggler_rank 3 --straggler_delay_ms "$delay")
      # shellcheck disable=SC2086
      run "$log" --model "$model" ${flags[$s]} "${extra[@]}"
      v=$(ips "$log")
      if [ -z "$v" ]; then
        echo "compare_strategies: $model $s failed:" >&2; tail -5 "$log" >&2; v=0
      fi
      [ "$s" = ring ] && ring_ips=$v
      # A 2x straggler: it sleeps as long as the ring's own step takes (4 ranks x batch).
      if [ "$s" = ring ] && [ "$straggle" = no ] && [ "$v" != 0 ]; then
        delay=$(awk -v v="$v" -v b="$batch" 'BEGIN { printf "%d", 4 * b / v * 1000 }')
      fi
      rel=$(awk -v v="$v" -v r="$ring_ips" 'BEGIN { if (r > 0) printf "%.2fx", v / r; else print "-" }')
      l=$(link "$log"); st=$(stale "$log")
      echo "| $model | $([ "$straggle" = yes ] && echo "rank 3, +$delay ms" || echo none) | $s | $v | $rel | ${l:--} | ${st:--} |" >>"$table"
      tail -1 "$table"
    done
  done
done
echo
cat "$table"
[ -n "$out" ] && cp "$table" "$out"
exit 0
