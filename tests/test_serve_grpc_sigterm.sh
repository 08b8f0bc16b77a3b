#!/usr/bin/env bash
# SIGTERM to build/serve under gRPC load (16 grpcio channels, each its own connection,
# calls of 8 images, batching with a 5 ms timeout so batches are in flight) answers every
# call the server began: serve exits 0; every call a client got an answer to is correct
# (the answer the image batch got alone before); the others failed UNAVAILABLE (not
# taken: refused by GOAWAY, or the server gone); the server logged exactly as many
# answered Predicts as the clients received, and no call cut unanswered. Before the
# SIGTERM, the calls of the 16 connections ran in batches together (fewer forward passes
# than calls on the metrics page): each call has its own thread, none waits behind another.
set -u
. "$(dirname "$0")/serve_prelude.sh"
serve_start --batch-timeout-micros 5000

PYTHONPATH=scripts timeout -k 5 90 /usr/bin/python3 - "$grpc_port" "$pid" "$tmp" "$port" >"$tmp/client.out" <<'PY'
import os, signal, sys, threading, time, urllib.request
import grpc
import numpy as np
from serve_load import GrpcClient, grpc_messages, test_images

gport, pid, tmp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
m = grpc_messages(tmp)
images, _ = test_images(count=64)
batches = [images[i:i + 8].reshape(8, 28, 28, 1) for i in range(0, 64, 8)]
g0 = GrpcClient(gport, m)
expected = [np.argmax(g0.predict(b), axis=1) for b in batches]
g0.close()
counts = {"ok": 0, "wrong": 0, "unavailable": 0, "other": 0}
others = []
lock = threading.Lock()
stop = threading.Event()

def client(k):
    g = GrpcClient(gport, m)
    i = k
    while not stop.is_set():
        i = (i + 1) % len(batches)
        try:
            p = g.predict(batches[i], timeout=30)
            kind = "ok" if np.array_equal(np.argmax(p, axis=1), expected[i]) else "wrong"
        except grpc.RpcError as e:
            kind = "unavailable" if e.code() == grpc.StatusCode.UNAVAILABLE else "other"
            if kind == "other":
                with lock:
                    others.append("%s %s" % (e.code(), e.details()))
        with lock:
            counts[kind] += 1
        if kind == "unavailable":
            time.sleep(0.05)
    g.close()

ts = [threading.Thread(target=client, args=(k,)) for k in range(16)]
[t.start() for t in ts]
for _ in range(300):  # under load: 64 answers first (30 s at most: a loaded machine)
    time.sleep(0.1)
    with lock:
        if counts["ok"] >= 64:
            break
with lock:
    before = counts["ok"]
metrics = urllib.request.urlopen("http://127.0.0.1:%s/monitoring/prometheus/metrics" % sys.argv[4],
                                 timeout=30).read().decode()
os.kill(pid, signal.SIGTERM)
fw, jobs = (int(l.split()[1]) for l in metrics.splitlines()
            if l.startswith(("serve_forward_passes_total ", "serve_batched_jobs_total ")))
time.sleep(2)
stop.set()
[t.join() for t in ts]
print("ok %(ok)d wrong %(wrong)d unavailable %(unavailable)d other %(other)d" % counts)
print("before_signal %d" % before)
print("batches %d forward passes for %d calls" % (fw, jobs))
for o in others[:5]:
    print("other: " + o)
PY
rc=$?
wait "$pid"; serve_rc=$?; pid=
cat "$tmp/client.out"
[ $rc -eq 0 ] || { echo "FAIL the client script failed ($rc)"; exit 1; }
[ $serve_rc -eq 0 ] || { echo "FAIL serve exited $serve_rc after SIGTERM"; tail "$tmp/serve.err"; exit 1; }
read -r _ ok _ wrong _ unavail _ other < "$tmp/client.out"
before=$(sed -n 's/^before_signal //p' "$tmp/client.out")
logged=$(grep -c "gRPC Predict OK" "$tmp/serve.err")
cut=$(grep -c "gRPC Predict .*the connection closed" "$tmp/serve.err")
fail=0
[ "$wrong" -eq 0 ] && [ "$other" -eq 0 ] || { echo "FAIL $wrong wrong answers, $other calls failed otherwise than UNAVAILABLE"; fail=1; }
[ "$before" -gt 0 ] || { echo "FAIL no call answered before SIGTERM: no load"; fail=1; }
read -r _ fw _ _ _ jobs _ < <(grep '^batches ' "$tmp/client.out")
# Batching is judged under load only: 64 answers before the metrics were read.
if [ "$before" -lt 64 ]; then
  echo "FAIL only $before calls answered in 30 s before SIGTERM: too little load to judge batching"; fail=1
elif [ "$fw" -ge "$jobs" ]; then
  echo "FAIL $fw forward passes for $jobs calls: no batch of calls"; fail=1
fi
# the 8 calls of the warm-up are logged too
[ "$logged" -eq $((ok + 8)) ] || { echo "FAIL the server logged $logged answered Predicts, the clients received $ok (+8 warm-up)"; fail=1; }
[ "$cut" -eq 0 ] || { echo "FAIL $cut call(s) cut unanswered:"; grep "connection closed" "$tmp/serve.err" | head -3; fail=1; }
grep -q "still unanswered" "$tmp/serve.err" && { echo "FAIL serve reported unanswered calls"; fail=1; }
[ $fail -eq 0 ] || { tail -5 "$tmp/serve.err"; exit 1; }
echo "ok: $ok calls answered ($before before SIGTERM), $unavail not taken, every answer received; serve exited 0"
