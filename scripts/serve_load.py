#!/usr/bin/env python3
"""serve_load.py: load generator and client for build/serve (TF Serving's REST API) and for
scripts/serve_torch_peer.py, and the helpers the tests/test_serve_*.sh tests import.

  serve_load.py bench --port P [--model lenet] [--clients 64] [--requests 100]
                      [--data-dir DIR]
    N concurrent clients (threads, one keep-alive http.client connection each) send
    batch-1 predict requests of Fashion-MNIST test images ([28,28,1], floats in [0,1]);
    prints requests/sec and latency percentiles, and checks every answer against the
    answer the server gave the same image alone before the run ("wrong" column).

  serve_load.py protocols --serve build/serve --weights LENET --weights MLP [--clients 64]
                          [--requests 32] [--big-requests 4]
    REST against gRPC: for each export (lenet; mlp, whose compute is small, so that the
    protocols' own cost shows), one build/serve (batching on, max batch 64) answers
    requests of 1 and of 64 images, as floats (REST JSON; gRPC tensor_content) and as
    JPEG bytes (REST {"b64"}; gRPC DT_STRING), then the PyTorch peer answers the float
    ones (REST). Every call is made by h2load (nghttp2-client: a C client, one thread;
    HTTP/1.1 keep-alive for REST, HTTP/2 for gRPC), N connections, one call at a time
    each, --requests (1 image) or --big-requests (64) calls per connection after a
    warm-up. One line per case: images/sec, p50, p99 of both protocols side by side, the
    ratio, and the CPU microseconds per image of the server and of h2load (the client
    runs on the same cores: a saturated client would cap the case). Each case is first checked by a
    Python call (REST: 200 and its predictions; gRPC: grpcio, status OK); h2load's runs
    must answer every call 200, and every gRPC call with the checked answer's bytes (an
    error is an HTTP 200 without data, grpc-status in its trailers).

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
    common = ["--model", a.model, "--weights", a.weights[0], "--port", "0", "--threads", str(a.threads)]
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


# ---- protocols: REST against gRPC, through one C client (h2load) ----

def cpu_seconds(pid):
    """User + system CPU seconds process pid has used (all its threads), from /proc."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def h2load(url, body_file, headers, calls, clients, h1, log_file):
    """One h2load run: calls POSTs of body_file, clients connections (HTTP/1.1 keep-alive
    with h1, else HTTP/2 with one call at a time each), one client thread. Returns its
    counts, the seconds it took and its CPU seconds, and each call's HTTP status and
    microseconds from its log file."""
    cmd = ["h2load", "-n", str(calls), "-c", str(clients), "-m", "1", "-t", "1", "-d", body_file,
           "--log-file", log_file] + (["--h1"] if h1 else [])
    for h in headers:
        cmd += ["-H", h]
    before = os.times()
    p = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=900)
    after = os.times()
    out = p.stdout
    if p.returncode != 0 or "finished in" not in out:
        raise RuntimeError("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, out[-2000:], p.stderr[-2000:]))

    def num(pattern):
        import re
        m = re.search(pattern, out)
        if not m:
            raise RuntimeError("h2load's output has no %r:\n%s" % (pattern, out[-2000:]))
        return float(m.group(1))
    unit = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
    import re
    m = re.search(r"finished in ([0-9.]+)(s|ms|us),", out)
    rows = [line.split("\t") for line in open(log_file) if line.strip()]
    return {"seconds": float(m.group(1)) * unit[m.group(2)],
            "succeeded": int(num(r"(\d+) succeeded")), "s2xx": int(num(r"status codes: (\d+) 2xx")),
            "data": int(num(r"traffic: .*\((\d+)\) data")),
            "status": [int(r[1]) for r in rows], "us": sorted(int(r[2]) for r in rows),
            "client_cpu": (after.children_user + after.children_system
                           - before.children_user - before.children_system)}


def check_rest(port, model, body, per):
    """One REST call by Python: 200 and per rows of predictions, or raises."""
    c = Client(port, timeout=600)
    status, doc = c.request("POST", "/v1/models/%s:predict" % model, body,
                            {"Content-Type": "application/json"})
    c.close()
    if status != 200 or len(doc.get("predictions", [])) != per:
        raise RuntimeError("REST check: status %d %s" % (status, str(doc)[:300]))


def check_grpc(port, msgs, message, per):
    """One gRPC call by grpcio: status OK and per rows of predictions, or raises. Returns
    the bytes of the answer's DATA (length prefix and message): the same for every call
    of a case, so h2load's data bytes say how many calls were answered OK (an error is a
    trailers-only answer, HTTP 200 without data)."""
    g = GrpcClient(port, msgs)
    answer = g.channel.unary_unary(PREDICT)(message, timeout=600)
    g.close()
    t = msgs["predict"].PredictResponse.FromString(answer).outputs["predictions"]
    if len(t.tensor_shape.dim) != 2 or t.tensor_shape.dim[0].size != per:
        raise RuntimeError("gRPC check: predictions of shape %s" % [d.size for d in t.tensor_shape.dim])
    return 5 + len(answer)


def protocol_cases(a, model, images, msgs):
    """[(input, images per call, REST body, gRPC message)]: the first images of the test
    set, as floats (REST JSON, gRPC tensor_content) and as JPEG bytes (REST {"b64"},
    gRPC DT_STRING)."""
    probe = GrpcClient(0, msgs)  # request builders only; its channel is never used
    cases = []
    for per in (1, 64):
        x = images[:per].reshape(-1, 28, 28, 1)
        jpegs = [encode_image(im) for im in images[:per]]
        cases.append(("float", per, json.dumps({"instances": [instance(im) for im in images[:per]]}),
                      probe.predict_request(x, content=True, model=model).SerializeToString()))
        cases.append(("JPEG", per,
                      json.dumps({"instances": [{"b64": base64.b64encode(j).decode()} for j in jpegs]}),
                      probe.image_request(jpegs, model=model).SerializeToString()))
    probe.close()
    return cases


def protocol_run(a, tmp, name, pid, url, body, headers, h1, calls, check):
    """Warm-up, then the measured h2load run; figures with the server's CPU seconds.
    check(result) raises when the answers were not all right."""
    f = os.path.join(tmp, name)
    with open(f, "wb") as out:
        out.write(body)
    log = os.path.join(tmp, name + ".log")
    h2load(url, f, headers, min(8, a.clients), min(8, a.clients), h1, log)
    os.remove(log)   # h2load appends: the warm-up's calls stay out of the figures
    cpu0 = cpu_seconds(pid)
    r = h2load(url, f, headers, calls, a.clients, h1, log)
    r["server_cpu"] = cpu_seconds(pid) - cpu0
    bad = calls - r["succeeded"] + calls - r["s2xx"] + sum(1 for s in r["status"] if s != 200)
    if bad:
        raise RuntimeError("%s: %d of %d calls failed or were not answered 200" % (name, bad, calls))
    check(r)
    return r


def protocols(a):
    """REST against gRPC on one build/serve per model, and the PyTorch peer's REST: one
    table, every call made by h2load."""
    import shutil
    import tempfile
    if not shutil.which("h2load"):
        print("serve_load.py protocols: h2load is not installed (Debian's nghttp2-client: "
              "scripts/install-deps.sh)", file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    tmp = tempfile.mkdtemp(prefix="serve_load_")
    images, _ = test_images(a.data_dir, 64)
    msgs = grpc_messages(tmp)
    grpc_headers = ["content-type: application/grpc", "te: trailers"]
    rest_headers = ["content-type: application/json"]
    print("%-6s %-5s %4s | %-32s | %-32s | %s" % ("model", "input", "imgs", "REST: img/s   p50 ms   p99 ms",
          "gRPC: img/s   p50 ms   p99 ms", "gRPC/REST | CPU us/img: serve REST gRPC, h2load REST gRPC"),
          flush=True)
    rows = []

    def line(r, per, calls):
        ips = calls * per / r["seconds"]
        return ips, "%10.1f %8.2f %8.2f" % (ips, percentile(r["us"], 50) / 1e3, percentile(r["us"], 99) / 1e3)

    for weights in a.weights:
        meta = st_metadata(weights) or {}
        model = meta.get("model")
        if model not in ("lenet", "mlp"):
            print("serve_load.py protocols: %s records model %r: expected a lenet or mlp export "
                  "(train --model lenet|mlp --export FILE)" % (weights, model), file=sys.stderr)
            return 2
        cases = protocol_cases(a, model, images, msgs)
        common = ["--model", model, "--weights", weights, "--port", "0", "--threads", str(a.threads)]
        p, port = start_server([a.serve] + common + ["--log-level", "warning", "--max-batch-size", "64",
                                                     "--batch-timeout-micros", str(a.timeout_us)])
        try:
            gport = next(int(l.split()[-1]) for l in p.stdout if l.startswith("serve: gRPC port "))
            for kind, per, body, message in cases:
                calls = a.clients * (a.requests if per == 1 else a.big_requests)
                tag = "%s-%s-%d" % (model, kind, per)
                check_rest(port, model, body, per)
                rest = protocol_run(a, tmp, tag + ".json", p.pid,
                                    "http://127.0.0.1:%d/v1/models/%s:predict" % (port, model),
                                    body.encode(), rest_headers, True, calls, lambda r: None)
                answer = check_grpc(gport, msgs, message, per)

                def all_answered(r, answer=answer, calls=calls, tag=tag):
                    if r["data"] != calls * answer:
                        raise RuntimeError("%s gRPC: %d data bytes, expected %d calls x %d: some calls "
                                           "failed (grpc-status)" % (tag, r["data"], calls, answer))
                grpc_r = protocol_run(a, tmp, tag + ".grpc", p.pid, "http://127.0.0.1:%d%s" % (gport, PREDICT),
                                      bytes([0]) + struct.pack(">I", len(message)) + message,
                                      grpc_headers, False, calls, all_answered)
                ri, rl = line(rest, per, calls)
                gi, gl = line(grpc_r, per, calls)
                us = [1e6 * r[k] / (calls * per) for k in ("server_cpu", "client_cpu") for r in (rest, grpc_r)]
                print("%-6s %-5s %4d | %s | %s | %6.2fx   | %17.1f %6.1f %12.1f %6.1f" % (
                    model, kind, per, rl, gl, gi / ri, *us), flush=True)
                rows.append((model, kind, per, rest, grpc_r))
        finally:
            p.terminate()
            p.wait()
        p, port = start_server(["/usr/bin/python3", os.path.join(here, "serve_torch_peer.py")] + common)
        try:
            for kind, per, body, _ in cases:
                if kind != "float":
                    continue
                calls = a.clients * (a.requests if per == 1 else a.big_requests)
                check_rest(port, model, body, per)
                r = protocol_run(a, tmp, "peer-%s-%d.json" % (model, per), p.pid,
                                 "http://127.0.0.1:%d/v1/models/%s:predict" % (port, model),
                                 body.encode(), rest_headers, True, calls, lambda r: None)
                print("%-6s %-5s %4d | %s | PyTorch + http.server (REST)    |           | %17.1f %20.1f" % (
                    model, kind, per, line(r, per, calls)[1], 1e6 * r["server_cpu"] / (calls * per),
                    1e6 * r["client_cpu"] / (calls * per)), flush=True)
        finally:
            p.terminate()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["bench", "compare", "protocols"])
    ap.add_argument("--port", type=int, help="bench: the server's port")
    ap.add_argument("--serve", default="build/serve", help="compare: the serve binary")
    ap.add_argument("--weights", action="append",
                    help="compare: the safetensors file (train --export); protocols: one per "
                         "model (lenet, mlp), repeat the flag")
    ap.add_argument("--threads", type=int, default=1, help="compare: compute threads of each server")
    ap.add_argument("--max-batch", type=int, default=32, help="compare: serve --max-batch-size")
    ap.add_argument("--timeout-us", type=int, default=1000, help="compare: serve --batch-timeout-micros")
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=100, help="per client (protocols: 1-image calls)")
    ap.add_argument("--big-requests", type=int, default=4, help="protocols: 64-image calls per client")
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
