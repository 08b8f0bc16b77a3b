#!/usr/bin/env bash
# hvdrun inside a SLURM allocation (launcher/slurm.c), without a SLURM: the allocation's
# variables set by hand, hvdrun --dry-run prints the mpirun command it would run.
#   - SLURM_JOB_NODELIST host lists ('node[1-3,5]', 'a,b', 'ns[1-2]', zero-padded ranges,
#     several brackets) with SLURM_TASKS_PER_NODE ('2(x2),1') become -np and -H;
#   - SLURM_JOB_CPUS_PER_NODE stands in for a missing SLURM_TASKS_PER_NODE;
#   - -np and -H given on the command line win; no SLURM_JOB_ID: no allocation;
#   - malformed lists and counts are errors (exit 2) that name the variable and value.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
[ -x "$hvdrun" ] || { echo "FAIL: $hvdrun is not built (run make)"; exit 1; }
command -v mpirun >/dev/null || { echo "FAIL: mpirun is not installed"; exit 1; }
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(SLURM_[A-Z_]*\)=.*/\1/p')
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NODELIST TASKS [HVDRUN FLAGS...]: hvdrun --dry-run true in job 42 of that allocation
# ("-" leaves a variable unset); prints hvdrun's output, returns its status.
run() {
  local list=$1 tasks=$2
  shift 2
  local env=(SLURM_JOB_ID=42)
  [ "$list" != - ] && env+=("SLURM_JOB_NODELIST=$list")
  [ "$tasks" != - ] && env+=("SLURM_TASKS_PER_NODE=$tasks")
  env "${env[@]}" "$hvdrun" --dry-run "$@" true 2>&1
}

# expect NODELIST TASKS "-np N -H LIST" [FLAGS...]
expect() {
  local list=$1 tasks=$2 want=$3 out
  shift 3
  out=$(run "$list" "$tasks" "$@"); local rc=$?
  if [ $rc -ne 0 ] || ! grep -qE -- "mpirun .*$want( |$)" <<<"$out"; then
    fail "'$list' '$tasks' $*: want '$want' (exit 0), got (exit $rc): $out"
  else
    echo "ok   '$list' '$tasks' $*: $want"
  fi
}

# refuse NODELIST TASKS NEEDLE
refuse() {
  local out
  out=$(run "$1" "$2"); local rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$3" <<<"$out"; then
    fail "'$1' '$2': want exit 2 and a message with \"$3\", got (exit $rc): $out"
  else
    echo "ok   '$1' '$2' refused: $out"
  fi
}

expect 'node[1-3,5]' '2(x2),1,3' '-np 8 -H node1:2,node2:2,node3:1,node5:3'
expect 'a,b' '1,4' '-np 5 -H a:1,b:4'
expect 'ns[1-2]' '2(x2)' '-np 4 -H ns1:2,ns2:2'
expect 'gpu[01-02],cpu[8-10]' '8(x2),1(x3)' '-np 19 -H gpu01:8,gpu02:8,cpu8:1,cpu9:1,cpu10:1'
expect 'r[1-2]n[1-2]' '1(x4)' '-np 4 -H r1n1:1,r1n2:1,r2n1:1,r2n2:1'
expect 'node[007-009]' '3(x3)' '-np 9 -H node007:3,node008:3,node009:3'
# SLURM_JOB_CPUS_PER_NODE when SLURM_TASKS_PER_NODE is missing
out=$(env SLURM_JOB_ID=42 SLURM_JOB_NODELIST='c[1-2]' SLURM_JOB_CPUS_PER_NODE='4(x2)' \
      "$hvdrun" --dry-run true 2>&1)
grep -q -- "-np 8 -H c1:4,c2:4 " <<<"$out" && echo "ok   SLURM_JOB_CPUS_PER_NODE" \
  || fail "SLURM_JOB_CPUS_PER_NODE='4(x2)': want -np 8 -H c1:4,c2:4: $out"
# The command line wins.
# -np below the allocation's slots: the first hosts' slots in order (as Horovod places them).
expect 'node[1-2]' '2(x2)' '-np 3 -H node1:2,node2:1' -np 3
out=$(run 'node[1-2]' '2(x2)' -H x:1)
grep -q -- "-np 1 -H x:1 " <<<"$out" && echo "ok   -H wins" || fail "-H x:1 in an allocation: $out"
# Outside an allocation: no hosts.
out=$("$hvdrun" --dry-run -np 1 true 2>&1)
grep -q -- " -H " <<<"$out" && fail "no allocation, yet -H: $out" || echo "ok   no allocation"

refuse 'node[1-' '1' "SLURM_JOB_NODELIST='node[1-'"
refuse 'x[3-1]' '1' "not a SLURM host list"
refuse 'x[1,]' '1' "not a SLURM host list"
refuse 'a,,b' '1' "not a SLURM host list"
refuse 'n[1-2000000]' '1' "more than 1000000 hosts"
refuse 'n[1-2]' '2(x3)' "SLURM_TASKS_PER_NODE='2(x3)'"
refuse 'n[1-2]' '2(x' "expected one task count per host"
refuse 'n[1-2]' '0,1' "expected one task count per host"
refuse 'n[1-2]' - "neither SLURM_TASKS_PER_NODE nor SLURM_JOB_CPUS_PER_NODE"
# Fewer task counts than nodes (SLURM writes '2(x3)'; a plain '2' is a short list): the
# counts of the other nodes would be made up.
refuse 'n[1-3]' '2' "SLURM_TASKS_PER_NODE='2' (SLURM allocation) gives task counts for 1 of the 3 hosts of SLURM_JOB_NODELIST='n[1-3]': expected one per host, such as '2(x3)'"
refuse 'n[1-3]' '2,1' "gives task counts for 2 of the 3 hosts"
refuse 'n[1-4]' '1(x3)' "gives task counts for 3 of the 4 hosts"
# A host name beginning with '-' would reach ssh as an option.
refuse '-np,n1' '1(x2)' "host '-np' cannot be passed to the MPI launcher"

echo "$failures failures"
[ "$failures" -eq 0 ]
