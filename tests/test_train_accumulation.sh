#!/usr/bin/env bash
# train's Horovod knobs, on 2 ranks (mlp, synthetic data: 461 samples, shards of 230 and
# 231, so an epoch ends on uneven batches):
#   --batches-per-allreduce 2 with --batch-size 32 trains as --batch-size 64 without it:
#     the same samples per optimizer step, the gradient the mean over them (the two passes
#     weighted by their samples, the uneven tail included); lr scaled by ranks x 2, so
#     --lr 0.05 there is --lr 0.1 here; exported weights equal to float tolerance (1e-5
#     relative), while batch 32 without accumulation is far off (the check can tell);
#   --gradient-predivide-factor 3 gives the weights of no predivide (to 1e-5);
#   --no-lr-scaling: the lr stays --lr (header "x 1", the epoch line, log.csv), where the
#     default shows lr x ranks;
#   a mid-epoch checkpoint with accumulation (taken at a window's end) resumes bit for bit,
#     also when an epoch ends on a short window (checkpoints counted in optimizer steps
#     across epochs).
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/train_resume_prelude.sh
/usr/bin/python3 -c 'import numpy' 2>/dev/null \
  || { echo "FAIL /usr/bin/python3 has no numpy: run scripts/install-deps.sh"; exit 1; }
fails=0
common=(--model mlp --dataset synthetic --synthetic-samples 512 --threads 1 --epochs 1 --seed 5)
run() {   # NAME FLAGS...: 2 ranks, export to $tmp/NAME.safetensors, output in $tmp/NAME.log
  local name=$1
  shift
  mpi2 "$train" "${common[@]}" "$@" --export "$tmp/$name.safetensors" >"$tmp/$name.log" 2>&1 \
    || { echo "FAIL $name:"; cat "$tmp/$name.log"; exit 1; }
}
# rel_diff A B: the largest relative difference of a tensor between two exports.
rel_diff() {
  /usr/bin/python3 - "$tmp/$1.safetensors" "$tmp/$2.safetensors" <<'EOF'
import json, struct, sys
import numpy as np
def load(p):
    d = open(p, "rb").read(); n = struct.unpack("<Q", d[:8])[0]; h = json.loads(d[8:8 + n])
    return {k: np.frombuffer(d[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], np.float32)
            for k, e in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b)
print("%.3g" % max(float(np.abs(a[k] - b[k]).max() / max(np.abs(b[k]).max(), 1e-30)) for k in a))
EOF
}
below() { awk -v d="$1" -v t="$2" 'BEGIN { exit !(d != "" && d + 0 < t + 0) }'; }

run accum --batch-size 32 --batches-per-allreduce 2 --lr 0.05
run big --batch-size 64 --lr 0.1
run small --batch-size 32 --lr 0.1
d=$(rel_diff accum big) c=$(rel_diff small big)
grep -q 'batch 32 per rank x 2 batches per allreduce (128 global).*lr 0.05 x 4, sgd, 8 steps per epoch (4 optimizer steps)' "$tmp/accum.log" \
  || { echo "FAIL accumulation header:"; grep '^train:' "$tmp/accum.log"; fails=$((fails + 1)); }
if below "$d" 1e-5 && ! below "$c" 1e-2; then
  echo "ok   --batches-per-allreduce 2 x batch 32 = batch 64: weights differ by $d (batch 32 alone: $c)"
else
  echo "FAIL --batches-per-allreduce 2 x batch 32 vs batch 64: relative difference $d (batch 32 alone: $c)"
  fails=$((fails + 1))
fi
la=$(grep '^Epoch 1/1' "$tmp/accum.log" | sed 's/.* - loss \([0-9.]*\) - accuracy \([0-9.]*\) .*/\1 \2/')
lb=$(grep '^Epoch 1/1' "$tmp/big.log" | sed 's/.* - loss \([0-9.]*\) - accuracy \([0-9.]*\) .*/\1 \2/')
[ -n "$la" ] && [ "$la" = "$lb" ] || { echo "FAIL epoch loss and accuracy: '$la' vs '$lb'"; fails=$((fails + 1)); }

