#!/usr/bin/env bash
# hvdrun's command line reaches the ranks intact: program arguments with spaces, quotes
# and shell characters arrive unchanged on every rank (real mpirun, 2 ranks, one output
# file per rank via --output-filename); horovodrun's tuning flags arrive as HVD_*
# variables; -x sets variables; "--" and unknown arguments after the program are the
# program's. Then the argv hvdrun builds (--dry-run) for hostfiles in both dialects,
# fewer ranks than slots (only the first hosts' slots go to the launcher), binding defaults, --start-timeout, and MPICH's spelling of the same options; then
# horovodrun's --network-interface, -p/--ssh-port and --mpi-args, their bad values, and
# a real run with the loopback interface and extra launcher words.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
# The ranks must see exactly the variables hvdrun sets: none inherited from here.
for v in $(compgen -e | grep -E '^(HVD_|FOO_)'); do unset "$v"; done
if [ ! -x "$hvdrun" ]; then echo "SKIP: $hvdrun is not built (run make)"; exit 77; fi
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun is not installed"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The program: prints each argument in brackets, then the HVD_* and FOO_* variables.
cat > "$tmp/show args.sh" <<'EOF'
#!/bin/sh
for a in "$@"; do printf '[%s]\n' "$a"; done
env | grep -E '^(HVD_|FOO_)' | sort
EOF
chmod +x "$tmp/show args.sh"

args=("a b" "it's" 'say "hi"' '$HOME' '*' '' 'x;y|z' '-np' '--verbose' "tab	here" 'back\slash')
expected=$(for a in "${args[@]}"; do printf '[%s]\n' "$a"; done)

# ---- 1. real run, 2 ranks, output per rank ----
export FOO_FROM_HERE="value from here"
timeout -k 5 60 "$hvdrun" -np 2 --oversubscribe --output-filename "$tmp/out" \
  --fusion-threshold-mb 32 --cycle-time-ms 2.5 --timeline-filename "$tmp/time line.json" \
  --stall-check-warning-time-seconds 30 --stall-check-shutdown-time-seconds 120 \
  --hierarchical-allreduce --log-level DEBUG --start-timeout 40 \
  -x 'FOO_SET=with space' -x FOO_FROM_HERE \
  -- "$tmp/show args.sh" "${args[@]}" > "$tmp/launch.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { fail "hvdrun -np 2 exited $rc"; cat "$tmp/launch.log"; }
