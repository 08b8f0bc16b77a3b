#!/usr/bin/env bash
# scripts/ps_server_scaling.sh: one dedicated parameter server as the workers grow, the
# textbook case against it: its link carries every worker's push and pull, N x the model
# each way per step, so beyond a few workers the link, not the workers, sets the pace.
#
#   scripts/ps_server_scaling.sh [--model vgg16] [--workers "1 2 3"] [--rate 1gbit]
#
# Simulated hosts (scripts/netns-hosts.sh, links shaped to RATE): the server (rank 0,
# cnn_bench --variable_update parameter_server --num_ps 1) alone on host 1, each worker
# on a host of its own. Prints per worker count: images/sec, the server link's MB per
# step in and out (against N x the model's size), and how busy that makes the link
# (MB per step over the step time, per direction, against RATE).
# Needs root (namespaces, tc), OpenMPI and build/cnn_bench (HVD_BUILD=DIR: another).
set -u
cd "$(dirname "$0")/.." || exit 2
model=vgg16 workers_list="1 2 3" rate=1gbit
while [ $# -gt 0 ]; do
  case "$1" in
    --model|--workers|--rate)
      [ $# -ge 2 ] || { echo "ps_server_scaling: $1 needs a value" >&2; exit 2; } ;;
  esac
  case "$1" in
    --model) model=$2; shift 2 ;;
    --workers) workers_list=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ps_server_scaling: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
build=${HVD_BUILD:-build}
bench=$build/cnn_bench
[ -x "$bench" ] || { echo "ps_server_scaling: $bench is not built (run make)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "ps_server_scaling: needs root (network namespaces, tc)" >&2; exit 2; }
max=0
for w in $workers_list; do
  [[ "$w" =~ ^[1-9][0-9]*$ ]] || { echo "ps_server_scaling: --workers: '$w' is not a count" >&2; exit 2; }
  [ "$w" -gt "$max" ] && max=$w
done
case "$rate" in
  *gbit) rate_mbit=$(( ${rate%gbit} * 1000 )) ;;
  *mbit) rate_mbit=${rate%mbit} ;;
  *) echo "ps_server_scaling: --rate: '$rate' (give Ngbit or Nmbit)" >&2; exit 2 ;;
esac
case "$model" in
  vgg16) batch=2 timed=2 warm=1 ;;
  *) batch=16 timed=10 warm=2 ;;
esac

exec 9>/run/hvd-netns.lock   # one user of the simulated hosts at a time
flock -w 600 9 || { echo "ps_server_scaling: another job holds /run/hvd-netns.lock" >&2; exit 1; }
tmp=$(mktemp -d /tmp/ps_server_scaling.XXXXXX)
trap 'scripts/netns-hosts.sh down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
scripts/netns-hosts.sh up $((max + 1)) --rate "$rate" || exit 1
subnet=${HVD_NETNS_SUBNET:-10.231.0.0/24}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
server_bytes() {   # "tx rx": bytes host 1 (the server's) sent and received so far
  local d=/sys/class/net/hvd0/statistics
  ip netns exec ns1 sh -c "echo \$(cat $d/tx_bytes) \$(cat $d/rx_bytes)"
}
printf '%-8s %10s %9s %16s %16s %22s\n' workers images/s ms/step "server out MB" "server in MB" "link busy out / in"
for w in $workers_list; do
  hosts=ns1:1
  for ((i = 2; i <= w + 1; i++)); do hosts+=",ns$i:1"; done
  log=$tmp/w$w.log
  read -r tx0 rx0 <<<"$(server_bytes)"
  timeout -k 5 1800 mpirun -np $((w + 1)) -H "$hosts" --bind-to none \
    --mca plm_rsh_agent "$PWD/scripts/netns-rsh" --mca oob_tcp_if_include "$subnet" \
    --mca btl_tcp_if_include "$subnet" -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
    -x HVD_PEER_TIMEOUT_SECONDS="${HVD_PEER_TIMEOUT_SECONDS:-300}" \
    "$PWD/$bench" --model "$model" --batch_size "$batch" --num_batches "$timed" \
    --num_warmup_batches "$warm" --display_every 1000 --threads 1 \
    --variable_update parameter_server --num_ps 1 >"$log" 2>&1 </dev/null
  read -r tx1 rx1 <<<"$(server_bytes)"
  v=$(sed -n 's/^total images\/sec: \([0-9.]*\)/\1/p' "$log")
  [ -n "$v" ] || { echo "ps_server_scaling: $w worker(s) failed:" >&2; tail -5 "$log" >&2; exit 1; }
  awk -v w="$w" -v v="$v" -v b="$batch" -v s=$((timed + warm)) -v tx=$((tx1 - tx0)) \
      -v rx=$((rx1 - rx0)) -v r="$rate_mbit" 'BEGIN {
    ms = w * b / v * 1000; out = tx / 1e6 / s; in_ = rx / 1e6 / s
    printf "%-8d %10.2f %9.0f %16.1f %16.1f %10.0f%% / %3.0f%%\n", w, v, ms, out, in_,
      100 * out * 8 / (ms / 1000) / r, 100 * in_ * 8 / (ms / 1000) / r }'
done
echo "(MB per step: the mean over the timed and warm-up steps, the initial broadcast of the"
echo " weights from the server included; a worker pushes the model's gradients and pulls its values once a step)"
