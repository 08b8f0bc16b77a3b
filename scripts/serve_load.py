#!/usr/bin/env python3
"""serve_load.py: load generator and client for build/serve (TF Serving's REST API) and for
scripts/serve_torch_peer.py, and the helpers the tests/test_serve_*.sh tests import.

  serve_load.py bench --port P [--model lenet] [--clients 64] [--requests 100]
                      [--data-dir DIR]
    N concurrent clients (threads, one keep-alive http.client connection each) send
    batch-1 predict requests of Fashion-MNIST test images ([28,28,1], floats in [0,1]);
    prints requests/sec and latency percentiles, and checks every answer against the
    answer the server gave the same image alone before the run ("wrong" column).

  serve_load.py protocols --serve build/serve --weights FILE [--clients 64] [--requests 100]
    One build/serve (REST and gRPC) and the PyTorch peer (REST) on the same weights: for
    each protocol, requests of 1 and of 64 images, as floats (REST JSON; gRPC
    tensor_content) and as JPEG bytes (REST {"b64"}; gRPC DT_STRING), N clients (threads,
    a connection each, requests encoded before the clock starts; a 64-image case makes
    --requests/64 calls per client, at least 2): requests/sec, images/sec, p50, p99.

  serve_load.py compare --serve build/serve --weights FILE [--clients 64] [--requests 100]
    Starts, one after the other, build/serve with batching on, build/serve with batching
    off, and scripts/serve_torch_peer.py on the same weights (each on a free port, the
    same --threads), runs bench against each, prints one line per server (docs/serve.md).

Plain Python (http.client, json, gzip, numpy): a real HTTP client, the same for both servers.
Also for the tests: Client.classify (TF Serving's Classify API), st_metadata and st_copy
(a safetensors file's "__metadata__", which train --export writes: read, replace, drop).
"""
import argparse
import base64
import gzip
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def test_images(data_dir=DATA_DIR, count=1000):
    """The first count test images as float [n][28][28] in [0, 1] and their labels."""
    images = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"))[:count]
    labels = read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"))[:count]
    return images.astype(np.float64) / 255.0, labels.astype(np.int64)


def instance(img, shape="hwc"):
    """One image as a Keras client sends it: [28,28,1], [28,28] or flat [784]."""
    if shape == "hwc":
        return img.reshape(28, 28, 1).tolist()
    if shape == "hw":
        return img.reshape(28, 28).tolist()
    return img.reshape(-1).tolist()


class Client:
    """One keep-alive connection; reconnects after the server closed it."""

    def __init__(self, port, host="127.0.0.1", timeout=60):
        self.host, self.port, self.timeout = host, port, timeout
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        """Returns (status, parsed JSON or text)."""
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                resp = self.conn.getresponse()
                data = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.close()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # a kept-alive connection the server closed meanwhile: once more, fresh
                self.close()
                if attempt == 1:
                    raise
        ctype = resp.getheader("Content-Type", "")
        return resp.status, (json.loads(data) if "json" in ctype else data.decode("utf-8", "replace"))

    def predict(self, model, instances, version=None):
        path = "/v1/models/%s%s:predict" % (model, "/versions/%d" % version if version else "")
        return self.request("POST", path, json.dumps({"instances": instances}),
                            {"Content-Type": "application/json"})

    def classify(self, model, examples, version=None):
        """TF Serving's Classify API: examples are {"image": S} objects (or bare samples)."""
        path = "/v1/models/%s%s:classify" % (model, "/versions/%d" % version if version else "")
        return self.request("POST", path, json.dumps({"examples": examples}),
                            {"Content-Type": "application/json"})

    def close(self):
        if self.conn is not None:
            self.conn.close()
        self.conn = None


# ---- gRPC (TF Serving's PredictionService and ModelService) ----

GRPC_PROTOS = ["tensorflow/core/framework/types.proto", "tensorflow/core/framework/tensor_shape.proto",
               "tensorflow/core/framework/tensor.proto", "tensorflow/core/protobuf/meta_graph.proto",
               "tensorflow/core/protobuf/error_codes.proto", "tensorflow_serving/util/status.proto",
               "tensorflow_serving/apis/model.proto", "tensorflow_serving/apis/predict.proto",
               "tensorflow_serving/apis/get_model_metadata.proto",
               "tensorflow_serving/apis/get_model_status.proto", "tensorflow/core/example/feature.proto",
               "tensorflow/core/example/example.proto", "tensorflow_serving/apis/input.proto",
               "tensorflow_serving/apis/classification.proto"]
