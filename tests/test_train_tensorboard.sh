#!/usr/bin/env bash
# build/train --logdir writes TensorBoard runs as Keras's TensorBoard callback does:
# <logdir>/train and <logdir>/validation (one event file each, only rank 0 writes), the
# same epoch_* tags in both so the curves overlay, epoch_learning_rate in train, Keras's
# 0-based epoch steps, float wall times; --tensorboard-update-freq N adds batch_loss and
# batch_accuracy every N batches (Keras's update_freq); --histogram-freq N a histogram of
# every weight every N epochs (Keras's histogram_freq) that TensorBoard reads. Checked by
# tests/tb_keras_check.py: with TensorBoard's own EventAccumulator where the tensorboard
# package is installed (HVD_TENSORBOARD_PYTHON, /usr/bin/python3 or python3 that imports
# it), else with tests/tfevents_reader.py (both CRCs of every record, Event, Summary and
# HistogramProto fields). log.csv has the same values; the printed val_accuracy too. The
# two options without --logdir are a usage error (exit 2). A run resumed with the same
# --logdir appends to log.csv (the header once, every epoch's row); a fresh run into a
# --logdir with an old log.csv starts it anew.
set -u
build=${HVD_BUILD:-build}
train=$build/train
[ -x "$train" ] || { echo "FAIL $train is not built (run make)"; exit 1; }
[ -x /usr/bin/python3 ] || { echo "FAIL /usr/bin/python3 is missing"; exit 1; }
py=/usr/bin/python3
for p in ${HVD_TENSORBOARD_PYTHON:-} /usr/bin/python3 python3; do
  if "$p" -c 'import tensorboard' 2>/dev/null; then py=$p; break; fi
done
tmp=$(mktemp -d /tmp/test_train_tensorboard.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--model mlp --dataset synthetic --synthetic-samples 512 --threads 1)

timeout -k 5 120 mpirun -np 2 --oversubscribe "$train" "${common[@]}" --epochs 3 \
  --logdir "$tmp/logs" --tensorboard-update-freq 2 --histogram-freq 2 --export "$tmp/mlp.safetensors" \
  >"$tmp/out" 2>&1 || { echo "FAIL train:"; cat "$tmp/out"; exit 1; }
steps=$(sed -n 's/.*, \([0-9]*\) steps per epoch.*/\1/p' "$tmp/out")
"$py" tests/tb_keras_check.py "$tmp/logs" 3 "${steps:-0}" 2 2 "$tmp/mlp.safetensors" || exit 1

# The values are the ones printed and logged: val_accuracy of epoch 3 (step 2 in the
# validation run's epoch_accuracy).
ev=$(ls "$tmp/logs"/validation/events.out.tfevents.*)
/usr/bin/python3 tests/tfevents_reader.py "$ev" --steps 3 --expect epoch_loss --expect epoch_accuracy \
  >"$tmp/scalars" || { echo "FAIL reader:"; cat "$tmp/scalars"; exit 1; }
ev_acc=$(awk '$1 == 2 && $2 == "epoch_accuracy" {printf "%.4f", $3}' "$tmp/scalars")
csv_acc=$(awk -F, 'NR == 4 {printf "%.4f", $5}' "$tmp/logs/log.csv")
out_acc=$(grep '^Epoch 3/3' "$tmp/out" | sed 's/.*val_accuracy \([0-9.]*\).*/\1/')
[ "$(wc -l <"$tmp/logs/log.csv")" -eq 4 ] || { echo "FAIL log.csv:"; cat "$tmp/logs/log.csv"; exit 1; }
head -n 1 "$tmp/logs/log.csv" | grep -q '^epoch,loss,accuracy,val_loss,val_accuracy,learning_rate,images_per_sec' \
  || { echo "FAIL log.csv header"; exit 1; }
if [ -z "$ev_acc" ] || [ "$ev_acc" != "$csv_acc" ] || [ "$ev_acc" != "$out_acc" ]; then
  echo "FAIL val_accuracy: events $ev_acc, csv $csv_acc, printed $out_acc"; exit 1
fi

# Without the two flags: epoch scalars only, no batch_* tags, no histograms.
timeout -k 5 60 "$train" "${common[@]}" --epochs 2 --quiet --logdir "$tmp/plain" \
  --export "$tmp/plain.safetensors" >"$tmp/plain.out" 2>&1 || { echo "FAIL train:"; cat "$tmp/plain.out"; exit 1; }
"$py" tests/tb_keras_check.py "$tmp/plain" 2 0 0 0 "$tmp/plain.safetensors" || exit 1
# The two options need --logdir: a usage error (exit 2), not silently nothing.
for f in --tensorboard-update-freq --histogram-freq; do
  "$train" "${common[@]}" "$f" 1 >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && grep -q "^train: $f needs --logdir" "$tmp/err" \
    || { echo "FAIL $f without --logdir: exit $rc, $(cat "$tmp/err")"; exit 1; }
done
# --resume with the same --logdir: log.csv keeps epoch 1's row, gains epoch 2's; a fresh
# run (no --resume) into that --logdir starts log.csv anew.
small=(--model mlp --dataset synthetic --synthetic-samples 128 --threads 1 --quiet
  --logdir "$tmp/resumed")
timeout -k 5 60 "$train" "${small[@]}" --epochs 1 --checkpoint-dir "$tmp/ck" >"$tmp/r1.out" 2>&1 \
  && timeout -k 5 60 "$train" "${small[@]}" --epochs 2 --checkpoint-dir "$tmp/ck" --resume auto >"$tmp/r2.out" 2>&1 \
  || { echo "FAIL train (resume):"; cat "$tmp/r1.out" "$tmp/r2.out" 2>/dev/null; exit 1; }
csv_epochs() { grep -c '^epoch,' "$1"; cut -d, -f1 "$1" | grep -v '^epoch$' | tr '\n' ' '; }
got=$(csv_epochs "$tmp/resumed/log.csv")
[ "$got" = "$(printf '1\n1 2 ')" ] || { echo "FAIL log.csv after --resume (want the header" \
  "once, epochs 1 2):"; cat "$tmp/resumed/log.csv"; exit 1; }
timeout -k 5 60 "$train" "${small[@]}" --epochs 1 >"$tmp/r3.out" 2>&1 \
  || { echo "FAIL train (fresh run into an old --logdir):"; cat "$tmp/r3.out"; exit 1; }
got=$(csv_epochs "$tmp/resumed/log.csv")
[ "$got" = "$(printf '1\n1 ')" ] || { echo "FAIL log.csv of a fresh run into an old --logdir" \
  "(want the header once, epoch 1):"; cat "$tmp/resumed/log.csv"; exit 1; }
echo "log.csv ok: appended by --resume, started anew by a fresh run"
echo "event files ok: Keras layout, val_accuracy $ev_acc at epoch 3 in events, log.csv and output"
