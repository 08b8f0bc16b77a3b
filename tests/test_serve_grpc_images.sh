#!/usr/bin/env bash
# Encoded images in both of build/serve's protocols: the same 50 Fashion-MNIST test
# images as JPEG bytes (PIL, quality 95) get bit-identical predictions as gRPC DT_STRING
# and as REST {"b64": ...} (one image per call, and all 50 in one call); as PNG bytes
# (lossless) they get exactly the predictions of the same images sent as floats. An
# image of another size (56x56) is resized to the model's 28x28 and answered; bytes that
# are no image, and a progressive JPEG of more than 500 scans, get INVALID_ARGUMENT / 400
# naming the input and the image, and the server goes on.
set -u
. "$(dirname "$0")/serve_prelude.sh"
serve_start

PYTHONPATH=scripts timeout -k 5 120 /usr/bin/python3 - "$port" "$grpc_port" "$tmp" <<'PY' || exit 1
import base64, json, sys
import grpc
import numpy as np
from serve_load import Client, GrpcClient, encode_image, grpc_messages, instance, test_images

port, gport, tmp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
m = grpc_messages(tmp)
g = GrpcClient(gport, m)
c = Client(port)
images, _ = test_images(count=50)
fails = []

def rest(instances):
    st, doc = c.request("POST", "/v1/models/lenet:predict", json.dumps({"instances": instances}),
                        {"Content-Type": "application/json"})
    return st, doc

def rest_probs(instances):
    st, doc = rest(instances)
    if st != 200:
        sys.exit("FAIL REST: %d %s" % (st, doc))
    return np.array(doc["predictions"], dtype=np.float32)

same = lambda a, b: a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
b64 = lambda data: {"b64": base64.b64encode(data).decode()}
jpegs = [encode_image(im, "JPEG") for im in images]
pngs = [encode_image(im, "PNG") for im in images]

g1 = np.concatenate([g.predict_images([j]) for j in jpegs])
r1 = np.concatenate([rest_probs([b64(j)]) for j in jpegs])
if not same(g1, r1):
    fails.append("JPEG, one per call: gRPC and REST differ in %d values" % np.sum(g1 != r1))
g50, r50 = g.predict_images(jpegs), rest_probs([{"input": b64(j)} for j in jpegs])
if not same(g50, r50):
    fails.append("JPEG, 50 in one call: gRPC and REST differ")
floats1 = np.concatenate([rest_probs([instance(im)]) for im in images])
agree = np.mean(np.argmax(g1, 1) == np.argmax(floats1, 1))
if agree < 0.9:
    fails.append("JPEG: the top class agrees with the floats' for only %.0f%% of the images" % (100 * agree))
p1 = np.concatenate([g.predict_images([p]) for p in pngs])
if not same(p1, floats1):
    fails.append("PNG, one per call (gRPC): not the floats' predictions (%d values differ)" % np.sum(p1 != floats1))
if not same(rest_probs([b64(p) for p in pngs]), rest_probs([instance(im) for im in images])):
    fails.append("PNG, 50 in one call (REST): not the floats' predictions")
big = g.predict_images([encode_image(images[0], "PNG", size=(56, 56))])
if big.shape != (1, 10) or abs(float(big.sum()) - 1) > 1e-4:
    fails.append("a 56x56 image: %s" % big)

try:
    g.predict_images([jpegs[0], b"not an image"])
    fails.append("gRPC, bytes that are no image: answered")
except grpc.RpcError as e:
    if e.code() != grpc.StatusCode.INVALID_ARGUMENT or "input" not in e.details() or "image 1" not in e.details():
        fails.append("gRPC, no image: %s %s" % (e.code(), e.details()))
try:
    g.predict_images([jpegs[0][:200]])
    fails.append("gRPC, a truncated JPEG: answered")
except grpc.RpcError as e:
    if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
        fails.append("gRPC, a truncated JPEG: %s %s" % (e.code(), e.details()))
st, doc = rest([b64(b"GIF89a....")])
if st != 400 or "instance 0" not in doc.get("error", ""):
    fails.append("REST, no image: %d %s" % (st, doc))
st, doc = rest([{"b64": "%%%"}])
if st != 400 or "base64" not in doc.get("error", ""):
    fails.append("REST, not base64: %d %s" % (st, doc))
# A progressive JPEG of 600 scans (its last scan repeated): refused, since each scan
# decodes the whole image again and a small message could ask for minutes of CPU. data/'s
# decoder stops at libjpeg's first warning (the bogus progression; PIL's rule), before
# TurboJPEG's limit of 500 scans (TJFLAG_LIMITSCANS) would.
import io
from PIL import Image
buf = io.BytesIO()
Image.fromarray((images[0].reshape(28, 28) * 255).astype(np.uint8)).save(buf, "JPEG", progressive=True)
prog = buf.getvalue()
last = prog.rfind(b"\xff\xda")
many = prog[:last] + prog[last:-2] * 600 + b"\xff\xd9"
try:
    g.predict_images([many])
    fails.append("gRPC, a JPEG of 600 scans: answered")
except grpc.RpcError as e:
    if e.code() != grpc.StatusCode.INVALID_ARGUMENT or not any(
            w in e.details() for w in ("500 scans", "bad JPEG data")):
        fails.append("gRPC, a JPEG of 600 scans: %s %s" % (e.code(), e.details()))
if not same(g.predict_images([jpegs[3]]), g1[3:4]):
    fails.append("after the bad requests: a good one answers differently")

if fails:
    print("FAIL\n  " + "\n  ".join(fails))
    sys.exit(1)
print("ok: 50 JPEGs bit-identical in gRPC and REST (top class as floats' for %.0f%%); PNGs "
      "exactly as floats; resized and bad images handled" % (100 * agree))
PY
serve_stop
