# tests/sanitize/options.sh: runtime options of the sanitizer builds (make SANITIZE=...),
# sourced by tests/run.sh and scripts/fuzz.sh. A variable already set is left as it is.
# Exported, so mpirun's ranks get them: OpenMPI starts local ranks (and, through
# scripts/netns-rsh, the simulated hosts' daemons) with mpirun's environment. On real
# remote hosts pass them on with mpirun -x (hvdrun -x). No effect on a build without
# sanitizers.
sanitize_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# ASan: leaks are checked (LeakSanitizer) with the suppressions of lsan.supp, which name
# only OpenMPI's and its helper libraries' allocations that live until exit.
# fast_unwind_on_malloc=0: OpenMPI, hwloc and glibc have no frame pointers, so the fast
# unwinder stops one frame above malloc and the suppressions could not see whose an
# allocation is; the slow unwinder costs little here (OpenMPI's start-up mostly).
# allocator_may_return_null=1: a malloc that cannot be met returns NULL, as without ASan
# (test_hvd_errors limits the address space to check that path). abort_on_error=0: a
# report exits 1 (not SIGABRT, no core file).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:fast_unwind_on_malloc=0:allocator_may_return_null=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:abort_on_error=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$sanitize_dir/lsan.supp:print_suppressions=0}
# UBSan: every error is fatal already (-fno-sanitize-recover=undefined); the stack says
# where.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# TSan: lock-order reports inside OpenMPI itself are suppressed (tsan.supp says which
# and why); any other report makes the process exit 66. allocator_may_return_null=1 as
# for ASan. history_size=7: enough history that the far side of a report inside OpenMPI
# keeps its stack, so the suppressions can match it.
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$sanitize_dir/tsan.supp:print_suppressions=0:second_deadlock_stack=1:allocator_may_return_null=1:exitcode=66:history_size=7}