mapfile -t outs < <(find "$tmp/out" -name stdout | sort)
[ ${#outs[@]} -eq 2 ] || fail "--output-filename: expected 2 per-rank stdout files, found ${#outs[@]}: ${outs[*]}"
want_env="FOO_FROM_HERE=value from here
FOO_SET=with space
HVD_CYCLE_TIME=2.5
HVD_FUSION_THRESHOLD=33554432
HVD_HIERARCHICAL_ALLREDUCE=1
HVD_LOG_LEVEL=debug
HVD_STALL_CHECK_TIME_SECONDS=30
HVD_STALL_SHUTDOWN_TIME_SECONDS=120
HVD_START_TIMEOUT=40
HVD_TIMELINE=$tmp/time line.json"
for f in "${outs[@]}"; do
  got=$(grep '^\[' "$f")
  [ "$got" = "$expected" ] || fail "arguments differ in $f:
--- got
$got
--- expected
$expected"
  got_env=$(grep -E '^(HVD_|FOO_)' "$f")
  [ "$got_env" = "$want_env" ] || fail "variables differ in $f:
--- got
$got_env
--- expected
$want_env"
done
[ $failures -eq 0 ] && echo "ok: arguments and variables intact on both ranks"

# ---- 2. unknown arguments after the program belong to it, without "--" ----
out=$(timeout -k 5 60 "$hvdrun" -np 1 "$tmp/show args.sh" -np 7 --bogus -x 2>&1)
want=$(printf '[-np]\n[7]\n[--bogus]\n[-x]')
[ "$(grep '^\[' <<<"$out")" = "$want" ] || fail "arguments after the program: got '$out'"

# ---- 3. --verbose prints the final command, and it is an argv that re-parses ----
out=$(timeout -k 5 60 "$hvdrun" --verbose -np 1 "$tmp/show args.sh" "a b" "it's" 2>&1)
first=$(head -n 1 <<<"$out")
[[ "$first" == */mpirun* || "$first" == */mpiexec* ]] || fail "--verbose: first line '$first' is not the launcher command"
if [ "$(id -u)" -eq 0 ]; then
  [[ "$first" == *" --allow-run-as-root "* ]] || fail "--verbose as root: no --allow-run-as-root in '$first'"
fi
eval "reparsed=($first)"
n=${#reparsed[@]}
[ "${reparsed[$((n - 2))]}" = "a b" ] && [ "${reparsed[$((n - 1))]}" = "it's" ] \
  || fail "--verbose: the printed command does not quote 'a b' and \"it's\" for the shell: $first"
grep -q '^\[a b\]$' <<<"$out" || fail "--verbose: the program did not run: $out"

# ---- 4. --dry-run: hostfiles in both dialects, defaults and options ----
cat > "$tmp/hosts" <<'EOF'
# OpenMPI and horovodrun lines mixed
nodeA slots=2
nodeB:3   # trailing comment
nodeC
nodeA slots=1 max_slots=4
EOF
dry() { "$hvdrun" --dry-run "$@" 2>&1; }
expect_cmd() {   # expect_cmd "substring" ARGS...
  local want=$1; shift
  local got; got=$(dry "$@")
  [[ "$got" == *"$want"* ]] || fail "hvdrun $*: command lacks '$want': $got"
}
expect_cmd " -np 7 -H nodeA:3,nodeB:3,nodeC:1 " --hostfile "$tmp/hosts" /bin/true
expect_cmd " -np 9 -H nodeA:3,nodeB:3,nodeC:1,nodeD:2 " --hostfile "$tmp/hosts" -H nodeD:2 -np 9 /bin/true
# Fewer ranks than slots: the first hosts' slots in order, the others left out (horovodrun).
expect_cmd " -np 4 -H nodeA:3,nodeB:1 " --hostfile "$tmp/hosts" -H nodeD:2 -np 4 /bin/true
expect_cmd " -np 2 -H a:2 " -H a:2,b:2 -np 2 /bin/true
expect_cmd " --bind-to core --map-by slot " -np 1 /bin/true
expect_cmd " --oversubscribe --bind-to none --map-by slot " --oversubscribe -np 64 /bin/true
expect_cmd " --bind-to socket --map-by node " --bind-to socket --map-by node -np 1 /bin/true
expect_cmd " --mca orte_startup_timeout 30 " --start-timeout 30 -np 1 /bin/true
expect_cmd " -x HVD_START_TIMEOUT=30 " --start-timeout 30 -np 1 /bin/true
expect_cmd " --mca btl '^openib' " --mca btl ^openib -np 1 /bin/true
expect_cmd " --mca plm_rsh_agent /opt/my-agent " --rsh-agent /opt/my-agent -H h1:1 /bin/true
expect_cmd " --output-filename $tmp/logs " --output-filename "$tmp/logs" -np 1 /bin/true
[ -e "$tmp/logs" ] && fail "--dry-run created the --output-filename directory"
expect_cmd "-x HVD_FUSION_THRESHOLD=0 " --fusion-threshold-mb 0 -np 1 /bin/true
expect_cmd "-x HVD_FUSION_THRESHOLD=1572864 " --fusion-threshold-mb=1.5 -np 1 /bin/true
# MPICH (Hydra) spells the same things differently.
got=$(dry --mpi mpich -np 3 -H a:2,b:2 -x FOO_X=1 -x 'FOO_Y=two words' --hierarchical-allreduce \
      --output-filename /tmp/o --start-timeout 9 /bin/echo hi)
want_tail="-np 3 -hosts a:2,b:1 -bind-to core -outfile-pattern /tmp/o/rank.%r.stdout -errfile-pattern /tmp/o/rank.%r.stderr -genv FOO_X 1 -genv FOO_Y 'two words' -genv HVD_HIERARCHICAL_ALLREDUCE 1 -genv HVD_START_TIMEOUT 9 /bin/echo hi"
[[ "$got" == *" $want_tail" ]] || fail "MPICH command: got '$got', expected it to end with '$want_tail'"
[[ "$got" == *"--allow-run-as-root"* ]] && fail "MPICH command has OpenMPI's --allow-run-as-root: $got"

# ---- 5. --network-interface, -p/--ssh-port, --mpi-args (horovodrun's flags) ----
# OpenMPI: both TCP interface parameters (out-of-band and the ranks' transport), NCCL's
# interface; the ssh port as the rsh agent's arguments; the extra words last before the
# program, split as a shell splits them.
expect_cmd " --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x NCCL_SOCKET_IFNAME=eth0 " \
  --network-interface eth0 -np 1 /bin/true
expect_cmd " --mca btl_tcp_if_include eth0,ib0 --mca oob_tcp_if_include eth0,ib0 " \
  --network-interfaces eth0,ib0 -np 1 /bin/true
got=$(dry --network-interface 10.1.0.0/16 -np 1 /bin/true)
[[ "$got" == *" --mca oob_tcp_if_include 10.1.0.0/16 "* && "$got" != *NCCL_SOCKET_IFNAME* ]] ||
  fail "--network-interface with a subnet: expected the MCA parameters and no NCCL_SOCKET_IFNAME: $got"
got=$(dry --network-interface eth1 -np 2 -H ns1:1,ns2:1 --rsh-agent /bin/true /bin/true)
[[ "$got" == *"_if_include eth1 "* && "$got" != *"10.231.0.0/24"* ]] ||
  fail "--network-interface on the namespace hosts: the given interface must replace the bridge's subnet: $got"
expect_cmd " --mca plm_rsh_args '-p 2222' " -p 2222 -H h1:1 /bin/true
expect_cmd " --mca plm_rsh_args '-p 22' " --ssh-port=22 -H h1:1 /bin/true
got=$(dry -np 1 --mpi-args "--mca btl ^openib -x 'FOO_A=two words' \"say \\\"hi\\\"\" ''   it\\'s" \
      --mpi-args "--report-bindings" /bin/echo last)
eval "words=($got)"
want=(--mca btl '^openib' -x 'FOO_A=two words' 'say "hi"' '' "it's" --report-bindings /bin/echo last)
tail_words=("${words[@]:$((${#words[@]} - ${#want[@]}))}")
same=1
for i in "${!want[@]}"; do [ "${tail_words[$i]}" = "${want[$i]}" ] || same=0; done
[ $same -eq 1 ] || fail "--mpi-args: expected the words (${want[*]}) just before the program, got: $got"
[[ "$got" == *" -x 'FOO_A=two words' "* ]] || fail "--mpi-args: 'FOO_A=two words' is not one word: $got"
# MPICH: -iface and -genv NCCL_SOCKET_IFNAME; the same extra words.
got=$(dry --mpi mpich -np 1 --network-interface eth0 --mpi-args "-v -genv FOO_B 'x y'" /bin/true)
[[ "$got" == *" -iface eth0 -genv NCCL_SOCKET_IFNAME eth0"*" -v -genv FOO_B 'x y' /bin/true" ]] ||
  fail "MPICH with --network-interface and --mpi-args: $got"

# Bad values: exit 2 and a message that says what is wrong.
expect_fail() {   # expect_fail "message part" ARGS...
  local want=$1; shift
  local out rc
  out=$("$hvdrun" --dry-run "$@" 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 2 ] && [[ "$out" == "hvdrun: error: "*"$want"* ]] ||
    fail "hvdrun $*: expected exit 2 and '$want', got exit $rc: $out"
}
expect_fail "bad value '0' for -p: expected an integer in [1, 65535]" -p 0 -np 1 /bin/true
expect_fail "bad value '65536' for --ssh-port: expected an integer in [1, 65535]" --ssh-port 65536 -np 1 /bin/true
expect_fail "bad value 'x' for -p" -p x -np 1 /bin/true
expect_fail "bad value '' for --network-interface: expected an interface such as eth0" --network-interface '' -np 1 /bin/true
expect_fail "bad value 'eth0,,ib0' for --network-interface" --network-interface eth0,,ib0 -np 1 /bin/true
expect_fail "bad value 'eth0 ib0' for --network-interface" --network-interface 'eth0 ib0' -np 1 /bin/true
expect_fail "--mpi-args: the ' at character 10 is never closed" --mpi-args "-x FOO_C='a b" -np 1 /bin/true
expect_fail '--mpi-args: the " at character 4 is never closed' --mpi-args '-x "a b' -np 1 /bin/true
expect_fail "--mpi-args: it ends in a backslash" --mpi-args 'a \' -np 1 /bin/true
expect_fail "--mpi-args: '\$' (character 4) expands a variable" --mpi-args '-x $HOME' -np 1 /bin/true
expect_fail "--mpi-args: ';' (character 2) ends a command" --mpi-args 'a; rm -rf x' -np 1 /bin/true
expect_fail "both choose the interfaces" --network-interface eth0 --mca oob_tcp_if_include eth1 -np 1 /bin/true
expect_fail "both set the rsh agent's arguments" -p 2222 --mca plm_rsh_args -q -H h1:1 /bin/true
expect_fail "takes no arguments for ssh; set the port for the hosts in ~/.ssh/config" --mpi mpich -p 2222 -np 1 /bin/true
expect_fail "MPICH's -iface takes one interface name" --mpi mpich --network-interface eth0,ib0 -np 1 /bin/true
help=$("$hvdrun" --help)
for f in "--network-interface IFACE" "-p, --ssh-port PORT" '--mpi-args "ARGS"'; do
  [[ "$help" == *"$f"* ]] || fail "hvdrun --help does not list $f"
done

# A real run: the interface (loopback) and the extra words reach mpirun and the ranks.
cat > "$tmp/show env.sh" <<'EOF2'
#!/bin/sh
env | grep -E '^(FOO_|NCCL_SOCKET_IFNAME)' | sort
EOF2
chmod +x "$tmp/show env.sh"
out=$(timeout -k 5 60 "$hvdrun" -np 2 --oversubscribe --network-interface lo \
      --mpi-args "-x 'FOO_MPI_ARGS=from --mpi-args' --tag-output" "$tmp/show env.sh" 2>&1); rc=$?
[ $rc -eq 0 ] || fail "hvdrun --network-interface lo --mpi-args: exit $rc: $out"
for r in 0 1; do
  grep -q "^\[1,$r\]<stdout>:FOO_MPI_ARGS=from --mpi-args$" <<<"$out" &&
    grep -q "^\[1,$r\]<stdout>:NCCL_SOCKET_IFNAME=lo$" <<<"$out" ||
    fail "rank $r did not get FOO_MPI_ARGS and NCCL_SOCKET_IFNAME (--tag-output from --mpi-args): $out"
done
[ $failures -eq 0 ] && echo "ok: --network-interface, --ssh-port and --mpi-args"

echo "$failures failures"
[ "$failures" -eq 0 ]
