#!/usr/bin/env bash
# scripts/bench_hierarchical.sh: flat vs hierarchical allreduce of the hvd runtime on
# 2 simulated hosts x 2 ranks (network namespaces, links shaped with tc), plus the
# alpha-beta calibration of both kinds of link that the model in docs/performance.md
# ("The alpha-beta model") uses.
#
#   sudo scripts/bench_hierarchical.sh [--rate 10gbit] [--reps 3] [--min 1M] [--max 64M]
#                                      [--iters 5] [--out FILE]
#
# 1. Calibration: bench/allreduce_bench --backend sendrecv (each rank sends to the next
#    and receives from the previous, both directions at once) between 2 hosts
#    (-H ns1:1,ns2:1: TCP through the shaped link) and within one host (-H ns1:2: shared
#    memory). alpha = the least median time of the exchanges of 8..512 bytes;
#    beta = slope between the two largest sizes (seconds per byte), shown as 1/beta GB/s.
# 2. allreduce_bench --backend hvd, flat then hierarchical (--hierarchical-allreduce),
#    alternated --reps times (A B A B ...); the table gives the median busbw of each and
#    their ratio, beside the ratio the alpha-beta model predicts from step 1.
# 3. The model projected to 8, 64 and 512 GPUs (8 per host, one 100 Gbit/s link per
#    host, NVLink 450 GB/s within a host) for resnet50's gradients (25,557,032 float32
#    = 102,228,128 bytes), with the measured alphas.
# Needs root, iproute2, a built tree (make). The machine is shared: expect noise, read
# the ratios, not the absolute figures.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
rate=10gbit reps=3 min=1M max=64M iters=5 out=$build/bench_hierarchical.md
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_hierarchical: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
hvdrun=$build/hvdrun bench=$build/allreduce_bench hosts=scripts/netns-hosts.sh
for f in "$hvdrun" "$bench"; do
  [ -x "$f" ] || { echo "bench_hierarchical: $f is not built (run make)" >&2; exit 2; }
done
"$bench" --help 2>/dev/null | grep -qE '^ +hvd +' \
  || { echo "bench_hierarchical: $bench has no --backend hvd" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "bench_hierarchical: needs root (network namespaces)" >&2; exit 2; }
export OMPI_MCA_rmaps_base_oversubscribe=1

exec 9>/run/hvd-netns.lock
flock -w 600 9 || { echo "bench_hierarchical: /run/hvd-netns.lock busy for 10 minutes" >&2; exit 1; }
trap '"$hosts" down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
tmp=$(mktemp -d)
"$hosts" up 2 --rate "$rate" || exit 1
# A private copy: a rebuild of the tree during the run must not swap the program.
cp "$bench" "$tmp/allreduce_bench" && bench=$tmp/allreduce_bench || exit 1

# run NAME ARGS...: one allreduce_bench job; keeps its "size busbw time" rows in
# $tmp/NAME.N (N = repetition); retries once if the job fails (a busy machine can
# time a TCP connection out).
run() {
  local name=$1; shift
  local n=$(( $(ls "$tmp" | grep -c "^$name\.") + 1 ))
  for attempt in 1 2; do
    if timeout -k 5 600 "$hvdrun" "$@" > "$tmp/log" 2>&1; then
      # nccl-tests' row: size count type redop root, then time algbw busbw #wrong out
      # of place (columns 6-9) and in place (10-13): the out-of-place size, busbw, time
      awk '/^ +[0-9]/ && NF == 13 {print $1, $8, $6}' "$tmp/log" > "$tmp/$name.$n"
      return 0
    fi
    echo "($name: attempt $attempt failed: $(grep -v '^#' "$tmp/log" | tail -n 3 | tr '\n' ' '))" >&2
  done
  return 1
}

# median over the repetitions of column COL ($2 busbw, $3 time) for each size.
median() {
  local name=$1 col=$2
  cat "$tmp/$name".* | awk -v c="$col" '{ print $1, $c }' | sort -k1,1n -k2,2g | awk '
    function flush() { print s, (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2; n = 0 }
    { if (NR > 1 && $1 != s) flush(); s = $1; v[++n] = $2 }
    END { if (n) flush() }'
}

echo "== calibration: sendrecv across hosts and within a host ($reps repetitions)"
for _ in $(seq 1 "$reps"); do
  run cross -np 2 -H ns1:1,ns2:1 "$bench" --backend sendrecv -b 8 -e "$max" -f 8 -n 20 -w 3 || exit 1
  run local -np 2 -H ns1:2 "$bench" --backend sendrecv -b 8 -e "$max" -f 8 -n 20 -w 3 || exit 1
done
# alpha (s) and beta (s/byte) of a link from its median times (microseconds).
fit() {
  median "$1" 3 | awk '{ s[NR] = $1; t[NR] = $2 * 1e-6
                         if ($1 <= 512 && (a == "" || t[NR] < a)) a = t[NR] } END {
    printf "%.3e %.3e\n", a, (t[NR] - t[NR - 1]) / (s[NR] - s[NR - 1]) }'
}
read -r alpha_n beta_n < <(fit cross)
read -r alpha_l beta_l < <(fit local)
awk -v a="$alpha_n" -v b="$beta_n" -v c="$alpha_l" -v d="$beta_l" 'BEGIN {
  printf "cross-host link (TCP, %s): alpha %.1f us, 1/beta %.3f GB/s\n", "'"$rate"'", a * 1e6, 1e-9 / b
  printf "intra-host (shared memory):  alpha %.1f us, 1/beta %.3f GB/s\n", c * 1e6, 1e-9 / d }'

