#!/usr/bin/env bash
# build/train --resume with a checkpoint whose fields were edited and whose CRC was then
# recomputed (so the file itself checks out): every field is range-checked against this
# run's flags and the other fields before it is believed. Each case must exit non-zero
# before any training, with exactly one "train: ..." line naming the checkpoint file and
# the field, and leave the existing checkpoints byte-for-byte untouched. (Before the
# checks, epochs_done NaN or 1e300 made train "resume after epoch -2147483648" and write
# hundreds of files; -5 trained epochs -4 to 3 and wrote epoch--04.ckpt.)
set -u
. "$(dirname "$0")/train_prelude.sh"
[ -x /usr/bin/python3 ] || { echo "FAIL /usr/bin/python3 is missing (it edits the checkpoints)"; exit 1; }

# ckedit IN OUT SECTION TYPE INDEX VALUE [SECTION TYPE INDEX VALUE...]: rewrites element
# INDEX (negative: from the end) of SECTION, read as TYPE (d: float64, q: int64, f:
# float32), to VALUE, for each such four, and recomputes the file's crc32 (layout:
# train/checkpoint.h).
ckedit() {
  /usr/bin/python3 - "$@" <<'EOF'
import struct, sys, zlib
src, dst = sys.argv[1:3]
edits = sys.argv[3:]
assert edits and len(edits) % 4 == 0, 'edits come in fours: SECTION TYPE INDEX VALUE'
b = bytearray(open(src, 'rb').read())
assert b[:8] == b'HVDCKPT1' and struct.unpack_from('<Q', b, 8)[0] == len(b)
for e in range(0, len(edits), 4):
    section, typ, index, value = edits[e:e + 4]
    pos = 16
    (ml,) = struct.unpack_from('<I', b, pos); pos += 4 + ml
    (count,) = struct.unpack_from('<I', b, pos); pos += 4
    for _ in range(count):
        (nl,) = struct.unpack_from('<H', b, pos); pos += 2
        name = b[pos:pos + nl].decode(); pos += nl
        (nb,) = struct.unpack_from('<Q', b, pos); pos += 8
        if name == section:
            size = struct.calcsize('<' + typ)
            i = int(index)
            if i < 0: i += nb // size
            assert 0 <= i < nb // size, 'index out of the section'
            v = int(value) if typ == 'q' else float(value)
            struct.pack_into('<' + typ, b, pos + i * size, v)
            break
        pos += nb
    else:
        sys.exit('no section ' + section)
struct.pack_into('<I', b, len(b) - 4, zlib.crc32(bytes(b[:-4])) & 0xffffffff)
open(dst, 'wb').write(b)
EOF
}

common=(--model mlp --dataset synthetic --synthetic-samples 256 --batch-size 32 --threads 1)
# A real checkpoint after 2 of 3 epochs, with best weights (sections best.*).
"$train" "${common[@]}" --quiet --epochs 2 --restore-best-weights --checkpoint-dir "$tmp/ck" >"$tmp/out" 2>&1 \
  || { echo "FAIL making a checkpoint:"; cat "$tmp/out"; exit 1; }
"$train" "${common[@]}" --quiet --optimizer adam --epochs 1 --checkpoint-dir "$tmp/ck_adam" >"$tmp/out" 2>&1 \
  || { echo "FAIL making an adam checkpoint:"; cat "$tmp/out"; exit 1; }
sums_before=$(snapshot ck ck_adam) || exit 1

# The edit helper itself: an unchanged value keeps a checkpoint that resumes.
ckedit "$tmp/ck/last.ckpt" "$tmp/same.ckpt" state d 0 2
if ! timeout -k 5 30 "$train" "${common[@]}" --epochs 3 --restore-best-weights \
     --resume "$tmp/same.ckpt" >"$tmp/out" 2>&1; then
  echo "FAIL a checkpoint rewritten with its own values does not resume:"; cat "$tmp/out"
  fails=$((fails + 1))
fi

# case WHAT FIELD SECTION TYPE INDEX VALUE [BASE]: resume from the edited copy with
# --epochs 3, writing into the real checkpoint directory (which must not change). With
# also="SECTION TYPE INDEX VALUE..." in the environment of the call: those edits too.
case_() {
  local what=$1 field=$2 section=$3 typ=$4 index=$5 value=$6 base=${7:-ck}
  local bad=$tmp/edited.ckpt extra=() more=()
  [ "$base" = ck ] && extra=(--restore-best-weights)
  [ "$base" = ck_adam ] && extra=(--optimizer adam)
  read -r -a more <<<"${also:-}"
  ckedit "$tmp/$base/last.ckpt" "$bad" "$section" "$typ" "$index" "$value" "${more[@]}" \
    || { echo "FAIL $what: cannot edit the checkpoint"; fails=$((fails + 1)); return; }
  # --save-best-only: should the run go ahead anyway, it rewrites two files, not hundreds.
  # The one line names the file and the field.
  NO_EPOCH=1 expect_error "$what" "$bad: bad checkpoint field $field" timeout -k 5 20 \
    "$train" "${common[@]}" "${extra[@]}" --epochs 3 --save-best-only --resume "$bad" \
    --checkpoint-dir "$tmp/$base"
}

# state: epochs_done, es_best, es_best_epoch, es_wait, ck_best, ck_best_epoch,
# best_val_acc, best_val_acc_epoch, train_seconds, train_images, have_best, dropout_step
case_ "epochs_done NaN" epochs_done state d 0 nan
case_ "epochs_done 1e300" epochs_done state d 0 1e300
case_ "epochs_done -5" epochs_done state d 0 -5
case_ "epochs_done 1.5" epochs_done state d 0 1.5
case_ "epochs_done past --epochs" epochs_done state d 0 4
case_ "epochs_done disagreeing with the metadata" epochs_done state d 0 1
case_ "es_best NaN" es_best state d 1 nan
case_ "es_best -inf (a loss)" es_best state d 1 -inf
case_ "es_best_epoch past epochs_done" es_best_epoch state d 2 7
case_ "es_wait negative" es_wait state d 3 -1
case_ "ck_best_epoch -1 with a best" ck_best_epoch state d 5 -1
case_ "best_val_acc 1.5" best_val_acc state d 6 1.5
case_ "best_val_acc_epoch NaN" best_val_acc_epoch state d 7 nan
case_ "train_seconds inf" train_seconds state d 8 inf
case_ "train_images NaN" train_images state d 9 nan
case_ "have_best 0.5" have_best state d 10 0.5
# Best weights kept (have_best 1) while es_best and es_best_epoch say no best yet (inf,
# -1): consistent with each other, so only have_best's own check refuses it.
also="state d 1 inf state d 2 -1" case_ "have_best 1 with es_best_epoch -1" have_best state d 10 1
case_ "dropout_step -1" dropout_step state d 11 -1
case_ "dropout_step 1e300" dropout_step state d 11 1e300
case_ "optim.step negative" optim.step optim.step q 0 -7
case_ "a NaN weight" params params f 10 nan
case_ "an infinite momentum" optim.state optim.state f 3 inf
case_ "a NaN best weight" best.params best.params f 0 nan
case_ "a negative Adam second moment" optim.state optim.state f -1 -0.5 ck_adam

finish "edited-checkpoint cases refused" "$sums_before" ck ck_adam
