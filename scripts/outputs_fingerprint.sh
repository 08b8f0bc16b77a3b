#!/usr/bin/env bash
# scripts/outputs_fingerprint.sh: what train and cnn_bench write on fixed seeds, with the
# times masked, for checking that a refactor changed nothing a user gets: run it on the
# build before and the build after, then `diff -r BEFORE AFTER`.
#   usage: scripts/outputs_fingerprint.sh BUILD_DIR OUT_DIR   (OUT_DIR is emptied first)
# Ten runs (about a minute on 2 cores): train lenet on 1 rank with checkpoints, --logdir
# and --export, then resumed; mlp on 2 ranks (validation split, restore-best, mid-epoch
# checkpoints, accumulation); resnet20 on 2 ranks, resumed on 3; resnet20 killed
# mid-epoch on 2 ranks and resumed on 2 (each rank's own batch-norm statistics) with
# per-batch TensorBoard scalars; a failing --resume; cnn_bench on synthetic and real data.
# Kept: stdout and stderr with durations and rates masked and OUT_DIR's path replaced,
# every checkpoint's metadata and sections (sha256; the state section's values, its two
# times masked), the exports' sha256, log.csv without its time columns, the event
# files' scalars (tests/tfevents_reader.py) without the throughput.
set -u
[ $# -eq 2 ] || { sed -n '5p' "$0" | sed 's/^#   //' >&2; exit 2; }
cd "$(dirname "$0")/.." || exit 2
B=$1; O=$2
[ -x "$B/train" ] && [ -x "$B/cnn_bench" ] || { echo "outputs_fingerprint: $B/train or $B/cnn_bench is not built (make)" >&2; exit 2; }
rm -rf "$O"; mkdir -p "$O"; O=$(cd "$O" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ompi_tmp=$(mktemp -d)
trap 'rm -rf "$ompi_tmp"' EXIT
export OMPI_MCA_orte_tmpdir_base=$ompi_tmp OMPI_MCA_ess_singleton_isolated=1
mask() { sed -E 's/[0-9.]+ ?(s|ms|us|img\/s|images\/sec|MiB)\b/T\1/g; s/(images\/sec|Img\/sec|images\/sec:|per rank,|total|in flight|waited for|overlapped|jitter =|\+\/-|hidden:|of) [0-9.]+/\1 N/g; s/[0-9.]+% (overlapped|\()/P\1/g'; }
run() { # NAME CMD...
  local n=$1; shift
  "$@" > "$O/$n.out" 2> "$O/$n.err"; echo "rc=$?" >> "$O/$n.out"
  mask < "$O/$n.out" > "$O/$n.stdout"; mask < "$O/$n.err" > "$O/$n.stderr"; rm "$O/$n.out" "$O/$n.err"
}
T="$B/train --threads 1 --dataset fashion-mnist --max-train 1536 --max-test 256 --seed 11"
run t1 $T --model lenet --epochs 2 --optimizer adam --checkpoint-dir "$O/ck1" --logdir "$O/tb1" --export "$O/e1.safetensors"
run t1r $T --model lenet --epochs 3 --optimizer adam --checkpoint-dir "$O/ck1" --resume auto --export "$O/e1r.safetensors"
run t2 timeout 300 mpirun -np 2 $T --model mlp --epochs 2 --validation-split 0.1 --restore-best-weights --checkpoint-dir "$O/ck2" --checkpoint-every-steps 3 --batches-per-allreduce 2 --monitor val_accuracy --export "$O/e2.safetensors"
run t3 timeout 300 mpirun -np 2 $T --model resnet20 --max-train 256 --max-test 64 --epochs 1 --batch-size 16 --lr-schedule cosine --checkpoint-dir "$O/ck3" --checkpoint-every-steps 2
run t3r timeout 300 mpirun -np 3 $T --model resnet20 --max-train 256 --max-test 64 --epochs 2 --batch-size 16 --lr-schedule cosine --checkpoint-dir "$O/ck3" --resume auto --export "$O/e3.safetensors"
run t4 env HVD_TRAIN_TEST_KILL_AT_STEP=11 timeout 300 mpirun -np 2 -x HVD_TRAIN_TEST_KILL_AT_STEP $T --model resnet20 --max-train 256 --max-test 64 --epochs 2 --batch-size 16 --checkpoint-dir "$O/ck4" --checkpoint-every-steps 2 --logdir "$O/tb4" --tensorboard-update-freq 3
run t4r timeout 300 mpirun -np 2 $T --model resnet20 --max-train 256 --max-test 64 --epochs 2 --batch-size 16 --checkpoint-dir "$O/ck4" --checkpoint-every-steps 2 --resume auto --logdir "$O/tb4" --tensorboard-update-freq 3 --export "$O/e4.safetensors"
run terr $B/train --model lenet --epochs 1 --max-train 64 --resume /nonexistent.ckpt
run c1 timeout 300 mpirun -np 2 $B/cnn_bench --model lenet --batch_size 32 --num_batches 6 --num_warmup_batches 1 --display_every 1 --threads 1
run c2 timeout 300 mpirun -np 2 $B/cnn_bench --model resnet20 --batch_size 8 --num_batches 3 --num_warmup_batches 1 --display_every 1 --threads 1 --optimizer momentum --print_training_accuracy
run c3 timeout 300 mpirun -np 2 $B/cnn_bench --model lenet --batch_size 32 --num_batches 4 --num_warmup_batches 1 --display_every 1 --threads 1 --data_name fashion-mnist --forward_only
run c4 $B/cnn_bench --model lenet --batch_size 16 --num_batches 3 --num_warmup_batches 0 --threads 1 --variable_update none --optimizer adam
python3 - "$O" <<'PY'
import struct, sys, os, glob, hashlib
O = sys.argv[1]
def ck(path):
    b = open(path, 'rb').read()
    assert b[:8] == b'HVDCKPT1'
    p = 16; ml, = struct.unpack_from('<I', b, p); p += 4
    meta = b[p:p+ml].decode(); p += ml
    cnt, = struct.unpack_from('<I', b, p); p += 4
    out = ['meta ' + meta.replace('\n', ' | ')]
    for _ in range(cnt):
        nl, = struct.unpack_from('<H', b, p); p += 2
        name = b[p:p+nl].decode(); p += nl
        nb, = struct.unpack_from('<Q', b, p); p += 8
        data = b[p:p+nb]; p += nb
        if name == 'state':
            d = list(struct.unpack('<%dd' % (nb // 8), data))
            for i in (8, 17):   # train_seconds, epoch_seconds
                if i < len(d): d[i] = 'T'
            out.append('state %s' % d)
        else:
            out.append('%s %d %s' % (name, nb, hashlib.sha256(data).hexdigest()))
    return '\n'.join(out)
with open(os.path.join(O, 'checkpoints.txt'), 'w') as f:
    for path in sorted(glob.glob(os.path.join(O, 'ck*', '*.ckpt'))):
        f.write('== %s\n%s\n' % (os.path.relpath(path, O), ck(path)))
with open(os.path.join(O, 'exports.txt'), 'w') as f:
    for path in sorted(glob.glob(os.path.join(O, '*.safetensors'))):
        f.write('%s %s\n' % (os.path.basename(path), hashlib.sha256(open(path,'rb').read()).hexdigest()))
PY
for d in "$O"/tb*; do
  [ -d "$d" ] || continue
  cut -d, -f1-6 "$d/log.csv" > "$O/$(basename "$d").csv"
  for r in train validation; do
    f=$(ls "$d/$r"/*tfevents* 2>/dev/null | head -1)
    [ -n "$f" ] && python3 tests/tfevents_reader.py "$f" 2>&1 | grep -v -i 'wall\|images_per_sec' > "$O/$(basename "$d")_$r.txt"
  done
done
rm -rf "$O"/ck* "$O"/tb1 "$O"/tb4 "$O"/*.safetensors "$O"/tbls.txt
# The output folder's own path, and the event files' names (time, host, pid), masked.
for f in "$O"/*; do sed -i -E "s#$O#OUT#g; s#events.out.tfevents[^ ]*#EVENTS#" "$f"; done
echo "outputs_fingerprint: $(ls "$O" | wc -l) files in $O"
