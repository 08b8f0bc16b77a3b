#!/usr/bin/env bash
# build/serve's gRPC API (TF Serving's, on --grpc-port) answers as its REST API does: a
# grpcio client with the message classes built from the repo's proto/ (grpc_tools.protoc)
# gets, for the same 50 Fashion-MNIST test images, predictions bit-identical to REST's:
# one image per call and all 50 in one call (against REST's same batches: a forward
# pass's numbers depend on its batch size), as float_val and as tensor_content.
# Classify (examples of one float_list feature) answers REST's :classify labels and scores
# exactly. GetModelMetadata answers TF Serving's SignatureDefMap (input "input" DT_FLOAT
# [-1,28,28,1], output "predictions" [-1,10], tensorflow/serving/predict) and
# GetModelStatus version 1 AVAILABLE with error_code OK. --version-labels stable=1: the
# label selects version 1 in both protocols (gRPC version_label, REST
# /v1/models/lenet/labels/stable), an unknown label is NOT_FOUND / 404, and a label naming
# a version not served (canary=2) stops serve at start, exit 2, naming it.
set -u
. "$(dirname "$0")/serve_prelude.sh"
serve_start --version-labels stable=1
[ -n "$grpc_port" ] || { echo "FAIL no 'gRPC port N' line:"; cat "$tmp/serve.out"; exit 1; }

PYTHONPATH=scripts timeout -k 5 120 /usr/bin/python3 - "$port" "$grpc_port" "$tmp" <<'PY' || exit 1
import sys
import grpc
import numpy as np
from serve_load import Client, GrpcClient, grpc_messages, instance, test_images

port, gport, tmp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
m = grpc_messages(tmp)
g = GrpcClient(gport, m)
images, _ = test_images(count=50)
x = images.reshape(-1, 28, 28, 1)
fails = []

c = Client(port)
rest = []
for img in images:
    st, doc = c.predict("lenet", [instance(img)])
    if st != 200:
        sys.exit("FAIL REST predict: %d %s" % (st, doc))
    rest.append(doc["predictions"][0])
rest = np.array(rest, dtype=np.float32)  # REST's numbers read back as the floats served
# A forward pass's numbers depend on its batch size (BLAS blocking): the same batches in
# both protocols (the calls here are sequential, each its own batch).
def rest_batch(imgs, path="/v1/models/lenet:predict"):
    st, doc = c.request("POST", path, '{"instances": %s}' % [instance(i) for i in imgs],
                        {"Content-Type": "application/json"})
    if st != 200:
        sys.exit("FAIL REST %s: %d %s" % (path, st, doc))
    return np.array(doc["predictions"], dtype=np.float32)
rest50, rest3 = rest_batch(images), rest_batch(images[:3])

one = np.concatenate([g.predict(x[i:i + 1]) for i in range(len(x))])
for name, got, want in [("float_val, one image per call", one, rest),
                        ("tensor_content, one image per call",
                         np.concatenate([g.predict(x[i:i + 1], content=True) for i in range(len(x))]), rest),
                        ("float_val, 50 images in one call", g.predict(x), rest50),
                        ("tensor_content, 50 images in one call", g.predict(x, content=True), rest50),
                        ("tensor_content [50,784]", g.predict(x.reshape(50, 784), content=True), rest50)]:
    if got.shape != want.shape or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        diff = int(np.sum(got != want)) if got.shape == want.shape else "shape %s" % (got.shape,)
        fails.append("%s: not bit-identical to REST (%s of %d values differ)" % (name, diff, want.size))

r = g.call("/tensorflow.serving.PredictionService/Predict", g.predict_request(x[:2]),
           m["predict"].PredictResponse)
if r.model_spec.name != "lenet" or r.model_spec.version.value != 1 or \
        r.model_spec.signature_name != "serving_default":
    fails.append("Predict's model_spec: %s" % r.model_spec)
