#!/usr/bin/env bash
# Test runner. Runs every test program build/tests/test_* and every script
# tests/test_*.sh, each under a time limit, and closes with "N passed, N failed, N skipped".
# A test passes with exit 0, is skipped with exit 77 (it prints why, and only a missing
# GPU or root is a reason: see skip_ok), fails otherwise; a test source that was not
# built, or a script without its executable bit, fails too.
# Usage: tests/run.sh [BUILD_DIR] [NAME_FILTER]   (NAME_FILTER: an extended regex, e.g. a
# name or part of one, or '^test_(hvd|coll)'; a sanitizer build's options: tests/sanitize/)
# Two at a time: the tests named in `pooled` below (independent: their own temporary
# files, no port, namespace or timing check) run first, HVD_TEST_JOBS at a time (default
# 2; 1: every test alone), then the others alone, one after the other. A result line is
# printed as its test ends; each test's output is in BUILD_DIR/test-logs/NAME.log.
set -u
build=${1:-build}
filter=${2:-}
# Tests left out of this run (an extended regex; make sets it for the sanitizer builds).
exclude=${HVD_TEST_EXCLUDE:-}
limit=${HVD_TEST_TIME_LIMIT:-300}
jobs=${HVD_TEST_JOBS:-2}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] ||
  { echo "run.sh: HVD_TEST_JOBS=$jobs: expected a number of tests at once, 1 or more" >&2; exit 2; }
# wait -n -p (bash 5.1) tells which test ended; an older bash runs them one at a time.
(( BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 501 )) || jobs=1
# The tests that may run beside another, roughly longest first (the order in which they
# start). Each uses only its own temporary files (mktemp) and its own mpirun jobs, binds
# no fixed port (a server on port 0 is fine: the kernel picks a free one), sets up no
# namespace, and judges no time: its timeouts only catch a hang, with room to spare. A
# test not named here runs alone; name a new one only if it keeps to that (one that
# measures time, binds a fixed port, uses a fixed path, network namespaces or SLURM
# daemons stays out).
pooled=(
  test_train_resume.sh test_train_resume_mid.sh test_coll_bench.sh test_train_ckpt_fields.sh
  test_hvd_cache test_train_init_weights.sh test_gpu_check_build.sh test_coll_inproc
  test_gpu_check_plan.sh
  test_train_errors.sh test_mutation_check.sh test_nn_precision_emulation
  test_train_output_paths.sh test_train_export.sh test_cnn_bench_format.sh
  test_train_resume_ranks.sh test_grad_buckets_mpi.sh test_coll_hierarchical.sh test_device_flags.sh
  test_train_write_errors.sh test_train_resume_auto.sh test_train_early_stopping.sh
  test_serve_concurrency.sh test_serve_accuracy.sh test_serve_body_framing.sh test_coll_mpi.sh
  test_hvdrun_args.sh
  test_hvd_hierarchical_one_host.sh
  test_train_ckpt_format.sh test_train_flags_agree.sh test_train_agree
  test_hvd_plan test_hvd_allreduce test_hvd_hierarchical test_hvd_fusion test_hvd_collectives
  test_hvd_alltoall_reducescatter test_hvd_join test_coll_hierarchical_split test_coll_transport_table test_util_plugin test_hvd_timeline test_hvd_init
  test_grad_buckets test_coll_hierarchical test_nn_models test_hvd_hello.sh
  test_hvdrun_hello.sh test_hvdrun_check_build.sh test_dependency_cycles.sh
  test_hvdrun_signals.sh test_hvdrun_elastic_hosts.sh
  test_train_tensorboard.sh test_fuzz_regressions.sh test_hvdrun_errors.sh
  test_slurm_nodelist.sh test_nn_conv_winograd test_nn_gradcheck test_nn_layers_torch
  test_nn_model_home test_nn_model_safetensors test_nn_model_step test_nn_optim
  test_nn_precision test_nn_safetensors_file test_train_callbacks test_train_checkpoint
  test_train_data test_train_step test_train_tfevents test_util_flags test_slurm_launch_env
  test_train_accumulation.sh test_train_idx.sh test_train_torch_models.sh test_train_deps.sh
  test_cnn_bench_accuracy test_coll_bench_check test_nn_optim_rmsprop test_hvd_device_thread
  test_cuda_half_layers test_cuda_hvd_allreduce test_cuda_layers test_cuda_mixed_precision
  test_cuda_model_step test_nn_conv_direct test_roofline_counts.sh test_nn_backward_store
  test_cuda_backward_store
  test_hvd_held test_coll_copy test_util_huge_pages test_hvd_background_nice test_source_limits.sh
  test_hvd_response_cache test_hvd_liveness_gap test_hvd_cache_rounds test_hvdrun_ignored_signals.sh
  test_hvd_device_flight
  test_serve_grpc.sh test_serve_grpc_errors.sh test_serve_grpc_images.sh
  test_python.sh test_python_mnist.sh
  test_hvd_process_sets test_nn_model_range test_train_pipeline test_train_pipeline.sh
  test_onnx_models test_onnx_train_serve.sh test_nn_graph_kernels
  test_nn_torchvision test_nn_freeze test_train_freeze.sh test_train_transfer.sh test_cuda_freeze
  test_serve_grpc_threads.sh
  test_train_images.sh test_data_torch.sh test_data_images
  test_hvd_ps test_train_ps.sh test_cnn_bench_ps.sh
  test_serve_grpc_threads.sh test_train_pipeline_freeze.sh
  test_blas_core.sh
  test_plots.sh
  test_train_pipeline_faults test_train_pipeline_plan
  test_compare_real_data.sh
)
cd "$(dirname "$0")/.."
export HVD_BUILD=$build
# OpenMPI refuses root without these; tests start many ranks on few cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# A program started without mpirun (an MPI singleton: train's error cases, dozens of
# starts) forks no helper daemon (OpenMPI 4's orted): 0.15 s less a start. Nothing here
# spawns or connects processes through MPI, which is all that daemon is for.
export OMPI_MCA_ess_singleton_isolated=1
logdir=$build/test-logs
# Sanitizer runtime options and suppressions (no effect on a build without sanitizers).
. tests/sanitize/options.sh
mkdir -p "$logdir"

