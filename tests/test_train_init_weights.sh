#!/usr/bin/env bash
# PyTorch -> train -> PyTorch: a model of python/hvd_models.py saved with safetensors
# (the official package when installed, else hvd_models' own writer), trained by train
# --init-weights with --lr 0 for one epoch on 2 ranks, exported, loaded back strictly:
#   lenet (no batch norm): every tensor of the export equals the input bit for bit;
#   resnet20: every parameter equals bit for bit; the batch-norm running statistics have
#     moved as PyTorch's model.train() moves them (they are not gradients: lr 0 does not
#     freeze them) and num_batches_tracked counts the epoch's batches; with --epochs 0 the
#     export equals the input entirely.
# With --resume auto the first start takes the file and a restart the checkpoint.
# And --init-weights refuses, with exit status 2, one "train:" line naming the file and
# the tensor, and nothing written (no --logdir, --checkpoint-dir or --export output): a
# missing tensor, an unexpected one, a wrong shape, a wrong dtype, a file that is not
# safetensors (text, a torch.save pickle), a file that does not exist.
set -u
build=${HVD_BUILD:-build}
train=$build/train
[ -x "$train" ] || { echo "FAIL $train is not built (run make)"; exit 1; }
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null \
  || { echo "FAIL /usr/bin/python3 has no torch/numpy: run scripts/install-deps.sh (python3-torch)"; exit 1; }
tmp=$(mktemp -d /tmp/test_train_init_weights.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
fails=0
mpi2() { timeout -k 5 90 mpirun -np 2 --oversubscribe "$@"; }
common=(--dataset synthetic --synthetic-samples 128 --batch-size 16 --threads 1 --epochs 1)

# The PyTorch side: models at PyTorch's own initialisation (another seed than train's),
# and the broken files.
/usr/bin/python3 - "$tmp" <<'EOF' || { echo "FAIL writing the PyTorch files"; exit 1; }
import sys, torch
import hvd_models as h
d = sys.argv[1]
print("writing with", "the safetensors package" if h.SAFETENSORS_PACKAGE else "hvd_models' own writer")
torch.manual_seed(7)
for name in ("lenet", "resnet20"):
    m = h.get_model(name)
    if name == "resnet20":  # running statistics that are not the defaults, a counter that is not 0
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5); mod.running_var.uniform_(0.5, 2); mod.num_batches_tracked.fill_(9)
    h.save_file(m.state_dict(), f"{d}/{name}.safetensors")
sd = h.load_file(f"{d}/lenet.safetensors")
bad = {"missing": {k: v for k, v in sd.items() if k != "fc2.bias"},
       "unexpected": dict(sd, **{"fc3.weight": torch.zeros(10, 10)}),
       "shape": dict(sd, **{"fc2.weight": torch.zeros(5, 512)}),
       "dtype": dict(sd, **{"conv1.weight": sd["conv1.weight"].double()})}
for k, v in bad.items():
    h.save_file(v, f"{d}/{k}.safetensors")
torch.save(sd, f"{d}/pickle.pt")
open(f"{d}/text.safetensors", "w").write("conv1.weight: not weights\n")
EOF

# compare IN OUT MODEL MODE: MODE all (every tensor bit for bit) or params (parameters bit
# for bit; buffers changed; num_batches_tracked = IN's + BATCHES).
compare() {
  /usr/bin/python3 - "$@" <<'EOF'
import sys, torch
import hvd_models as h
src, dst, name, mode = sys.argv[1:5]
a, b = h.load_file(src), h.load_file(dst)
m = h.get_model(name)
m.load_state_dict(b, strict=True)  # train's export goes back into PyTorch strictly
params = {k for k, _ in m.named_parameters()}
bad = [k for k in a if (mode == "all" or k in params) and not torch.equal(a[k], b[k])]
if sorted(a) != sorted(b) or bad:
    sys.exit(f"FAIL {name}: {len(bad)} tensor(s) differ from the input, first {bad[:1]}")
msg = f"ok   {name}: {len(params) if mode != 'all' else len(a)} tensors bit for bit"
if mode != "all":
    batches = int(mode)
    moved = [k for k in a if k.endswith("running_mean") or k.endswith("running_var")]
    still = [k for k in moved if torch.equal(a[k], b[k])]
    counts = {int(b[k]) - int(a[k]) for k in a if k.endswith("num_batches_tracked")}
    if still or counts != {batches}:
        sys.exit(f"FAIL {name}: running statistics unchanged {still[:1]}, counters moved by {counts}, expected {batches}")
    msg += f"; {len(moved)} running statistics moved, num_batches_tracked +{batches}"
print(msg)
EOF
}

