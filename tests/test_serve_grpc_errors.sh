#!/usr/bin/env bash
# Every bad gRPC call to build/serve gets its status code, and the server goes on (a
# good call answers after each, and serve exits 0 at SIGTERM): unknown model, version or
# version label (NOT_FOUND); a wrong shape, dtype, value count, tensor_content length,
# input name, number of inputs, a NaN, an unknown signature or output filter, bytes that
# are no PredictRequest, GetModelMetadata without or with an unknown metadata_field,
# Classify examples with a wrong feature, none, or a context (INVALID_ARGUMENT, naming the
# input, example or field); an unknown method, a compressed message
# (UNIMPLEMENTED); a message over --max-body-bytes, or over what
# --max-inflight-body-bytes leaves (RESOURCE_EXHAUSTED). Clients that
# would hold a connection: a call whose message never comes is answered DEADLINE_EXCEEDED
# at its grpc-timeout by the server (its log says so), or without one at
# --request-timeout; a connection that sends nothing is closed after --idle-timeout; one
# that is not HTTP/2 is closed. A second serve on either port it holds does not start.
set -u
. "$(dirname "$0")/serve_prelude.sh"
serve_start --max-body-bytes 100000 --max-inflight-body-bytes 60000 --request-timeout 2 \
  --idle-timeout 2

PYTHONPATH=scripts timeout -k 5 120 /usr/bin/python3 - "$grpc_port" "$tmp" <<'PY' || exit 1
import socket, sys, threading, time
import grpc
import numpy as np
from serve_load import GrpcClient, grpc_messages, test_images, CLASSIFY, PREDICT, METADATA

gport, tmp = int(sys.argv[1]), sys.argv[2]
m = grpc_messages(tmp)
g = GrpcClient(gport, m)
images, _ = test_images(count=64)
x = images.reshape(-1, 28, 28, 1).astype(np.float32)
good = g.predict(x[:1])
fails = []
C = grpc.StatusCode

def expect(what, code, words, send):
    try:
        send()
        fails.append("%s: answered OK, expected %s" % (what, code.name))
    except grpc.RpcError as e:
        if e.code() != code or not all(w in e.details() for w in words):
            fails.append("%s: %s %r, expected %s naming %s" % (what, e.code().name, e.details(),
                                                                code.name, words))
    try:  # the server goes on
        if not np.array_equal(g.predict(x[:1]), good):
            fails.append("after %s: a good call answers differently" % what)
    except grpc.RpcError as e:
        fails.append("after %s: a good call failed: %s %s" % (what, e.code(), e.details()))

def predict_with(edit, images=x[:1], content=False):
    req = g.predict_request(images, content)
    edit(req)
    return lambda: g.call(PREDICT, req, m["predict"].PredictResponse)

def set_dtype(r): r.inputs["input"].dtype = m["types"].DT_DOUBLE
def drop_value(r): r.inputs["input"].float_val.pop()
def cut_content(r): r.inputs["input"].tensor_content = r.inputs["input"].tensor_content[:-4]
def rename(r): r.inputs["image"].CopyFrom(r.inputs["input"]); del r.inputs["input"]
def two(r): r.inputs["other"].CopyFrom(r.inputs["input"])
def none(r): del r.inputs["input"]
def nan(r): r.inputs["input"].float_val[5] = float("nan")
def signature(r): r.model_spec.signature_name = "other_signature"
def out_filter(r): r.output_filter.append("scores")

expect("unknown model", C.NOT_FOUND, ["other"], lambda: g.predict(x[:1], model="other"))
expect("unknown version", C.NOT_FOUND, ["lenet, 2"], lambda: g.predict(x[:1], version=2))
expect("unknown label", C.NOT_FOUND, ["nolabel"], lambda: g.predict(x[:1], label="nolabel"))
expect("shape [1,27,28,1]", C.INVALID_ARGUMENT, ["input input has shape [1,27,28,1]", "[n,28,28,1]"],
       lambda: g.predict(np.zeros((1, 27, 28, 1))))
expect("shape [2,28,28,3]", C.INVALID_ARGUMENT, ["input input has shape [2,28,28,3]", "[n,28,28,1]"], lambda: g.predict(np.zeros((2, 28, 28, 3))))
expect("dtype DT_DOUBLE", C.INVALID_ARGUMENT, ["input", "DT_FLOAT"], predict_with(set_dtype))
expect("783 float_val", C.INVALID_ARGUMENT, ["input", "783 float_val"], predict_with(drop_value))
expect("short tensor_content", C.INVALID_ARGUMENT, ["input", "tensor_content"],
       predict_with(cut_content, content=True))
expect("input named image", C.INVALID_ARGUMENT, ["image"], predict_with(rename))
expect("two inputs", C.INVALID_ARGUMENT, ["2 inputs"], predict_with(two))
expect("no input", C.INVALID_ARGUMENT, ["0 inputs"], predict_with(none))
expect("a NaN", C.INVALID_ARGUMENT, ["input", "finite"], predict_with(nan))
expect("unknown signature", C.INVALID_ARGUMENT, ["other_signature"], predict_with(signature))
expect("unknown output filter", C.INVALID_ARGUMENT, ["scores"], predict_with(out_filter))
raw = g.channel.unary_unary(PREDICT)
expect("not a PredictRequest", C.INVALID_ARGUMENT, ["PredictRequest"], lambda: raw(b"\xff\xff\xff", timeout=30))
expect("metadata without a field", C.INVALID_ARGUMENT, ["metadata_field"], lambda: g.metadata(fields=()))
expect("metadata field foo", C.INVALID_ARGUMENT, ["foo"], lambda: g.metadata(fields=("foo",)))
def classify_with(edit):
    req = m["classification"].ClassificationRequest()
    req.model_spec.name = "lenet"
    f = req.input.example_list.examples.add().features.feature["image"]
    f.float_list.value.extend(x[0].reshape(-1).tolist())
    edit(req, f)
    return lambda: g.call(CLASSIFY, req, m["classification"].ClassificationResponse)
