#!/usr/bin/env bash
# hvdrun's elastic restarts and its own bound on a launcher that does not end a failed
# job, on this machine (no namespaces):
#  - a discovery script whose answer changes (localhost:2, then localhost:1): train on 2
#    ranks with mid-epoch checkpoints is killed (SIGKILL of rank 0) in epoch 2, hvdrun
#    asks again and restarts on 1 rank, train --resume auto goes on from the last
#    checkpoint with the global batch kept; the run finishes with exit 0, at most 5 steps
#    lost, and the epoch it resumed in has the loss and val_loss of an uninterrupted
#    2-rank run within 1% (tests/elastic_compare.sh);
#  - a program that always fails: --reset-limit 1 gives 2 starts, then a non-zero exit
#    naming the limit;
#  - fewer slots than --min-np: no start, a non-zero exit naming both;
#  - elastic flags without --host-discovery-script: refused;
#  - a launcher that says a rank failed and then hangs (a fake mpirun): hvdrun ends it
#    (its whole process group) after --abort-timeout and exits non-zero, naming why.
set -u
. "$(dirname "$0")/train_prelude.sh"
hvdrun=$build/hvdrun
[ -x "$hvdrun" ] || { echo "FAIL: $hvdrun is not built (run make)"; exit 1; }
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }
. "$(dirname "$0")/elastic_compare.sh"

# The discovery script: counts its calls; the first answer is localhost:2, later ones
# what $tmp/hosts holds.
cat >"$tmp/discover.sh" <<EOS
#!/bin/sh
n=\$(cat "$tmp/calls" 2>/dev/null || echo 0); n=\$((n + 1)); echo \$n >"$tmp/calls"
if [ \$n -eq 1 ]; then echo localhost:2; else cat "$tmp/hosts"; fi
EOS
echo localhost:1 >"$tmp/hosts"
# The program: train, with rank 0 killed at global step 40 in the first start only.
cat >"$tmp/train_once.sh" <<EOS
#!/bin/sh
[ "\$(cat "$tmp/calls")" = 1 ] && export HVD_TRAIN_TEST_KILL_AT_STEP=40
exec "$PWD/$train" "\$@"
EOS
chmod +x "$tmp/discover.sh" "$tmp/train_once.sh"
common=(--model mlp --dataset synthetic --synthetic-samples 1024 --batch-size 16 --threads 1 --seed 7
        --lr 0.02 --lr-schedule cosine --epochs 3)

mpi2 "$train" "${common[@]}" >"$tmp/full.log" 2>&1 || { echo "FAIL uninterrupted run:"; cat "$tmp/full.log"; exit 1; }
start=$(date +%s.%N)
timeout -k 5 200 "$hvdrun" --host-discovery-script "$tmp/discover.sh" --min-np 1 --max-np 2 --reset-limit 2 \
  "$tmp/train_once.sh" "${common[@]}" --checkpoint-dir "$tmp/ck" --checkpoint-every-steps 5 --resume auto \
  >"$tmp/elastic.log" 2>&1
rc=$?
secs=$(echo "$(date +%s.%N) - $start" | bc)
if [ $rc -ne 0 ]; then bad "elastic run: exit $rc after ${secs}s:"; cat "$tmp/elastic.log"
else
  ok "elastic run finished with exit 0 in ${secs}s"
  for want in "hvdrun: elastic: starting 2 rank(s) on localhost:2 (from $tmp/discover.sh)" \
              "hvdrun: elastic: the job failed (exit status 137); asking $tmp/discover.sh for hosts again (restart 1 of 2)" \
              "hvdrun: elastic: restarting with 1 rank(s) on localhost:1 (from $tmp/discover.sh)" \
              "hvdrun: elastic: the job finished after 1 restart(s)" \
              "train: resuming on 1 rank(s), the checkpoint's run had 2: batch 32 per rank keeps the global batch 32 and the lr schedule (lr 0.02 x 2)"; do
    grep -qxF "$want" "$tmp/elastic.log" && ok "said: $want" || { bad "not said: $want"; cat "$tmp/elastic.log"; }
  done
  # 922 samples: 29 steps an epoch; killed before global step 40, the checkpoint of 40
  # steps is step 11 of epoch 2: nothing lost here, at most 5 (--checkpoint-every-steps).
  at=$(sed -n 's/^train: resuming .* after epoch \([0-9]*\) and step \([0-9]*\) of epoch .*/\1 \2/p' "$tmp/elastic.log")
  lost=$(echo "$at" | awk '{ print 40 - ($1 * 29 + $2) }')
  [ -n "$at" ] && [ "$lost" -ge 0 ] && [ "$lost" -le 5 ] && ok "$lost step(s) lost (resumed after epoch/step $at)" \
    || bad "steps lost: '$lost' (resumed at '$at')"
  elastic_compare "$tmp/full.log" "$tmp/elastic.log"
