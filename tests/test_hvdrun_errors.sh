#!/usr/bin/env bash
# Every error hvdrun reports before starting anything: the exit status is non-zero (2 for
# a bad command line or configuration, 127 for a missing program or launcher) and the
# message on stderr names the problem. Nothing here starts MPI.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
if [ ! -x "$hvdrun" ]; then echo "SKIP: $hvdrun is not built (run make)"; exit 77; fi
# The slot check honours this like mpirun does; the runner sets it for every test.
unset OMPI_MCA_rmaps_base_oversubscribe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect_error WANT_RC "expected message part" ARGS...
expect_error() {
  local want=$1 msg=$2
  shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: $* -> exit $rc, expected $want (stderr: $out)"; failures=$((failures + 1))
  elif [[ "$out" != *"$msg"* ]]; then
    echo "FAIL: $* -> stderr '$out' lacks '$msg'"; failures=$((failures + 1))
  elif [[ "$out" != "hvdrun: error: "* ]]; then
    echo "FAIL: $* -> stderr '$out' does not start with 'hvdrun: error: '"; failures=$((failures + 1))
  else
    echo "ok: $* -> $rc: $out"
  fi
}

# Unknown flags (before the program; after it they belong to the program), in the words of
# every program of the project (util/flags.h), with a guess when one is close.
expect_error 2 "unknown flag --bogus; see hvdrun --help; options for the program go after its name" \
  "$hvdrun" --bogus -np 1 /bin/true
expect_error 2 "unknown flag -q; see hvdrun --help" "$hvdrun" -np 1 -q /bin/true
expect_error 2 "unknown flag --verbos (did you mean --verbose?)" "$hvdrun" --verbos /bin/true
expect_error 2 "unknown flag -hostfil (did you mean -hostfile?)" "$hvdrun" -hostfil h /bin/true
expect_error 2 "no program to run" "$hvdrun" -np 2
expect_error 2 "-np needs a value" "$hvdrun" -np
expect_error 2 "bad value 'two' for -np: expected an integer in [1, 1000000]" "$hvdrun" -np two /bin/true
expect_error 2 "bad value '0' for -np: expected an integer in [1, 1000000]" "$hvdrun" -np 0 /bin/true
expect_error 2 "bad value 'loud' for --log-level: expected one of trace" "$hvdrun" --log-level loud /bin/true
expect_error 2 "bad value 'big' for --fusion-threshold-mb: expected a size in MiB" "$hvdrun" --fusion-threshold-mb big /bin/true
expect_error 2 "bad value '-1' for --cycle-time-ms: expected milliseconds" "$hvdrun" --cycle-time-ms -1 /bin/true
expect_error 2 "bad value '1.5' for --stall-check-shutdown-time-seconds: expected whole seconds" \
  "$hvdrun" --stall-check-shutdown-time-seconds 1.5 /bin/true
expect_error 2 "bad value '0' for --start-timeout: expected an integer in [1, 100000000]" "$hvdrun" --start-timeout 0 /bin/true
expect_error 2 "bad value 'yes' for --hierarchical-allreduce: expected true or false" \
  "$hvdrun" --hierarchical-allreduce=yes /bin/true
expect_error 2 "--mca needs 2 values (--mca KEY VALUE)" "$hvdrun" --mca btl
expect_error 2 "bad value 'lam' for --mpi: expected one of openmpi, mpich" "$hvdrun" --mpi lam /bin/true
expect_error 2 "bad value '1BAD' for -x: expected VAR or VAR=value" "$hvdrun" -x 1BAD /bin/true
unset HVD_TEST_SURELY_UNSET
expect_error 2 "-x HVD_TEST_SURELY_UNSET: HVD_TEST_SURELY_UNSET is not set" \
  "$hvdrun" -x HVD_TEST_SURELY_UNSET /bin/true
expect_error 2 "--mca orte_x: MCA parameters are OpenMPI's" \
  "$hvdrun" --mpi mpich --dry-run --mca orte_x 1 -np 1 /bin/true
expect_error 2 "-H 'a:2,b:x': malformed host 'b:x'" "$hvdrun" -H a:2,b:x /bin/true
expect_error 2 "-H 'a:0': malformed host 'a:0'" "$hvdrun" -H a:0 /bin/true
# A host name beginning with '-' would reach ssh as an option.
expect_error 2 "-H '-np:2': malformed host '-np:2': expected 'host' or 'host:slots' separated by commas, with slots a positive integer up to 1000000 and host names of at most 255 letters, digits, '-', '.', '_', not beginning with '-'" \
  "$hvdrun" -H -np:2 /bin/true
