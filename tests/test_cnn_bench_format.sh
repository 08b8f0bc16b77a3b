#!/usr/bin/env bash
# cnn_bench prints exactly tf_cnn_benchmarks' format (docs/cnn_bench.md):
# the info block, "Step<TAB>Img/sec<TAB>total_loss" lines at steps 1, 2, 4, 6, the total
# between dashed lines and (horovod) the overlap line; the loss on the fixed synthetic
# batch goes down. Runs mpirun -np 2 with horovod and with none, and once alone; checks
# that bad flags fail with a message naming them.
set -u
build=${HVD_BUILD:-build}
bin=$build/cnn_bench
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
command -v mpirun >/dev/null || { echo "skip: mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check_output FILE NP VARIABLES: strict line-by-line parse of rank 0's stdout.
check_output() {
  /usr/bin/python3 - "$@" <<'PY'
import re, sys
path, np, variables = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = open(path).read().split("\n")
if lines and lines[-1] == "": lines.pop()
devices = "[" + ", ".join("'cpu:%d'" % r for r in range(np)) + "]"
LENET_PARAMS = 1663370   # torch_models.LeNet: sum(p.numel() for p in parameters())
want = ["Model:       lenet", "Dataset:     synthetic", "Mode:        training",
        "Batch size:  %d global" % (8 * np), "             8 per device",
        "Num batches: 6", "Devices:     " + devices, "Data format: NCHW",
        "Optimizer:   sgd", "Variables:   " + variables,
        "Parameters:  %d" % LENET_PARAMS, "==========", "Generating training model",
        "Running warm up", "Done warm up", "Step\tImg/sec\ttotal_loss"]
def fail(msg):
    print("FORMAT ERROR in %s: %s" % (path, msg)); print("\n".join(lines)); sys.exit(1)
if len(lines) < len(want): fail("only %d lines" % len(lines))
for i, w in enumerate(want):
    if lines[i] != w: fail("line %d is %r, expected %r" % (i + 1, lines[i], w))
step_re = re.compile(r"^(\d+)\timages/sec: (\d+\.\d) \+/- (\d+\.\d) \(jitter = (\d+\.\d)\)\t(\d+\.\d{3})$")
i = len(want); steps = []; losses = []
while i < len(lines) and step_re.match(lines[i]):
    m = step_re.match(lines[i]); steps.append(int(m.group(1))); losses.append(float(m.group(5)))
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
if variables == "horovod":
    comm_re = r"^communication hidden: \d+\.\d% \(not overlapped \d+\.\d ms of \d+\.\d ms per step\)$"
    if len(rest) != 1 or not re.match(comm_re, rest[0]): fail("overlap line %r" % rest)
elif rest: fail("unexpected lines after the total: %r" % rest)
if not losses[-1] < losses[0]:
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
run fp16 120 mpirun -np 2 "$bin" "${args[@]}" --fp16-allreduce --no-overlap --bucket_mb 1
check_output "$tmp/fp16.out" 2 horovod || exit 1
run alone 120 "$bin" "${args[@]}" --threads 1
check_output "$tmp/alone.out" 1 horovod || exit 1

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
timeout 10 "$bin" --help | grep -q -- "--variable_update" || { echo "FAIL: --help"; exit 1; }
echo "cnn_bench format OK"
