#!/usr/bin/env bash
# The Python package on 2 and 4 ranks: every collective of hvd (numpy) and hvd.torch on
# every dtype against numpy's result, a count mismatch raising HorovodInternalError with
# hvd's message (tests/python/check_collectives.py); DistributedOptimizer
# (backward_passes_per_step, op, gradient_predivide_factor, fp16 compression,
# synchronize/skip_synchronize), broadcast_parameters and broadcast_optimizer_state
# against hand-computed results (tests/python/check_optimizer.py); a process alone
# (size 1) with the library found from the tree, without HVD_LIBRARY; and cuda_built()
# of a library found on the loader's search path (the folder it was loaded from).
. "$(dirname "$0")/python_prelude.sh"
fail=0
for n in 2 4; do
  echo "== check_collectives.py, np $n"
  run_np "$n" tests/python/check_collectives.py || { echo "FAIL: collectives at np $n"; fail=1; }
done
echo "== check_optimizer.py, np 2"
run_np 2 tests/python/check_optimizer.py || { echo "FAIL: optimizer at np 2"; fail=1; }
echo "== alone, the library found in the tree's build/lib (HVD_LIBRARY unset)"
# (another build folder than build/ is found through HVD_LIBRARY only)
unset_lib=(-u HVD_LIBRARY)
[ "$build" = build ] || unset_lib=()
out=$(cd "$tmp" && env "${unset_lib[@]}" timeout -k 5 60 "$py" -c '
import numpy as np, hvd
hvd.init()
print(hvd.library(), hvd.size(), hvd.allreduce(np.arange(3.0), op=hvd.Sum).tolist())' 2>&1)
echo "$out"
grep -q "$build/lib/libhvd.so.0 1 \[0.0, 1.0, 2.0\]$" <<<"$out" || { echo "FAIL: alone"; fail=1; }
echo "== the library found on the loader's search path: its real folder answers cuda_built"
# A copy of the package where none of its own candidates exist, and a libhvd with a
# (stand-in) libhvd_cuda.so.0 beside it, reached only through LD_LIBRARY_PATH.
mkdir -p "$tmp/ld/lib" "$tmp/ld/pkg"
cp -r python/hvd "$tmp/ld/pkg/" && cp "$lib" "$tmp/ld/lib/" && : > "$tmp/ld/lib/libhvd_cuda.so.0"
out=$(cd "$tmp" && env -u HVD_LIBRARY LD_LIBRARY_PATH="$tmp/ld/lib" PYTHONPATH="$tmp/ld/pkg" \
  timeout -k 5 60 "$py" -c '
import hvd, hvd.torch
print(hvd.library(), hvd.torch.cuda_built(), hvd.torch.nccl_built())' 2>&1)
echo "$out"
grep -q "^$tmp/ld/lib/libhvd.so.0 True True$" <<<"$out" ||
  { echo "FAIL: cuda_built through the search path"; fail=1; }
[ $fail -eq 0 ] && echo PASS
exit $fail