expect_error 2 "-H 'a:1,--mca:1': malformed host '--mca:1'" "$hvdrun" -H a:1,--mca:1 /bin/true

# More ranks than slots, unless --oversubscribe.
expect_error 2 "-np 5 is more than the 4 slots available (nodeA:2,nodeB:2)" \
  "$hvdrun" -np 5 -H nodeA:2,nodeB:2 /bin/true
cores=$("$hvdrun" --check-build | sed -n 's/^ *cores: //p')
expect_error 2 "-np $((cores + 1)) is more than the $cores slots available (this machine's cores)" \
  "$hvdrun" -np $((cores + 1)) /bin/true
if "$hvdrun" --dry-run --oversubscribe -np 5 -H nodeA:2,nodeB:2 /bin/true | grep -q -- '--oversubscribe'; then
  echo "ok: --oversubscribe lifts the slot limit"
else
  echo "FAIL: --oversubscribe -np 5 on 4 slots did not produce a command with --oversubscribe"
  failures=$((failures + 1))
fi

# Hostfiles: each malformed line is reported with its number.
printf '# cluster\nnodeA slots=2\n\n' > "$tmp/good_head"
bad_line() {   # bad_line "LINE" "expected message part"
  cp "$tmp/good_head" "$tmp/hosts"
  printf '%s\n' "$1" >> "$tmp/hosts"
  expect_error 2 "hostfile '$tmp/hosts' line 4: malformed entry '$2'" \
    "$hvdrun" --hostfile "$tmp/hosts" /bin/true
}
bad_line "nodeB slots=abc" "nodeB slots=abc"
bad_line "nodeB slots=0" "nodeB slots=0"
bad_line "nodeB:" "nodeB:"
bad_line "nodeB:2 slots=3" "nodeB:2 slots=3"
bad_line "nodeB cpus=4" "nodeB cpus=4"
bad_line "node/B" "node/B"
bad_line "nodeB slots" "nodeB slots"
bad_line "-np:2" "-np:2"
bad_line "--mca slots=1" "--mca slots=1"
# ... and so is a line of a discovery script's output, named by its number.
printf '#!/bin/sh\nprintf "a:1\\nb:2\\n-np:2\\n"\n' > "$tmp/discover2.sh"
chmod +x "$tmp/discover2.sh"
expect_error 1 "the output of --host-discovery-script '$tmp/discover2.sh' line 3: malformed entry '-np:2'" \
  env HVD_MPIRUN=/bin/true "$hvdrun" --mpi openmpi --host-discovery-script "$tmp/discover2.sh" /bin/true
expect_error 2 "cannot open hostfile '$tmp/none': No such file or directory" \
  "$hvdrun" --hostfile "$tmp/none" /bin/true
printf '# nothing\n\n' > "$tmp/empty"
expect_error 2 "hostfile '$tmp/empty' lists no hosts" "$hvdrun" --hostfile "$tmp/empty" /bin/true

# The program: missing, not executable, a directory, not on PATH.
expect_error 127 "program 'no-such-program-hvd' not found: not found on PATH" \
  "$hvdrun" -np 1 no-such-program-hvd
expect_error 127 "program '$tmp/missing' not found: no such file" "$hvdrun" -np 1 "$tmp/missing"
printf '#!/bin/sh\n' > "$tmp/noexec"; chmod -x "$tmp/noexec"
expect_error 127 "program '$tmp/noexec' not found: not executable" "$hvdrun" -np 1 "$tmp/noexec"
expect_error 127 "program '$tmp' not found: is a directory" "$hvdrun" -np 1 "$tmp"

# No MPI launcher: PATH without one (the program given by path still resolves).
mkdir "$tmp/emptybin"
expect_error 127 "no MPI launcher found: neither mpirun nor mpiexec is on PATH. Install one: apt-get install openmpi-bin" \
  env PATH="$tmp/emptybin" "$hvdrun" -np 1 /bin/true
expect_error 127 "MPI launcher '$tmp/nompirun' (from HVD_MPIRUN) not found" \
  env HVD_MPIRUN="$tmp/nompirun" "$hvdrun" -np 1 /bin/true

# --help is not an error.
if "$hvdrun" --help | grep -q "^usage: hvdrun"; then echo "ok: --help"; else
  echo "FAIL: --help does not print the usage"; failures=$((failures + 1)); fi

echo "$failures failures"
[ "$failures" -eq 0 ]
