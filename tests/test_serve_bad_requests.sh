#!/usr/bin/env bash
# build/serve refuses bad requests as TF Serving does and keeps serving: 45 kinds
# (malformed JSON, wrong shapes, wrong dtypes, NaN/Infinity, too many instances, bad
# :classify bodies (no or empty "examples", predict's keys, two features, a context), huge
# arrays, deep nesting, huge bodies declared or chunked, unknown model/version/path, wrong
# methods, slow clients that stall in the headers or the body, a malformed header, bytes
# that are not HTTP: closed unanswered)
# each get the right status and an {"error": "..."} body, and after each one a good
# request is still answered. Limits made small: --max-body-bytes 1M --max-instances 64
# --idle-timeout 2.
set -u
. "$(dirname "$0")/serve_prelude.sh"
serve_start --max-body-bytes 1M --max-instances 64 --idle-timeout 2

PYTHONPATH=scripts timeout -k 5 100 /usr/bin/python3 - "$port" <<'PY' || exit 1
import json, socket, sys, time
from serve_load import Client, raw_exchange

port = int(sys.argv[1])
P = "/v1/models/lenet:predict"
img = [[[0.5] for _ in range(28)] for _ in range(28)]
good = json.dumps({"instances": [img]})
fails = []

def answered(buf):
    """A whole response is in buf (its Content-Length of body after the headers)."""
    if b"\r\n\r\n" not in buf:
        return False
    head, _, body = buf.partition(b"\r\n\r\n")
    cl = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
    return bool(cl) and len(body) >= int(cl[0].split(b":")[1])

def raw(data, wait_close=False, timeout=10):
    """Sends bytes on a fresh connection; returns (status or None, body text)."""
    buf, _ = raw_exchange(port, data, timeout, None if wait_close else answered)
    if not buf.startswith(b"HTTP/1."):
        return None, buf.decode("latin1")
    head, _, body = buf.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode("latin1")

def post(body, path=P, extra=b""):
    b = body if isinstance(body, bytes) else body.encode()
    return raw(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n"
               % (path.encode(), extra, len(b)) + b)

def still_serving(name):
    st, doc = Client(port).predict("lenet", [img])
    if st != 200:
        fails.append("after %s: a good request got %d %s" % (name, st, doc))

def case(name, want, got):
    st, body = got
    ok = st == want
    if ok and want != 200 and body.strip():
        try:
            ok = isinstance(json.loads(body).get("error"), str)
        except ValueError:
            ok = want == 400 and "malformed" in body  # libmicrohttpd's own page (bad HTTP)
    print("%s %-34s %s %s" % ("ok  " if ok else "FAIL", name, st, body[:110].replace("\n", " ")))
    if not ok:
        fails.append("%s: got %s, want %s" % (name, st, want))
    still_serving(name)

