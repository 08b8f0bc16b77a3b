#!/usr/bin/env bash
# cnn_bench prints exactly tf_cnn_benchmarks' format (docs/cnn_bench.md):
# the info block, "Step<TAB>Img/sec<TAB>total_loss" lines at steps 1, 2, 4, 6 (with
# "<TAB>top_1_accuracy<TAB>top_5_accuracy" in forward-only mode and with
# --print_training_accuracy), the total between dashed lines and (horovod, training)
# the overlap line; the loss on the fixed synthetic batch goes down under every
# optimizer (sgd, momentum, adam, rmsprop); --forward_only prints mode "forward only", a
# loss of 0 and no overlap line; --data_name fashion_mnist trains on the real data set.
# Runs mpirun -np 2 with horovod and with none, and alone; checks that bad flags
# (--num_gpus 2, --data_name imagenet, ...) fail with a message naming them.
set -u
build=${HVD_BUILD:-build}
bin=$build/cnn_bench
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
command -v mpirun >/dev/null || { echo "skip: mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check_output FILE NP VARIABLES [optimizer=sgd] [mode=training] [dataset=synthetic]
#              [accuracy=0]: strict line-by-line parse of rank 0's stdout.
check_output() {
  /usr/bin/python3 - "$@" <<'PY'
import re, sys
path, np, variables = sys.argv[1], int(sys.argv[2]), sys.argv[3]
opt = {"optimizer": "sgd", "mode": "training", "dataset": "synthetic", "accuracy": "0"}
for a in sys.argv[4:]:
    k, v = a.split("=", 1); opt[k] = v
accuracy = opt["accuracy"] == "1" or opt["mode"] == "forward only"
training = opt["mode"] == "training"
lines = open(path).read().split("\n")
if lines and lines[-1] == "": lines.pop()
devices = "[" + ", ".join("'cpu:%d'" % r for r in range(np)) + "]"
LENET_PARAMS = 1663370   # torch_models.LeNet: sum(p.numel() for p in parameters())
want = ["Model:       lenet", "Dataset:     " + opt["dataset"], "Mode:        " + opt["mode"],
        "Batch size:  %d global" % (8 * np), "             8 per device",
        "Num batches: 6", "Devices:     " + devices, "Data format: NCHW",
        "Optimizer:   " + opt["optimizer"], "Variables:   " + variables,
        "Parameters:  %d" % LENET_PARAMS, "==========", "Generating training model",
        "Running warm up", "Done warm up",
        "Step\tImg/sec\ttotal_loss" + ("\ttop_1_accuracy\ttop_5_accuracy" if accuracy else "")]
def fail(msg):
    print("FORMAT ERROR in %s: %s" % (path, msg)); print("\n".join(lines)); sys.exit(1)
if len(lines) < len(want): fail("only %d lines" % len(lines))
for i, w in enumerate(want):
    if lines[i] != w: fail("line %d is %r, expected %r" % (i + 1, lines[i], w))
step_re = re.compile(r"^(\d+)\timages/sec: (\d+\.\d) \+/- (\d+\.\d) \(jitter = (\d+\.\d)\)\t(\d+\.\d{3})"
                     + (r"\t([01]\.\d{3})\t([01]\.\d{3})" if accuracy else "") + "$")
i = len(want); steps = []; losses = []
while i < len(lines) and step_re.match(lines[i]):
    m = step_re.match(lines[i]); steps.append(int(m.group(1))); losses.append(float(m.group(5)))
    if accuracy:   # fractions of the batch of 8, top-1 within top-5
        top1, top5 = float(m.group(6)), float(m.group(7))
        if not (0 <= top1 <= top5 <= 1) or any(abs(a * 8 - round(a * 8)) > 0.005 for a in (top1, top5)):
            fail("accuracies %r are not k/8 with top_1 <= top_5" % lines[i])
    if float(m.group(2)) <= 0: fail("images/sec not positive: %r" % lines[i])
    if int(m.group(1)) == 1 and (m.group(3) != "0.0" or m.group(4) != "0.0"):
        fail("step 1 has one sample: +/- and jitter must be 0.0: %r" % lines[i])
    i += 1
if steps != [1, 2, 4, 6]: fail("step lines %r, expected [1, 2, 4, 6]" % steps)
dash = "-" * 64
rest = lines[i:]
if len(rest) < 3 or rest[0] != dash or rest[2] != dash: fail("total block %r" % rest)
if not re.match(r"^total images/sec: \d+\.\d\d$", rest[1]): fail("total line %r" % rest[1])
rest = rest[3:]
if variables == "horovod" and training:
    comm_re = r"^communication hidden: \d+\.\d% \(not overlapped \d+\.\d ms of \d+\.\d ms per step\)$"
    if len(rest) != 1 or not re.match(comm_re, rest[0]): fail("overlap line %r" % rest)
elif rest: fail("unexpected lines after the total: %r" % rest)
if not training:
    if any(l != 0 for l in losses): fail("forward-only prints a loss of 0.000: %r" % losses)
elif opt["dataset"] == "synthetic" and not losses[-1] < losses[0]:
    fail("loss did not go down on the fixed batch: %r" % losses)
print("%s: format OK, loss %s" % (path, " -> ".join("%.3f" % l for l in losses)))
PY
}

args=(--model lenet --batch_size 8 --num_batches 6 --display_every 2)
run() {   # run NAME TIMEOUT CMD...: stdout to $tmp/NAME.out, stderr to $tmp/NAME.err
  local name=$1 limit=$2; shift 2
  timeout -k 5 "$limit" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: $* exited $rc"; cat "$tmp/$name.out" "$tmp/$name.err"; exit 1
  fi
}
run hvd2 120 mpirun -np 2 "$bin" "${args[@]}"
check_output "$tmp/hvd2.out" 2 horovod || exit 1
run none2 120 mpirun -np 2 "$bin" "${args[@]}" --variable_update none
check_output "$tmp/none2.out" 2 none || exit 1
# barrier: the replicas of none, with an hvd_barrier after each of the 1 + 6 steps, besides
# the two around the timed steps (the timeline counts them).
run barrier2 120 env HVD_TIMELINE="$tmp/barrier.json" mpirun -np 2 "$bin" "${args[@]}" \
  --variable_update barrier --num_warmup_batches 1
check_output "$tmp/barrier2.out" 2 barrier || exit 1
/usr/bin/python3 - "$tmp/barrier.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
events = d["traceEvents"] if isinstance(d, dict) else d
n = sum(1 for e in events if e.get("name") == "BARRIER" and e.get("ph") == "X")
if n != 9:
    print("FAIL: --variable_update barrier: %d barriers in the timeline, expected 1 + 6 + 2" % n)
    sys.exit(1)
PY
run fp16 120 mpirun -np 2 "$bin" "${args[@]}" --fp16-allreduce --no-overlap --bucket_mb 1
check_output "$tmp/fp16.out" 2 horovod || exit 1
run alone 120 "$bin" "${args[@]}" --threads 1
check_output "$tmp/alone.out" 1 horovod || exit 1
# tf_cnn_benchmarks' other modes and flags.
run fwd 120 mpirun -np 2 "$bin" "${args[@]}" --forward_only --num_gpus 1
check_output "$tmp/fwd.out" 2 horovod "mode=forward only" optimizer=sgd || exit 1
run rmsprop 120 "$bin" "${args[@]}" --threads 1 --optimizer rmsprop --print_training_accuracy
check_output "$tmp/rmsprop.out" 1 horovod optimizer=rmsprop accuracy=1 || exit 1
run adam 120 "$bin" "${args[@]}" --threads 1 --optimizer adam --init_learning_rate 0.001
check_output "$tmp/adam.out" 1 horovod optimizer=adam || exit 1
run momentum 120 "$bin" "${args[@]}" --threads 1 --optimizer momentum
check_output "$tmp/momentum.out" 1 horovod optimizer=momentum || exit 1
# Each optimizer is its own update: from the same weights and batch (seeded, one thread),
# their first timed losses all differ (one mapped to another would repeat a loss).
/usr/bin/python3 - "$tmp" <<'PY' || exit 1
import re, sys
first = {}
for name in ("alone", "momentum", "rmsprop", "adam"):
    text = open("%s/%s.out" % (sys.argv[1], name)).read()
    first[name] = re.search(r"^1\timages/sec: .*?\t(\d+\.\d{3})", text, re.M).group(1)
if len(set(first.values())) != len(first):
    print("FAIL: optimizers sgd, momentum, rmsprop, adam gave the same first loss: %r" % first)
    sys.exit(1)
print("first losses per optimizer: %r" % first)
PY
# The real data set make run trains on (install-deps brings it).
fmnist=/usr/share/datasets/fashion-mnist
[ -f "$fmnist/train-images-idx3-ubyte.gz" ] || { echo "FAIL: $fmnist missing (scripts/install-deps.sh installs it)"; exit 1; }
run real 120 mpirun -np 2 "$bin" "${args[@]}" --data_name fashion_mnist --print_training_accuracy
check_output "$tmp/real.out" 2 horovod dataset=fashion_mnist accuracy=1 || exit 1

# Bad flags: non-zero exit and a one-line message naming the flag.
expect_error() {   # expect_error PATTERN ARGS...
  local pattern=$1; shift
  timeout -k 5 30 "$bin" "$@" >"$tmp/err.out" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] || ! grep -q -- "$pattern" "$tmp/err.out"; then
    echo "FAIL: cnn_bench $* exited $rc, expected an error matching '$pattern':"
    cat "$tmp/err.out"; exit 1
  fi
}
expect_error "CUDA" --device gpu
expect_error "--use_fp16" --use_fp16
expect_error "unknown flag --bogus; see cnn_bench --help" --bogus 1
expect_error "unknown flag --num_batch (did you mean --num_batches?)" --num_batch 3
expect_error "bad value 'nosuch' for --model: expected one of" --model nosuch
expect_error "--variable_update" --variable_update replicated
expect_error "--batch_size" --batch_size 0
expect_error "--data_format" --data_format NHWC
expect_error "--num_gpus 2: hvd drives one GPU per process" --num_gpus 2
expect_error "--num_gpus 0: hvd drives one GPU per process" --num_gpus 0
expect_error "--data_name imagenet needs --data_dir DIR" --data_name imagenet
expect_error "--data_name imagenet: opening the data: $tmp/none: neither TFRecords" --data_name imagenet --data_dir "$tmp/none"
expect_error "--data_name cifar10: .*: cannot open" --data_name cifar10 --data_dir "$tmp/none"
expect_error "--data_dir $tmp: give the data set too" --data_dir "$tmp"
expect_error "--optimizer rmsprop runs on the CPU only" --optimizer rmsprop --device gpu
expect_error "bad value 'adagrad' for --optimizer: expected one of momentum, sgd, rmsprop, adam" --optimizer adagrad
timeout 10 "$bin" --help | grep -q -- "--variable_update" || { echo "FAIL: --help"; exit 1; }
echo "cnn_bench format OK"
