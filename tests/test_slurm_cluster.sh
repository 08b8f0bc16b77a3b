#!/usr/bin/env bash
# hvd under a real SLURM (scripts/slurm-cluster.sh: munge, slurmctld, one slurmd on each
# of 2 simulated hosts), as a user of a cluster starts it:
#   - srun -N2 --ntasks-per-node=2 --mpi=pmix examples/slurm/where: 4 ranks, ranks 0-1
#     on ns1 and 2-3 on ns2, local rank 0-1 of 2 on each host, cross rank = host index;
#     and hello_allreduce the same way: every rank gets the sum 10;
#   - sbatch --wait examples/slurm/train_cpu.sbatch (2 nodes x 2 tasks, lenet, one short
#     epoch): exit 0, "4 rank(s)" and the "test accuracy: NN.NN%" line in its output;
#   - salloc -N2 --ntasks-per-node=2 hvdrun where, no flags: hvdrun reads the allocation
#     (mpirun -np 4 -H ns1:2,ns2:2) and the 4 ranks see the same topology;
#   - srun --mpi=none where (no PMI): the copies fail at MPI_Init (OpenMPI's own check)
#     rather than run as 2 jobs of one rank; where typed alone in the shell of an
#     allocation of 4 tasks: hvd_init refuses it (hvd/launch_env.c), naming
#     SLURM_NTASKS=4 and srun --mpi=pmix.
# Needs root and network namespaces; skips otherwise. Stops the daemons and removes the
# hosts on every exit. About 30 s.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
hvdrun=$build/hvdrun
hello=$build/examples/hello_allreduce
hosts=scripts/slurm-cluster.sh   # netns_prelude.sh's exit trap runs "$hosts" down
skip() { echo "SKIP: $*"; exit 77; }
for f in "$hvdrun" "$hello" "$build/train" "$build/libhvd.a"; do
  [ -e "$f" ] || { echo "FAIL: $f is not built (run make)"; exit 1; }
done
. tests/netns_prelude.sh
# The test's files (where, the job's output); the prelude's exit trap removes them.
netns_tmp=$(mktemp -d "$PWD/$build/slurm-test.XXXXXX")
for t in munged slurmctld slurmd srun sbatch salloc pkg-config; do
  command -v $t >/dev/null || { echo "FAIL: $t is not installed (scripts/install-deps.sh)"; exit 1; }
done
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# This test's cluster only: nothing of a SLURM job this test may itself run in.
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(SLURM_[A-Z_]*\)=.*/\1/p')

where=$netns_tmp/where
# shellcheck disable=SC2046
cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror examples/slurm/where.c \
  $(PKG_CONFIG_PATH=$build pkg-config --cflags --libs hvd) -o "$where" \
  || { echo "FAIL: cannot build examples/slurm/where.c"; exit 1; }

up=$("$hosts" up 2 2>&1); rc=$?
echo "$up"
if [ $rc -ne 0 ]; then
  grep -qiE 'cgroup|not permitted|permission denied' <<<"$up" \
    && skip "the SLURM daemons are not permitted here: $(tail -n 1 <<<"$up")"
  echo "FAIL: scripts/slurm-cluster.sh up 2 (logs: /run/hvd-slurm/log)"; exit 1
fi
eval "$(tail -n 1 <<<"$up")"
[ -f "${SLURM_CONF:-}" ] || { echo "FAIL: 'up' did not end with export SLURM_CONF=PATH"; exit 1; }

# topology OUTPUT WHAT: the 4 lines of where, 2 ranks a host in rank order.
topology() {
  local want
  want=$(for r in 0 1 2 3; do
    echo "rank $r of 4: local $((r % 2)) of 2, cross $((r / 2)) of 2 on ns$((r / 2 + 1))"
  done)
  local got
  got=$(grep '^rank [0-9]* of' <<<"$1" | sort -n -k2)
  [ "$got" = "$want" ] || fail "$2: ranks:
$got
expected
$want"
}

echo "== srun --mpi=pmix where"
out=$(timeout -k 5 60 srun -N2 --ntasks-per-node=2 --mpi=pmix "$where" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "srun where exited $rc"
topology "$out" "srun --mpi=pmix"

echo "== srun --mpi=pmix hello_allreduce"
out=$(timeout -k 5 60 srun -N2 --ntasks-per-node=2 --mpi=pmix "$hello" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "srun hello_allreduce exited $rc"
for r in 0 1 2 3; do
  grep -qx "rank $r of 4: sum of rank+1 = 10" <<<"$out" || fail "srun hello: rank $r did not print the sum 10"
done

echo "== sbatch --wait examples/slurm/train_cpu.sbatch"
out=$(HVD_BUILD=$build timeout -k 5 150 sbatch --wait --output="$netns_tmp/train-%j.out" \
      examples/slurm/train_cpu.sbatch --model lenet --epochs 1 --max-train 2000 \
      --max-test 500 2>&1); rc=$?
echo "$out"
cat "$netns_tmp"/train-*.out 2>/dev/null
[ $rc -eq 0 ] || fail "sbatch --wait exited $rc"
job=$(cat "$netns_tmp"/train-*.out 2>/dev/null)
grep -q "^job [0-9]*: 4 ranks on ns\[1-2\]" <<<"$job" || fail "sbatch: no 'job N: 4 ranks on ns[1-2]' line"
grep -q "^train: lenet on fashion-mnist, 4 rank(s)" <<<"$job" || fail "sbatch: train did not run on 4 ranks"
grep -qE "^test accuracy: [0-9]+\.[0-9]+%$" <<<"$job" || fail "sbatch: no 'test accuracy: NN.NN%' line"

echo "== salloc -N2 --ntasks-per-node=2 hvdrun where (no flags)"
out=$(HVD_RSH_AGENT=$PWD/scripts/netns-rsh timeout -k 5 90 salloc -N2 --ntasks-per-node=2 \
      "$hvdrun" --verbose "$where" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "salloc hvdrun exited $rc"
grep -qE "^[^ ]*mpirun .*-np 4 -H ns1:2,ns2:2 " <<<"$out" || fail "hvdrun did not choose -np 4 -H ns1:2,ns2:2"
topology "$out" "salloc hvdrun"

echo "== srun where without --mpi=pmix: refused by MPI"
out=$(timeout -k 5 60 srun -N2 --ntasks-per-node=1 --mpi=none "$where" 2>&1); rc=$?
echo "$out"
[ $rc -ne 0 ] || fail "srun --mpi=none exited 0 (two jobs of one rank ran)"
grep -q "^rank 0 of 1" <<<"$out" && fail "srun --mpi=none ran as rank 0 of 1"

echo "== where alone in the shell of salloc -N2 --ntasks-per-node=2: refused by hvd_init"
out=$(timeout -k 5 60 salloc -N2 --ntasks-per-node=2 "$where" 2>&1); rc=$?
echo "$out"
[ $rc -ne 0 ] || fail "a single process in an allocation of 4 tasks exited 0"
grep -q "^rank 0 of 1" <<<"$out" && fail "a single process in an allocation of 4 tasks ran as rank 0 of 1"
grep -q "hvd_init failed: .*SLURM_NTASKS=4.*srun --mpi=pmix" <<<"$out" \
  || fail "hvd_init did not refuse with SLURM_NTASKS=4 and srun --mpi=pmix in its message"

echo "$failures failures"
[ "$failures" -eq 0 ]
