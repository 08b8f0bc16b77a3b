#!/usr/bin/env bash
# build/serve end to end: lenet trained and exported by build/train (a 3000-image subset,
# 1 epoch), served, and the first 1000 Fashion-MNIST test images sent through the REST API
# one per request ([28,28,1] floats in [0,1], 8 clients) score exactly the test accuracy
# train printed for the same 1000 images. Also: [28,28], flat [784], several instances per
# request and the columnar "inputs" form give the same probabilities as [28,28,1];
# GET /v1/models/lenet and /metadata answer as TF Serving does.
# The normalisation train records in its export (__metadata__, docs/serve.md): served
# without --normalize, scores equal those of --normalize fashion-mnist bit for bit; a
# copy recording mnist's constants scores as the original with --normalize mnist (and
# not as fashion-mnist); a copy without metadata logs its default (fashion-mnist) and
# scores the same; --model mlp on lenet's export exits non-zero naming the recorded
# model. :classify on 50 images: the top label is the recorded class name of predict's
# argmax, with its score; the bare-sample form answers the same. Under a sanitizer
# (HVD_TEST_SANITIZER, set by make SANITIZE=... test) lenet trains on 1000 images and the
# first 250 test images are sent: the same check, for the instrumented build's memory
# errors rather than a long run.
set -u
n_train=3000 n_test=1000
[ -n "${HVD_TEST_SANITIZER:-}" ] && n_train=1000 n_test=250
build=${HVD_BUILD:-build}
data=/usr/share/datasets/fashion-mnist
for p in "$build/train" "$build/serve"; do
  [ -x "$p" ] || { echo "FAIL: $p is not built (run make)"; exit 1; }
