#!/usr/bin/env bash
# A client that lets its gRPC calls time out (or cancels them) cannot make build/serve
# start call threads without bound: a call answered at its deadline leaves nghttp2's
# count of open streams while its thread still waits in the batcher, so the stream limit
# (100 per connection) does not bound the threads. Calls wait 3 s in the batcher
# (--batch-timeout-micros) while 120 client threads call with a 0.2 s timeout, again and
# again, for 2.5 s on one connection: the server's threads must stay under 100 + a few,
# the calls over the limit are answered UNAVAILABLE "server busy", and a good call
# answers afterwards.
set -u
. "$(dirname "$0")/serve_prelude.sh"
serve_start --enable-batching --max-batch-size 512 --batch-timeout-micros 3000000

PYTHONPATH=scripts timeout -k 5 120 /usr/bin/python3 - "$grpc_port" "$tmp" "$pid" <<'PY' || exit 1
import sys, threading, time
import grpc
import numpy as np
from serve_load import GrpcClient, grpc_messages

gport, tmp, pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
m = grpc_messages(tmp)
g = GrpcClient(gport, m)
x = np.zeros((1, 28, 28, 1), np.float32)

def threads():
    with open("/proc/%d/status" % pid) as f:
        return int(next(l for l in f if l.startswith("Threads:")).split()[1])

base = threads()
codes, stop, peak = {}, time.time() + 2.5, [base]
lock = threading.Lock()

def caller():
    while time.time() < stop:
        try:
            g.predict(x, timeout=0.2)
            code = "OK"
        except grpc.RpcError as e:
            code = e.code().name
            if code == "UNAVAILABLE" and "server busy" not in e.details():
                code = "UNAVAILABLE " + e.details()
        with lock:
            codes[code] = codes.get(code, 0) + 1

callers = [threading.Thread(target=caller) for _ in range(120)]
for t in callers:
    t.start()
while any(t.is_alive() for t in callers):
    peak[0] = max(peak[0], threads())
    time.sleep(0.02)
for t in callers:
    t.join()
print("server threads: %d at start, at most %d under the calls; answers %s" % (base, peak[0], codes))
fails = []
if peak[0] > base + 100 + 10:
    fails.append("the server ran %d threads (%d at start): call threads are not bounded"
                 % (peak[0], base))
if codes.get("DEADLINE_EXCEEDED", 0) == 0:
    fails.append("no call timed out: the test did not load the server as meant")
odd = [c for c in codes if c not in ("OK", "DEADLINE_EXCEEDED", "UNAVAILABLE", "CANCELLED")]
if odd:
    fails.append("unexpected answers: %s" % odd)
time.sleep(3.5)  # the batch of the timed-out calls runs
try:
    g.predict(x, timeout=30)
except grpc.RpcError as e:
    fails.append("a good call afterwards failed: %s %s" % (e.code().name, e.details()))
for f in fails:
    print("FAIL " + f)
sys.exit(1 if fails else 0)
PY
serve_stop
echo "PASS test_serve_grpc_threads"
