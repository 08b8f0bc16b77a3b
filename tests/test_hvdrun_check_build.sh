#!/usr/bin/env bash
# hvdrun --check-build: the compiled-in backends (MPI name and version as the installed
# mpirun reports them, GPU libraries marked present exactly in a CUDA build, OpenBLAS,
# hwloc) and the local topology, whose counts must equal hwloc-calc's and nproc's, and a
# placement of one rank per core that gives every rank its own cores. Whether the build
# under test has CUDA is read from $build/config.cuda (the Makefile's record); a CPU-only
# hvdrun (make CUDA=0, a few seconds: launcher/*.c only) is built here from the same
# sources, so "absent in a CPU build" is checked whatever kind of build is under test.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
if [ ! -x "$hvdrun" ]; then echo "SKIP: $hvdrun is not built (run make)"; exit 77; fi
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# gpu_libs OUTPUT WANT LABEL: the four GPU lines of --check-build OUTPUT say "[X] ...
# compiled in" (WANT=1) or "[ ] ... not compiled in" (WANT=0).
gpu_libs() {
  local lib
  for lib in CUDA cuDNN cuBLAS NCCL; do
    if [ "$2" = 1 ]; then
      grep -qE "^ +\[X\] $lib +compiled in$" <<<"$1" \
        || fail "$3: $lib not marked compiled in: $(grep -E " $lib " <<<"$1")"
    else
      grep -qE "^ +\[ \] $lib +not compiled in" <<<"$1" \
        || fail "$3: $lib not marked absent: $(grep -E " $lib " <<<"$1")"
    fi
  done
}
cpu=$(mktemp -d)
trap 'rm -rf "$cpu"' EXIT
# Not the caller's make flags: under `make test BUILD=...` they would redirect this build.
if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -j2 CUDA=0 BUILD="$cpu" "$cpu/hvdrun" \
    >"$cpu/make.log" 2>&1; then
  cpu_out=$("$cpu/hvdrun" --check-build 2>&1) || fail "CPU-only hvdrun --check-build exited $?"
  gpu_libs "$cpu_out" 0 "CPU-only build (make CUDA=0)"
else
  fail "make CUDA=0 BUILD=$cpu $cpu/hvdrun failed: $(tail -n 5 "$cpu/make.log")"
fi

out=$("$hvdrun" --check-build 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "--check-build exited $rc"
has() { grep -qE -- "$1" <<<"$out" || fail "--check-build output lacks /$1/"; }
has '^ +\[X\] MPI +'
if command -v mpirun >/dev/null && mpirun --version 2>&1 | grep -q "Open MPI"; then
  v=$(mpirun --version 2>&1 | sed -n 's/.*(Open MPI) \([0-9.]*\).*/\1/p' | head -n 1)
  has "\[X\] MPI +Open MPI $v "
  has "launcher: .*mpirun \(mpirun \(Open MPI\) $v\)"
fi
if [ -f "$build/config.cuda" ]; then
  with_cuda=0
  grep -q '^USE_CUDA=1$' "$build/config.cuda" && with_cuda=1
  gpu_libs "$out" "$with_cuda" "$hvdrun ($build/config.cuda: $(cat "$build/config.cuda"))"
else
  fail "$build/config.cuda is missing: cannot tell whether $hvdrun was built with CUDA"
fi
has '^ +\[X\] OpenBLAS +OpenBLAS [0-9]+\.[0-9]+'
has '^ +\[X\] hwloc +API [0-9]+\.[0-9]+\.[0-9]+'

count() { sed -n "s/^ *$1: \([0-9]*\)$/\1/p" <<<"$out"; }
cores=$(count cores); pus=$(count PUs)
if command -v hwloc-calc >/dev/null; then
  [ "$cores" = "$(hwloc-calc --number-of core all)" ] || fail "cores: $cores, hwloc-calc says $(hwloc-calc --number-of core all)"
  [ "$pus" = "$(hwloc-calc --number-of pu all)" ] || fail "PUs: $pus, hwloc-calc says $(hwloc-calc --number-of pu all)"
  [ "$(count 'NUMA nodes')" = "$(hwloc-calc --number-of numa all)" ] || fail "NUMA nodes differ from hwloc-calc"
  [ "$(count packages)" = "$(hwloc-calc --number-of package all)" ] || fail "packages differ from hwloc-calc"
fi
[ "$pus" = "$(nproc)" ] || fail "PUs: $pus, nproc says $(nproc)"
[ "$(count GPUs)" = 0 ] || [ -e /dev/nvidia0 ] || ls /dev/dri/renderD* >/dev/null 2>&1 \
  || fail "GPUs: $(count GPUs) on a machine without GPU device nodes"

# One rank per core: every core to exactly one rank, in order.
place=$(grep -E '^ +local rank [0-9]+: ' <<<"$out")
[ "$(wc -l <<<"$place")" = "$cores" ] || fail "expected $cores placement lines: $place"
if [ "$(count GPUs)" = 0 ]; then
  want=$(for ((r = 0; r < cores; r++)); do echo "local rank $r: cores $r"; done)
  got=$(sed 's/^ *//; s/, PUs.*//' <<<"$place")
  [ "$got" = "$want" ] || fail "placement one rank per core:
$got
expected
$want"
fi
# More ranks than cores share cores round robin; fewer get blocks.
out=$("$hvdrun" --check-build -np $((cores * 2)))
last=$(grep -E "^ +local rank $((cores * 2 - 1)): " <<<"$out")
[[ "$last" == *"cores $((cores - 1)),"* ]] || fail "rank $((cores * 2 - 1)) of $((cores * 2)): '$last'"
out=$("$hvdrun" --check-build -np 1)
only=$(grep -E "^ +local rank 0: " <<<"$out")
if [ "$cores" -gt 1 ]; then
  [[ "$only" == *"cores 0-$((cores - 1)),"* ]] || fail "one rank should get every core: '$only'"
fi

echo "$failures failures"
[ "$failures" -eq 0 ]