# A skip is for what a machine may lack that no install step can bring: a GPU, root (or
# what root may do here). Any other reason to skip (a program not built, a package not
# installed: make test builds and installs them) counts as a failure.
skip_ok='no CUDA device|without CUDA|GPU is present|usable GPU|need(s)? root|not permitted here'

passed=0; failed=0; skipped=0; failures=()
fail_unrunnable() { # NAME WHY
  failed=$((failed + 1)); failures+=("$1"); echo "FAIL  $1: $2"
}
# Every test source is counted: one that was not built, or a script that cannot be run,
# fails instead of vanishing from the count.
for src in tests/test_*.c; do
  name=$(basename "$src" .c)
  [ -n "$filter" ] && ! [[ "$name" =~ $filter ]] && continue
  [ -x "$build/tests/$name" ] || fail_unrunnable "$name" "$src was not built ($build/tests/$name missing: run make)"
done
# A sanitizer's report anywhere in a test's log fails the test, whatever its exit status:
# a rank of an mpirun job that a test expects to fail (a fault, a stall, a bad input)
# ends non-zero either way, so its ASan, UBSan or TSan report would otherwise pass unseen.
sanitizer_report='(ERROR|WARNING|SUMMARY): (Address|Leak|Thread|UndefinedBehavior)Sanitizer|: runtime error: '
# report NAME RC SECS: the result line (and the log's tail for a failure)
report() {
  local name=$1 rc=$2 secs=$3
  if grep -qE "$sanitizer_report" "$logdir/$name.log"; then
    failed=$((failed + 1)); failures+=("$name")
    echo "FAIL  $name: a sanitizer reported an error (exit $rc):"
    grep -m 3 -E -A 12 "$sanitizer_report" "$logdir/$name.log" | sed 's/^/      /'
  elif [ $rc -eq 0 ]; then
    passed=$((passed + 1)); printf 'PASS  %-40s (%ds)\n' "$name" "$secs"
  elif [ $rc -eq 77 ] && tail -n 1 "$logdir/$name.log" | grep -qiE "$skip_ok"; then
    skipped=$((skipped + 1)); printf 'SKIP  %-40s %s\n' "$name" "$(tail -n 1 "$logdir/$name.log")"
  elif [ $rc -eq 77 ]; then
    failed=$((failed + 1)); failures+=("$name")
    echo "FAIL  $name: skipped for a reason other than a missing GPU or root: $(tail -n 1 "$logdir/$name.log")"
  else
    failed=$((failed + 1)); failures+=("$name")
    [ $rc -eq 124 ] && echo "FAIL  $name: no result within ${limit}s (killed)" || echo "FAIL  $name (exit $rc)"
    tail -n 25 "$logdir/$name.log" | sed 's/^/      /'
  fi
}
serial=(); pool=()
for t in "$build"/tests/test_* tests/test_*.sh; do
  name=$(basename "$t")
  case "$name" in *.d|*.o) continue ;; esac
  [ -n "$filter" ] && ! [[ "$name" =~ $filter ]] && continue
  if [ -n "$exclude" ] && [[ "$name" =~ $exclude ]]; then
    printf 'NOTE  %-40s not run in this build (HVD_TEST_EXCLUDE)\n' "$name"; continue
  fi
  if [ ! -x "$t" ]; then
    [ -e "$t" ] && fail_unrunnable "$name" "$t is not executable (chmod +x)"
    continue
  fi
  serial+=("$t")
