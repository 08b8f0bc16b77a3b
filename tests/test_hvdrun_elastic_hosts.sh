#!/usr/bin/env bash
# What an elastic start passes to the launcher:
#  - a discovery script that lists more slots than --max-np: exactly --max-np ranks start
#    (localhost:3 with --max-np 2, through the real mpirun: 2 ranks, each writing a file);
#  - a discovery script that lists 5,000 hosts with --max-np 2: the launcher gets -np 2
#    and only the one host the 2 ranks need (a fake launcher records its arguments);
#  - the last host kept gets only the slots still needed (a:1,b:1,c:4 with --max-np 3).
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$PWD/$build/hvdrun
if [ ! -x "$hvdrun" ]; then echo "SKIP: $hvdrun is not built (run make)"; exit 77; fi
command -v mpirun >/dev/null || { echo "FAIL: mpirun is not installed"; exit 1; }
unset OMPI_MCA_rmaps_base_oversubscribe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# ---- more slots than --max-np: exactly --max-np ranks (the real mpirun) ----
printf '#!/bin/sh\necho localhost:3\n' >"$tmp/three.sh"
cat >"$tmp/rank.sh" <<EOS
#!/bin/sh
touch "$tmp/ranks/rank.\$OMPI_COMM_WORLD_RANK"
EOS
chmod +x "$tmp/three.sh" "$tmp/rank.sh"
mkdir "$tmp/ranks"
timeout -k 5 120 "$hvdrun" --host-discovery-script "$tmp/three.sh" --max-np 2 "$tmp/rank.sh" >"$tmp/out" 2>&1
rc=$?
got=$(ls "$tmp/ranks" | paste -sd' ')
if [ $rc -ne 0 ]; then fail "localhost:3 --max-np 2: exit $rc:"; cat "$tmp/out"
elif [ "$got" != "rank.0 rank.1" ]; then fail "localhost:3 --max-np 2: ranks started: '$got', expected 'rank.0 rank.1'"; cat "$tmp/out"
elif ! grep -qxF "hvdrun: elastic: starting 2 rank(s) on localhost:2 (from $tmp/three.sh, which lists 3 slot(s) on 1 host(s))" "$tmp/out"
then fail "localhost:3 --max-np 2: the start line is not as expected:"; cat "$tmp/out"
else echo "ok   localhost:3 --max-np 2: exactly 2 ranks started ($got): $(head -n 1 "$tmp/out")"; fi

# ---- 5,000 hosts, --max-np 2: one host reaches the launcher ----
cat >"$tmp/many.sh" <<'EOS'
#!/bin/sh
i=1
while [ $i -le 5000 ]; do echo "node$i:4"; i=$((i + 1)); done
EOS
cat >"$tmp/fake-mpirun" <<EOS
#!/bin/sh
printf '%s\n' "\$@" >"$tmp/args"
EOS
chmod +x "$tmp/many.sh" "$tmp/fake-mpirun"
# args_of: the launcher's arguments on one line.
args_of() { paste -sd' ' "$tmp/args"; }
HVD_MPIRUN=$tmp/fake-mpirun timeout -k 5 60 "$hvdrun" --mpi openmpi --host-discovery-script "$tmp/many.sh" \
  --max-np 2 /bin/true >"$tmp/out" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$tmp/args" ]; then fail "5000 hosts --max-np 2: exit $rc:"; cat "$tmp/out"
elif [[ "$(args_of)" != *" -np 2 -H node1:2 "* ]]; then fail "5000 hosts --max-np 2: the launcher got: $(args_of | cut -c1-300)"
elif ! grep -qxF "hvdrun: elastic: starting 2 rank(s) on node1:2 (from $tmp/many.sh, which lists 20000 slot(s) on 5000 host(s))" "$tmp/out"
then fail "5000 hosts --max-np 2: the start line is not as expected:"; cut -c1-300 "$tmp/out"
else echo "ok   5000 hosts --max-np 2: the launcher got $(args_of)"; fi

# ---- the last host kept gets only what is still needed ----
printf '#!/bin/sh\necho a:1\necho b:1\necho c:4\necho d:2\n' >"$tmp/four.sh"
chmod +x "$tmp/four.sh"
rm -f "$tmp/args"
HVD_MPIRUN=$tmp/fake-mpirun timeout -k 5 60 "$hvdrun" --mpi openmpi --host-discovery-script "$tmp/four.sh" \
  --max-np 3 /bin/true >"$tmp/out" 2>&1
rc=$?
if [ $rc -ne 0 ] || [[ "$(args_of)" != *" -np 3 -H a:1,b:1,c:1 "* ]]; then
  fail "a:1,b:1,c:4,d:2 --max-np 3: exit $rc, the launcher got: $(args_of)"; cat "$tmp/out"
else echo "ok   a:1,b:1,c:4,d:2 --max-np 3: the launcher got $(args_of)"; fi

echo "$failures failures"
[ "$failures" -eq 0 ]
