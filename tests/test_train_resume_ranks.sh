#!/usr/bin/env bash
# Resuming on another number of ranks (an elastic restart on fewer hosts): the global
# batch and the lr schedule stay, said in one line.
#  - 2 ranks x 16, killed in mid-epoch 2, resumed (--resume auto, the same command line)
#    on 1 rank: batch 32 per rank, lr still x 2, the epoch lines' lr those of the
#    uninterrupted 2-rank run, and its test accuracy within 3 points of that run's;
#  - 3 ranks x 5 resumed on 2: 15 does not split evenly, so batch 8 per rank, global 16,
#    lr x 3.2 (linear scaling), and the mid-epoch step maps onto the new shards; said.
set -u
. "$(dirname "$0")/train_prelude.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
mpin() { local n=$1; shift; timeout -k 5 120 mpirun -np "$n" --oversubscribe "$@"; }
common=(--model mlp --dataset synthetic --synthetic-samples 1024 --threads 1 --seed 7 --lr 0.02
        --lr-schedule cosine --epochs 3)
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }
lrs() { grep '^Epoch' "$1" | sed 's/.* - lr \([^ ]*\) .*/\1/'; }
accuracy() { sed -n 's/^test accuracy: \([0-9.]*\)%$/\1/p' "$1"; }

# 922 training samples: 2 ranks x 16 and 1 rank x 32 both take 29 steps an epoch; the
# kill before step 40 finds the checkpoint written after 40 steps, step 11 of epoch 2.
mpin 2 "$train" "${common[@]}" --batch-size 16 >"$tmp/full2.log" 2>&1 || { echo "FAIL 2-rank run:"; cat "$tmp/full2.log"; exit 1; }
HVD_TRAIN_TEST_KILL_AT_STEP=40 mpin 2 -x HVD_TRAIN_TEST_KILL_AT_STEP "$train" "${common[@]}" --batch-size 16 \
  --checkpoint-dir "$tmp/ck" --checkpoint-every-steps 5 >"$tmp/killed.log" 2>&1
"$train" "${common[@]}" --batch-size 16 --checkpoint-dir "$tmp/ck" --checkpoint-every-steps 5 \
  --resume auto >"$tmp/one.log" 2>&1 || { echo "FAIL 1-rank resume:"; cat "$tmp/one.log"; exit 1; }
line="train: resuming on 1 rank(s), the checkpoint's run had 2: batch 32 per rank keeps the global batch 32 and the lr schedule (lr 0.02 x 2)"
grep -qxF "$line" "$tmp/one.log" && ok "2 -> 1 ranks said: $line" || { bad "2 -> 1: no line '$line':"; cat "$tmp/one.log"; }
grep -q "after epoch 1 and step 11 of epoch 2$" "$tmp/one.log" && ok "2 -> 1 resumed in mid-epoch 2" \
  || { bad "2 -> 1: not resumed at step 11 of epoch 2:"; cat "$tmp/one.log"; }
grep -q "batch 32 per rank (32 global)" "$tmp/one.log" || bad "2 -> 1: the header does not show batch 32 per rank"
[ "$(lrs "$tmp/one.log")" = "$(lrs "$tmp/full2.log" | tail -n 2)" ] && ok "2 -> 1: lr of epochs 2, 3 as in the 2-rank run: $(lrs "$tmp/one.log" | tr '\n' ' ')" \
  || bad "2 -> 1: lr $(lrs "$tmp/one.log" | tr '\n' ' ') differs from the 2-rank run's $(lrs "$tmp/full2.log" | tail -n 2 | tr '\n' ' ')"
a=$(accuracy "$tmp/full2.log"); b=$(accuracy "$tmp/one.log")
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d <= 3 && d >= -3) }' \
  && ok "2 -> 1: test accuracy $b% vs $a% uninterrupted" || bad "2 -> 1: test accuracy $b% vs $a% uninterrupted"

# 3 ranks x 5: 308 samples per rank, 62 steps; 2 ranks x 8: 58 steps. The kill at step
# 87 (step 25 of epoch 2) finds the checkpoint of step 18 (global step 80).
HVD_TRAIN_TEST_KILL_AT_STEP=87 mpin 3 -x HVD_TRAIN_TEST_KILL_AT_STEP "$train" "${common[@]}" --batch-size 5 \
  --checkpoint-dir "$tmp/ck3" --checkpoint-every-steps 10 >"$tmp/killed3.log" 2>&1
mpin 2 "$train" "${common[@]}" --batch-size 5 --checkpoint-dir "$tmp/ck3" --resume auto >"$tmp/two.log" 2>&1 \
  || { echo "FAIL 3 -> 2 resume:"; cat "$tmp/two.log"; exit 1; }
line="train: resuming on 2 rank(s), the checkpoint's run had 3: its global batch 15 does not split evenly; batch 8 per rank, global batch 16, lr 0.02 x 3.2 (was x 3)"
grep -qxF "$line" "$tmp/two.log" && ok "3 -> 2 ranks said: $line" || { bad "3 -> 2: no line '$line':"; cat "$tmp/two.log"; }
line="train: step 18 of 62 of epoch 2 goes on at step 17 of 58 of this run's global batches (samples of this epoch may repeat or be left out)"
grep -qxF "$line" "$tmp/two.log" && ok "3 -> 2: the step mapped: $line" || { bad "3 -> 2: no line '$line':"; cat "$tmp/two.log"; }
[ $fails -eq 0 ] && echo "all rank-change cases pass" && exit 0
echo "$fails case(s) failed"; exit 1
