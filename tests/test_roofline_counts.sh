#!/usr/bin/env bash
# The roofline report's counting (scripts/roofline.py counts, no timing): the FLOPs and
# bytes of single layers against hand-worked values, the totals of resnet50 against
# torchvision's published figures (25,557,032 parameters, 4.09 GMAC forward at 224x224),
# resnet20's parameters against scripts/peers/torch_models.py, and the layer names of
# both against nn's own models (nn_train_bench --profile at batch 1), so a change to
# nn/models.c that the report does not follow fails here.
set -u
build=${HVD_BUILD:-build}
py=/usr/bin/python3
bench=$build/nn_train_bench
[ -x "$bench" ] || { echo "FAIL: $bench is not built (make BUILD=$build)"; exit 1; }
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # check WHAT GOT WANT
  if [ "$2" = "$3" ]; then echo "ok: $1 = $3"; else echo "FAIL: $1: got '$2', want '$3'"; fail=1; fi
}

"$py" scripts/roofline.py counts resnet20 2 >"$tmp/r20" || { echo "FAIL: counts resnet20"; exit 1; }
"$py" scripts/roofline.py counts resnet50 1 >"$tmp/r50" || { echo "FAIL: counts resnet50"; exit 1; }
# Columns: name shape fwd_flops bwd_flops fwd_bytes bwd_bytes params.
# conv1 3->16 3x3 on 32x32, batch 2, no dx: 2*2*16*32*32*3*9 FLOPs each way; bytes
# 4*(x 6144 + w 432 + y 32768) forward, plus dW (432) backward.
check "resnet20 conv1" "$(awk '$1 == "conv1"' "$tmp/r20")" \
  "conv1 conv_3->16_3x3_s1_32x32_(no_dx) 1769472 1769472 157376 159104 432"
# layer1.0.conv1 16->16 3x3, batch 2: backward is dx and dW, twice the forward; bytes
# 4*(x 32768 + w 2304 + y 32768) forward, 4*(x + w + dy + dW + dx) backward.
check "resnet20 layer1.0.conv1" "$(awk '$1 == "layer1.0.conv1"' "$tmp/r20")" \
  "layer1.0.conv1 conv_16->16_3x3_s1_32x32 9437184 18874368 271360 411648 2304"
# batch norm over 2x16x32x32 = 32768 elements: 5 and 7 FLOPs, 8 and 12 bytes each.
check "resnet20 bn1" "$(awk '$1 == "bn1"' "$tmp/r20")" \
  "bn1 bn_16x32x32 163840 229376 262144 393216 32"
check "resnet50 parameters" "$(awk '$1 == "total" {print $7}' "$tmp/r50")" 25557032
check "resnet50 forward MACs of conv+fc" \
  "$(awk '$2 ~ /^(conv|fc)_/ {s += $3} END {printf "%.0f", s / 2}' "$tmp/r50")" 4089184256
want=$(cd scripts/peers &&
  "$py" -c 'import torch_models as m; print(sum(p.numel() for p in m.ResNet20().parameters()))') ||
  { echo "FAIL: counting ResNet20's parameters in scripts/peers/torch_models.py"; exit 1; }
check "resnet20 parameters" "$(awk '$1 == "total" {print $7}' "$tmp/r20")" "$want"

for model in resnet20 resnet50; do
  OPENBLAS_NUM_THREADS=1 "$bench" --model "$model" --batch 1 --steps 1 --warmup 0 --threads 1 \
    --profile >"$tmp/$model.prof" || { echo "FAIL: $bench --model $model"; exit 1; }
  nn_names=$(awk '/^layer / {on = 1; next} /^all layers/ {on = 0} on {print $1}' \
    "$tmp/$model.prof" | sort)
  our_names=$("$py" scripts/roofline.py counts "$model" 1 |
    awk 'NR > 1 && $1 != "total" {print $1}' | sort)
  [ -n "$nn_names" ] || { echo "FAIL: no layer names in $bench --profile's output"; fail=1; }
  check "$model layer names (scripts/roofline.py vs nn/models.c)" \
    "$(diff <(echo "$our_names") <(echo "$nn_names") | tr '\n' ' ')" ""
done
[ "$fail" = 0 ] && echo "PASS" || echo "FAIL"
exit "$fail"