fi

# Always failing: 1 + 1 starts, then the limit.
echo localhost:1 >"$tmp/hosts"; echo 1 >"$tmp/calls"
timeout -k 5 60 "$hvdrun" --host-discovery-script "$tmp/discover.sh" --reset-limit 1 sh -c 'exit 3' \
  >"$tmp/fail.log" 2>&1
rc=$?
starts=$(grep -c "^hvdrun: elastic: .*rank(s) on localhost:1" "$tmp/fail.log")
if [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$starts" -eq 2 ] && \
   grep -q "^hvdrun: error: elastic: the job failed (exit status 3) and the 1 restart(s) of --reset-limit are used up$" "$tmp/fail.log"
then ok "reset limit: 2 starts, exit $rc: $(tail -n 1 "$tmp/fail.log")"
else bad "reset limit: exit $rc, $starts start(s):"; cat "$tmp/fail.log"; fi

# Too few slots for --min-np.
timeout -k 5 30 "$hvdrun" --host-discovery-script "$tmp/discover.sh" --min-np 2 /bin/true >"$tmp/few.log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q "^hvdrun: error: elastic: the hosts listed now (localhost:1) have 1 slot(s), fewer than --min-np 2: not starting$" "$tmp/few.log" \
  && ok "too few slots: exit $rc: $(cat "$tmp/few.log")" || { bad "too few slots: exit $rc:"; cat "$tmp/few.log"; }
"$hvdrun" --min-np 2 /bin/true >"$tmp/flags.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "give --host-discovery-script too" "$tmp/flags.log" \
  && ok "--min-np alone refused: $(cat "$tmp/flags.log")" || { bad "--min-np alone: exit $rc:"; cat "$tmp/flags.log"; }

# A launcher that reports a failed rank and hangs, with a child in its group that
# ignores SIGTERM.
cat >"$tmp/hung-mpirun" <<EOS
#!/bin/bash
trap '' TERM
sleep 300 &
echo \$! >"$tmp/hung-child"
echo "Primary job  terminated normally, but 1 process returned" >&2
echo "a non-zero exit code. Per user-direction, the job has been aborted." >&2
wait
EOS
chmod +x "$tmp/hung-mpirun"
# A process is alive unless gone or a zombie (nothing may reap orphans here).
alive() { ps -o stat= -p "$1" 2>/dev/null | grep -qv '^Z'; }
start=$(date +%s.%N)
HVD_MPIRUN=$tmp/hung-mpirun timeout -k 5 60 "$hvdrun" --mpi openmpi --abort-timeout 2 -np 1 /bin/true \
  >"$tmp/hung.log" 2>&1
rc=$?
secs=$(echo "$(date +%s.%N) - $start" | bc)
sleep 0.2
if [ $rc -ne 0 ] && [ $rc -lt 124 ] && awk -v s="$secs" 'BEGIN { exit !(s < 10) }' && \
   grep -q "^hvdrun: error: a rank failed 2 s ago and the MPI launcher has not ended the job (a host it cannot reach?): ending it (process group [0-9]*)$" "$tmp/hung.log" && \
   ! alive "$(cat "$tmp/hung-child")"
then ok "hung launcher ended after ${secs}s, exit $rc, its group gone: $(grep '^hvdrun' "$tmp/hung.log")"
else bad "hung launcher: exit $rc after ${secs}s:"; cat "$tmp/hung.log"; fi

[ $fails -eq 0 ] && echo "all elastic cases pass" && exit 0
echo "$fails case(s) failed"; exit 1
