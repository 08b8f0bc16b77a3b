#!/usr/bin/env bash
# examples/hello_allreduce.c built the way a user outside the project builds it (the flags
# of build/hvd.pc through pkg-config), run on 2 ranks: both print the sum 1 + 2 = 3.
set -u
cd "$(dirname "$0")/.."
build=${HVD_BUILD:-build}
command -v pkg-config >/dev/null || { echo "SKIP: pkg-config is not installed"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: mpirun is not installed"; exit 77; }
[ -f "$build/hvd.pc" ] && [ -f "$build/libhvd.a" ] || { echo "SKIP: run make first"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=$(PKG_CONFIG_PATH=$build pkg-config --cflags --libs hvd) || { echo "FAIL: pkg-config hvd"; exit 1; }
echo "cc examples/hello_allreduce.c $flags"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror examples/hello_allreduce.c $flags -o "$tmp/hello" || { echo "FAIL: build"; exit 1; }
out=$(timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$tmp/hello" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: exit $rc"; exit 1; }
for r in 0 1; do
  grep -qx "rank $r of 2: sum of rank+1 = 3" <<<"$out" || { echo "FAIL: rank $r did not print the sum 3"; exit 1; }
done
# alone (no launcher): size 1, the sum is 1
out=$(timeout -k 5 30 "$tmp/hello" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] && grep -qx "rank 0 of 1: sum of rank+1 = 1" <<<"$out" || { echo "FAIL: run alone"; exit 1; }
echo PASS