run predivide --batch-size 32 --lr 0.1 --gradient-predivide-factor 3
d=$(rel_diff predivide small)
grep -q 'gradient predivide factor 3' "$tmp/predivide.log" || { echo "FAIL no predivide in the header"; fails=$((fails + 1)); }
if below "$d" 1e-5; then echo "ok   --gradient-predivide-factor 3 = none: weights differ by $d"
else echo "FAIL --gradient-predivide-factor 3 vs none: relative difference $d"; fails=$((fails + 1)); fi

# --no-lr-scaling: lr 0.05 as given; the default doubles it on 2 ranks.
mpi2 "$train" "${common[@]}" --lr 0.05 --no-lr-scaling --batches-per-allreduce 2 --logdir "$tmp/nols" \
  >"$tmp/nols.log" 2>&1 || { echo "FAIL --no-lr-scaling run:"; cat "$tmp/nols.log"; exit 1; }
mpi2 "$train" "${common[@]}" --lr 0.05 >"$tmp/scaled.log" 2>&1 || { echo "FAIL scaled run:"; cat "$tmp/scaled.log"; exit 1; }
if grep -q 'lr 0.05 x 1,' "$tmp/nols.log" && grep -q '^Epoch 1/1.* - lr 0.05 - ' "$tmp/nols.log" \
   && [ "$(awk -F, 'NR == 2 {printf "%.4f", $6}' "$tmp/nols/log.csv")" = 0.0500 ] \
   && grep -q 'lr 0.05 x 2,' "$tmp/scaled.log" && grep -q '^Epoch 1/1.* - lr 0.1 - ' "$tmp/scaled.log"; then
  echo "ok   --no-lr-scaling: lr 0.05 x 1 (epoch line and log.csv 0.05); default lr 0.05 x 2 = 0.1"
else
  echo "FAIL --no-lr-scaling:"; grep -E '^(train|Epoch)' "$tmp/nols.log" "$tmp/scaled.log"; cat "$tmp/nols/log.csv"
  fails=$((fails + 1))
fi
[ $fails -eq 0 ] || { echo "$fails case(s) failed"; exit 1; }

# A mid-epoch checkpoint every optimizer step (every 2 batches): the kill at batch 13
# (epoch 2, batch 5: inside the window of batches 4 and 5) finds the checkpoint of the
# window that ended at batch 4 of epoch 2; the resumed run ends bit for bit as the
# uninterrupted one.
every=1 at_step=4 check_case mlp_accumulation_mid 13 1 2 --model mlp --dataset synthetic \
  --synthetic-samples 512 --batch-size 32 --seed 5 --threads 1 --batches-per-allreduce 2 \
  --optimizer adam
# 8 batches per epoch, not a multiple of --batches-per-allreduce 3: windows of 3, 3 and 2
# batches, 3 optimizer steps an epoch (the short window at the epoch's end is one), so
# epoch 2's optimizer steps are the 4th to 6th. With a checkpoint every 2 of them, epoch
# 1's is after batch 6 and epoch 2's after its first window (batch 3, the 4th step); the
# kill at batch 15 (epoch 2's last) finds that one. (Windows counted rounded down, 2 an
# epoch, would put it after batch 6 of epoch 2.)
every=2 at_step=3 check_case mlp_accumulation_partial 15 1 2 --model mlp --dataset synthetic \
  --synthetic-samples 512 --batch-size 32 --seed 5 --threads 1 --batches-per-allreduce 3
grep -q '8 steps per epoch (3 optimizer steps)' "$tmp/mlp_accumulation_partial/full.log" \
  || { echo "FAIL header of --batches-per-allreduce 3:"; grep '^train:' "$tmp/mlp_accumulation_partial/full.log"; exit 1; }
echo "accumulation, predivide and lr scaling pass"
