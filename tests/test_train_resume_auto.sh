#!/usr/bin/env bash
# train --resume auto, and the stale temporary files of cut-short checkpoint writes:
#  - an empty --checkpoint-dir: a fresh start, said in a line, with the same weights as a
#    run without --resume;
#  - "NAME.ckpt.tmp.PID" files (what a kill during a write leaves) are removed at start,
#    said in a line;
#  - the newest checkpoint corrupt (bad crc), the next newest of another model: both
#    passed over with a line each, and the run resumes from the newest that loads, ending
#    bit for bit as the uninterrupted run;
#  - --resume auto without --checkpoint-dir: one error line.
set -u
. "$(dirname "$0")/train_prelude.sh"
common=(--model mlp --dataset synthetic --synthetic-samples 256 --batch-size 32 --threads 1
        --seed 11 --lr 0.02 --lr-schedule cosine)
run() { timeout -k 5 60 "$train" "${common[@]}" "$@"; }
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }

run --epochs 3 --export "$tmp/full.safetensors" >"$tmp/full.log" 2>&1 || { echo "FAIL uninterrupted run:"; cat "$tmp/full.log"; exit 1; }

# A fresh start in an empty (here: missing) directory.
run --epochs 3 --checkpoint-dir "$tmp/fresh" --resume auto --export "$tmp/fresh.safetensors" \
  >"$tmp/fresh.log" 2>&1 || { echo "FAIL fresh start:"; cat "$tmp/fresh.log"; exit 1; }
grep -q "^train: --resume auto: no checkpoint in $tmp/fresh, starting from scratch$" "$tmp/fresh.log" \
  && ok "fresh start said" || { bad "no fresh-start line:"; cat "$tmp/fresh.log"; }
cmp -s "$tmp/full.safetensors" "$tmp/fresh.safetensors" && ok "fresh start trains as without --resume" \
  || bad "the fresh start's weights differ from a run without --resume"

# Checkpoints of 2 of 3 epochs (231 training samples, 8 steps an epoch: killed at step 1
# of epoch 3), then leftovers of writes cut short.
HVD_TRAIN_TEST_KILL_AT_STEP=17 run --epochs 3 --checkpoint-dir "$tmp/ck" >"$tmp/two.log" 2>&1
grep -q '^Epoch 2/3' "$tmp/two.log" && ! grep -q '^Epoch 3/3' "$tmp/two.log" \
  || { echo "FAIL the killed run did not stop in epoch 3:"; cat "$tmp/two.log"; exit 1; }
run --epochs 1 --model lenet --checkpoint-dir "$tmp/other" >"$tmp/other.log" 2>&1 \
  || { echo "FAIL lenet checkpoint:"; cat "$tmp/other.log"; exit 1; }
echo partial >"$tmp/ck/last.ckpt.tmp.4242"
echo partial >"$tmp/ck/epoch-002.ckpt.tmp.77"
# The newest: last.ckpt with a metadata byte set to 0xff (crc mismatch); then epoch-002.ckpt replaced
# by the lenet checkpoint, which reads but is of another model; epoch-001.ckpt is good.
printf '\xff' | dd of="$tmp/ck/last.ckpt" bs=1 seek=100 conv=notrunc status=none
cp "$tmp/other/last.ckpt" "$tmp/ck/epoch-002.ckpt"
touch "$tmp/ck/last.ckpt"
run --epochs 3 --checkpoint-dir "$tmp/ck" --resume auto --export "$tmp/resumed.safetensors" \
  >"$tmp/resumed.log" 2>"$tmp/resumed.err" || { echo "FAIL resume auto:"; cat "$tmp/resumed.log" "$tmp/resumed.err"; exit 1; }
grep -q "^train: removed 2 stale temporary checkpoint file(s) from $tmp/ck" "$tmp/resumed.log" \
  && ok "stale temporary files: said" || { bad "no line about the stale files:"; cat "$tmp/resumed.log"; }
ls "$tmp/ck" | grep -q '\.tmp\.' && bad "stale temporary files left: $(ls "$tmp/ck")" || ok "stale temporary files removed"
grep -q "^train: --resume auto: passing over $tmp/ck/last.ckpt: checksum mismatch" "$tmp/resumed.err" \
  && ok "corrupt newest passed over" || { bad "no line passing over the corrupt last.ckpt:"; cat "$tmp/resumed.err"; }
grep -q "^train: --resume auto: passing over $tmp/ck/epoch-002.ckpt: checkpoint of model lenet" "$tmp/resumed.err" \
  && ok "other model passed over" || { bad "no line passing over the lenet checkpoint:"; cat "$tmp/resumed.err"; }
grep -q "^train: resuming $tmp/ck/epoch-001.ckpt after epoch 1$" "$tmp/resumed.log" \
  && ok "resumed from the newest valid one" || { bad "not resumed from epoch-001.ckpt:"; cat "$tmp/resumed.log"; }
cmp -s "$tmp/full.safetensors" "$tmp/resumed.safetensors" && ok "resumed run ends as the uninterrupted one" \
  || bad "resumed weights differ from the uninterrupted run"

# Checkpoints there, but none loads: an error, not a fresh start over them.
mkdir -p "$tmp/broken" && cp "$tmp/ck/last.ckpt" "$tmp/broken/last.ckpt"
printf '\xff' | dd of="$tmp/broken/last.ckpt" bs=1 seek=100 conv=notrunc status=none
run --epochs 3 --checkpoint-dir "$tmp/broken" --resume auto >"$tmp/broken.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q "^train: --resume auto: none of the checkpoints in $tmp/broken loads" "$tmp/broken.log" \
   && ! grep -q '^Epoch' "$tmp/broken.log"; then ok "no checkpoint loads: an error"
else bad "no checkpoint loads: exit $rc:"; cat "$tmp/broken.log"; fi
expect_error "--resume auto without --checkpoint-dir" "--resume auto needs --checkpoint-dir" \
  run --epochs 1 --resume auto
[ $fails -eq 0 ] && echo "all --resume auto cases pass" && exit 0
echo "$fails case(s) failed"; exit 1