PREDICT = "/tensorflow.serving.PredictionService/Predict"
METADATA = "/tensorflow.serving.PredictionService/GetModelMetadata"
STATUS = "/tensorflow.serving.ModelService/GetModelStatus"
CLASSIFY = "/tensorflow.serving.PredictionService/Classify"


def grpc_messages(out_dir, proto_dir=None):
    """The message classes of the repo's TF Serving .proto files (proto/), compiled with
    grpc_tools.protoc into out_dir (a scratch folder) and imported: a dict by file stem
    ("predict", "tensor", ...). The well-known google/protobuf types come from protobuf."""
    import importlib
    import grpc_tools
    from grpc_tools import protoc
    proto_dir = proto_dir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(["protoc", "-I" + well_known, "-I" + proto_dir, "--python_out=" + out_dir]
                     + [os.path.join(proto_dir, p) for p in GRPC_PROTOS])
    if rc != 0:
        raise RuntimeError("grpc_tools.protoc failed on %s (exit %d)" % (proto_dir, rc))
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)
    mods = {}
    for p in GRPC_PROTOS:
        name = p[:-len(".proto")].replace("/", ".") + "_pb2"
        mods[os.path.basename(p)[:-len(".proto")]] = importlib.import_module(name)
    return mods


class GrpcClient:
    """One gRPC channel (its own HTTP/2 connection) to serve's --grpc-port."""

    def __init__(self, port, msgs, host="127.0.0.1"):
        import grpc
        self.grpc, self.m = grpc, msgs
        self.channel = grpc.insecure_channel(
            "%s:%d" % (host, port), options=[("grpc.use_local_subchannel_pool", 1),
                                             ("grpc.max_send_message_length", 1 << 30),
                                             ("grpc.max_receive_message_length", 1 << 30)])

    def call(self, method, request, response_class, timeout=60):
        """Returns the response message; raises grpc.RpcError (.code(), .details())."""
        f = self.channel.unary_unary(method, request_serializer=lambda r: r.SerializeToString(),
                                     response_deserializer=response_class.FromString)
        return f(request, timeout=timeout)

    def spec(self, ms, model="lenet", version=None, label=None):
        ms.name = model
        if version is not None:
            ms.version.value = version
        if label is not None:
            ms.version_label = label

    def predict_request(self, images, content=False, **spec):
        """images: float array [n, 28, 28, 1] in [0, 1] -> a PredictRequest of DT_FLOAT
        (tensor_content when content, else float_val)."""
        req = self.m["predict"].PredictRequest()
        self.spec(req.model_spec, **spec)
        x = np.asarray(images, dtype=np.float32)
        t = req.inputs["input"]
        t.dtype = self.m["types"].DT_FLOAT
        for d in x.shape:
            t.tensor_shape.dim.add().size = d
        if content:
            t.tensor_content = x.astype("<f4").tobytes()
        else:
            t.float_val.extend(x.reshape(-1).tolist())
        return req

    def image_request(self, encoded, **spec):
        """encoded: JPEG/PNG bytes, one per image -> a PredictRequest of DT_STRING [n]."""
        req = self.m["predict"].PredictRequest()
        self.spec(req.model_spec, **spec)
        t = req.inputs["input"]
        t.dtype = self.m["types"].DT_STRING
        t.tensor_shape.dim.add().size = len(encoded)
        t.string_val.extend(encoded)
        return req

    def predict_images(self, encoded, timeout=60, **spec):
        r = self.call(PREDICT, self.image_request(encoded, **spec),
                      self.m["predict"].PredictResponse, timeout)
        t = r.outputs["predictions"]
        return np.array(t.float_val, dtype=np.float32).reshape([d.size for d in t.tensor_shape.dim])

    def predict(self, images, content=False, timeout=60, **spec):
        """The "predictions" output as float32 [n, classes]."""
        r = self.call(PREDICT, self.predict_request(images, content, **spec),
                      self.m["predict"].PredictResponse, timeout)
        t = r.outputs["predictions"]
        return np.array(t.float_val, dtype=np.float32).reshape([d.size for d in t.tensor_shape.dim])

    def classify(self, images=None, encoded=None, **spec):
        """Classify: examples of one feature "image", float_list of [28,28,1] pixels (images)
        or bytes_list of one encoded image each (encoded). Returns the response."""
        req = self.m["classification"].ClassificationRequest()
        self.spec(req.model_spec, **spec)
        for im in (images if images is not None else encoded):
            f = req.input.example_list.examples.add().features.feature["image"]
            if images is not None:
                f.float_list.value.extend(np.asarray(im, dtype=np.float32).reshape(-1).tolist())
            else:
                f.bytes_list.value.append(im)
        return self.call(CLASSIFY, req, self.m["classification"].ClassificationResponse)

    def metadata(self, fields=("signature_def",), **spec):
        req = self.m["get_model_metadata"].GetModelMetadataRequest()
        self.spec(req.model_spec, **spec)
        req.metadata_field.extend(fields)
        return self.call(METADATA, req, self.m["get_model_metadata"].GetModelMetadataResponse)

    def status(self, **spec):
        req = self.m["get_model_status"].GetModelStatusRequest()
        self.spec(req.model_spec, **spec)
        return self.call(STATUS, req, self.m["get_model_status"].GetModelStatusResponse)

    def close(self):
        self.channel.close()


