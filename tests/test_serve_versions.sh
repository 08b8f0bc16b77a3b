#!/usr/bin/env bash
# build/serve --model-base-path: TF Serving's numbered version folders. Version 1 is
# served; version 2 (the same weights with fc2.bias pushed towards class 3, so every answer
# becomes 3) written while 8 clients keep sending requests is picked up without a restart
# within a few polls, no request failing meanwhile; /versions/1 is then 404 and
# /versions/2 answers, and version 1 is unloaded (the metrics page's
# serve_model_versions_loaded back to 1: no model and batcher thread leaked per swap); a
# truncated version 3 is reported and version 2 stays served. Then, as TF Serving does:
# folder 2 deleted -> version 1 is loaded again and served (2 unloaded); folder 1 deleted
# too -> nothing is served (404); folder 1 back -> served again.
set -u
build=${HVD_BUILD:-build}
for p in "$build/train" "$build/serve"; do
  [ -x "$p" ] || { echo "FAIL: $p is not built (run make)"; exit 1; }
done
tmp=$(mktemp -d /tmp/test_serve_versions.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base/1"
timeout -k 5 120 "$build/train" --model lenet --max-train 500 --max-test 100 --epochs 1 \
  --threads 2 --export "$tmp/base/1/model.safetensors" >"$tmp/train.out" 2>&1 \
  || { echo "FAIL train:"; cat "$tmp/train.out"; exit 1; }
"$build/serve" --model lenet --model-base-path "$tmp/base" --file-system-poll-wait-seconds 1 \
  --port 0 --threads 1 >"$tmp/serve.out" 2>"$tmp/serve.err" &
pid=$!
for _ in $(seq 600); do grep -q 'listening on port' "$tmp/serve.out" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on port \([0-9]*\)$/\1/p' "$tmp/serve.out")
[ -n "$port" ] || { echo "FAIL serve did not start:"; cat "$tmp/serve.err"; exit 1; }

PYTHONPATH=scripts timeout -k 5 100 /usr/bin/python3 - "$port" "$tmp/base" <<'PY' || exit 1
import json, os, shutil, struct, sys, threading, time
import numpy as np
from serve_load import Client, instance, test_images

port, base = int(sys.argv[1]), sys.argv[2]
images, _ = test_images(count=20)
fails = []

def versions(c):
    st, doc = c.request("GET", "/v1/models/lenet")
    return [v["version"] for v in doc["model_version_status"]] if st == 200 else st

def loaded(c):
    st, text = c.request("GET", "/monitoring/prometheus/metrics")
    n = [l.split()[1] for l in text.splitlines() if l.startswith("serve_model_versions_loaded ")]
    return int(n[0]) if n else None

def wait_for(what, want, seconds=10):
    """Polls what() until it returns want (a bound that only catches a server that never
    gets there); returns the last value."""
    t0 = time.time()
    got = what()
    while got != want and time.time() - t0 < seconds:
        time.sleep(0.1)
        got = what()
    return got

c = Client(port)
if versions(c) != ["1"]:
    fails.append("at start: %s" % versions(c))

# version 2: fc2.bias[3] += 1000 (written to a temporary name, then renamed into place)
raw = open(os.path.join(base, "1", "model.safetensors"), "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + n])
b, e = hdr["fc2.bias"]["data_offsets"]
bias = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=np.float32).copy()
bias[3] += 1000
new = raw[:8 + n + b] + bias.tobytes() + raw[8 + n + e:]

stop = threading.Event()
errors, answers = [], []
def load(k):
    cl = Client(port)
    while not stop.is_set():
        st, doc = cl.predict("lenet", [instance(images[k])])
        if st != 200:
            errors.append("%d %s" % (st, doc))
        else:
            answers.append(int(np.argmax(doc["predictions"][0])))
ts = [threading.Thread(target=load, args=(k,)) for k in range(8)]
[t.start() for t in ts]
time.sleep(0.5)
os.makedirs(os.path.join(base, "2"))
with open(os.path.join(base, "2", "model.safetensors.tmp"), "wb") as f:
    f.write(new)
os.rename(os.path.join(base, "2", "model.safetensors.tmp"), os.path.join(base, "2", "model.safetensors"))
t0 = time.time()
while versions(c) != ["2"] and time.time() - t0 < 10:
    time.sleep(0.1)
waited = time.time() - t0
time.sleep(0.5)
stop.set()
[t.join() for t in ts]
print("version 2 served after %.1f s; %d requests during the swap, %d errors" % (waited, len(answers), len(errors)))
if versions(c) != ["2"]:
    fails.append("version 2 not served after %.1f s: %s" % (waited, versions(c)))
if errors:
    fails.append("requests failed during the swap: %s" % errors[:3])
st, doc = c.predict("lenet", [instance(im) for im in images])
if st != 200 or any(int(np.argmax(p)) != 3 for p in doc["predictions"]):
    fails.append("version 2's answers are not all class 3: %d %s" % (st, str(doc)[:200]))
st, doc = c.predict("lenet", [instance(images[0])], version=1)
if st != 404:
    fails.append("/versions/1 after the swap: %d %s" % (st, doc))
st, doc = c.predict("lenet", [instance(images[0])], version=2)
if st != 200:
    fails.append("/versions/2: %d %s" % (st, doc))
got = wait_for(lambda: loaded(c), 1)
print("versions loaded after the swap: %s" % got)
if got != 1:
    fails.append("after the swap, serve_model_versions_loaded is %s, not 1: version 1 never unloaded" % got)

# a truncated version 3: reported, version 2 stays
os.makedirs(os.path.join(base, "3"))
with open(os.path.join(base, "3", "model.safetensors"), "wb") as f:
    f.write(new[:len(new) // 2])
time.sleep(2.5)
if versions(c) != ["2"]:
    fails.append("after a truncated version 3: %s" % versions(c))
shutil.rmtree(os.path.join(base, "3"))

# folder 2 deleted: version 1 again (TF Serving unloads 2, serves the newest left)
shutil.rmtree(os.path.join(base, "2"))
got = wait_for(lambda: versions(c), ["1"])
print("after folder 2 was deleted: versions %s" % got)
if got != ["1"]:
    fails.append("after folder 2 was deleted, the versions served are %s, not [\"1\"]" % got)
st, doc = c.predict("lenet", [instance(im) for im in images])
if st != 200 or all(int(np.argmax(p)) == 3 for p in doc["predictions"]):
    fails.append("after folder 2 was deleted, the answers are still version 2's: %d %s" % (st, str(doc)[:200]))
st, doc = c.predict("lenet", [instance(images[0])], version=2)
if st != 404:
    fails.append("/versions/2 after folder 2 was deleted: %d %s" % (st, doc))
got = wait_for(lambda: loaded(c), 1)
if got != 1:
    fails.append("after folder 2 was deleted, serve_model_versions_loaded is %s, not 1" % got)

# folder 1 deleted too: nothing served; back: served again
os.rename(os.path.join(base, "1"), os.path.join(base, "old1"))
got = wait_for(lambda: versions(c), 404)
st, doc = c.predict("lenet", [instance(images[0])])
print("no version folder left: status %s, predict %d" % (got, st))
if got != 404 or st != 404:
    fails.append("with no version folder left: status %s, predict %d %s (want 404)" % (got, st, doc))
if loaded(c) != 0:
    fails.append("with no version folder left, serve_model_versions_loaded is %s, not 0" % loaded(c))
os.rename(os.path.join(base, "old1"), os.path.join(base, "1"))
got = wait_for(lambda: versions(c), ["1"])
if got != ["1"]:
    fails.append("folder 1 back: versions %s, not [\"1\"]" % got)
for f in fails:
    print("FAIL " + f)
sys.exit(1 if fails else 0)
PY
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
grep -E 'version [0-9]' "$tmp/serve.err"
[ $rc -eq 0 ] || { echo "FAIL serve exited $rc"; exit 1; }
grep -q 'warning: version 3 not loaded' "$tmp/serve.err" || { echo "FAIL the truncated version 3 was not reported"; exit 1; }
grep -q "version 2's folder is gone" "$tmp/serve.err" || { echo "FAIL the deleted version 2 was not reported"; exit 1; }
echo "serve versions ok"
