#!/usr/bin/env bash
# build/serve and where a request body ends, with --max-body-bytes 8K, on loopback (a
# few connections, each bounded by a timeout):
# - a body of exactly the limit is answered (200), one byte more is 413, declared
#   (Content-Length) or chunked;
# - a 64 MiB body POSTed with Python's urllib (which sends it all before reading) gets
#   the 413 and its message, not a broken pipe; with "Expect: 100-continue" the 413 comes
#   before the body is sent;
# - Content-Length -5, out of range or "5, 5" gets one answer (one status line), 400 or
#   413, with an {"error": ...} body; two Content-Length headers (equal or not),
#   Content-Length beside Transfer-Encoding, or a Transfer-Encoding other than chunked get
#   400 and the connection closed (no second request read from it);
# and after each case a good request is answered.
set -u
. "$(dirname "$0")/serve_prelude.sh"
serve_start --max-body-bytes 8K

PYTHONPATH=scripts timeout -k 5 100 /usr/bin/python3 - "$port" <<'PY' || { tail -20 "$tmp/serve.err"; exit 1; }
import json, socket, sys, urllib.error, urllib.request
from serve_load import Client, raw_exchange

port = int(sys.argv[1])
LIMIT = 8192
P = "/v1/models/lenet:predict"
img = [[[0.5] for _ in range(28)] for _ in range(28)]
fails = []

def check(name, ok, got):
    print("%s %-40s %s" % ("ok  " if ok else "FAIL", name, got))
    if not ok:
        fails.append("%s: %s" % (name, got))
    st, doc = Client(port).predict("lenet", [img])
    if st != 200:
        fails.append("after %s: a good request got %d %s" % (name, st, doc))

def raw(data):
    """Sends data on a fresh connection, reads until the server closes it (or 10 s)."""
    buf, error = raw_exchange(port, data)
    return buf + (b"<<%s>>" % repr(error).encode() if error else b"")

def one_answer(buf, want):
    """(ok, summary): exactly one response, of status want, with an {"error": ...} body."""
    n = buf.count(b"HTTP/1.")
    head, _, body = buf.partition(b"\r\n\r\n")
    try:
        st = int(head.split()[1])
        err = json.loads(body).get("error")
    except (IndexError, ValueError, AttributeError):
        st, err = None, None
    return n == 1 and st == want and isinstance(err, str), "%d status line(s), %s %s" % (n, st, body[:100])

# Bodies of exactly the limit and one byte more: valid JSON padded with spaces.
base = json.dumps({"instances": [img]}).encode()
assert len(base) < LIMIT - 10, len(base)
for size, want in ((LIMIT, 200), (LIMIT + 1, 413)):
    body = base[:-1] + b" " * (size - len(base)) + b"}"
    st, doc = Client(port).request("POST", P, body, {"Content-Type": "application/json"})
    check("declared body of %d bytes (limit %d)" % (size, LIMIT), st == want, "%s %s" % (st, str(doc)[:80]))
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 1000]), body[i:i + 1000]) for i in range(0, len(body), 1000))
    buf = raw(b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" % P.encode()
              + chunks + b"0\r\n\r\n")
    st = int(buf.split()[1]) if buf.startswith(b"HTTP/1.") else None
    check("chunked body of %d bytes (limit %d)" % (size, LIMIT), st == want, buf[:60])

# 64 MiB with urllib: it sends the whole body, then reads the answer.
big = b'{"instances": [' + b"0," * (32 << 20) + b"0]}"
try:
    urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%d%s" % (port, P), data=big,
                           headers={"Content-Type": "application/json"}), timeout=60)
    check("64 MiB body with urllib", False, "answered 200")
except urllib.error.HTTPError as e:
    msg = e.read().decode()
    check("64 MiB body with urllib", e.code == 413 and "--max-body-bytes" in msg, "%d %s" % (e.code, msg))
except OSError as e:
    check("64 MiB body with urllib", False, repr(e))
buf = raw(b"POST %s HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (P.encode(), len(big)))
ok, got = one_answer(buf, 413)
check("64 MiB declared, Expect: 100-continue", ok, got)

# Malformed lengths: one answer, not two.
for name, header, want in (("Content-Length -5", b"Content-Length: -5", 400),
                           ("Content-Length out of range", b"Content-Length: 99999999999999999999999", 413),
                           ("Content-Length 5, 5", b"Content-Length: 5, 5", 400)):
    ok, got = one_answer(raw(b"POST %s HTTP/1.1\r\nHost: x\r\n%s\r\n\r\n{}" % (P.encode(), header)), want)
    check(name, ok, got)

# Ambiguous framing: 400, and what follows on the connection is not read as a request.
hidden = b"GET /v1/models/lenet HTTP/1.1\r\nHost: x\r\n\r\n"
for name, headers, body in (
        ("two Content-Length, different", b"Content-Length: 5\r\nContent-Length: %d\r\n" % (5 + len(hidden)), b"{}   " + hidden),
        ("two Content-Length, equal", b"Content-Length: 5\r\nContent-Length: 5\r\n", b"{}   " + hidden),
        ("Content-Length and chunked", b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n" + hidden),
        ("Transfer-Encoding gzip", b"Transfer-Encoding: gzip\r\n", b"{}" + hidden)):
    ok, got = one_answer(raw(b"POST %s HTTP/1.1\r\nHost: x\r\n%s\r\n%s" % (P.encode(), headers, body)), 400)
    check(name, ok, got)
for f in fails:
    print("FAIL " + f)
sys.exit(1 if fails else 0)
PY
serve_stop
echo "serve body framing ok"
