#!/usr/bin/env bash
# build/train started with different flags on different ranks (an MPMD command line,
# `mpirun -np 1 train --batch-size 16 : -np 1 train --batch-size 1500`): the ranks compare
# their shared settings right after hvd_init and every rank exits non-zero at once, before
# any training, with exactly one "train:" line (rank 0's) naming the flag and both values.
# (Before the check such a job started, then printed only stall warnings every 60 s,
# forever.) Also: the lowest rank that differs is named on 3 ranks; the same flags over
# data sets of other sizes (IDX files of another length on one "host") are refused the
# same way; flags that may differ per rank (--threads, --quiet) do not stop a run.
set -u
. "$(dirname "$0")/train_prelude.sh"
[ -x /usr/bin/python3 ] || { echo "FAIL /usr/bin/python3 is missing (it writes the IDX files)"; exit 1; }

common=(--model mlp --dataset synthetic --synthetic-samples 256 --epochs 1 --threads 1)
# mpmd ARGS...: mpirun under a time limit that only a hang reaches (the check takes a
# second or two; without it these jobs never end).
mpmd() { timeout -k 5 60 mpirun --oversubscribe "$@"; }

NO_EPOCH=1 expect_error "--batch-size 16 : --batch-size 1500" \
  "--batch-size differs between the ranks: 16 on rank 0, 1500 on rank 1" \
  mpmd -np 1 "$train" "${common[@]}" --batch-size 16 : -np 1 "$train" "${common[@]}" --batch-size 1500
NO_EPOCH=1 expect_error "--model mlp : --model lenet" \
  "--model differs between the ranks: mlp on rank 0, lenet on rank 1" \
  mpmd -np 1 "$train" "${common[@]}" : -np 1 "$train" "${common[@]}" --model lenet
NO_EPOCH=1 expect_error "--lr 0.01 : --lr 0.02 (as written, not 0.0199999996)" \
  "--lr differs between the ranks: 0.01 on rank 0, 0.02 on rank 1" \
  mpmd -np 1 "$train" "${common[@]}" --lr 0.01 : -np 1 "$train" "${common[@]}" --lr 0.02
NO_EPOCH=1 expect_error "3 ranks, the third with another --seed" \
  "--seed differs between the ranks: 1 on rank 0, 2 on rank 2" \
  mpmd -np 2 "$train" "${common[@]}" --seed 1 : -np 1 "$train" "${common[@]}" --seed 2
NO_EPOCH=1 expect_error "--checkpoint-every-steps on rank 1 only" \
  "--checkpoint-every-steps differs between the ranks: 0 on rank 0, 2 on rank 1" \
  mpmd -np 1 "$train" "${common[@]}" : -np 1 "$train" "${common[@]}" --checkpoint-every-steps 2 \
  --checkpoint-dir "$tmp/ck"
[ -e "$tmp/ck/last.ckpt" ] && { echo "FAIL a checkpoint was written before the ranks were compared"; fails=$((fails + 1)); }

# The same flags, other data: rank 1's IDX training files hold 300 images, rank 0's 320.
/usr/bin/python3 - "$tmp" <<'EOF' || { echo "FAIL writing the IDX files"; exit 1; }
import struct, sys
d = sys.argv[1]
def write(path, dims, data):
    with open(path, 'wb') as f:
        f.write(struct.pack('>BBBB', 0, 0, 8, len(dims)) + b''.join(struct.pack('>I', n) for n in dims) + data)
for name, n in (('a', 320), ('b', 300), ('test', 64)):
    write(f'{d}/{name}-images', (n, 28, 28), bytes((i * 7 + j) % 256 for i in range(n) for j in range(784)))
    write(f'{d}/{name}-labels', (n,), bytes(i % 10 for i in range(n)))
EOF
idx() { echo --dataset idx --train-images "$tmp/$1-images" --train-labels "$tmp/$1-labels" \
  --test-images "$tmp/test-images" --test-labels "$tmp/test-labels"; }
# shellcheck disable=SC2046
NO_EPOCH=1 expect_error "IDX training sets of 320 and 300 images" \
  "the training set's size differs between the ranks: 288 samples on rank 0, 270 samples on rank 1" \
  mpmd -np 1 "$train" --model mlp --epochs 1 --threads 1 $(idx a) : \
  -np 1 "$train" --model mlp --epochs 1 --threads 1 $(idx b)

# Flags that may differ per rank: the run goes ahead.
if mpmd -np 1 "$train" "${common[@]}" --threads 1 : -np 1 "$train" "${common[@]}" --threads 2 --quiet \
     >"$tmp/out" 2>"$tmp/err" && grep -q '^Epoch 1/1' "$tmp/out" && ! grep -q '^train: ' "$tmp/err"; then
  echo "ok   --threads 1 : --threads 2 --quiet trains"
else
  echo "FAIL --threads 1 : --threads 2 --quiet does not train:"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1))
fi

[ $fails -eq 0 ] && echo "all rank-agreement cases pass" && exit 0
echo "$fails case(s) failed"
exit 1
