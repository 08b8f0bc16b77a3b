# tests/train_prelude.sh: sourced by the tests of train's failure paths
# (test_train_errors.sh, test_train_output_paths.sh, test_train_write_errors.sh).
# Sets build, train, tmp (a scratch folder removed at exit), fails=0, mpi2 (2 ranks under
# a time limit), and expect_error.
build=${HVD_BUILD:-build}
train=$build/train
[ -x "$train" ] || { echo "FAIL: $train is not built (run make)"; exit 1; }
tmp=$(mktemp -d "/tmp/$(basename "$0" .sh).XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fails=0
mpi2() { timeout -k 5 60 mpirun -np 2 --oversubscribe "$@"; }

# expect_error WHAT NEEDLE CMD...: a non-zero exit that is neither a timeout nor a signal,
# and exactly one "train:" line on stderr, containing NEEDLE. With NO_EPOCH=1 in the
# environment of the call: also no epoch trained (no "Epoch" line on stdout).
expect_error() {
  local what=$1 needle=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(grep -c '^train: ' "$tmp/err")
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then
    echo "FAIL $what: exit status $rc; stderr:"; cat "$tmp/err"; fails=$((fails + 1))
  elif [ "$lines" -ne 1 ]; then
    echo "FAIL $what: $lines 'train:' lines on stderr:"; cat "$tmp/err"; fails=$((fails + 1))
  elif [ "${NO_EPOCH:-0}" = 1 ] && grep -q '^Epoch' "$tmp/out"; then
    echo "FAIL $what: trained $(grep -c '^Epoch' "$tmp/out") epoch(s) before: $(grep '^train: ' "$tmp/err")"
    fails=$((fails + 1))
  elif ! grep '^train: ' "$tmp/err" | grep -qF -- "$needle"; then
    echo "FAIL $what: the message does not name '$needle':"; grep '^train: ' "$tmp/err"; fails=$((fails + 1))
  else
    echo "ok   $what: $(grep '^train: ' "$tmp/err")"
  fi
}

# snapshot DIR...: checksums of every file in the folders under $tmp (a file left over, a
# temporary one, changes it too); fails when a folder is missing or empty. Use as
# `before=$(snapshot DIR...) || exit 1`.
snapshot() {
  local d files=()
  for d in "$@"; do files+=("$tmp/$d"/*); done
  (cd "$tmp" && md5sum "${files[@]#"$tmp"/}") || { echo "FAIL snapshot of $* under $tmp" >&2; return 1; }
}

# finish WHAT BEFORE DIR...: fails when the folders' files differ from the snapshot BEFORE,
# then ends the test with its verdict (WHAT: "error cases pass", ...).
finish() {
  local what=$1 before=$2
  shift 2
  local after
  after=$(snapshot "$@")
  if [ -z "$before" ] || [ -z "$after" ]; then
    echo "FAIL no snapshot of $* to compare"; fails=$((fails + 1))
  elif [ "$before" != "$after" ]; then
    echo "FAIL existing files changed (or a temporary file was left):"
    diff <(echo "$before") <(echo "$after") | head -20
    fails=$((fails + 1))
  else
    echo "ok   existing files untouched: $*"
  fi
  [ $fails -eq 0 ] && echo "all $what" && exit 0
  echo "$fails case(s) failed"
  exit 1
}
