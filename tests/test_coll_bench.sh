#!/usr/bin/env bash
# build/allreduce_bench prints nccl-tests' all_reduce_perf format exactly (the '#'
# parameter and device lines, the column header, its units row, one row per size with
# the out-of-place and the in-place half, root -1, "# Out of bounds values : 0 OK" and
# "# Avg bus bandwidth" equal to the mean busbw of the rows) with #wrong = 0 in both
# halves for every backend, dtype and op it supports, np = 2 and 3; the default backend
# is the hvd runtime; -c 0 prints N/A; -g other than 1, avg on a backend without it and
# bad flags are refused with a message. That -c counts wrong elements when there are
# some is tests/test_coll_bench_check.c. No timing is judged here (speed goals live in
# scripts/compare_allreduce.sh).
set -u
cd "$(dirname "$0")/.."
bin=${HVD_BUILD:-build}/allreduce_bench
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
command -v mpirun >/dev/null || { echo "skip: mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# check_format FILE NP BACKEND DTYPE OP ROWS CHECKS (-c): strict parse of rank 0's stdout.
check_format() {
  /usr/bin/python3 - "$@" <<'PY'
import re, sys
path, np, backend, dtype, op, rows, checks = sys.argv[1:8]
np, rows, checks = int(np), int(rows), int(checks)
checked = checks > 0
lines = open(path).read().split("\n")
if lines and lines[-1] == "": lines.pop()
def fail(msg):
    print("FORMAT ERROR (%s): %s" % (" ".join(sys.argv[2:]), msg)); print("\n".join(lines)); sys.exit(1)
size_of = {"float": 4, "double": 8, "half": 2, "bfloat16": 2, "int8": 1, "uint8": 1,
           "int32": 4, "int64": 8}
i = 0
def expect(pattern, what):
    global i
    if i >= len(lines) or not re.fullmatch(pattern, lines[i]):
        fail("line %d is %r, expected %s" % (i + 1, lines[i] if i < len(lines) else None, what))
    i += 1
expect(r"# nThread 1 nGpus 1 minBytes \d+ maxBytes \d+ step: [\d.]+\(factor\) warmup iters: \d+ "
       r"iters: \d+ agg iters: 1 validation: %d graph: 0" % checks, "the parameter line")
expect(r"#", "'#'")
expect(r"# Using devices", "'# Using devices'")
for r in range(np):
    expect(r"#  Rank %2d Group  0 Pid +\d+ on +\S+ device cpu \[host memory\]" % r, "rank %d's device" % r)
expect(r"#", "'#'")
expect(r"# allreduce_bench: %d ranks, backend %s, .*" % (np, backend), "the backend line")
expect(r"#", "'#'")
header = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       "]
for h in header:
    if i >= len(lines) or lines[i] != h: fail("line %d is %r, expected %r" % (i + 1, lines[i] if i < len(lines) else None, h))
    i += 1
busbw = []
def time_ok(tok):
    # nccl-tests' time: %7.2f below 100 us, %7.1f below 10000, %7.0f above
    m = re.fullmatch(r"\d+(\.\d+)?", tok)
    if not m or float(tok) <= 0: return False
    decimals = len(m.group(1)) - 1 if m.group(1) else 0
    v = float(tok)
    return (decimals == 2 and v <= 100.0) or (decimals == 1 and 99.99 <= v <= 10000.0) or \
           (decimals == 0 and v >= 9999.5)
for k in range(rows):
    if i >= len(lines): fail("only %d rows, expected %d" % (k, rows))
    tok = lines[i].split()
    if len(tok) != 13: fail("row %r has %d columns, expected 13" % (lines[i], len(tok)))
    # Rebuilt with nccl-tests' printf formats, the row must come out the same, widths
    # included.
    try:
        rebuilt = "%12d  %12d  %8s  %6s  %6s" % (int(tok[0]), int(tok[1]), tok[2], tok[3], tok[4])
        for h in (5, 9):
            rebuilt += "  %7s  %6.2f  %6.2f  %5s" % (tok[h], float(tok[h + 1]), float(tok[h + 2]), tok[h + 3])
    except ValueError:
        fail("row %r: a number column does not parse" % lines[i])
    if rebuilt != lines[i]: fail("row %r is not in nccl-tests' widths: %r" % (lines[i], rebuilt))
    size, count, t, o = int(tok[0]), int(tok[1]), tok[2], tok[3]
    if t != dtype or o != op or size != count * size_of[dtype] or tok[4] != "-1":
        fail("row %r: expected type %s, redop %s, root -1, size = count x %d" % (lines[i], dtype, op, size_of[dtype]))
    for h in (5, 9):
        if not time_ok(tok[h]): fail("row %r: time %r not in nccl-tests' format" % (lines[i], tok[h]))
        if tok[h + 3] != ("0" if checked else "N/A"):
            fail("row %r: #wrong %r, expected %s" % (lines[i], tok[h + 3], "0" if checked else "N/A"))
    busbw += [float(tok[7]), float(tok[11])]
    i += 1
expect(r"# Out of bounds values : 0 OK", "'# Out of bounds values : 0 OK'")
if i >= len(lines): fail("no Avg bus bandwidth line")
m = re.fullmatch(r"# Avg bus bandwidth    : (\S+) ", lines[i])
if not m: fail("line %d is %r, expected '# Avg bus bandwidth    : X '" % (i + 1, lines[i]))
avg, mean = float(m.group(1)), sum(busbw) / len(busbw)
if abs(avg - mean) > 0.006: fail("Avg bus bandwidth %g is not the mean busbw of the rows, %g" % (avg, mean))
i += 1
expect(r"#", "the closing '#'")
if i != len(lines): fail("unexpected lines after the end: %r" % lines[i:])
PY
}

# run EXPECTED-ROWS NP BACKEND DTYPE OP CHECKS ARGS...
run() {
  local rows=$1 np=$2 backend=$3 dtype=$4 op=$5 checked=$6; shift 6
  timeout -k 5 60 mpirun -np "$np" "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: mpirun -np $np allreduce_bench $* exited $rc"; tail -n 15 "$tmp/out" "$tmp/err"; fail=1
  elif ! check_format "$tmp/out" "$np" "$backend" "$dtype" "$op" "$rows" "$checked"; then
    echo "FAIL: mpirun -np $np allreduce_bench $*"; fail=1
  fi
}
small=(-b 8 -e 512K -f 8 -n 2 -w 1)   # 8 B .. 256 KiB: 6 rows
for np in 2 3; do
  run 6 $np hvd float sum 1 "${small[@]}"                 # the default backend
  run 6 $np ring float sum 1 "${small[@]}" --backend ring --chunk 4K
  run 6 $np mpi float sum 1 "${small[@]}" --backend mpi
  run 6 $np sendrecv float sum 1 "${small[@]}" --backend sendrecv
done
# Every dtype and every op of the ring, one pair a run (the reductions are shared by
# all backends); then avg, the runtime's own op, on 3 ranks (a division by 3).
for pair in double:sum bfloat16:max int8:min uint8:prod int32:sum int64:max half:prod float:min; do
  d=${pair%:*} o=${pair#*:}
  run 2 2 ring $d $o 1 -b 64K -e 1M -f 16 -n 1 -w 0 -d $d -o $o --backend ring --chunk 16K
done
for pair in float:avg half:avg int32:avg int64:prod; do
  d=${pair%:*} o=${pair#*:}
  run 1 3 hvd $d $o 1 -b 64K -e 64K -n 1 -w 0 -d $d -o $o
done
run 1 3 hvd uint8 avg 2 -b 64K -e 64K -n 1 -w 0 -d uint8 -o avg -c 2
run 2 2 hvd float sum 0 -b 1K -e 16K -f 16 -n 1 -w 0 -c 0 -g 1   # no check: N/A

# Refused with one message naming the flag, before any work (one process, without
# mpirun: MPI's singleton start is quicker than mpirun's report of a failed job).
expect_error() {   # expect_error PATTERN ARGS...
  local pattern=$1; shift
  if out=$(timeout 30 "$bin" "$@" 2>&1); then
    echo "FAIL: allreduce_bench $* was accepted"; fail=1
  elif ! grep -q -- "^allreduce_bench: $pattern" <<<"$out"; then
    echo "FAIL: allreduce_bench $*: no message '$pattern': $out"; fail=1
  fi
}
expect_error "bad value 'notatype' for -d: expected one of float, " -d notatype
expect_error "-g 2: one device per process only .* mpirun -np N allreduce_bench" -g 2
expect_error "-g 0: one device per process" -g 0
expect_error "-o avg: --backend ring has no average" -o avg --backend ring
expect_error "-o avg: --backend mpi has no average" -o avg --backend mpi
expect_error "-b 1024 is larger than -e 8" -b 1K -e 8
exit $fail
