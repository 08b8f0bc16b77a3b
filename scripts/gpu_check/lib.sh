# shellcheck shell=bash
# scripts/gpu_check/lib.sh: how the GPU check reads its programs' logs. Sourced by
# scripts/gpu_check.sh, and by tests/test_gpu_check_plan.sh, which feeds these functions
# sample lines on a machine without a GPU. Functions only: sourcing runs nothing.

# gc_is_oom LOG: the run ran out of device memory: CUDA's or PyTorch's "out of memory",
# or a library's *_STATUS_ALLOC_FAILED. Nothing else: "an illegal memory access was
# encountered" is a kernel bug, to be shown as it is, not retried at half the batch.
gc_is_oom() { grep -qsiE 'out of memory|ALLOC_FAILED' "$1"; }

# gc_refusals LOG: the "cuDNN refused ..." notices of a run (nn_notice), each once, in
# the order they came, shortened to what was refused, joined by "; ".
gc_refusals() {
  sed -n 's/.*cuDNN refused \(.*\)$/\1/p' "$1" 2>/dev/null | sed 's/ (.*//' |
    awk '!seen[$0]++' | paste -sd';' - | sed 's/;/; /g'
}

# gc_first_error LOG: the first line of a log that says what went wrong (at most 100
# characters), for a FAIL row: the diagnosis without opening the log.
gc_first_error() {
  grep -sm1 -iE 'illegal|error|fail|abort|segmentation|assert|not found|cannot|no such' "$1" |
    cut -c1-100
}

# gc_stamp_init FILE START: copies its input to its output; when the first line that
# shows the device (nn_cuda_info's "CUDA: ..." or torch_bench's "torch N.N ...") passes,
# writes the seconds since START (an $EPOCHREALTIME) to FILE, with one decimal: how long
# the process took to start and initialise CUDA.
gc_stamp_init() {
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line"
    if [[ $line == *"CUDA: "* || $line =~ ^torch\ [0-9] ]]; then
      # (bash 5 has EPOCHREALTIME; an older one reports no start-up time)
      [ -n "${EPOCHREALTIME:-}" ] &&
        awk -v a="$2" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f\n", b - a}' > "$1"
      cat
      return
    fi
  done
}

# bench_ips LOG: cnn_bench's "total images/sec", or, when the run was cut short, the
# images/sec of the last Step line (the mean over the steps timed so far) and "partial".
bench_ips() {
  awk -F'\t' '/^total images\/sec: / {split($0, a, ": "); total = a[2]}
    /^[0-9]+\timages\/sec: / {split($2, a, " "); last = a[2]; step = $1}
    END {if (total != "") print total; else if (last != "") print last, "partial", step}' "$1" 2>/dev/null
}
# bench_losses LOG: the total_loss column of cnn_bench's Step lines.
bench_losses() { awk -F'\t' '/^[0-9]+\timages\/sec: / {print $3}' "$1" 2>/dev/null; }
# train_losses LOG: the training loss of each of train's epoch lines.
train_losses() { sed -n 's/^Epoch [0-9]*\/[0-9]*: .* - loss \([^ ]*\) - accuracy .*/\1/p' "$1"; }
# falls LOSSES...: every value finite, and the last below the first.
falls() {
  [ $# -ge 2 ] || return 1
  printf '%s\n' "$@" | grep -qiE 'nan|inf' && return 1
  awk -v a="$1" -v b="${!#}" 'BEGIN {exit !(b + 0 < a + 0)}'
}
