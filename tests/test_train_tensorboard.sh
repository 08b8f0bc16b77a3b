#!/usr/bin/env bash
# build/train --logdir: the TensorBoard event file parses with tests/tfevents_reader.py
# (both CRCs of every record, the Event/Summary fields) and holds one value per epoch
# of every scalar; log.csv has the same rows; only rank 0 wrote (one event file).
set -u
build=${HVD_BUILD:-build}
train=$build/train
if [ ! -x "$train" ]; then echo "skipped: $train is not built"; exit 77; fi
if [ ! -x /usr/bin/python3 ]; then echo "skipped: /usr/bin/python3 is missing"; exit 77; fi
tmp=$(mktemp -d /tmp/test_train_tensorboard.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
timeout -k 5 120 mpirun -np 2 --oversubscribe "$train" --model mlp --dataset synthetic \
  --synthetic-samples 512 --epochs 3 --threads 1 --logdir "$tmp/logs" >"$tmp/out" 2>&1 \
  || { echo "FAIL train:"; cat "$tmp/out"; exit 1; }
n=$(ls "$tmp/logs"/events.out.tfevents.* 2>/dev/null | wc -l)
[ "$n" -eq 1 ] || { echo "FAIL $n event files, expected 1"; ls -l "$tmp/logs"; exit 1; }
ev=$(ls "$tmp/logs"/events.out.tfevents.*)
/usr/bin/python3 tests/tfevents_reader.py "$ev" --steps 3 --expect loss --expect accuracy \
  --expect val_loss --expect val_accuracy --expect learning_rate --expect images_per_sec \
  >"$tmp/scalars" || { echo "FAIL reader:"; cat "$tmp/scalars"; exit 1; }
# The event values are the ones printed and logged: compare val_accuracy of epoch 3.
ev_acc=$(awk '$1 == 3 && $2 == "val_accuracy" {printf "%.4f", $3}' "$tmp/scalars")
csv_acc=$(awk -F, 'NR == 4 {printf "%.4f", $5}' "$tmp/logs/log.csv")
out_acc=$(grep '^Epoch 3/3' "$tmp/out" | sed 's/.*val_accuracy \([0-9.]*\).*/\1/')
[ "$(wc -l <"$tmp/logs/log.csv")" -eq 4 ] || { echo "FAIL log.csv:"; cat "$tmp/logs/log.csv"; exit 1; }
head -n 1 "$tmp/logs/log.csv" | grep -q '^epoch,loss,accuracy,val_loss,val_accuracy,learning_rate,images_per_sec' \
  || { echo "FAIL log.csv header"; exit 1; }
if [ -z "$ev_acc" ] || [ "$ev_acc" != "$csv_acc" ] || [ "$ev_acc" != "$out_acc" ]; then
  echo "FAIL val_accuracy: events $ev_acc, csv $csv_acc, printed $out_acc"; exit 1
fi
echo "event file ok: $(wc -l <"$tmp/scalars") scalars, val_accuracy $ev_acc at epoch 3"
