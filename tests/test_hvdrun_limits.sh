#!/usr/bin/env bash
# hvdrun has no size limits of its own on what it is given (issue 15, item 6): a host
# list of 300 long names reaches the launcher whole; long option values and paths are
# not cut; slot counts that add up past INT_MAX are an error or a correct total, never
# a wrapped number; a NUL byte in a hostfile is an error naming the file and line, and
# never ends the line early or hangs (/dev/zero). Only --dry-run: no MPI is started, and
# none needs to be installed (--mpi names the flavour, HVD_MPIRUN a stand-in launcher).
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
if [ ! -x "$hvdrun" ]; then echo "SKIP: $hvdrun is not built (run make)"; exit 77; fi
unset OMPI_MCA_rmaps_base_oversubscribe
export HVD_MPIRUN=/bin/true
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() { timeout -k 2 20 "$hvdrun" "$@"; }
dry() { run --dry-run --mpi openmpi "$@"; }
# arg_after FLAG: the argument after FLAG in the printed command on stdin.
arg_after() { awk -v f="$1" '{ for (i = 1; i < NF; i++) if ($i == f) { print $(i + 1); exit } }'; }
# expect_error "message part" ARGS...: a dry run exits 2 and one line "hvdrun: error: ...part...".
expect_error() {
  local msg=$1; shift
  local out rc
  out=$(dry "$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -ne 2 ]; then fail "hvdrun ${*:1:5}... -> exit $rc, expected 2 (stderr: ${out:0:300})"
  elif [[ "$out" != "hvdrun: error: "*"$msg"* ]]; then fail "hvdrun ${*:1:5}... -> stderr '${out:0:400}' lacks '$msg'"
  elif [ "$(wc -l <<<"$out")" -ne 1 ]; then fail "hvdrun ${*:1:5}... -> more than one line: ${out:0:400}"
  else echo "ok: error: ${out:0:200}"; fi
}

# ---- 1. 300 hosts x 8 slots, long names: every host arrives with its slots ----
for i in $(seq 1 300); do printf 'rack-%02d-node-%04d.cluster.example.internal\n' $((i % 20)) "$i"; done > "$tmp/names"
want=$(sed 's/$/:8/' "$tmp/names" | paste -sd,)
sed 's/$/ slots=8/' "$tmp/names" > "$tmp/hosts300"
got=$(dry -np 2400 --hostfile "$tmp/hosts300" /bin/true | arg_after -H)
[ "$got" = "$want" ] || fail "hostfile of 300 hosts: -H has ${#got} characters, expected ${#want}; ends '...${got: -60}'"
got=$(dry -np 2400 -H "$want" /bin/true | arg_after -H)
[ "$got" = "$want" ] || fail "-H of 300 hosts: -H has ${#got} characters, expected ${#want}; ends '...${got: -60}'"
got=$(run --dry-run --mpi mpich -np 2400 -H "$want" /bin/true | arg_after -hosts)
[ "$got" = "$want" ] || fail "MPICH -hosts of 300 hosts: ${#got} characters, expected ${#want}"
[[ "$(dry --hostfile "$tmp/hosts300" /bin/true)" == *" -np 2400 "* ]] || fail "300 x 8 slots: default -np is not 2400"
# The slot error keeps its advice even with a long host list.
expect_error "-np 2401 is more than the 2400 slots available" -np 2401 --hostfile "$tmp/hosts300" /bin/true
out=$(dry -np 2401 --hostfile "$tmp/hosts300" /bin/true 2>&1)
[[ "$out" == *"or pass --oversubscribe" ]] || fail "-np 2401 on 300 hosts: message cut: ...${out: -80}"
[ $failures -eq 0 ] && echo "ok: 300 hosts x 8 slots reach the launcher whole"

# ---- 2. long values and paths are not cut ----
long=$(printf 'd%.0s' $(seq 1 5000))
out=$(dry -np 1 --timeline-filename "/tmp/$long.json" /bin/true)
[[ "$out" == *" -x HVD_TIMELINE=/tmp/$long.json "* ]] || fail "--timeline-filename of 5000 characters is cut: ${#out} characters"
out=$(dry -np 1 --rsh-agent "/opt/$long/agent" -H h1:1 /bin/true)
[[ "$out" == *" --mca plm_rsh_agent /opt/$long/agent "* ]] || fail "--rsh-agent of 5000 characters is cut"
out=$(run --dry-run --mpi mpich -np 1 --output-filename "/tmp/$long" /bin/true)
[[ "$out" == *" -outfile-pattern /tmp/$long/rank.%r.stdout "* ]] || fail "MPICH --output-filename of 5000 characters is cut"
# An error quoting a 5000-character value keeps its start and its advice, in one line.
out=$(dry -np 1 "--$long=1" /bin/true 2>&1)
[[ "$out" == "hvdrun: error: unknown flag --ddd"*" bytes left out ..."*"; see hvdrun --help; options for the program go after its name, or after --" ]] \
  && [ "$(wc -l <<<"$out")" -eq 1 ] || fail "error for an unknown 5000-character option: ${out:0:100}...${out: -100}"
# A hostfile line longer than any fixed buffer: a valid entry with a long comment.
printf 'nodeA slots=2   # %s\nnodeB:3\n' "$long" > "$tmp/longline"
[[ "$(dry --hostfile "$tmp/longline" /bin/true 2>&1)" == *" -np 5 -H nodeA:2,nodeB:3 "* ]] \
  || fail "a hostfile line of 5000 characters is refused: $(dry --hostfile "$tmp/longline" /bin/true 2>&1 | head -c 300)"

# ---- 3. slot totals past INT_MAX ----
seq 1 3000 | sed 's/^/n/; s/$/ slots=1000000/' > "$tmp/big"          # 3e9 slots
out=$(dry -np 2400 --hostfile "$tmp/big" /bin/true)
[[ "$out" == *" -np 2400 "* ]] || fail "3000 x 1000000 slots, -np 2400: ${out:0:200}"
# Fewer ranks than slots: the first host's slots (as Horovod places them).
[ "$(arg_after -H <<<"$out")" = "n1:2400" ] \
  || fail "3000 x 1000000 slots, -np 2400: want -H n1:2400, got $(arg_after -H <<<"$out" | head -c 200)"
expect_error "the hosts have 3000000000 slots in all, more than the 1000000 ranks" --hostfile "$tmp/big" /bin/true
yes 'big slots=1000000' | head -n 3000 > "$tmp/repeat"                   # one host, 3e9
expect_error "hostfile '$tmp/repeat' line 2: host 'big' would have 2000000 slots" \
  --hostfile "$tmp/repeat" /bin/true
expect_error "host 'big' would have 2000000 slots" -H big:1000000,big:1000000 /bin/true
expect_error "-H 'a:2000000000': malformed host 'a:2000000000'" -H a:2000000000 /bin/true

# 100000 hosts: a repeated host is found at once, not by a scan of all before it.
seq 1 100000 | sed 's/^/node-/; s/$/ slots=8/' > "$tmp/hosts100k"
start=$(date +%s%N)
n=$(dry -np 800000 --hostfile "$tmp/hosts100k" /bin/true | arg_after -H | tr ',' '\n' | wc -l)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$n" -eq 100000 ] && [ "$ms" -lt 5000 ] || fail "hostfile of 100000 hosts: $n hosts in ${ms} ms (expected 100000 within 5 s)"

# Past what Linux takes in one argument (128 KiB) the exec fails: the error says why.
sed -n '1,4000p' "$tmp/hosts100k" | sed 's/^node-/rack-07-node-/; s/ slots=8/.cluster.example.internal:1/' > "$tmp/hosts4k"
out=$(run -np 4000 --mpi openmpi --hostfile "$tmp/hosts4k" /bin/true 2>&1); rc=$?
[ $rc -eq 127 ] && [[ "$out" == "hvdrun: error: cannot run the MPI launcher '/bin/true': "*"takes at most 131072 in one"* ]] \
  || fail "a host list of 4000 hosts past 128 KiB: exit $rc, '$out'"

# ---- 4. NUL bytes in a hostfile ----
printf 'nodeA slots=2\nnodeB\0 garbage\nnodeC\n' > "$tmp/nul"
expect_error "hostfile '$tmp/nul' line 2: NUL byte" --hostfile "$tmp/nul" /bin/true
printf 'nodeA slots=2\n# a comment\0nodeX\n' > "$tmp/nul2"
expect_error "hostfile '$tmp/nul2' line 2: NUL byte" --hostfile "$tmp/nul2" /bin/true
expect_error "hostfile '/dev/zero' line 1: NUL byte" --hostfile /dev/zero /bin/true

echo "$failures failures"
[ "$failures" -eq 0 ]
