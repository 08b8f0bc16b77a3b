#!/usr/bin/env bash
# scripts/compare_real_data.sh end to end on a tiny set (8 photographs of 96x72, the
# trivial model, 1 rank, 1 round): both runs complete, and the ratio it prints is real /
# synthetic of the figures it printed (awk once read `s > 0 ? ...` in its printf as a
# redirection into a file named 0 and printed the synthetic figure as the ratio).
set -u
build=${HVD_BUILD:-build}
[ -x "$build/cnn_bench" ] || { echo "FAIL: $build/cnn_bench is not built (run make)"; exit 1; }
tmp=$(mktemp -d /tmp/test_compare_real_data.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
/usr/bin/python3 scripts/make_image_dataset.py photos "$tmp/d" --count 8 --size 96x72 \
  || { echo "FAIL scripts/make_image_dataset.py photos"; exit 1; }
if ! (cd "$tmp" && HVD_BUILD="$OLDPWD/$build" timeout -k 5 120 "$OLDPWD/scripts/compare_real_data.sh" \
      --data_dir "$tmp/d" --model trivial --np 1 --batch 2 --batches 2 --rounds 1) > "$tmp/out" 2>&1; then
  echo "FAIL compare_real_data.sh failed:"; cat "$tmp/out"; exit 1
fi
syn=$(awk '$2 == "synthetic" { print $3 }' "$tmp/out")
real=$(awk '$2 == "imagenet" { print $3 }' "$tmp/out")
ratio=$(sed -n 's/.*(medians) = \([0-9.]*\) (goal.*/\1/p' "$tmp/out")
if [ -n "$syn" ] && [ -n "$real" ] && [ -n "$ratio" ] && grep -q "^compare_real_data: 2 runs in" "$tmp/out" &&
   awk -v s="$syn" -v r="$real" -v q="$ratio" 'BEGIN { d = r / s - q; exit !(s > 0 && d < 0.002 && d > -0.002) }'; then
  echo "ok   compare_real_data.sh: real $real / synthetic $syn = $ratio"
else
  echo "FAIL compare_real_data.sh's ratio '$ratio' is not real $real / synthetic $syn:"; cat "$tmp/out"; exit 1
fi
