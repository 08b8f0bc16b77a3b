#!/usr/bin/env bash
# train on image files (--dataset imagefolder | tfrecord | filelist; docs/data.md):
#   - scripts/make_image_dataset.py writes 1200 training and 400 test Fashion-MNIST images
#     as 56x56 JPEGs (ImageFolder, TFRecords in 2 shards, list files) and the same images
#     as IDX files, all in one order; lenet on 2 ranks, same seed and epochs: the folder's
#     and the TFRecords' test accuracy are within 1 point of the IDX files';
#   - the sets are streamed (decoded batch by batch by --data-threads threads): with
#     --augment (RandomResizedCrop + flip), a run with 3 threads killed mid-epoch and
#     resumed from its mid-epoch checkpoint has the epochs and, bit for bit, the weights
#     of the uninterrupted run with 1 thread; resumed on 1 rank instead (elastic), its
#     epoch figures;
#   - ranks whose copies of the training images differ normalise with rank 0's mean and std;
#   - a truncated JPEG in the training folder stops train with one line naming it (found
#     while measuring the normalisation); one in the validation folder stops the run at
#     its evaluation, named by the rank that read it; --skip-bad-images leaves it out and
#     says how many were left out;
#   - a corrupt TFRecord length stops train naming the shard and the record.
set -u
. "$(dirname "$0")/train_prelude.sh"
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] \
  || { echo "FAIL Fashion-MNIST is missing: run scripts/install-deps.sh (dataset-fashion-mnist)"; exit 1; }
d=$tmp/fm
/usr/bin/python3 scripts/make_image_dataset.py fashion "$d" --train 1200 --val 400 --size 56 --shards 2 \
  || { echo "FAIL scripts/make_image_dataset.py fashion"; exit 1; }
common=(--epochs 2 --validation-split 0 --lr 0.01 --batch-size 32 --threads 1 --seed 3)
accuracy() {   # accuracy NAME ARGS...: trains, prints the test accuracy (percent)
  local name=$1
  shift
  # A longer limit than mpi2's: on a loaded machine two epochs of lenet take a while.
  if ! timeout -k 5 600 mpirun -np 2 --oversubscribe "$train" "$@" "${common[@]}" > "$tmp/$name.log" 2>&1; then
    echo "FAIL $name: train failed:" >&2; tail -5 "$tmp/$name.log" >&2; echo -1; return
  fi
  sed -n 's/^test accuracy: \([0-9.]*\)%$/\1/p' "$tmp/$name.log"
}
ref=$(accuracy idx --dataset idx --train-images "$d/idx/train-images-idx3-ubyte" \
  --train-labels "$d/idx/train-labels-idx1-ubyte" --test-images "$d/idx/t10k-images-idx3-ubyte" \
  --test-labels "$d/idx/t10k-labels-idx1-ubyte")
for kind in imagefolder tfrecord; do
  acc=$(accuracy "$kind" --dataset "$kind" --data-dir "$d" --data-threads 2 --prefetch 2)
  if [ -z "$acc" ] || [ -z "$ref" ] || ! awk -v a="$acc" -v r="$ref" 'BEGIN { exit !(a >= 0 && r >= 0 && a - r <= 1 && r - a <= 1) }'; then
    echo "FAIL $kind: test accuracy ${acc:-none}%, the IDX files' ${ref:-none}% (within 1 point expected)"
    fails=$((fails + 1))
  else
    echo "ok   $kind: test accuracy $acc%, the IDX files' $ref%"
  fi
done

# Streaming: the same batches whatever the threads; an exact resume mid-epoch.
small=(--dataset imagefolder --data-dir "$d" --augment --max-train 256 --max-test 64 --batch-size 32
       --validation-split 0 --lr 0.01 --threads 1 --seed 5 --epochs 2)
run_small() {   # run_small NAME ARGS...: $tmp/NAME.log, $tmp/NAME.safetensors
  local name=$1
  shift
  mpi2 "$train" "${small[@]}" "$@" --export "$tmp/$name.safetensors" > "$tmp/$name.log" 2>&1 \
    || { echo "FAIL $name: train failed:"; tail -5 "$tmp/$name.log"; fails=$((fails + 1)); }
}
# Epoch and test lines without timings.
results() { grep -E '^(Epoch|test )' "$1" | sed 's/:.* - loss/ loss/; s/ - [0-9.]* img\/s.*//'; }
# The uninterrupted run with 1 decode thread; the killed and resumed one with 3: the
# same epochs and weights show both that the batches do not depend on the threads and
# that the resume goes on with the very batches. 4 steps per epoch: global step 6 is
# step 2 of epoch 2, after its mid-epoch checkpoint.
run_small full --data-threads 1 --prefetch 1
HVD_TRAIN_TEST_KILL_AT_STEP=6 mpi2 -x HVD_TRAIN_TEST_KILL_AT_STEP "$train" "${small[@]}" --data-threads 3 \
  --prefetch 3 --checkpoint-dir "$tmp/ck" --checkpoint-every-steps 1 > "$tmp/killed.log" 2>&1
