#!/usr/bin/env bash
# build/allreduce_bench prints the nccl-tests columns with #wrong = 0 for every backend,
# dtype and op it supports, np = 2 and 3, and exits non-zero on bad flags. No timing
# is judged here (speed goals live in scripts/compare_allreduce.sh).
set -u
cd "$(dirname "$0")/.."
bin=${HVD_BUILD:-build}/allreduce_bench
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
command -v mpirun >/dev/null || { echo "skip: mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
fail=0
check() { # expected-rows np args...
  local rows=$1 np=$2; shift 2
  local out
  out=$(timeout -k 5 60 mpirun -np "$np" "$bin" "$@" 2>&1)
  local rc=$?
  local got bad hdr
  got=$(awk '$1 ~ /^[0-9]+$/ && NF == 8' <<<"$out" | wc -l)
  bad=$(awk '$1 ~ /^[0-9]+$/ && NF == 8 && $8 != 0' <<<"$out" | wc -l)
  hdr=$(grep -c '^#       size         count      type   redop     time   algbw   busbw  #wrong$' <<<"$out")
  if [ $rc -ne 0 ] || [ "$got" -ne "$rows" ] || [ "$bad" -ne 0 ] || [ "$hdr" -ne 1 ]; then
    echo "FAIL: np=$np $* -> exit $rc, $got rows (want $rows), $bad with #wrong > 0, header $hdr"
    echo "$out" | tail -15
    fail=1
  fi
}
for np in 2 3; do
  check 6 $np -b 8 -e 512K -f 8 -n 2 -w 1 --backend ring
  check 6 $np -b 8 -e 512K -f 8 -n 2 -w 1 --backend ring --inplace --chunk 4K
  check 6 $np -b 8 -e 512K -f 8 -n 2 -w 1 --backend mpi
  check 6 $np -b 8 -e 512K -f 8 -n 2 -w 1 --backend sendrecv
done
for d in double bfloat16 int8 uint8 int32 int64; do
  check 2 2 -b 64K -e 1M -f 16 -n 1 -w 0 -d $d --chunk 16K
done
for d in float half; do
  for o in sum prod min max; do
    check 2 2 -b 64K -e 1M -f 16 -n 1 -w 0 -d $d -o $o --chunk 16K
  done
done
# A bad flag is an error, not a silent default, with one message naming it.
if out=$(timeout 30 mpirun -np 1 "$bin" -d notatype 2>&1); then
  echo "FAIL: -d notatype was accepted"; fail=1
elif ! grep -q "^allreduce_bench: bad value 'notatype' for -d: expected one of float, " <<<"$out"; then
  echo "FAIL: -d notatype: no message naming it: $out"; fail=1
fi
exit $fail
