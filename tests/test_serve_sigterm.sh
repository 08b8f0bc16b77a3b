#!/usr/bin/env bash
# build/serve shuts down gracefully: SIGTERM in the middle of load (32 clients, a new
# connection per request, batching with a 5 ms timeout so batches are in flight) stops
# accepting connections, answers every request already read, and exits 0. Checked: every
# request a client got an answer to is a correct 200; the others never got a byte (refused
# or reset: not accepted); the server logged exactly as many answered predicts as the
# clients received, and no request ended unanswered.
set -u
. "$(dirname "$0")/serve_prelude.sh"
serve_start --batch-timeout-micros 5000

PYTHONPATH=scripts timeout -k 5 60 /usr/bin/python3 - "$port" "$pid" >"$tmp/client.out" <<'PY'
import http.client, json, os, signal, sys, threading, time
import numpy as np
from serve_load import expected_answers, instance, test_images

port, pid = int(sys.argv[1]), int(sys.argv[2])
images, _ = test_images(count=50)
expected = expected_answers(port, "lenet", images)
bodies = [json.dumps({"instances": [instance(im)]}) for im in images]
counts = {"ok": 0, "wrong": 0, "not accepted": 0, "bad": 0}
bad = []
lock = threading.Lock()
stop = threading.Event()

def client(k):
    i = k
    while not stop.is_set():
        i = (i + 1) % len(bodies)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            c.request("POST", "/v1/models/lenet:predict", bodies[i], {"Connection": "close"})
            r = c.getresponse()
            data = r.read()
            st = r.status
        except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected,
                BrokenPipeError) as e:
            with lock:
                counts["not accepted"] += 1
            if isinstance(e, ConnectionRefusedError):
                return
            continue
        except Exception as e:  # noqa: BLE001
            with lock:
                counts["bad"] += 1; bad.append(repr(e))
            continue
        finally:
            c.close()
        with lock:
            if st != 200:
                counts["bad"] += 1; bad.append("%d %s" % (st, data[:100]))
            elif int(np.argmax(json.loads(data)["predictions"][0])) != expected[i]:
                counts["wrong"] += 1
            else:
                counts["ok"] += 1

ts = [threading.Thread(target=client, args=(k,)) for k in range(32)]
[t.start() for t in ts]
time.sleep(1.5)
os.kill(pid, signal.SIGTERM)
time.sleep(3)
stop.set()
[t.join() for t in ts]
print("answered_ok %d wrong %d not_accepted %d bad %d warmup %d" % (
    counts["ok"], counts["wrong"], counts["not accepted"], counts["bad"], len(images)))
for b in bad[:5]:
    print("bad: " + b)
PY
wait "$pid"; rc=$?; pid=
cat "$tmp/client.out"
grep -E 'Terminated|unanswered|stopped' "$tmp/serve.err"
fails=0
[ $rc -eq 0 ] || { echo "FAIL serve exited $rc after SIGTERM"; fails=1; }
read -r _ ok _ wrong _ notacc _ badn _ warm < <(grep '^answered_ok' "$tmp/client.out")
logged=$(grep -c 'info: POST /v1/models/lenet:predict 200' "$tmp/serve.err")
ended=$(grep -c 'ended by' "$tmp/serve.err")
echo "clients: $ok answered, $notacc not accepted; server log: $logged answered predicts (with $warm warm-up), $ended ended unanswered"
[ -n "$ok" ] && [ "$ok" -gt 0 ] || { echo "FAIL no request answered"; fails=1; }
[ "${wrong:-1}" -eq 0 ] && [ "${badn:-1}" -eq 0 ] || { echo "FAIL wrong or bad answers"; fails=1; }
[ "$logged" -eq $((ok + warm)) ] || { echo "FAIL the server answered $logged predicts, the clients got $((ok + warm))"; fails=1; }
[ "$ended" -eq 0 ] || { echo "FAIL requests ended unanswered:"; grep 'ended by' "$tmp/serve.err" | head; fails=1; }
[ $fails -eq 0 ] || exit 1
echo "serve sigterm ok"