def encode_image(img, fmt="JPEG", size=None, quality=95):
    """A float image [28][28] in [0, 1] as JPEG or PNG bytes (grey; resized to size, a
    (w, h), when given), with PIL."""
    import io
    from PIL import Image
    im = Image.fromarray(np.round(np.asarray(img).reshape(28, 28) * 255).astype(np.uint8), "L")
    if size:
        im = im.resize(size, Image.BILINEAR)
    buf = io.BytesIO()
    im.save(buf, fmt, **({"quality": quality} if fmt == "JPEG" else {}))
    return buf.getvalue()


def raw_exchange(port, data, timeout=10, done=None):
    """Sends bytes on a fresh loopback connection and reads the answer until the server
    closes it, `timeout` passes, or done(bytes so far) is true. Returns (bytes, the error
    that ended the reading or None); a send cut short by the server is not an error (its
    answer may still be there to read). For the tests' malformed requests."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
    except OSError:
        pass
    buf, error = b"", None
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            if done is not None and done(buf):
                break
    except OSError as e:
        error = e
    s.close()
    return buf, error


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * (len(sorted_values) - 1)))))
    return sorted_values[k]


def run_load(port, model, bodies, expected, clients, requests):
    """clients threads x requests batch-1 predicts, cycling through bodies (JSON strings)
    whose expected argmax is expected[i]. Returns a dict of figures."""
    lat, errors, wrong = [], [], [0]
    lock = threading.Lock()
    start_gate = threading.Barrier(clients + 1)

    def worker(k):
        c = Client(port)
        mine, bad = [], 0
        start_gate.wait()
        for j in range(requests):
            i = (k * requests + j) % len(bodies)
            t0 = time.perf_counter()
            try:
                status, doc = c.request("POST", "/v1/models/%s:predict" % model, bodies[i],
                                        {"Content-Type": "application/json"})
            except Exception as e:  # noqa: BLE001: every failure is counted
                with lock:
                    errors.append("client %d: %r" % (k, e))
                c.close()
                continue
            mine.append(time.perf_counter() - t0)
            if status != 200:
                with lock:
                    errors.append("client %d: status %d %s" % (k, status, doc))
            elif int(np.argmax(doc["predictions"][0])) != expected[i]:
                bad += 1
        c.close()
        with lock:
            lat.extend(mine)
            wrong[0] += bad

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    start_gate.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    return {"requests": clients * requests, "ok": len(lat), "errors": errors, "wrong": wrong[0],
            "seconds": wall, "rps": len(lat) / wall if wall > 0 else 0.0,
            "p50_ms": 1e3 * percentile(lat, 50), "p90_ms": 1e3 * percentile(lat, 90),
            "p99_ms": 1e3 * percentile(lat, 99), "max_ms": 1e3 * (lat[-1] if lat else float("nan"))}


def expected_answers(port, model, images):
    """The argmax the server gives each image alone (sequential requests)."""
    c = Client(port)
    out = []
    for img in images:
        status, doc = c.predict(model, [instance(img)])
        if status != 200:
            raise RuntimeError("predict: status %d %s" % (status, doc))
        out.append(int(np.argmax(doc["predictions"][0])))
    c.close()
    return out


def st_metadata(path):
    """The "__metadata__" of a safetensors file (train --export records one), or None."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__")