cp -r "$tmp/ck" "$tmp/ck1"
run_small resumed --data-threads 3 --prefetch 3 --checkpoint-dir "$tmp/ck" --checkpoint-every-steps 1 --resume auto
if grep -q "resuming .* after epoch 1 and step 2 of epoch 2" "$tmp/resumed.log" &&
   [ -n "$(results "$tmp/full.log")" ] &&
   [ "$(results "$tmp/full.log" | tail -3)" = "$(results "$tmp/resumed.log")" ] &&
   [ "$(results "$tmp/full.log" | head -1)" = "$(results "$tmp/killed.log")" ] &&
   cmp -s "$tmp/full.safetensors" "$tmp/resumed.safetensors"; then
  echo "ok   --augment, 3 decode threads, killed at step 2 of epoch 2 and resumed: the uninterrupted 1-thread run's epochs and weights"
else
  echo "FAIL the killed and resumed 3-thread run differs from the uninterrupted 1-thread one:"
  diff <(results "$tmp/full.log") <(results "$tmp/killed.log"; results "$tmp/resumed.log")
  grep resuming "$tmp/resumed.log"; fails=$((fails + 1))
fi
# Elastic: the same checkpoint resumed on 1 rank (batch 64 keeps the global batch): the
# same global batches, so the same epoch figures (the gradients summed in another order:
# the printed digits, not the bits).
timeout -k 5 120 "$train" "${small[@]}" --checkpoint-dir "$tmp/ck1" --checkpoint-every-steps 1 \
  --resume auto > "$tmp/elastic.log" 2>&1
if grep -q "resuming on 1 rank(s), the checkpoint's run had 2: batch 64" "$tmp/elastic.log" &&
   [ "$(results "$tmp/full.log" | tail -3)" = "$(results "$tmp/elastic.log")" ]; then
  echo "ok   the mid-epoch checkpoint resumed on 1 rank: the uninterrupted 2-rank run's epoch"
else
  echo "FAIL resumed on 1 rank:"; tail -5 "$tmp/elastic.log"; fails=$((fails + 1))
fi

# The normalisation is measured per host on its own copy: two ranks whose copies differ
# (rank 1's training images inverted) normalise with rank 0's figures, not each its own.
mkdir -p "$tmp/fm2" && cp -r "$d/train" "$d/val" "$tmp/fm2/"
/usr/bin/python3 - "$tmp/fm2/train" <<'PY'
import glob, sys
from PIL import Image, ImageOps
for f in glob.glob(sys.argv[1] + "/*/*.jpg"):
    ImageOps.invert(Image.open(f).convert("RGB")).save(f, quality=95)
PY
norm() { grep "rank $1 normalises" "$tmp/norm.err" | sed 's/.*normalises//'; }
HVD_TRAIN_TEST_PRINT_NORM=1 timeout -k 5 120 mpirun --oversubscribe -x HVD_TRAIN_TEST_PRINT_NORM \
  -np 1 "$train" --dataset imagefolder --data-dir "$d" --epochs 0 --max-test 32 : \
  -np 1 "$train" --dataset imagefolder --data-dir "$tmp/fm2" --epochs 0 --max-test 32 \
  > "$tmp/norm.log" 2> "$tmp/norm.err"
if [ -n "$(norm 0)" ] && [ "$(norm 0)" = "$(norm 1)" ]; then
  echo "ok   ranks with different copies of the data normalise alike:$(norm 1)"
else
  echo "FAIL ranks with different copies normalise differently: rank 0$(norm 0), rank 1$(norm 1)"
  tail -3 "$tmp/norm.err"; fails=$((fails + 1))
fi

# Bad files.
head -c 700 "$d/train/3-dress/$(ls "$d/train/3-dress" | head -1)" > "$tmp/truncated.jpg"
cp "$tmp/truncated.jpg" "$d/train/3-dress/zz-truncated.jpg"
NO_EPOCH=1 expect_error "a truncated JPEG" "zz-truncated.jpg" \
  mpi2 "$train" --dataset imagefolder --data-dir "$d" --epochs 1
# In the validation part: read first by the final evaluation (--epochs 0), after the
# runtime is up, by one rank.
mv "$d/train/3-dress/zz-truncated.jpg" "$d/val/3-dress/zz-truncated.jpg"
mpi2 "$train" --dataset imagefolder --data-dir "$d" --epochs 0 > "$tmp/val.log" 2> "$tmp/val.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q "^train: .*zz-truncated.jpg: bad JPEG" "$tmp/val.err"; then
  echo "ok   a truncated JPEG in val/: $(grep -m1 zz-truncated "$tmp/val.err")"
else
  echo "FAIL a truncated JPEG in val/: exit $rc, no line naming it:"; cat "$tmp/val.err"; fails=$((fails + 1))
fi
if mpi2 "$train" --dataset imagefolder --data-dir "$d" --epochs 0 --skip-bad-images > "$tmp/skip.log" 2>&1 &&
   grep -q -- "--skip-bad-images: 1 bad image(s) left out" "$tmp/skip.log"; then
  echo "ok   --skip-bad-images: $(grep -m1 -- '--skip-bad-images' "$tmp/skip.log")"
else
  echo "FAIL --skip-bad-images: no count of the one bad image:"; tail -5 "$tmp/skip.log"; fails=$((fails + 1))
fi
/usr/bin/python3 - "$d/train-00001-of-00002" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
n = int.from_bytes(b[0:8], "little")
b[16 + n + 1] ^= 0x10          # record 1's length
open(sys.argv[1], "wb").write(b)
PY
NO_EPOCH=1 expect_error "a corrupt TFRecord length" "train-00001-of-00002, record 1" \
  mpi2 "$train" --dataset tfrecord --data-dir "$d" --epochs 1
[ $fails -eq 0 ] && echo "test_train_images: ok"
exit $((fails > 0))
