#!/usr/bin/env bash
# The Python package on 2 and 4 ranks: every collective of hvd (numpy) and hvd.torch on
# every dtype against numpy's result, a count mismatch raising HorovodInternalError with
# hvd's message (tests/python/check_collectives.py); DistributedOptimizer
# (backward_passes_per_step, op, gradient_predivide_factor, fp16 compression,
# synchronize/skip_synchronize), broadcast_parameters and broadcast_optimizer_state
# against hand-computed results (tests/python/check_optimizer.py); and a process alone
# (size 1) with the library found from the tree, without HVD_LIBRARY.
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
[ $fail -eq 0 ] && echo PASS
exit $fail
