#!/usr/bin/env bash
# scripts/compare_strategies.sh: the ring against parameter servers, side by side in one
# run, as the field compares them (tf_cnn_benchmarks' --variable_update).
#
#   scripts/compare_strategies.sh [--models "resnet20 vgg16"] [--rate 1gbit]
#                                 [--no-accuracy] [--out FILE] [--plot FILE.svg]
#
# Two simulated hosts of two ranks each (scripts/netns-hosts.sh up 2 --rate RATE: both
# directions of each host's link shaped with tc tbf; taken down at exit, under the lock
# the netns tests take), cnn_bench on the CPU with every strategy:
#   ring           --variable_update horovod
#   ps-sync-1ps    --variable_update parameter_server --num_ps 1 (rank 0 serves only)
#   ps-sync-coloc  --variable_update parameter_server --num_ps 0 (every rank serves a shard;
#                  a host's 2 workers sum their gradients first: local aggregation)
#   ps-sync-coloc-noagg  the same with --ps_local_aggregation off (each worker pushes)
#   ps-async-coloc --variable_update parameter_server --num_ps 0 --cross_replica_sync false
# for each model, then all again with rank 3 a 2x straggler: first the model's compute
# step is measured (the 4 ranks on their hosts, --variable_update none), and rank 3
# sleeps that long each step (--straggler_delay_ms), so its step takes twice the others'.
# Steps: resnet20 batch 16, 2 warm-up + 10 timed; vgg16 (138M parameters: vgg16 needs
# its 224x224 input) batch 2, 1 warm-up + 2 timed, its steps bound by the links (553 MB
# of gradients a step): chosen for about 10 minutes in all on an idle machine (an
# estimate from the bytes at 1 Gbit/s; resnet20 alone took 3.3 minutes on the loaded
# machine of 2026-12-05).
# Prints one table (images/sec, ms per step, MB per step through host 1's link (sent +
# received, the initial broadcast included), the busiest server's MB per step, the
# largest staleness), then ps-async's test accuracy against ps-sync's with the same 2x
# straggler (scripts/ps_async_accuracy.sh --straggler; --no-accuracy skips it), and
# writes the table to FILE (default: stdout only).
# Needs root (namespaces, tc), OpenMPI and build/cnn_bench (HVD_BUILD=DIR: another).
# --plot FILE.svg: also draws the table (scripts/plot_strategies.py: images/sec per
# strategy and model, without and with the straggler, MB per step over each bar).
set -u
cd "$(dirname "$0")/.." || exit 2
models="resnet20 vgg16" rate=1gbit out="" accuracy=1 plot=""
while [ $# -gt 0 ]; do
  case "$1" in
    --models|--rate|--out|--plot)
      [ $# -ge 2 ] || { echo "compare_strategies: $1 needs a value (see --help)" >&2; exit 2; } ;;
  esac
  case "$1" in
    --models) models=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --no-accuracy) accuracy=0; shift ;;
    # Files are named from the caller's directory (the script runs in the repository's).
    --out) out=$2; [[ "$out" = /* ]] || out=$OLDPWD/$out; shift 2 ;;
    --plot) plot=$2; [[ "$plot" = /* ]] || plot=$OLDPWD/$plot; shift 2 ;;
    -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_strategies: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
build=${HVD_BUILD:-build}
bench=$build/cnn_bench
[ -x "$bench" ] || { echo "compare_strategies: $bench is not built (run make)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "compare_strategies: needs root (network namespaces, tc)" >&2; exit 2; }
command -v tc >/dev/null || { echo "compare_strategies: tc not found (apt-get install iproute2)" >&2; exit 2; }
declare -A steps=([resnet20]="16 10 2" [vgg16]="2 2 1")   # batch, timed, warm-up
for model in $models; do
  [ -n "${steps[$model]:-}" ] || { echo "compare_strategies: --models: '$model' has no step settings here (resnet20, vgg16)" >&2; exit 2; }
done
# --plot: fail now rather than after the runs.
[ -z "$plot" ] || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null ||
  { echo "compare_strategies: --plot needs matplotlib for /usr/bin/python3 (apt-get install -y python3-matplotlib)" >&2; exit 2; }

# One user of the simulated hosts at a time (tests/netns_prelude.sh takes the same lock).
exec 9>/run/hvd-netns.lock
flock -w 600 9 || { echo "compare_strategies: another job holds /run/hvd-netns.lock" >&2; exit 1; }
tmp=$(mktemp -d /tmp/compare_strategies.XXXXXX)
trap 'scripts/netns-hosts.sh down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
scripts/netns-hosts.sh up 2 --rate "$rate" || exit 1
subnet=${HVD_NETNS_SUBNET:-10.231.0.0/24}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# vgg16's 553 MB of weights take seconds through a 1 Gbit/s link, during which a rank
# busy in the broadcast answers no heartbeat: a long peer timeout (the default 10 s ended
# every vgg16 run of 2026-12-05 in the initial broadcast).
peer_timeout=${HVD_PEER_TIMEOUT_SECONDS:-300}
link_bytes() {   # bytes host 1 sent and received so far
  local d=/sys/class/net/hvd0/statistics
  ip netns exec ns1 sh -c "echo \$((\$(cat $d/tx_bytes) + \$(cat $d/rx_bytes)))"
}
run() {   # run LOG MODEL FLAGS...: cnn_bench on 2 hosts x 2 ranks
  local log=$1 model=$2; shift 2
  local b n w
  read -r b n w <<<"${steps[$model]}"
  local before; before=$(link_bytes)
  timeout -k 5 1200 mpirun -np 4 -H ns1:2,ns2:2 --oversubscribe --bind-to none \
    --mca plm_rsh_agent "$PWD/scripts/netns-rsh" --mca oob_tcp_if_include "$subnet" \
    --mca btl_tcp_if_include "$subnet" -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
    -x HVD_PEER_TIMEOUT_SECONDS="$peer_timeout" \
    "$PWD/$bench" --model "$model" --batch_size "$b" --num_batches "$n" \
    --num_warmup_batches "$w" --display_every 1000 --threads 1 "$@" >"$log" 2>&1 </dev/null
  echo "link_mb_per_step $(awk -v a="$before" -v z="$(link_bytes)" -v s=$((n + w)) \
    'BEGIN { printf "%.2f", (z - a) / 1e6 / s }')" >>"$log"
}
ips() { sed -n 's/^total images\/sec: \([0-9.]*\)/\1/p' "$1"; }
server() { sed -n 's/.*busiest server link \([0-9.]*\) MB per step.*/\1/p' "$1"; }
hostlink() { sed -n 's/^link_mb_per_step \([0-9.]*\)/\1/p' "$1"; }
stale() { sed -n 's/.*staleness max \([0-9]*\).*/\1/p' "$1"; }

declare -A flags=(
  [ring]="--variable_update horovod"
  [ps-sync-1ps]="--variable_update parameter_server --num_ps 1"
  [ps-sync-coloc]="--variable_update parameter_server --num_ps 0"
  [ps-sync-coloc-noagg]="--variable_update parameter_server --num_ps 0 --ps_local_aggregation off"
  [ps-async-coloc]="--variable_update parameter_server --num_ps 0 --cross_replica_sync false"
)
declare -A workers=([ring]=4 [ps-sync-1ps]=3 [ps-sync-coloc]=4 [ps-sync-coloc-noagg]=4 [ps-async-coloc]=4)
order="ring ps-sync-1ps ps-sync-coloc ps-sync-coloc-noagg ps-async-coloc"
table="$tmp/table"
{
  echo "| model | straggler | strategy | images/sec | vs ring | ms/step | host 1 link, MB/step | busiest server, MB/step | max staleness |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >"$table"
for model in $models; do
  read -r batch _ _ <<<"${steps[$model]}"
  # The compute step alone: 4 ranks, no exchange; a 2x straggler sleeps that long.
  run "$tmp/$model.compute.log" "$model" --variable_update none
  v=$(ips "$tmp/$model.compute.log")
  [ -n "$v" ] || { echo "compare_strategies: $model's compute step failed:" >&2; tail -5 "$tmp/$model.compute.log" >&2; exit 1; }
  delay=$(awk -v v="$v" -v b="$batch" 'BEGIN { printf "%d", 4 * b / v * 1000 }')
  echo "$model: the compute step alone takes $delay ms (4 ranks, $v images/sec)"
  for straggle in no yes; do
    ring_ips=""
    for s in $order; do
      log="$tmp/$model.$straggle.$s.log"
      extra=()
      [ "$straggle" = yes ] && extra=(--straggler_rank 3 --straggler_delay_ms "$delay")
      # shellcheck disable=SC2086
      run "$log" "$model" ${flags[$s]} "${extra[@]}"
      v=$(ips "$log")
      if [ -z "$v" ]; then
        echo "compare_strategies: $model $s failed:" >&2; tail -5 "$log" >&2; v=0
      fi
      [ "$s" = ring ] && ring_ips=$v
      rel=$(awk -v v="$v" -v r="$ring_ips" 'BEGIN { if (r > 0) printf "%.2fx", v / r; else print "-" }')
      ms=$(awk -v v="$v" -v b="$batch" -v w="${workers[$s]}" 'BEGIN { if (v > 0) printf "%.0f", w * b / v * 1000; else print "-" }')
      sv=$(server "$log"); st=$(stale "$log")
      echo "| $model | $([ "$straggle" = yes ] && echo "rank 3, +$delay ms" || echo none) | $s | $v | $rel | $ms | $(hostlink "$log") | ${sv:--} | ${st:--} |" >>"$table"
      tail -1 "$table"
    done
  done
done
echo
cat "$table"
[ -n "$out" ] && cp "$table" "$out"
if [ -n "$plot" ]; then   # the picture of this table (prints where it wrote it)
  /usr/bin/python3 scripts/plot_strategies.py "$table" --out "$plot" --title \
    "Ring against parameter servers: cnn_bench, 2 hosts x 2 ranks, links $rate, $(date -u +%F)" || exit 1
fi
if [ "$accuracy" = 1 ]; then
  echo
  scripts/ps_async_accuracy.sh --straggler "$build" || exit 1
fi
exit 0