def st_copy(src, dst, metadata):
    """Copies a safetensors file with its "__metadata__" replaced (None: without one)."""
    with open(src, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    if metadata is not None:
        header = dict([("__metadata__", metadata)] + list(header.items()))
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data[8 + n:])


def start_server(cmd, stderr=None):
    """Starts a server that prints "listening on port N"; returns (process, port). stderr:
    a file object for its stderr (default: discarded)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr or subprocess.DEVNULL,
                         text=True)
    for line in p.stdout:
        if "listening on port" in line:
            return p, int(line.split()[-1])
    p.wait()
    raise RuntimeError("%s did not start (exit %s)" % (" ".join(cmd), p.returncode))


def bench(a, port, label):
    images, _ = test_images(a.data_dir, a.images)
    expected = expected_answers(port, a.model, images)
    bodies = [json.dumps({"instances": [instance(img)]}) for img in images]
    run_load(port, a.model, bodies[:8], expected[:8], min(a.clients, 8), 5)  # warm-up
    r = run_load(port, a.model, bodies, expected, a.clients, a.requests)
    print("%-28s clients %3d  requests %6d  errors %d  wrong %d  %8.1f req/s  "
          "p50 %7.2f ms  p90 %7.2f ms  p99 %7.2f ms  max %7.2f ms"
          % (label, a.clients, r["requests"], len(r["errors"]), r["wrong"],
             r["rps"], r["p50_ms"], r["p90_ms"], r["p99_ms"], r["max_ms"]), flush=True)
    for e in r["errors"][:5]:
        print("  error: " + e)
    return 1 if r["errors"] or r["wrong"] else 0


def compare(a):
    here = os.path.dirname(os.path.abspath(__file__))
    common = ["--model", a.model, "--weights", a.weights, "--port", "0", "--threads", str(a.threads)]
    servers = [
        ("serve, batching on", [a.serve] + common + ["--log-level", "warning",
                                                     "--max-batch-size", str(a.max_batch),
                                                     "--batch-timeout-micros", str(a.timeout_us)]),
        ("serve, batching off", [a.serve] + common + ["--log-level", "warning", "--no-enable-batching"]),
        ("PyTorch + http.server", ["/usr/bin/python3", os.path.join(here, "serve_torch_peer.py")] + common),
    ]
    rc = 0
    for label, cmd in servers:
        p, port = start_server(cmd)
        try:
            rc |= bench(a, port, label)
        finally:
            p.terminate()
            p.wait()
    return rc


def run_calls(clients, requests, make_worker):
    """clients threads x requests calls. make_worker(k) -> (call, close): call(j) makes
    call j and returns the images answered (raises on a failure). Returns figures."""
    lat, errors, images = [], [], [0]
    lock = threading.Lock()
    gate = threading.Barrier(clients + 1)

    def worker(k):
        call, close = make_worker(k)
        mine, n = [], 0
        gate.wait()
        for j in range(requests):
            t0 = time.perf_counter()
            try:
                n += call(j)
            except Exception as e:  # noqa: BLE001: every failure is counted
                with lock:
                    errors.append("client %d: %r" % (k, e))
                continue
            mine.append(time.perf_counter() - t0)
        close()
        with lock:
            lat.extend(mine)
            images[0] += n

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    gate.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    return {"ok": len(lat), "errors": errors, "rps": len(lat) / wall, "ips": images[0] / wall,
            "p50_ms": 1e3 * percentile(lat, 50), "p99_ms": 1e3 * percentile(lat, 99)}


def rest_worker(port, bodies, per_call):
    def make(k):
        c = Client(port, timeout=600)  # a loaded machine: slow, not failed

        def call(j):
            status, doc = c.request("POST", "/v1/models/lenet:predict", bodies[(k + j) % len(bodies)],
                                    {"Content-Type": "application/json"})
            if status != 200 or len(doc["predictions"]) != per_call:
                raise RuntimeError("status %d %s" % (status, str(doc)[:200]))
            return per_call
        return call, c.close
    return make


def grpc_worker(port, msgs, requests_bytes, per_call):
    response = msgs["predict"].PredictResponse

    def make(k):
        g = GrpcClient(port, msgs)
        f = g.channel.unary_unary(PREDICT)  # bytes in, bytes out: encoded once, up front

        def call(j):
            r = response.FromString(f(requests_bytes[(k + j) % len(requests_bytes)], timeout=600))
            if len(r.outputs["predictions"].float_val) != per_call * 10:
                raise RuntimeError("%d scores" % len(r.outputs["predictions"].float_val))
            return per_call
        return call, g.close
    return make


def protocols(a):
    """REST vs gRPC on one build/serve, and the PyTorch peer's REST, one table."""
    import tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    images, _ = test_images(a.data_dir, a.images)
    msgs = grpc_messages(tempfile.mkdtemp(prefix="serve_load_"))
    probe = GrpcClient(0, msgs)  # request builders only; its channel is never used
    jpegs = [encode_image(im) for im in images]
    x = images.reshape(-1, 28, 28, 1)
    cases = []  # (label, per_call, REST bodies, gRPC request bytes)
    for per in (1, 64):
        groups = [list(range(i, i + per)) for i in range(0, len(images) - per + 1, per)][:50]
        cases.append(("float", per, [json.dumps({"instances": [instance(images[i]) for i in g]}) for g in groups],
                      [probe.predict_request(x[g], content=True).SerializeToString() for g in groups]))
        cases.append(("JPEG", per,
                      [json.dumps({"instances": [{"b64": base64.b64encode(jpegs[i]).decode()} for i in g]})
                       for g in groups],
                      [probe.image_request([jpegs[i] for i in g]).SerializeToString() for g in groups]))
    probe.close()
    common = ["--model", "lenet", "--weights", a.weights, "--port", "0", "--threads", str(a.threads)]
    rows = []

    def measure(label, make, per):
        run_calls(min(a.clients, 8), 2, make)  # warm-up
        reqs = max(2, a.requests // per) if per > 1 else a.requests
        r = run_calls(a.clients, reqs, make)
        rows.append((label, r))
        print("%-34s %8.1f req/s %9.1f img/s  p50 %8.2f ms  p99 %8.2f ms  errors %d"
              % (label, r["rps"], r["ips"], r["p50_ms"], r["p99_ms"], len(r["errors"])), flush=True)
        for e in r["errors"][:3]:
            print("  error: " + e)

    p, port = start_server([a.serve] + common + ["--log-level", "warning", "--max-batch-size", "64",
                                                 "--batch-timeout-micros", str(a.timeout_us)])
    try:
        gport = None
        for line in p.stdout:
            if line.startswith("serve: gRPC port "):
                gport = int(line.split()[-1])
                break
        for kind, per, bodies, reqs in cases:
            measure("serve REST, %s, %d/request" % (kind, per), rest_worker(port, bodies, per), per)
            measure("serve gRPC, %s, %d/request" % (kind, per), grpc_worker(gport, msgs, reqs, per), per)
    finally:
        p.terminate()
        p.wait()
    p, port = start_server(["/usr/bin/python3", os.path.join(here, "serve_torch_peer.py")] + common)
    try:
        for kind, per, bodies, _ in cases:
            if kind == "float":
                measure("PyTorch + http.server REST, float, %d/request" % per,
                        rest_worker(port, bodies, per), per)
    finally:
        p.terminate()
        p.wait()
    return 1 if any(r["errors"] for _, r in rows) else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["bench", "compare", "protocols"])
    ap.add_argument("--port", type=int, help="bench: the server's port")
    ap.add_argument("--serve", default="build/serve", help="compare: the serve binary")
    ap.add_argument("--weights", help="compare: the safetensors file (train --export)")
    ap.add_argument("--threads", type=int, default=1, help="compare: compute threads of each server")
    ap.add_argument("--max-batch", type=int, default=32, help="compare: serve --max-batch-size")
    ap.add_argument("--timeout-us", type=int, default=1000, help="compare: serve --batch-timeout-micros")
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=100, help="per client")
    ap.add_argument("--images", type=int, default=200, help="distinct test images cycled through")
    ap.add_argument("--data-dir", default=DATA_DIR)
    ap.add_argument("--label", default="", help="a name printed with the figures")
    a = ap.parse_args()
    if a.mode in ("compare", "protocols"):
        if not a.weights:
            ap.error("%s needs --weights" % a.mode)
        return compare(a) if a.mode == "compare" else protocols(a)
    if a.port is None:
        ap.error("bench needs --port")
    return bench(a, a.port, a.label or "port %d" % a.port)


if __name__ == "__main__":
    sys.exit(main())
