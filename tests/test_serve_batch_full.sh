#!/usr/bin/env bash
# build/serve's batches reach --max-batch-size: with --max-batch-size 4 and a batch
# timeout of 10 s (so a batch goes only when full, or 10 s after its first request),
# 4 requests of 1 instance sent at once run as one forward pass of 4 samples, then
# requests of 3 and 1 instances as one more (the metrics page counts forward passes and
# samples). A batcher that stops one job short of the maximum runs 2 passes each time.
# Bounded: 6 loopback connections; the bound (60 s) only catches a hang.
set -u
. "$(dirname "$0")/serve_prelude.sh"
serve_start --max-batch-size 4 --batch-timeout-micros 10000000 --log-level warning

PYTHONPATH=scripts timeout -k 5 60 /usr/bin/python3 - "$port" <<'PY' || exit 1
import sys, threading
from serve_load import Client

port = int(sys.argv[1])
img = [[[0.5] for _ in range(28)] for _ in range(28)]
fails = []

def counters():
    st, text = Client(port).request("GET", "/monitoring/prometheus/metrics")
    get = lambda k: int([l for l in text.splitlines() if l.startswith(k + " ")][0].split()[1])
    return get("serve_forward_passes_total"), get("serve_forward_samples_total")

def at_once(sizes):
    """Sends requests of these many instances together; their statuses."""
    out = [None] * len(sizes)
    def one(k):
        out[k] = Client(port).predict("lenet", [img] * sizes[k])[0]
    ts = [threading.Thread(target=one, args=(k,)) for k in range(len(sizes))]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return out

f0, s0 = counters()
for sizes in ([1, 1, 1, 1], [3, 1]):
    st = at_once(sizes)
    f1, s1 = counters()
    ok = st == [200] * len(sizes) and (f1 - f0, s1 - s0) == (1, 4)
    print("%s requests of %s instance(s): statuses %s, %d forward pass(es) of %d samples in all"
          % ("ok  " if ok else "FAIL", sizes, st, f1 - f0, s1 - s0))
    if not ok:
        fails.append("requests of %s: %d forward passes for %d samples (want one full batch of 4)"
                     % (sizes, f1 - f0, s1 - s0))
    f0, s0 = f1, s1
sys.exit(1 if fails else 0)
PY
serve_stop
echo "serve batch full ok"