def short_list(r, f): f.float_list.value.pop()
def int_feature(r, f): f.int64_list.value.append(1)
def no_examples(r, f): del r.input.example_list.examples[:]
def context(r, f):
    first = type(r.input.example_list.examples[0])()
    first.CopyFrom(r.input.example_list.examples[0])
    ex = r.input.example_list_with_context
    ex.examples.add().CopyFrom(first)
    ex.context.features.feature["x"].float_list.value.append(1)
expect("classify, 783 floats", C.INVALID_ARGUMENT, ["example 0", "image", "783"], classify_with(short_list))
expect("classify, an int64 feature", C.INVALID_ARGUMENT, ["example 0", "image"], classify_with(int_feature))
expect("classify, no examples", C.INVALID_ARGUMENT, ["no examples"], classify_with(no_examples))
expect("classify, a context feature", C.INVALID_ARGUMENT, ["context"], classify_with(context))
regress = g.channel.unary_unary("/tensorflow.serving.PredictionService/Regress")
expect("unknown method", C.UNIMPLEMENTED, ["Regress"], lambda: regress(b"", timeout=30))
gz = grpc.insecure_channel("127.0.0.1:%d" % gport, compression=grpc.Compression.Gzip)
zpredict = gz.unary_unary(PREDICT)
expect("a compressed message", C.UNIMPLEMENTED, ["compressed"],
       lambda: zpredict(g.predict_request(x[:1]).SerializeToString(), timeout=30))
expect("64 images (200704 bytes) over --max-body-bytes 100000", C.RESOURCE_EXHAUSTED,
       ["100000"], lambda: g.predict(x))
expect("24 images (75264 bytes) over --max-inflight-body-bytes 60000", C.RESOURCE_EXHAUSTED,
       ["server busy", "60000"], lambda: g.predict(x[:24]))
if g.predict(x[:16]).shape != (16, 10):
    fails.append("16 images (under --max-body-bytes): not answered")

# A call whose message never comes: answered by the server at its grpc-timeout, or at
# --request-timeout (2 s) without one. grpcio cancels a call at its own deadline, before
# the server's: the grpc-timeout one is sent by hand (HTTP/2 frames, HPACK literals) and
# waits for the server's HEADERS on its stream.
def frame(ftype, flags, sid, payload):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + sid.to_bytes(4, "big") + payload
def literal(name, value):
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
headers = b"".join(literal(n, v) for n, v in [
    (b":method", b"POST"), (b":scheme", b"http"), (b":path", PREDICT.encode()),
    (b":authority", b"localhost"), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
    (b"grpc-timeout", b"500m")])
s = socket.create_connection(("127.0.0.1", gport), timeout=30)
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") + frame(1, 4, 1, headers))
buf, answered = b"", False
try:
    while not answered:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n, ftype, sid = int.from_bytes(buf[:3], "big"), buf[3], int.from_bytes(buf[5:9], "big") & 0x7fffffff
            answered |= ftype == 1 and sid == 1
            buf = buf[9 + n:]
except OSError:
    pass
s.close()
if not answered:
    fails.append("a call with grpc-timeout 500m whose message never came: no answer in 30 s")
never = lambda: iter(lambda: time.sleep(60), 0)
stream = g.channel.stream_unary(PREDICT)
expect("a message that never comes", C.DEADLINE_EXCEEDED, ["--request-timeout"],
       lambda: stream(never(), timeout=60))

def closed_by_server(data):
    s = socket.create_connection(("127.0.0.1", gport), timeout=30)
    s.sendall(data)
    try:
        while s.recv(65536):
            pass
        return True
    except OSError:
        return False
    finally:
        s.close()
if not closed_by_server(b""):
    fails.append("a silent connection was not closed within 30 s (--idle-timeout 2)")
if not closed_by_server(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"):
    fails.append("an HTTP/1.1 connection was not closed within 30 s")

if fails:
    print("FAIL\n  " + "\n  ".join(fails))
    sys.exit(1)
print("ok: every bad call got its status, and the server went on")
PY
grep -q "DEADLINE_EXCEEDED .*: Deadline Exceeded (grpc-timeout) before the request arrived" "$tmp/serve.err" || {
  echo "FAIL the server did not answer DEADLINE_EXCEEDED at the call's grpc-timeout:"
  grep gRPC "$tmp/serve.err" | tail; exit 1; }
# A port in use is refused, REST's as gRPC's: not shared with this server (SO_REUSEPORT
# would let a second one on --port take half of this one's connections).
for flags in "--port $port --grpc-port 0" "--port 0 --grpc-port $grpc_port"; do
  # shellcheck disable=SC2086
  timeout -k 5 20 "$build/serve" --model lenet --weights "$tmp/lenet.safetensors" --threads 1 \
    $flags >"$tmp/second.out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -q "cannot listen on .*port" "$tmp/second.out" || {
    echo "FAIL a second serve $flags (a port this one holds): exit $rc, expected 1 and" \
      "\"cannot listen\":"; cat "$tmp/second.out"; exit 1; }
done
serve_stop
echo "ok: serve exited 0"
