#!/usr/bin/env bash
# hvdrun never outlives or orphans its children, with a fake
# mpirun (HVD_MPIRUN) and discovery scripts that ignore SIGTERM and start children of
# their own that ignore it too:
#  - SIGTERM to hvdrun while the launcher ignores it: hvdrun passes it on, then kills the
#    launcher's process group (SIGKILL) and exits 143; the launcher and its child are
#    gone, reaped by hvdrun (not left to PID 1, not even as zombies);
#  - SIGKILL to hvdrun: its guardian ends the launcher's group; nothing is left running;
#  - SIGTERM, then SIGKILL, to hvdrun while the discovery script runs: the same for the
#    script and what it started;
#  - a launcher that never answers --version (no --mpi given): SIGTERM to hvdrun ends
#    both; without a signal hvdrun gives up after 10 s, saying to pass --mpi;
#  - hvdrun's exit status is its launcher's (launcher/hvdrun.c): 0, 3, and 128+10 for a
#    launcher ended by SIGUSR1, so a failed job never reads as a success.
# Timeouts only catch hangs: each bound is many times the 5 s hvdrun allows a group.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$PWD/$build/hvdrun
if [ ! -x "$hvdrun" ]; then echo "SKIP: $hvdrun is not built (run make)"; exit 77; fi
tmp=$(mktemp -d)
pids=()   # every process the fakes started, killed at the end whatever happens
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
BOUND=30

# A process is alive unless gone or a zombie (nothing may reap orphans under PID 1 here).
alive() { ps -o stat= -p "$1" 2>/dev/null | grep -qv '^Z'; }
# exists PID: there at all, zombie or not.
exists() { ps -o pid= -p "$1" >/dev/null 2>&1; }
# wait_file FILE: until the fake has written it (its pids), at most BOUND s.
wait_file() {
  local i
  for ((i = 0; i < BOUND * 10; i++)); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}
# wait_gone PID...: until none is alive, at most BOUND s.
wait_gone() {
  local i p left
  for ((i = 0; i < BOUND * 10; i++)); do
    left=0
    for p in "$@"; do alive "$p" && left=1; done
    [ $left -eq 0 ] && return 0
    sleep 0.1
  done
  return 1
}
# wait_exit PID: hvdrun (a child of this shell) ended within BOUND s; its status in $status.
wait_exit() {
  local i
  for ((i = 0; i < BOUND * 10; i++)); do
    if ! kill -0 "$1" 2>/dev/null; then wait "$1"; status=$?; return 0; fi
    sleep 0.1
  done
  kill -KILL "$1" 2>/dev/null
  wait "$1"
  status=timeout
  return 1
}
record() { local f; for f in "$@"; do [ -s "$f" ] && pids+=("$(cat "$f")"); done; }

# The fake launcher: ignores TERM, INT and HUP (as its child does: an ignored signal is
# inherited), writes its pid and its child's, and waits.
cat >"$tmp/fake-mpirun" <<EOS
#!/bin/bash
trap '' TERM INT HUP
sleep 300 &
echo \$! >"$tmp/child.\$\$"
echo \$\$ >"$tmp/launcher"
wait
EOS
# The discovery script: the same, and it never answers.
cat >"$tmp/discover.sh" <<EOS
#!/bin/bash
trap '' TERM INT HUP
sleep 300 &
echo \$! >"$tmp/dchild"
sleep 300 &
echo \$! >"$tmp/dsleep"
echo \$\$ >"$tmp/dscript"
wait
echo localhost:1
EOS
echo localhost:1 >"$tmp/hosts"
chmod +x "$tmp/fake-mpirun" "$tmp/discover.sh"

# start_hvdrun WHAT HVDRUN_ARG...: hvdrun in the background with the fake launcher; waits
# for the launcher and its child. Sets hp, lp, cp (hvdrun's, the launcher's and its
# child's pids; all recorded); returns 1 (a failure said) if the launcher did not start.
start_hvdrun() {
  local what=$1
  shift
  rm -f "$tmp"/launcher "$tmp"/child.*
  HVD_MPIRUN=$tmp/fake-mpirun "$hvdrun" "$@" >"$tmp/out" 2>&1 &
  hp=$!
  pids+=("$hp")
  if ! wait_file "$tmp/launcher"; then fail "$what: the fake launcher did not start"; cat "$tmp/out"; return 1; fi
  lp=$(cat "$tmp/launcher")
  wait_file "$tmp/child.$lp"
  cp=$(cat "$tmp/child.$lp")
  pids+=("$lp" "$cp")
}

# launch_case SIGNAL: hvdrun -np 1 with the fake launcher, SIGNAL once the launcher runs.
launch_case() {
  local sig=$1 hp lp cp
  start_hvdrun "$sig" --mpi openmpi -np 1 /bin/true || return
  kill -"$sig" "$hp"
  wait_exit "$hp"
  if [ "$sig" = TERM ]; then
    if [ "$status" != 143 ]; then fail "TERM: hvdrun: exit $status, expected 143:"; cat "$tmp/out"
    elif ! grep -q "^hvdrun: error: the MPI launcher has not ended 5 s after signal 15 was passed on to it: killing its process group $lp (SIGKILL)$" "$tmp/out"
    then fail "TERM: hvdrun did not say that it killed the group:"; cat "$tmp/out"
    elif exists "$lp" || exists "$cp"
    then fail "TERM: hvdrun exited, its launcher ($lp) or the launcher's child ($cp) is still there:"; ps -o pid,ppid,stat,cmd -p "$lp,$cp"
    else echo "ok   TERM to hvdrun, launcher ignoring it: exit 143, launcher and child gone and reaped: $(grep '^hvdrun' "$tmp/out" | paste -sd' ')"; fi
  else
    if [ "$status" != 137 ]; then fail "KILL: hvdrun: exit $status, expected 137"
    elif ! wait_gone "$lp" "$cp"
    then fail "KILL: the launcher ($lp) or its child ($cp) runs on after hvdrun was killed:"; ps -o pid,ppid,stat,cmd -p "$lp,$cp"
    else echo "ok   KILL to hvdrun: its guardian ended the launcher and its child"; fi
  fi
}

