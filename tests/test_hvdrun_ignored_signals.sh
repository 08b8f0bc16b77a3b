#!/usr/bin/env bash
# A signal hvdrun was started with ignored stays ignored, in hvdrun and in the launcher it
# starts, as in any shell's child: `nohup hvdrun ...` (HUP) and a script's background
# `hvdrun ... &` (INT) must not lose the job to a logout or to a Ctrl-C meant for the
# foreground. With a fake mpirun (HVD_MPIRUN) that records which signals it ignores and
# ends when told to (a file), hvdrun started with INT and HUP ignored gets SIGINT and
# SIGHUP: it and the launcher keep running, the launcher ignores both too, and hvdrun
# exits 0 when the launcher does. A caught signal still works (test_hvdrun_signals.sh).
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$PWD/$build/hvdrun
[ -x "$hvdrun" ] || { echo "FAIL: $hvdrun is not built (run make)"; exit 1; }
tmp=$(mktemp -d)
hp=
trap '[ -n "$hp" ] && kill -KILL "$hp" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

cat > "$tmp/fake-mpirun" <<EOS
#!/bin/bash
grep '^SigIgn:' /proc/\$\$/status > "$tmp/sigign"
echo \$\$ > "$tmp/launcher"
for i in \$(seq 600); do [ -e "$tmp/stop" ] && exit 0; sleep 0.1; done
exit 3
EOS
chmod +x "$tmp/fake-mpirun"
wait_file() { local i; for i in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }

# INT and HUP ignored from the start, as nohup and a non-interactive shell's & leave them.
bash -c 'trap "" INT HUP; exec "$@"' _ env HVD_MPIRUN="$tmp/fake-mpirun" \
  "$hvdrun" --mpi openmpi -np 1 /bin/true > "$tmp/out" 2>&1 &
hp=$!
wait_file "$tmp/launcher" || { fail "the fake launcher did not start"; cat "$tmp/out"; exit 1; }
lp=$(cat "$tmp/launcher")
kill -INT "$hp"; kill -HUP "$hp"
sleep 1
if kill -0 "$hp" 2>/dev/null && kill -0 "$lp" 2>/dev/null; then
  echo "ok   SIGINT and SIGHUP, ignored when hvdrun started: hvdrun and its launcher run on"
else
  fail "SIGINT/SIGHUP ended the job although hvdrun was started with them ignored: $(cat "$tmp/out")"
fi
# SigIgn is a hex mask: bit (n-1) for signal n; INT is 2 (0x2), HUP is 1 (0x1).
mask=$(awk '{print $2}' "$tmp/sigign")
if (( (16#$mask & 0x3) == 0x3 )); then
  echo "ok   the launcher ignores INT and HUP too (SigIgn $mask)"
else
  fail "the launcher does not ignore INT and HUP (SigIgn $mask): hvdrun gave it other actions"
fi
touch "$tmp/stop"
for i in $(seq 300); do kill -0 "$hp" 2>/dev/null || break; sleep 0.1; done
wait "$hp"; rc=$?; hp=
[ "$rc" -eq 0 ] && echo "ok   hvdrun exits 0 with its launcher" || fail "hvdrun exited $rc: $(cat "$tmp/out")"

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "hvdrun keeps the signals it was started with ignored"