t = r.outputs["predictions"]
if t.dtype != m["types"].DT_FLOAT or [d.size for d in t.tensor_shape.dim] != [2, 10]:
    fails.append("Predict's output: dtype %d shape %s" % (t.dtype, t.tensor_shape))

# Classify: the same 50 images in one call as REST's :classify in one request.
st_, doc = c.classify("lenet", [{"image": instance(im)} for im in images])
cl = g.classify(images=x)
got = [[(k.label, k.score) for k in e.classes] for e in cl.result.classifications]
want = [[(l, np.float32(s)) for l, s in e] for e in doc.get("result", [])] if st_ == 200 else None
if got != want or cl.model_spec.version.value != 1:
    fails.append("Classify: not REST's :classify answer (%s)" % str(got[:1])[:300])

md = g.metadata()
sigs = m["get_model_metadata"].SignatureDefMap()
if md.metadata["signature_def"].type_url != "type.googleapis.com/tensorflow.serving.SignatureDefMap" \
        or not md.metadata["signature_def"].Unpack(sigs):
    fails.append("GetModelMetadata: no SignatureDefMap: %s" % md)
sd = sigs.signature_def["serving_default"]
dims = lambda ti: [d.size for d in ti.tensor_shape.dim]
if list(sd.inputs) != ["input"] or dims(sd.inputs["input"]) != [-1, 28, 28, 1] or \
        sd.inputs["input"].dtype != m["types"].DT_FLOAT or list(sd.outputs) != ["predictions"] or \
        dims(sd.outputs["predictions"]) != [-1, 10] or sd.method_name != "tensorflow/serving/predict":
    fails.append("GetModelMetadata's serving_default: %s" % sd)
if md.model_spec.name != "lenet" or md.model_spec.version.value != 1:
    fails.append("GetModelMetadata's model_spec: %s" % md.model_spec)

st = g.status()
vs = list(st.model_version_status)
if len(vs) != 1 or vs[0].version != 1 or \
        vs[0].state != m["get_model_status"].ModelVersionStatus.AVAILABLE or vs[0].status.error_code != 0:
    fails.append("GetModelStatus: %s" % st)

if not np.array_equal(g.predict(x[:3], label="stable"), rest3):
    fails.append("version_label stable: not version 1's answer")
if not np.array_equal(rest_batch(images[:3], "/v1/models/lenet/labels/stable:predict"), rest3):
    fails.append("REST /labels/stable: not version 1's answer")
st_, doc = c.request("GET", "/v1/models/lenet/labels/stable")
if st_ != 200 or doc["model_version_status"][0]["version"] != "1":
    fails.append("REST GET /labels/stable: %d %s" % (st_, doc))
try:
    g.predict(x[:1], label="canary")
    fails.append("version_label canary: answered")
except grpc.RpcError as e:
    if e.code() != grpc.StatusCode.NOT_FOUND or "canary" not in e.details():
        fails.append("version_label canary: %s %s" % (e.code(), e.details()))
st_, doc = c.request("GET", "/v1/models/lenet/labels/canary/metadata")
if st_ != 404 or "canary" not in doc.get("error", ""):
    fails.append("REST /labels/canary: %d %s" % (st_, doc))

if fails:
    print("FAIL\n  " + "\n  ".join(fails))
    sys.exit(1)
print("ok: 50 images bit-identical to REST (float_val, tensor_content, batch 1 and 50); "
      "metadata, status and version labels as TF Serving answers")
PY
serve_stop

"$build/serve" --model lenet --weights "$tmp/lenet.safetensors" --port 0 \
  --version-labels stable=1,canary=2 >"$tmp/labels.out" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "canary=2 names no version served" "$tmp/labels.out"; then
  echo "FAIL --version-labels canary=2 (no version 2): exit $rc, expected 2 naming it:"
  cat "$tmp/labels.out"; exit 1
fi
echo "ok: --version-labels naming no loaded version is refused"