row = [[0.5] for _ in range(28)]
case("malformed JSON", 400, post('{"instances": [[1, 2'))
case("empty body", 400, post(""))
case("body not an object", 400, post("[1, 2, 3]"))
case("no instances key", 400, post("{}"))
case("both instances and inputs", 400, post(json.dumps({"instances": [img], "inputs": [img]})))
case("unknown key", 400, post(json.dumps({"instances": [img], "foo": 1})))
case("instances not a list", 400, post('{"instances": 5}'))
case("no instance", 400, post('{"instances": []}'))
case("shape [28,27,1]", 400, post(json.dumps({"instances": [[r[:27] for r in [row] * 28]]})))
case("shape [27,28]", 400, post(json.dumps({"instances": [[[0.5] * 28] * 27]})))
case("shape [783]", 400, post(json.dumps({"instances": [[0.5] * 783]})))
case("shape [1,28,28,1]", 400, post(json.dumps({"instances": [[img]]})))
case("ragged rows", 400, post(json.dumps({"instances": [img[:27] + [row[:5]]]})))
case("scalar instance", 400, post('{"instances": [0.5]}'))
case("string value", 400, post(json.dumps({"instances": [["0.5"] * 784]})))
case("boolean value", 400, post(json.dumps({"instances": [[True] * 784]})))
case("null value", 400, post(json.dumps({"instances": [[None] * 784]})))
case("NaN", 400, post(json.dumps({"instances": [[float("nan")] * 784]})))
case("Infinity", 400, post(json.dumps({"instances": [[float("inf")] * 784]})))
case("1e999", 400, post('{"instances": [[' + ",".join(["1e999"] * 784) + "]]}"))
case("65 instances (limit 64)", 400, post(json.dumps({"instances": [[0.5] * 784] * 65})))
case("huge array (over 1M body)", 413, post('{"instances": [[' + ",".join(["0"] * 600000) + "]]}"))
case("huge array (under 1M body)", 400, post('{"instances": [[' + ",".join(["0"] * 400000) + "]]}"))
case("nesting 100000 deep", 400, post("[" * 100000 + "]" * 100000))
case("declared 100 MB body, Expect", 413, raw(b"POST %s HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100000000\r\n\r\n" % P.encode()))
chunk = b"a" * 65536
case("chunked body over 1M", 413, raw(b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" % P.encode()
                                      + (b"10000\r\n" + chunk + b"\r\n") * 20 + b"0\r\n\r\n"))
case("invalid UTF-8", 400, post(b'{"instances": "\xff\xfe"}'))
case("duplicate key", 400, post('{"instances": [[0.5]], "instances": [[0.5]]}'))
case("wrong signature_name", 400, post(json.dumps({"instances": [img], "signature_name": "train"})))
case("object instance, 2 keys", 400, post(json.dumps({"instances": [{"a": img, "b": img}]})))
C = "/v1/models/lenet:classify"
case("classify: no examples key", 400, post(json.dumps({"instances": [img]}), C))
case("classify: no example", 400, post('{"examples": []}', C))
case("classify: examples not a list", 400, post('{"examples": {"image": 1}}', C))
case("classify: example, 2 features", 400, post(json.dumps({"examples": [{"image": img, "x": img}]}), C))
case("classify: a context feature", 400, post(json.dumps({"examples": [img], "context": {"image": img}}), C))
case("classify: shape [783]", 400, post(json.dumps({"examples": [{"image": [0.5] * 783}]}), C))
case("GET on :classify", 404, raw(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % C.encode()))
case("unknown model", 404, post(good, "/v1/models/resnet:predict"))
case("unknown version", 404, post(good, "/v1/models/lenet/versions/7:predict"))
case("bad version", 404, post(good, "/v1/models/lenet/versions/x1:predict"))
case("unknown path", 404, raw(b"GET /v2/models HTTP/1.1\r\nHost: x\r\n\r\n"))
case("unknown verb :regress", 404, post(good, "/v1/models/lenet:regress"))
case("GET on :predict", 404, raw(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % P.encode()))
case("malformed header line", 400, raw(b"GET /v1/models/lenet HTTP/1.1\r\nBad Header Line\r\n\r\n", wait_close=True))
case("not HTTP (closed, no answer)", None, raw(b"\x00\x01garbage garbage\r\n\r\n", wait_close=True))

# slow clients: one stalls inside its headers, one inside its body; others are served
# meanwhile, and the server closes both after --idle-timeout 2 s.
for name, data in (("slow client (headers)", b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Le" % P.encode()),
                   ("slow client (body)", b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{\"inst" % P.encode())):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    t0 = time.time()
    still_serving(name)
    try:
        closed = s.recv(100) == b""
    except ConnectionResetError:
        closed = True
    waited = time.time() - t0
    ok = closed and 1.0 <= waited <= 8.0
    print("%s %-34s closed after %.1f s" % ("ok  " if ok else "FAIL", name, waited))
    if not ok:
        fails.append("%s: closed %s after %.1f s" % (name, closed, waited))
    s.close()
for f in fails:
    print("FAIL " + f)
sys.exit(1 if fails else 0)
PY
serve_stop
echo "serve bad requests ok"
