#!/usr/bin/env bash
# train --freeze (transfer learning) on lenet, 2 ranks, synthetic data:
# - --freeze 'conv*' for one epoch: every tensor of the frozen layers (conv1, conv2) in the
#   export is bit-identical to the initial weights (an --epochs 0 export), every other one
#   changed;
# - the allreduced bytes per step drop by exactly the frozen gradients' bytes (the same run
#   without --freeze), as the summary's "frozen:" line says;
# - a resume of that run's checkpoint without --freeze keeps the frozen set (a warning
#   says so), and the frozen tensors still equal the initial ones after its epoch;
# - --unfreeze-at-epoch 1 --fine-tune-lr: the second epoch trains every layer (conv1 moves);
# - --init-weights with --init-skip 'fc2.*' and --num-classes 12: every other tensor from
#   the file, a fresh 12-class head; without --init-skip the file's 10-class head is refused;
# - refused with one line and exit 2: a frozen layer above a trainable one, a pattern
#   matching nothing, --unfreeze-at-epoch without --freeze.
set -u
. tests/train_prelude.sh
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
common=(--model lenet --dataset synthetic --synthetic-samples 128 --batch-size 16 --threads 1
        --max-test 32)

run() {  # NAME ARGS...: 2 ranks, stdout in $tmp/NAME.out
  local name=$1
  shift
  mpi2 "$train" "${common[@]}" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { echo "FAIL train $*:"; cat "$tmp/$name.out" "$tmp/$name.err"; exit 1; }
}
# compare A B FROZEN_GLOB [same|changed for the others]: tensors of A and B matching the
# glob must be equal, the others as the last word says.
compare() {
  /usr/bin/python3 - "$@" <<'PYEOF'
import fnmatch, sys, torch
from hvd_models import load_file
a, b, glob, others = load_file(sys.argv[1]), load_file(sys.argv[2]), sys.argv[3], sys.argv[4]
bad = []
for k in a:
    same = a[k].shape == b[k].shape and torch.equal(a[k], b[k])
    if fnmatch.fnmatch(k, glob) and not same: bad.append(k + " changed")
    if not fnmatch.fnmatch(k, glob) and same != (others == "same"): bad.append(k + (" unchanged" if same else " changed"))
if bad:
    sys.exit("FAIL %s vs %s: %s" % (sys.argv[1], sys.argv[2], ", ".join(bad)))
print("ok   %s vs %s: %s equal, the others %s" % (sys.argv[1].split("/")[-1], sys.argv[2].split("/")[-1], glob, others))
PYEOF
}
per_step() { sed -n 's/^gradient allreduce bytes per step: //p' "$tmp/$1.out"; }

run init --epochs 0 --export "$tmp/init.safetensors"
run frozen --epochs 1 --freeze 'conv*' --export "$tmp/frozen.safetensors" --checkpoint-dir "$tmp/ck"
compare "$tmp/init.safetensors" "$tmp/frozen.safetensors" 'conv*' changed || fails=$((fails + 1))
run full --epochs 1 --export "$tmp/full.safetensors"
frozen_bytes=$(sed -n 's/^frozen: .* kept; \([0-9]*\) gradient bytes per step not allreduced$/\1/p' "$tmp/frozen.out")
a=$(per_step frozen) b=$(per_step full)
if [ -z "$frozen_bytes" ] || [ -z "$a" ] || [ -z "$b" ] || [ $((b - a)) -ne "$frozen_bytes" ] ||
   [ "$frozen_bytes" -le 0 ]; then
  echo "FAIL bytes per step: $b without --freeze, $a with, frozen $frozen_bytes"; fails=$((fails + 1))
else
  echo "ok   allreduced bytes per step: $b without --freeze, $a with: $frozen_bytes fewer, the frozen gradients'"
fi

run resumed --epochs 2 --resume "$tmp/ck/last.ckpt" --export "$tmp/resumed.safetensors"
if ! grep -q "checkpoint's frozen layers" "$tmp/resumed.err" || ! grep -q '^frozen: ' "$tmp/resumed.out"; then
  echo "FAIL the resume did not keep the frozen set:"; cat "$tmp/resumed.err" "$tmp/resumed.out"; fails=$((fails + 1))
fi
compare "$tmp/init.safetensors" "$tmp/resumed.safetensors" 'conv*' changed || fails=$((fails + 1))

run phases --epochs 2 --freeze 'conv*' --unfreeze-at-epoch 1 --fine-tune-lr 0.002 \
  --export "$tmp/phases.safetensors"
grep -q '^train: epoch 2: unfroze 4 tensors' "$tmp/phases.out" ||
  { echo "FAIL no unfreezing line:"; cat "$tmp/phases.out"; fails=$((fails + 1)); }
compare "$tmp/init.safetensors" "$tmp/phases.safetensors" 'nothing' changed || fails=$((fails + 1))

run head --epochs 0 --init-weights "$tmp/frozen.safetensors" --init-skip 'fc2.*' --num-classes 12 \
  --export "$tmp/head.safetensors"
/usr/bin/python3 - "$tmp/frozen.safetensors" "$tmp/head.safetensors" <<'PYEOF' || fails=$((fails + 1))
import sys, torch
from hvd_models import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
bad = [k for k in a if not k.startswith("fc2.") and not torch.equal(a[k], b[k])]
if bad or list(b["fc2.weight"].shape) != [12, 512] or torch.equal(b["fc2.bias"][:10], a["fc2.bias"]):
    sys.exit("FAIL --init-skip: %s, fc2.weight %s" % (bad, list(b["fc2.weight"].shape)))
print("ok   --init-skip 'fc2.*' --num-classes 12: the base from the file, a fresh 12-class head")
PYEOF
NO_EPOCH=1 expect_error "a 10-class head into 12 classes" 'fc2.weight' \
  mpi2 "$train" "${common[@]}" --init-weights "$tmp/frozen.safetensors" --num-classes 12
NO_EPOCH=1 expect_error "a frozen layer above a trainable one" 'conv1' \
  mpi2 "$train" "${common[@]}" --freeze 'fc1.*'
NO_EPOCH=1 expect_error "a pattern matching nothing" "features.*" \
  mpi2 "$train" "${common[@]}" --freeze 'features.*'
NO_EPOCH=1 expect_error "--unfreeze-at-epoch without --freeze" '--freeze' \
  "$train" "${common[@]}" --unfreeze-at-epoch 1
[ $fails -eq 0 ] && echo "train --freeze: frozen layers kept, not sent, resumed frozen" || exit 1
