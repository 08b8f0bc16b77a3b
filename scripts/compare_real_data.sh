#!/usr/bin/env bash
# scripts/compare_real_data.sh: cnn_bench on real images against synthetic data, side by
# side in one run (the issue's goal: real within 5% of synthetic).
#
#   scripts/compare_real_data.sh --data_dir DIR [--model resnet50] [--np 2] [--batch 2]
#                                [--batches 3] [--rounds 2]
#
# DIR holds ImageNet's layouts (DIR/train-* TFRecords or DIR/train/CLASS/*.jpg), e.g.
# `scripts/make_image_dataset.py photos DIR`. Runs synthetic and real alternately (A B A B,
# --rounds times, so a change of the machine's load hits both), each `mpirun -np NP
# cnn_bench --model M --batch_size B --num_batches N`, and prints every run's total
# images/sec, the input pipeline's share of the step (real data), and the ratio of the
# medians (real / synthetic).
set -u
cd "$(dirname "$0")/.." || exit 2
model=resnet50 np=2 batch=2 batches=3 rounds=2 dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data_dir) dir=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_real_data: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$dir" ] || { echo "compare_real_data: --data_dir DIR is required (see --help)" >&2; exit 2; }
bench=${HVD_BUILD:-build}/cnn_bench
[ -x "$bench" ] || { echo "compare_real_data: $bench is not built (run make)" >&2; exit 2; }
log=$(mktemp -d /tmp/compare_real_data.XXXXXX)
trap 'rm -rf "$log"' EXIT
common=(--model "$model" --batch_size "$batch" --num_batches "$batches" --num_warmup_batches 1)
printf '%-10s %-10s %18s  %s\n' round data "total images/sec" "input pipeline"
for r in $(seq 1 "$rounds"); do
  for kind in synthetic imagenet; do
    extra=()
    [ "$kind" = imagenet ] && extra=(--data_dir "$dir")
    if ! mpirun -np "$np" --oversubscribe "$bench" "${common[@]}" --data_name "$kind" "${extra[@]}" \
        > "$log/$kind.$r" 2>&1; then
      echo "compare_real_data: the $kind run failed:" >&2; tail -5 "$log/$kind.$r" >&2; exit 1
    fi
    ips=$(sed -n 's/^total images\/sec: //p' "$log/$kind.$r")
    share=$(sed -n 's/^input pipeline: \([0-9.]*%\).*/\1/p' "$log/$kind.$r")
    printf '%-10s %-10s %18s  %s\n' "$r" "$kind" "$ips" "${share:--}"
    echo "$ips" >> "$log/$kind.all"
  done
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
s=$(median "$log/synthetic.all") i=$(median "$log/imagenet.all")
awk -v s="$s" -v i="$i" -v m="$model" -v n="$np" 'BEGIN {
  printf "%s, %d ranks: real %.3g / synthetic %.3g images/sec (medians) = %.3f (goal: within 5%%)\n", m, n, i, s, (s > 0 ? i / s : 0) }'
echo "compare_real_data: $((2 * rounds)) runs in ${SECONDS} s"