# discovery_case SIGNAL: SIGNAL to hvdrun while the discovery script runs.
discovery_case() {
  local sig=$1
  rm -f "$tmp/dscript" "$tmp/dchild" "$tmp/dsleep" "$tmp/launcher"
  HVD_MPIRUN=$tmp/fake-mpirun "$hvdrun" --mpi openmpi --host-discovery-script "$tmp/discover.sh" \
    /bin/true >"$tmp/out" 2>&1 &
  local hp=$!
  pids+=("$hp")
  if ! wait_file "$tmp/dscript" || ! wait_file "$tmp/dchild"; then
    fail "discovery $sig: the script did not start"; cat "$tmp/out"; return
  fi
  local sp cp; sp=$(cat "$tmp/dscript"); cp=$(cat "$tmp/dchild")
  pids+=("$sp" "$cp" "$(cat "$tmp/dsleep")")
  kill -"$sig" "$hp"
  wait_exit "$hp"
  local want=$((128 + $(kill -l "$sig")))
  if [ "$status" != "$want" ]; then fail "discovery $sig: hvdrun: exit $status, expected $want:"; cat "$tmp/out"
  elif [ "$sig" = TERM ] && ! grep -q "^hvdrun: error: interrupted (signal 15) while --host-discovery-script '$tmp/discover.sh' ran: ended it and what it started; not starting$" "$tmp/out"
  then fail "discovery TERM: hvdrun did not say why it stopped:"; cat "$tmp/out"
  elif [ "$sig" = TERM ] && { exists "$sp" || exists "$cp"; }
  then fail "discovery TERM: hvdrun exited, the script ($sp) or its child ($cp) is still there:"; ps -o pid,ppid,stat,cmd -p "$sp,$cp"
  elif ! wait_gone "$sp" "$cp"
  then fail "discovery $sig: the script ($sp) or its child ($cp) runs on:"; ps -o pid,ppid,stat,cmd -p "$sp,$cp"
  elif [ -e "$tmp/launcher" ]; then fail "discovery $sig: the launcher was started all the same"
  else echo "ok   $sig to hvdrun during discovery: exit $status, the script and its child gone: $(grep '^hvdrun' "$tmp/out" | paste -sd' ')"; fi
}

# version_case: without --mpi, hvdrun asks the launcher for its --version; the fake one
# never answers. SIGTERM to hvdrun then ends it and the launcher; with no signal, hvdrun
# gives up after 10 s and says to pass --mpi.
version_case() {
  local hp lp cp
  start_hvdrun "--version" -np 1 /bin/true || return
  kill -TERM "$hp"
  wait_exit "$hp"
  if [ "$status" != 143 ]; then fail "--version, TERM: hvdrun: exit $status, expected 143:"; cat "$tmp/out"
  elif exists "$lp" || exists "$cp"
  then fail "--version, TERM: hvdrun exited, the launcher ($lp) or its child ($cp) is still there:"; ps -o pid,ppid,stat,cmd -p "$lp,$cp"
  else echo "ok   TERM to hvdrun while the launcher does not answer --version: exit 143, launcher and child gone"; fi

  rm -f "$tmp"/launcher "$tmp"/child.*
  HVD_MPIRUN=$tmp/fake-mpirun timeout -k 5 $BOUND "$hvdrun" -np 1 /bin/true >"$tmp/out" 2>&1
  status=$?
  lp=$(cat "$tmp/launcher" 2>/dev/null); cp=$(cat "$tmp/child.$lp" 2>/dev/null)
  pids+=($lp $cp)
  if [ "$status" != 2 ] || ! grep -qxF "hvdrun: error: cannot tell which MPI '$tmp/fake-mpirun' belongs to (its --version: no answer in 10 s); pass --mpi openmpi or --mpi mpich" "$tmp/out"
  then fail "--version never answered: exit $status, expected 2 and a message:"; cat "$tmp/out"
  elif [ -z "$lp" ] || exists "$lp" || exists "$cp"
  then fail "--version never answered: the launcher ('$lp') or its child ('$cp') is still there"
  else echo "ok   --version never answered: $(cat "$tmp/out")"; fi
}

# status_case WANT LAUNCHER_BODY: hvdrun -np 1 with a fake launcher that runs the body.
status_case() {
  local want=$1
  printf '#!/bin/bash\n%s\n' "$2" >"$tmp/status-mpirun"
  chmod +x "$tmp/status-mpirun"
  HVD_MPIRUN=$tmp/status-mpirun timeout -k 5 $BOUND "$hvdrun" --mpi openmpi -np 1 /bin/true \
    >"$tmp/out" 2>&1
  status=$?
  if [ "$status" != "$want" ]; then fail "a launcher that runs '$2': hvdrun exited $status, expected $want:"; cat "$tmp/out"
  else echo "ok   a launcher that runs '$2': hvdrun exits $status"; fi
}

status_case 0 'exit 0'
status_case 3 'exit 3'
status_case 138 'kill -USR1 $$'
launch_case TERM
launch_case KILL
discovery_case TERM
discovery_case KILL
version_case

echo "$failures failures"
[ "$failures" -eq 0 ]
