#!/usr/bin/env bash
# build/train --resume and the checkpoint's "format" field (metadata, CRC recomputed after
# the edit, so the file itself checks out). train writes hvd-train-checkpoint-2 and reads
# 1 (before mid-epoch checkpoints: 12 state fields) and 2 (18):
#   - format 3, a version that is no number, another name, or no format field: refused
#     before any training with one "train:" line naming the file, the field's value and
#     the versions this train reads; --resume auto refuses a directory holding only such
#     a file (training from scratch would overwrite it); the checkpoints are untouched;
#   - format 1 with format 2's state (18 fields): refused, naming the state section;
#   - a real format-1 file (state cut to its 12 fields) and the unchanged file resume.
# (Before the check, the field was written and never read: -1, -3 or none loaded alike.)
set -u
. "$(dirname "$0")/train_prelude.sh"
[ -x /usr/bin/python3 ] || { echo "FAIL /usr/bin/python3 is missing (it edits the checkpoints)"; exit 1; }

# metaedit IN OUT FORMAT [STATE_FIELDS]: the checkpoint with its format line set to
# "format=FORMAT" (FORMAT "-": the line removed), its state section cut to STATE_FIELDS
# float64s when given, the length field and crc32 recomputed (layout: train/checkpoint.h).
metaedit() {
  /usr/bin/python3 - "$@" <<'EOF'
import struct, sys, zlib
src, dst, fmt = sys.argv[1:4]
keep = int(sys.argv[4]) if len(sys.argv) > 4 else None
b = open(src, 'rb').read()
assert b[:8] == b'HVDCKPT1' and struct.unpack_from('<Q', b, 8)[0] == len(b)
(ml,) = struct.unpack_from('<I', b, 16)
meta = b[20:20 + ml].decode().split('\n')
assert any(l.startswith('format=') for l in meta), 'no format line to edit'
meta = [l for l in meta if not l.startswith('format=')]
if fmt != '-':
    meta.insert(0, 'format=' + fmt)
meta = '\n'.join(meta).encode()
pos = 20 + ml
(count,) = struct.unpack_from('<I', b, pos)
out = bytearray(struct.pack('<I', count))
pos += 4
for _ in range(count):
    (nl,) = struct.unpack_from('<H', b, pos)
    name = b[pos + 2:pos + 2 + nl]
    (nb,) = struct.unpack_from('<Q', b, pos + 2 + nl)
    data = b[pos + 10 + nl:pos + 10 + nl + nb]
    pos += 10 + nl + nb
    if name == b'state' and keep is not None:
        assert len(data) >= 8 * keep
        data = data[:8 * keep]
    out += struct.pack('<H', nl) + name + struct.pack('<Q', len(data)) + data
body = b'HVDCKPT1' + struct.pack('<Q', 0) + struct.pack('<I', len(meta)) + meta + bytes(out)
body = bytearray(body + b'\0\0\0\0')
struct.pack_into('<Q', body, 8, len(body))
struct.pack_into('<I', body, len(body) - 4, zlib.crc32(bytes(body[:-4])) & 0xffffffff)
open(dst, 'wb').write(body)
EOF
}

common=(--model mlp --dataset synthetic --synthetic-samples 256 --batch-size 32 --threads 1)
"$train" "${common[@]}" --quiet --epochs 1 --checkpoint-dir "$tmp/ck" >"$tmp/out" 2>&1 \
  || { echo "FAIL making a checkpoint:"; cat "$tmp/out"; exit 1; }
grep -qa 'format=hvd-train-checkpoint-2$' "$tmp/ck/last.ckpt" \
  || { echo "FAIL the checkpoint does not say format=hvd-train-checkpoint-2"; exit 1; }

# resumes WHAT FILE: the run goes on from the file and finishes epoch 2.
resumes() {
  if timeout -k 5 30 "$train" "${common[@]}" --epochs 2 --resume "$2" >"$tmp/out" 2>&1 &&
     grep -q "resuming $2 after epoch 1" "$tmp/out" && grep -q '^Epoch 2/2' "$tmp/out"; then
    echo "ok   $1 resumes"
  else
    echo "FAIL $1 does not resume:"; cat "$tmp/out"; fails=$((fails + 1))
  fi
}
metaedit "$tmp/ck/last.ckpt" "$tmp/same.ckpt" hvd-train-checkpoint-2
resumes "the checkpoint rewritten with its own format" "$tmp/same.ckpt"
metaedit "$tmp/ck/last.ckpt" "$tmp/v1.ckpt" hvd-train-checkpoint-1 12
resumes "a format-1 checkpoint (12 state fields)" "$tmp/v1.ckpt"

mkdir -p "$tmp/out_dir" && touch "$tmp/out_dir/keep"
before=$(snapshot ck out_dir) || exit 1
# refused WHAT FORMAT NEEDLE [STATE_FIELDS]: --resume of the edited file fails with one
# line naming it and NEEDLE.
refused() {
  local bad=$tmp/edited.ckpt
  metaedit "$tmp/ck/last.ckpt" "$bad" "$2" ${4:+"$4"} \
    || { echo "FAIL $1: cannot edit the checkpoint"; fails=$((fails + 1)); return; }
  NO_EPOCH=1 expect_error "$1" "$bad: $3" timeout -k 5 20 "$train" "${common[@]}" --epochs 2 \
    --resume "$bad" --checkpoint-dir "$tmp/out_dir"
}
reads="this train reads hvd-train-checkpoint-1 to hvd-train-checkpoint-2"
refused "format 3" hvd-train-checkpoint-3 "checkpoint format hvd-train-checkpoint-3, $reads (a newer train wrote it"
refused "format 0" hvd-train-checkpoint-0 "checkpoint format hvd-train-checkpoint-0, $reads"
refused "format 2x" hvd-train-checkpoint-2x "checkpoint format hvd-train-checkpoint-2x, $reads"
refused "format of another program" other-format-2 "checkpoint format other-format-2, $reads"
refused "no format field" - "no format field in the checkpoint's metadata (this train reads hvd-train-checkpoint-1 to hvd-train-checkpoint-2)"
refused "format 1 with format 2's state" hvd-train-checkpoint-1 "section state has 144 bytes, model mlp needs 96 (checkpoint format 1)"

# --resume auto over a directory whose one checkpoint is of format 3: refused, untouched.
mkdir -p "$tmp/auto"
metaedit "$tmp/ck/last.ckpt" "$tmp/auto/last.ckpt" hvd-train-checkpoint-3
before_auto=$(snapshot auto) || exit 1
timeout -k 5 20 "$train" "${common[@]}" --epochs 2 --resume auto --checkpoint-dir "$tmp/auto" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 124 ] && ! grep -q '^Epoch' "$tmp/out" &&
   grep -q "^train: --resume auto: passing over $tmp/auto/last.ckpt: checkpoint format hvd-train-checkpoint-3, $reads" "$tmp/err" &&
   grep -q "^train: --resume auto: none of the checkpoints in $tmp/auto loads" "$tmp/err"; then
  echo "ok   --resume auto with only a format-3 checkpoint: exit $rc, $(head -n 1 "$tmp/err")"
else
  echo "FAIL --resume auto with only a format-3 checkpoint: exit $rc:"; cat "$tmp/err"; fails=$((fails + 1))
fi
[ "$before_auto" = "$(snapshot auto)" ] || { echo "FAIL --resume auto changed the format-3 checkpoint"; fails=$((fails + 1)); }

finish "checkpoint format cases pass" "$before" ck out_dir