done
# The pooled tests, in the order of the list; the others stay in serial, in their order.
if [ "$jobs" -gt 1 ]; then
  for p in "${pooled[@]}"; do
    for i in "${!serial[@]}"; do
      [ "$(basename "${serial[$i]}")" = "$p" ] && { pool+=("${serial[$i]}"); unset 'serial[i]'; }
    done
  done
fi

# Each test runs in the background (timeout, its own process group), so that an
# interrupted run ends the tests it started; `running` maps its pid to its name.
declare -A running=() started=()
# Each test gets its own folder for OpenMPI's session directories. By default every MPI
# process shares /tmp/ompi.HOST.UID, and a job that ends removes it once empty, while
# another test's process may be making its own folder inside: that mkdir fails and the
# process dies in MPI_Init ("orte_session_dir failed"). An MPI singleton started with
# ess_singleton_isolated (above) is job family 0, so all of them share even the folder
# below it (jf.0). Three loops of 300 concurrent singletons: 6 failed in 1800 starts.
mpi_sessions=$(mktemp -d /tmp/hvd-tests.XXXXXX) || { echo "run.sh: cannot make a folder in /tmp" >&2; exit 2; }
tests_started=0
trap '[ ${#running[@]} -gt 0 ] && kill "${!running[@]}" 2>/dev/null; rm -rf "$mpi_sessions"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
start_test() { # PATH
  local name
  name=$(basename "$1")
  # A short path (a number, not the name): OpenMPI puts unix sockets under it.
  tests_started=$((tests_started + 1))
  mkdir "$mpi_sessions/$tests_started" || { fail_unrunnable "$name" "cannot make $mpi_sessions/$tests_started"; return; }
  (export OMPI_MCA_orte_tmpdir_base="$mpi_sessions/$tests_started"
   exec timeout -k 10 "$limit" "$1" >"$logdir/$name.log" 2>&1 </dev/null) &
  running[$!]=$name; started[$!]=$(date +%s)
}
reap() { # waits for one running test to end and reports it
  local pid rc
  while :; do
    # One that ended while this shell was busy is no longer a job for wait -n; wait PID
    # still has its status.
    for pid in "${!running[@]}"; do
      kill -0 "$pid" 2>/dev/null && continue
      wait "$pid"; rc=$?
      break 2
    done
    pid=
    wait -n -p pid "${!running[@]}"; rc=$?
    [ -n "$pid" ] && break
  done
  report "${running[$pid]}" "$rc" $(( $(date +%s) - started[$pid] ))
  unset 'running[$pid]' 'started[$pid]'
}
for t in "${pool[@]}"; do
  while [ ${#running[@]} -ge "$jobs" ]; do reap; done
  start_test "$t"
done
while [ ${#running[@]} -gt 0 ]; do reap; done
for t in "${serial[@]}"; do
  start_test "$t"
  [ ${#running[@]} -gt 0 ] && reap
done
echo
[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
