# tests/train_resume_prelude.sh: sourced by test_train_resume.sh and
# test_train_resume_mid.sh. check_case runs one exact-resume case: an uninterrupted
# 2-rank run, the same run killed with SIGKILL at a chosen global step (rank 0 sends it
# itself: HVD_TRAIN_TEST_KILL_AT_STEP, so nothing depends on timing), and the resumed
# run, whose epoch lines and exported weights must equal the uninterrupted run's.
build=${HVD_BUILD:-build}
train=$build/train
if [ ! -x "$train" ]; then echo "skipped: $train is not built"; exit 77; fi
# The checkpoints go to memory (/dev/shm) when it has room: alexnet's are 456 MB each and
# rewritten every step (test_train_resume_mid.sh alone: 49 s with them on a disk, fsynced,
# 36 s in /dev/shm). What the test checks (the resumed run's figures and weights) is the
# same on either.
scratch=/tmp
if [ -d /dev/shm ] && [ -w /dev/shm ] &&
   [ "$(df -P -k /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')" -ge 4194304 ] 2>/dev/null; then
  scratch=/dev/shm
fi
tmp=$(mktemp -d "$scratch/test_train_resume.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi2() { timeout -k 5 120 mpirun -np 2 --oversubscribe "$@"; }

# Epoch lines without timings: "Epoch E/N loss ... - lr X".
epoch_lines() { grep '^Epoch' "$1" | sed 's/:.* - loss/ loss/; s/ - [0-9.]* img\/s.*//'; }

# check_case NAME KILL_STEP DONE_EPOCHS EPOCHS FLAGS...: kill at global step KILL_STEP,
# which lies inside epoch DONE_EPOCHS + 1 (1-based), of a run of EPOCHS epochs.
# With every=N (and at_step=S, the step of that epoch the last mid-epoch checkpoint
# holds) in the environment of the call: checkpoints every N steps, --resume auto.
check_case() {
  local name=$1 kill=$2 done=$3 epochs=$4
  shift 4
  local mid=() resume=(--resume "$tmp/$name/ck/last.ckpt") at="after epoch $done"
  if [ "${every:-0}" -gt 0 ]; then
    mid=(--checkpoint-every-steps "$every"); resume=(--resume auto)
    at="after epoch $done and step $at_step of epoch $((done + 1))"
  fi
  local d=$tmp/$name
  mkdir -p "$d"
  mpi2 "$train" "$@" --epochs "$epochs" --checkpoint-dir "$d/ck_full" --export "$d/full.safetensors" \
    >"$d/full.log" 2>&1 || { echo "FAIL $name: uninterrupted run:"; cat "$d/full.log"; exit 1; }
  HVD_TRAIN_TEST_KILL_AT_STEP=$kill mpi2 -x HVD_TRAIN_TEST_KILL_AT_STEP "$train" "$@" \
    --epochs "$epochs" --checkpoint-dir "$d/ck" "${mid[@]}" --export "$d/killed.safetensors" >"$d/killed.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
    echo "FAIL $name: the killed run exited with $rc"; cat "$d/killed.log"; exit 1
  fi
  [ -e "$d/killed.safetensors" ] && { echo "FAIL $name: the killed run finished"; exit 1; }
  grep -q "Epoch $done/$epochs" "$d/killed.log" || { echo "FAIL $name: epoch $done not finished before the kill"; cat "$d/killed.log"; exit 1; }
  grep -q "Epoch $((done + 1))/$epochs" "$d/killed.log" && { echo "FAIL $name: the kill came after epoch $((done + 1))"; exit 1; }
  ls "$d/ck" | grep -q tmp && { echo "FAIL $name: a temporary checkpoint file was left behind"; exit 1; }
  if [ ${#mid[@]} -eq 0 ]; then
    cmp "$d/ck/last.ckpt" "$d/ck/epoch-$(printf %03d "$done").ckpt" || { echo "FAIL $name: last.ckpt is not epoch $done's"; exit 1; }
  fi

  mpi2 "$train" "$@" --epochs "$epochs" --checkpoint-dir "$d/ck" "${mid[@]}" "${resume[@]}" \
    --export "$d/resumed.safetensors" >"$d/resumed.log" 2>&1 \
    || { echo "FAIL $name: resumed run:"; cat "$d/resumed.log"; exit 1; }
  grep -q "resuming .* $at\$" "$d/resumed.log" || { echo "FAIL $name: no 'resuming ... $at':"; cat "$d/resumed.log"; exit 1; }
  grep -q "Epoch $done/$epochs" "$d/resumed.log" && { echo "FAIL $name: the resumed run repeated an epoch"; exit 1; }
  if ! diff <(epoch_lines "$d/full.log" | tail -n $((epochs - done))) <(epoch_lines "$d/resumed.log"); then
    echo "FAIL $name: the resumed run's epoch lines differ from the uninterrupted run's"; exit 1
  fi
  if ! cmp "$d/full.safetensors" "$d/resumed.safetensors"; then
    echo "FAIL $name: resumed weights differ from the uninterrupted run"
    tail -n 4 "$d/full.log" "$d/resumed.log"
    exit 1
  fi
  local a b
  a=$(grep '^test accuracy' "$d/full.log"); b=$(grep '^test accuracy' "$d/resumed.log")
  [ "$a" = "$b" ] || { echo "FAIL $name: $a vs $b"; exit 1; }
  echo "$name: resumed run matches the uninterrupted one bit for bit ($a)"
}