echo "== flat vs hierarchical, 2 hosts x 2 ranks, A B A B x $reps"
for _ in $(seq 1 "$reps"); do
  run flat -np 4 -H ns1:2,ns2:2 "$bench" --backend hvd -b "$min" -e "$max" -f 4 -n "$iters" -w 2 || exit 1
  run hier -np 4 -H ns1:2,ns2:2 --hierarchical-allreduce "$bench" --backend hvd \
    -b "$min" -e "$max" -f 4 -n "$iters" -w 2 || exit 1
done

# The model (docs/performance.md, "The alpha-beta model") for H = 2 hosts of L = 2 ranks, S bytes:
#   flat ring, 4 ranks, one ring edge per host on the network:
#     T = 6 alpha_n + 1.5 S beta_n
#   hierarchical: reduce-scatter and allgather within the host (1 step of S/2 each),
#   cross-host ring of 2 ranks per segment, the 2 segments' rings sharing the link:
#     T = 2 alpha_l + S beta_l + 2 alpha_n + S beta_n
{
  echo "Flat vs hierarchical allreduce, hvd runtime, 2 hosts x 2 ranks (network namespaces),"
  echo "links shaped to $rate; float32 sum; busbw (GB/s) of the median time over $reps runs each, alternated;"
  echo "$(date -u +%Y-%m-%d), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Command: sudo scripts/bench_hierarchical.sh --rate $rate --reps $reps --min $min --max $max --iters $iters"
  echo
  awk -v a="$alpha_n" -v b="$beta_n" -v c="$alpha_l" -v d="$beta_l" -v rate="$rate" 'BEGIN {
    printf "Calibration: cross-host alpha %.1f us, 1/beta %.3f GB/s (%s shaping); ", a * 1e6, 1e-9 / b, rate
    printf "intra-host alpha %.1f us, 1/beta %.3f GB/s.\n\n", c * 1e6, 1e-9 / d }'
  echo "| bytes | flat busbw | hierarchical busbw | hier / flat | model hier / flat |"
  echo "|------:|-----------:|-------------------:|------------:|------------------:|"
  # busbw from the median time (the bench prints busbw with 2 decimals only):
  # busbw = 2(n-1)/n * S / t = 1.5 S / t for n = 4.
  join <(median flat 3) <(median hier 3) | sort -n |
    awk -v a="$alpha_n" -v b="$beta_n" -v c="$alpha_l" -v d="$beta_l" '{
      S = $1; bf = 1.5 * S / ($2 * 1e3); bh = 1.5 * S / ($3 * 1e3)
      tf = 6 * a + 1.5 * S * b; th = 2 * c + S * d + 2 * a + S * b
      printf "| %d | %.3f | %.3f | %.2f | %.2f |\n", S, bf, bh, bh / bf, tf / th }'
  echo
  echo "Projection (alpha-beta model, measured alphas; 8 GPUs per host, one 100 Gbit/s link"
  echo "per host, NVLink 450 GB/s; resnet50 gradients 102,228,128 bytes float32):"
  echo
  echo "| GPUs | hosts | flat ring | hierarchical | step time below which communication is exposed (flat / hier) |"
  echo "|-----:|------:|----------:|-------------:|------------------------------------:|"
  awk -v an="$alpha_n" -v al="$alpha_l" 'BEGIN {
    S = 102228128; bn = 1 / 12.5e9; bl = 1 / 450e9; L = 8
    split("8 64 512", gpus, " ")
    for (i = 1; i <= 3; i++) {
      N = gpus[i]; H = N / L
      if (H == 1) { tf = 2 * (N - 1) * al + 2 * (N - 1) / N * S * bl; th = tf }
      else {
        tf = 2 * (N - 1) * an + 2 * (N - 1) / N * S * bn
        th = 2 * (L - 1) * al + 2 * (L - 1) / L * S * bl + 2 * (H - 1) * an + 2 * (H - 1) / H * S * bn
      }
      printf "| %d | %d | %.1f ms | %.1f ms | %.0f / %.0f ms |\n", N, H, tf * 1e3, th * 1e3, 1.5 * tf * 1e3, 1.5 * th * 1e3
    } }'
} | tee "$out"
echo "(written to $out)"