run_ok() {   # LOG CMD...
  local log=$1
  shift
  "$@" >"$tmp/$log" 2>&1 || { echo "FAIL $*:"; cat "$tmp/$log"; fails=$((fails + 1)); return 1; }
}
run_ok lenet.log mpi2 "$train" --model lenet "${common[@]}" --lr 0 \
  --init-weights "$tmp/lenet.safetensors" --export "$tmp/lenet.out.safetensors" \
  && { compare "$tmp/lenet.safetensors" "$tmp/lenet.out.safetensors" lenet all || fails=$((fails + 1)); }
run_ok r20.log mpi2 "$train" --model resnet20 "${common[@]}" --lr 0 --optimizer adam \
  --init-weights "$tmp/resnet20.safetensors" --export "$tmp/resnet20.out.safetensors" \
  && { batches=$(sed -n 's/.*, \([0-9]*\) steps per epoch.*/\1/p' "$tmp/r20.log")
       compare "$tmp/resnet20.safetensors" "$tmp/resnet20.out.safetensors" resnet20 "${batches:-?}" \
         || fails=$((fails + 1)); }
run_ok r20e0.log "$train" --model resnet20 "${common[@]}" --epochs 0 --max-test 16 \
  --init-weights "$tmp/resnet20.safetensors" --export "$tmp/resnet20.e0.safetensors" \
  && { compare "$tmp/resnet20.safetensors" "$tmp/resnet20.e0.safetensors" resnet20 all || fails=$((fails + 1)); }

# With --resume auto: the first start (no checkpoint yet) takes the file, a restart the
# checkpoint, and each says which.
auto=(--model lenet "${common[@]}" --lr 0 --init-weights "$tmp/lenet.safetensors" --resume auto
      --checkpoint-dir "$tmp/auto")
if run_ok auto1.log "$train" "${auto[@]}" --export "$tmp/auto1.safetensors" \
   && run_ok auto2.log "$train" "${auto[@]}" --epochs 2; then
  if grep -q "no checkpoint in $tmp/auto, starting from --init-weights $tmp/lenet.safetensors" "$tmp/auto1.log" \
     && cmp -s "$tmp/lenet.out.safetensors" "$tmp/auto1.safetensors" \
     && grep -q "resuming $tmp/auto/.*: its weights, not --init-weights" "$tmp/auto2.log"; then
    echo "ok   --resume auto: the first start takes --init-weights, the restart the checkpoint"
  else
    echo "FAIL --resume auto with --init-weights:"; grep -h '^train' "$tmp/auto1.log" "$tmp/auto2.log"
    fails=$((fails + 1))
  fi
fi

# refuse WHAT FILE NEEDLE [launcher]: exit 2, one "train:" line with the file and NEEDLE,
# no output directory created.
refuse() {
  local what=$1 file=$2 needle=$3
  shift 3
  rm -rf "$tmp/out"
  "$@" "$train" --model lenet "${common[@]}" --init-weights "$file" --logdir "$tmp/out/logs" \
    --checkpoint-dir "$tmp/out/ck" >"$tmp/refuse.out" 2>"$tmp/refuse.err"
  local rc=$? lines
  lines=$(grep -c '^train: ' "$tmp/refuse.err")
  if [ $rc -ne 2 ]; then
    echo "FAIL $what: exit status $rc, expected 2:"; cat "$tmp/refuse.err"; fails=$((fails + 1))
  elif [ "$lines" -ne 1 ] || ! grep '^train: ' "$tmp/refuse.err" | grep -qF -- "$file" \
       || ! grep '^train: ' "$tmp/refuse.err" | grep -qF -- "$needle"; then
    echo "FAIL $what: expected one line naming $file and '$needle':"; cat "$tmp/refuse.err"
    fails=$((fails + 1))
  elif [ -e "$tmp/out" ] || grep -q '^Epoch' "$tmp/refuse.out"; then
    echo "FAIL $what: trained or wrote something: $(ls -R "$tmp/out" 2>/dev/null | head -5)"; fails=$((fails + 1))
  else
    echo "ok   $what: $(grep '^train: ' "$tmp/refuse.err")"
  fi
}
refuse "missing tensor" "$tmp/missing.safetensors" 'tensor "fc2.bias" of model lenet is missing'
refuse "unexpected tensor" "$tmp/unexpected.safetensors" 'tensor "fc3.weight" is not part of model lenet'
refuse "wrong shape" "$tmp/shape.safetensors" 'tensor "fc2.weight" has shape [5, 512], model lenet expects [10, 512]'
refuse "wrong dtype" "$tmp/dtype.safetensors" 'tensor "conv1.weight" has dtype F64, expected F32'
refuse "a text file" "$tmp/text.safetensors" "not a safetensors file"
refuse "a torch.save pickle" "$tmp/pickle.pt" "not a safetensors file"
refuse "no such file" "$tmp/none.safetensors" "No such file"
refuse "wrong shape, 2 ranks" "$tmp/shape.safetensors" 'tensor "fc2.weight" has shape' mpi2

[ $fails -eq 0 ] && { echo "PyTorch -> train -> PyTorch round trip and --init-weights errors pass"; exit 0; }
echo "$fails case(s) failed"
exit 1
