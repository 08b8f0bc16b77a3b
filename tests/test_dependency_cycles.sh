#!/usr/bin/env bash
# scripts/check_deps.sh on the tree: no call from one module into another that the module
# table forbids, no call cycle between modules, no forbidden #include (docs/architecture.md).
# Then the script itself, on small planted trees: a call cycle between nn and hvd, a
# forbidden call hvd -> nn, a forbidden include, a cycle between the files of one module,
# must each fail (exit 1) with a message naming the files; an allowed tree must pass; a
# build directory without objects is a usage error (exit 2).
set -u
cd "$(dirname "$0")/.." || exit 1
build=${HVD_BUILD:-build}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
command -v nm >/dev/null || { echo "FAIL: nm is not installed (binutils)"; exit 1; }
command -v cc >/dev/null || { echo "FAIL: cc is not installed"; exit 1; }
[ -d "$build/obj" ] || { echo "FAIL: $build/obj does not exist: run make first"; exit 1; }

# ---- the tree ----
echo "== scripts/check_deps.sh $build"
scripts/check_deps.sh "$build"
rc=$?
[ $rc -eq 0 ] || fail "the tree breaks the module rules (check_deps.sh exited $rc; the FAIL lines above say where)"

# ---- planted trees ----
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# plant NAME FILE=CODE...: sources under $tmp/NAME/src, objects under $tmp/NAME/build/obj
plant() {
  local t=$tmp/$1 spec f code; shift
  for spec in "$@"; do
    f=${spec%%=*}; code=${spec#*=}
    mkdir -p "$t/src/$(dirname "$f")"
    printf '%s\n' "$code" > "$t/src/$f"
    case "$f" in
      *.c) mkdir -p "$t/build/obj/$(dirname "$f")"
           cc -c "$t/src/$f" -o "$t/build/obj/${f%.c}.o" -I "$t/src" || fail "cc $f" ;;
    esac
  done
}
# expect NAME RC PATTERN...: check_deps.sh on the planted tree exits RC and prints each PATTERN
expect() {
  local name=$1 want=$2 out rc p; shift 2
  out=$(scripts/check_deps.sh --verbose --src "$tmp/$name/src" "$tmp/$name/build" 2>&1); rc=$?
  echo "== $name (exit $rc, expected $want)"; echo "$out" | sed 's/^/   /'
  [ $rc -eq "$want" ] || fail "$name: check_deps.sh exited $rc, expected $want"
  for p in "$@"; do grep -qE -- "$p" <<<"$out" || fail "$name: no line matching '$p'"; done
}
# absent NAME PATTERN WHY: check_deps.sh on the planted tree prints no line matching PATTERN
absent() {
  grep -qE -- "$2" <<<"$(scripts/check_deps.sh --src "$tmp/$1/src" "$tmp/$1/build" 2>&1)" &&
    fail "$1: $3"
}

# nn/a.c and hvd/b.c call each other: a cycle between modules, and hvd -> nn is forbidden.
plant cycle 'nn/a.c=int hvd_b(int); int nn_a(int x) { return x ? hvd_b(x - 1) : 0; }' \
            'hvd/b.c=int nn_a(int); int hvd_b(int x) { return x ? nn_a(x - 1) : 1; }'
expect cycle 1 '^FAIL: call cycle between modules .*hvd/b\.c.*nn/a\.c|^FAIL: call cycle between modules .*nn/a\.c.*hvd/b\.c' \
               '^FAIL: forbidden call hvd -> nn: hvd/b\.c calls nn/a\.c \(nn_a\)' \
               '^  nn/a\.c -> hvd/b\.c$'

# hvd/b.c calls nn/a.c, nothing calls back: a forbidden edge without a cycle.
plant edge 'nn/a.c=int nn_a(int x) { return x + 1; }' \
           'hvd/b.c=int nn_a(int); int hvd_b(int x) { return nn_a(x); }'
expect edge 1 '^FAIL: forbidden call hvd -> nn: hvd/b\.c calls nn/a\.c \(nn_a\); hvd may use only: collectives util'
absent edge 'call cycle' "a cycle reported where there is none"

# collectives/c.c includes nn/nn_x.h (a header-only dependency), no call at all.
plant include 'nn/nn_x.h=#define NN_X 1' \
              'collectives/c.c=#include "nn/nn_x.h"
int coll_c(void) { return NN_X; }'
expect include 1 '^FAIL: forbidden include collectives -> nn: collectives/c\.c includes "nn/nn_x\.h"'

# hvd/q.c -> hvd/b.c -> hvd/e.c -> hvd/q.c: a cycle between the files of one module (the
# one queue.c, background.c and execute.c used to form).
plant filecycle 'hvd/q.c=int hvd_b(int); int hvd_q(int x) { return x ? hvd_b(x - 1) : 0; }' \
                'hvd/b.c=int hvd_e(int); int hvd_b(int x) { return x ? hvd_e(x - 1) : 0; }' \
                'hvd/e.c=int hvd_q(int); int hvd_e(int x) { return x ? hvd_q(x - 1) : 0; }' \
                'hvd/leaf.c=int hvd_q(int); int hvd_leaf(int x) { return hvd_q(x); }'
expect filecycle 1 '^FAIL: call cycle between files of module hvd: hvd/b\.c -> hvd/e\.c -> hvd/q\.c -> hvd/b\.c  \(hvd/b\.c calls hvd_e\); files in the cycle: hvd/b\.c hvd/e\.c hvd/q\.c$'
absent filecycle '^FAIL: .*leaf' "hvd/leaf.c, which only calls into the cycle, is named as part of it"

# Allowed: nn/cuda -> nn -> util (a header), hvd -> collectives, a call between two files of
# one module (nn/model.c -> nn/model_cpu.c) that does not come back; a stale object is
# left out.
plant clean 'util/u.h=static inline int util_u(int x) { return x; }' \
            'nn/model.c=#include "util/u.h"
int nn_a2(int); int nn_a(int x) { return x ? nn_a2(util_u(x) - 1) : 0; }' \
            'nn/model_cpu.c=int nn_a2(int x) { return x - 1; }' \
            'nn/cuda/k.c=int nn_a(int); int nn_cuda_k(int x) { return nn_a(x); }' \
            'collectives/c.c=int coll_c(int x) { return x; }' \
            'hvd/b.c=int coll_c(int); int hvd_b(int x) { return coll_c(x); }' \
            'examples/old.c=int old(void) { return 0; }'
rm "$tmp/clean/src/examples/old.c"
expect clean 0 '^  nn/cuda/k\.c -> nn/model\.c$' '^  hvd/b\.c -> collectives/c\.c$' \
               'note: left out examples/old\.o' '^ok: '
out=$(scripts/check_deps.sh --quiet --src "$tmp/clean/src" "$tmp/clean/build" 2>&1)
[ -z "$out" ] || fail "clean --quiet printed: $out"

# No objects, and a bad option: exit 2.
mkdir -p "$tmp/empty/build/obj" "$tmp/empty/src"
scripts/check_deps.sh --src "$tmp/empty/src" "$tmp/empty/build" >/dev/null 2>&1
rc=$?; [ $rc -eq 2 ] || fail "no objects: exit $rc, expected 2"
scripts/check_deps.sh "$tmp/missing" >/dev/null 2>&1
rc=$?; [ $rc -eq 2 ] || fail "missing build directory: exit $rc, expected 2"
scripts/check_deps.sh --bogus >/dev/null 2>&1
rc=$?; [ $rc -eq 2 ] || fail "unknown option: exit $rc, expected 2"

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo PASS
