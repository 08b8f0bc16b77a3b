#!/usr/bin/env bash
# train on image files (--dataset imagefolder | tfrecord | filelist; docs/data.md):
#   - scripts/make_image_dataset.py writes 1200 training and 400 test Fashion-MNIST images
#     as 56x56 JPEGs (ImageFolder, TFRecords in 2 shards, list files) and the same images
#     as IDX files, all in one order; lenet on 2 ranks, same seed and epochs: the folder's
#     and the TFRecords' test accuracy are within 1 point of the IDX files';
#   - a truncated JPEG in the folder stops train with one line naming it;
#     --skip-bad-images leaves it out and says how many were left out;
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

# Bad files.
head -c 700 "$d/train/3-dress/$(ls "$d/train/3-dress" | head -1)" > "$d/train/3-dress/zz-truncated.jpg"
NO_EPOCH=1 expect_error "a truncated JPEG" "zz-truncated.jpg" \
  mpi2 "$train" --dataset imagefolder --data-dir "$d" --epochs 1
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