done
/usr/bin/python3 -c 'import numpy' || { echo "FAIL: /usr/bin/python3 lacks numpy"; exit 1; }
[ -f "$data/t10k-images-idx3-ubyte.gz" ] || { echo "FAIL: $data missing"; exit 1; }
tmp=$(mktemp -d /tmp/test_serve_accuracy.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

timeout -k 5 120 "$build/train" --model lenet --max-train "$n_train" --max-test "$n_test" \
  --epochs 1 --threads 2 --optimizer adam --export "$tmp/lenet.safetensors" >"$tmp/train.out" 2>&1 \
  || { echo "FAIL train:"; cat "$tmp/train.out"; exit 1; }
acc=$(sed -n 's/^test accuracy: \([0-9.]*\)%$/\1/p' "$tmp/train.out")
[ -n "$acc" ] || { echo "FAIL no test accuracy from train:"; cat "$tmp/train.out"; exit 1; }

"$build/serve" --model lenet --weights "$tmp/lenet.safetensors" \
  --port 0 --threads 1 >"$tmp/serve.out" 2>"$tmp/serve.err" &
pid=$!
for _ in $(seq 600); do grep -q 'listening on port' "$tmp/serve.out" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on port \([0-9]*\)$/\1/p' "$tmp/serve.out")
[ -n "$port" ] || { echo "FAIL serve did not start:"; cat "$tmp/serve.err"; exit 1; }

PYTHONPATH=scripts timeout -k 5 120 /usr/bin/python3 - "$port" "$acc" "$data" "$n_test" "$build/serve" "$tmp" <<'PY' || exit 1
import sys, json, subprocess, threading
import numpy as np
from serve_load import Client, test_images, instance, st_metadata, st_copy, start_server

port, train_acc, data, n_test = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
serve, tmp = sys.argv[5], sys.argv[6]
weights = tmp + "/lenet.safetensors"
images, labels = test_images(data, n_test)
fails = []

c = Client(port)
st, doc = c.request("GET", "/v1/models/lenet")
if st != 200 or doc["model_version_status"][0]["state"] != "AVAILABLE":
    fails.append("status: %d %s" % (st, doc))
st, doc = c.request("GET", "/v1/models/lenet/metadata")
sig = doc.get("metadata", {}).get("signature_def", {}).get("signature_def", {}).get("serving_default", {})
dims = [d["size"] for d in sig.get("inputs", {}).get("input", {}).get("tensor_shape", {}).get("dim", [])]
if st != 200 or dims != ["-1", "28", "28", "1"]:
    fails.append("metadata: %d %s" % (st, doc))

pred = [None] * len(images)
def work(k):
    cl = Client(port)
    for i in range(k, len(images), 8):
        st, doc = cl.predict("lenet", [instance(images[i])])
        if st != 200:
            fails.append("image %d: %d %s" % (i, st, doc)); continue
        p = doc["predictions"][0]
        if len(p) != 10 or abs(sum(p) - 1) > 1e-4:
            fails.append("image %d: not 10 softmax scores: %s" % (i, p))
        pred[i] = int(np.argmax(p))
    cl.close()
ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
served = 100.0 * np.mean([p == l for p, l in zip(pred, labels)])
print("train: test accuracy %.2f%%; served (%d requests): %.2f%%" % (train_acc, n_test, served))
if abs(served - train_acc) > 1e-6:
    fails.append("accuracy through the API %.2f%% != train's %.2f%%" % (served, train_acc))

# the same 4 images in every accepted form
four = images[:4]
st, ref = c.predict("lenet", [instance(im) for im in four])
ref = np.array(ref["predictions"])
forms = {
    "[28,28]": {"instances": [instance(im, "hw") for im in four]},
    "[784]": {"instances": [instance(im, "flat") for im in four]},
    "named": {"instances": [{"input": instance(im)} for im in four]},
    "columnar": {"inputs": [instance(im) for im in four]},
    "columnar named": {"inputs": {"input": [instance(im) for im in four]}, "signature_name": "serving_default"},
}
for name, body in forms.items():
    st, doc = c.request("POST", "/v1/models/lenet:predict", json.dumps(body))
    key = "outputs" if "inputs" in body else "predictions"
    if st != 200 or key not in doc or np.abs(np.array(doc[key]) - ref).max() > 1e-6:
        fails.append("form %s: %d %s" % (name, st, str(doc)[:200]))
    else:
        print("ok   form %s" % name)
for i in range(4):  # batched == alone
    st, doc = c.predict("lenet", [instance(four[i])])
    if np.abs(np.array(doc["predictions"][0]) - ref[i]).max() > 1e-5:
        fails.append("image %d alone differs from in a batch of 4" % i)

# ---- the normalisation the export records ----
meta = st_metadata(weights)
st, doc = c.request("GET", "/v1/models/lenet/metadata")
exp = doc.get("metadata", {}).get("hvd_export", {})
if (exp.get("normalization") != "recorded" or exp.get("norm_mean") != meta.get("norm_mean")
        or exp.get("input_shape") != "1,28,28" or exp.get("class_names", [None])[0] != "T-shirt/top"):
    fails.append("metadata's hvd_export: %s (file: %s)" % (exp, meta))
eight = images[:8]
ref8 = np.array(c.predict("lenet", [instance(im) for im in eight])[1]["predictions"])

def served(args, path):
    """Probabilities of eight from a serve of path with args, and its stderr."""
    with open(tmp + "/variant.err", "w+") as err:
        p, vport = start_server([serve, "--model", "lenet", "--weights", path, "--port", "0",
                                 "--threads", "1", "--log-level", "warning"] + args, err)
        try:
            st, d = Client(vport).predict("lenet", [instance(im) for im in eight])
        finally:
            p.terminate()
            if p.wait() != 0:
                fails.append("serve %s %s exited %d after SIGTERM" % (path, args, p.returncode))
        err.seek(0)
        return (np.array(d["predictions"]) if st == 200 else None), err.read()

def same(a, b):
    return a is not None and b is not None and np.array_equal(a, b)

flag, _ = served(["--normalize", "fashion-mnist"], weights)
if not same(flag, ref8):
    fails.append("recorded normalisation scores differ from --normalize fashion-mnist's")
st_copy(weights, tmp + "/mnist.safetensors", dict(meta, dataset="mnist", norm_mean="0.1307", norm_std="0.3081"))
rec_mnist, _ = served([], tmp + "/mnist.safetensors")
flag_mnist, _ = served(["--normalize", "mnist"], weights)
if not same(rec_mnist, flag_mnist) or same(rec_mnist, ref8):
    fails.append("a file recording mnist's constants does not score as --normalize mnist")
st_copy(weights, tmp + "/nometa.safetensors", None)
bare, log = served([], tmp + "/nometa.safetensors")
line = [l for l in log.splitlines() if "records no normalisation" in l]
if not same(bare, ref8) or not line or "default, fashion-mnist" not in line[0]:
    fails.append("a file without metadata: scores equal %s, log %r" % (same(bare, ref8), log[:300]))
r = subprocess.run([serve, "--model", "mlp", "--weights", weights, "--port", "0"],
                   capture_output=True, text=True, timeout=30)
if r.returncode == 0 or "exported for model lenet" not in r.stderr or "listening" in r.stdout:
    fails.append("--model mlp on lenet's export: exit %d, %r" % (r.returncode, r.stderr[:300]))
if not fails:
    print("ok   recorded normalisation == --normalize fashion-mnist; mnist's recorded == "
          "--normalize mnist; no metadata: default logged; model mismatch refused")

# ---- :classify ----
names = json.loads(meta["class_names"])
fifty = images[:50]
st, pd = c.predict("lenet", [instance(im) for im in fifty])
probs = np.array(pd["predictions"])
st, cd = c.classify("lenet", [{"image": instance(im)} for im in fifty])
res = cd.get("result", []) if st == 200 else []
if len(res) != len(fifty):
    fails.append("classify: %d %s" % (st, str(cd)[:200]))
for i, pairs in enumerate(res):
    scores = [p[1] for p in pairs]
    k = int(np.argmax(probs[i]))
    if (len(pairs) != 10 or sorted(p[0] for p in pairs) != sorted(names) or scores != sorted(scores, reverse=True)
            or pairs[0][0] != names[k] or abs(pairs[0][1] - probs[i][k]) > 1e-6):
        fails.append("classify example %d: %s, predict's argmax %d (%s)" % (i, pairs[:2], k, names[k]))
st, cd2 = c.request("POST", "/v1/models/lenet/versions/1:classify",
                    json.dumps({"signature_name": "serving_default", "examples": [instance(im, "flat") for im in fifty[:4]]}))
# the same top label and score as in the 50-image request (the score within 1e-6: a
# batch of 4 may take other GEMM kernels than one of 50, OpenBLAS's Haswell ones do)
top4 = [r[0] for r in cd2.get("result", [])] if st == 200 else []
if (len(top4) != 4 or [t[0] for t in top4] != [r[0][0] for r in res[:4]]
        or any(abs(t[1] - r[0][1]) > 1e-6 for t, r in zip(top4, res))):
    fails.append("classify, bare samples: %d %s" % (st, str(cd2)[:200]))
else:
    print("ok   classify: top labels of %d examples == predict's argmax" % len(res))
for f in fails[:20]:
    print("FAIL " + f)
sys.exit(1 if fails else 0)
PY
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
[ $rc -eq 0 ] || { echo "FAIL serve exited $rc after SIGTERM"; tail "$tmp/serve.err"; exit 1; }
n=$(grep -c 'info: POST /v1/models/lenet:predict 200' "$tmp/serve.err")
[ "$n" -ge "$n_test" ] || { echo "FAIL only $n predict lines in the request log"; exit 1; }
echo "serve accuracy ok"
