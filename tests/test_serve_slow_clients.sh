#!/usr/bin/env bash
# build/serve against slow clients (slowloris), all on loopback, bounded in count (63
# connections) and time (about 15 s):
# - 60 connections from 127.0.0.1, each sending its headers one byte every 0.5 s (never
#   idle for --idle-timeout 10) and reconnecting when closed, against --max-connections 40:
#   --max-connections-per-client 10 keeps 30 slots free, so 12 requests from 127.0.0.2
#   meanwhile must all be answered 200;
# - a request from 127.0.0.3 whose headers trickle, and one from 127.0.0.4 whose body
#   trickles, must be closed by --request-timeout 3 (the bound here, 20 s, only catches a
#   server that never closes them), and the metrics page counts them;
# - so must a keep-alive connection from 127.0.0.5 that had one request answered and then
#   trickles its next request line: the clock starts again when the connection waits for
#   its next request (bytes every 0.5 s keep --idle-timeout from ever closing it).
# Judges no time; binds no fixed port (the addresses are the loopback network's own).
set -u
. "$(dirname "$0")/serve_prelude.sh"
serve_start --max-connections 40 --max-connections-per-client 10 --request-timeout 3 --idle-timeout 10 \
  --log-level warning

timeout -k 5 100 /usr/bin/python3 - "$port" <<'PY' || { cat "$tmp/serve.err"; exit 1; }
import http.client, json, socket, sys, threading, time

port = int(sys.argv[1])
P = "/v1/models/lenet:predict"
img = [[[0.5] for _ in range(28)] for _ in range(28)]
fails = []

def connect(src):
    s = socket.socket()
    s.settimeout(5)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    s.settimeout(None)  # blocking: a recv with MSG_DONTWAIT then returns at once
    return s

def closed(s):
    """True when the server closed s (EOF or reset), without blocking."""
    try:
        return s.recv(4096, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True

stop = threading.Event()
reconnects = [0]

def slowloris():
    socks = [None] * 60
    while not stop.is_set():
        for i, s in enumerate(socks):
            try:
                if s is None or closed(s):
                    if s is not None:
                        s.close()
                        reconnects[0] += 1
                    socks[i] = s = connect("127.0.0.1")
                    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nX-a: " % P.encode())
                else:
                    s.sendall(b"a")
            except OSError:
                if socks[i] is not None:
                    socks[i].close()
                socks[i] = None
        stop.wait(0.5)
    for s in socks:
        if s is not None:
            s.close()

attacker = threading.Thread(target=slowloris)
attacker.start()
time.sleep(1.5)  # every slot the attacker may take is taken

# Normal requests from another address while the attack goes on.
body = json.dumps({"instances": [img]})
for k in range(12):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=20, source_address=("127.0.0.2", 0))
        c.request("POST", P, body, {"Content-Type": "application/json"})
        r = c.getresponse()
        st = r.status
        r.read()
        c.close()
    except OSError as e:
        st = repr(e)
    print("%s normal request %2d during the attack: %s" % ("ok  " if st == 200 else "FAIL", k, st))
    if st != 200:
        fails.append("normal request %d during the attack: %s" % (k, st))
    time.sleep(0.3)

def answered(s):
    """Sends one GET on s and reads its whole answer; True when it is a 200 that keeps
    the connection open."""
    s.sendall(b"GET /v1/models/lenet HTTP/1.1\r\nHost: x\r\n\r\n")
    s.settimeout(20)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return False
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").lower().split("\r\n")
        length = [int(l.split(":", 1)[1]) for l in lines if l.startswith("content-length:")]
        while length and len(body) < length[0]:
            chunk = s.recv(4096)
            if not chunk:
                return False
            body += chunk
    except OSError:
        return False
    finally:
        s.settimeout(None)
    return lines[0].startswith("http/1.1 200") and "connection: close" not in lines

# A request whose headers trickle, one whose body trickles, and a request line that
# trickles after a first request was answered on the connection: closed by
# --request-timeout.
def trickle(name, src, head, byte, keep_alive=False):
    s = connect(src)
    if keep_alive and not answered(s):
        s.close()
        print("FAIL %s: the first request was not answered 200 on a kept connection" % name)
        fails.append("%s: no 200 on a kept connection for the first request" % name)
        return
    s.sendall(head)
    t0 = time.time()
    while time.time() - t0 < 20:
        if closed(s):
            print("ok   %s: closed by the server after %.1f s" % (name, time.time() - t0))
            s.close()
            return
        try:
            s.sendall(byte)
        except OSError:
            print("ok   %s: closed by the server" % name)
            s.close()
            return
        time.sleep(0.5)
    s.close()
    print("FAIL %s: still open after 20 s" % name)
    fails.append("%s: still open after 20 s (--request-timeout 3)" % name)

t1 = threading.Thread(target=trickle, args=("trickled headers", "127.0.0.3",
                      b"POST %s HTTP/1.1\r\nHost: x\r\nX-b: " % P.encode(), b"b"))
t2 = threading.Thread(target=trickle, args=("trickled body", "127.0.0.4",
                      b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" % P.encode(), b" "))
t3 = threading.Thread(target=trickle, args=("trickled request line after an answer", "127.0.0.5",
                      b"GET /v1/models/lenet", b"x", True))
t1.start(); t2.start(); t3.start(); t1.join(); t2.join(); t3.join()
stop.set()
attacker.join()
print("the attacker reconnected %d time(s)" % reconnects[0])

c = http.client.HTTPConnection("127.0.0.1", port, timeout=20, source_address=("127.0.0.2", 0))
c.request("GET", "/monitoring/prometheus/metrics")
metrics = c.getresponse().read().decode()
n = [l for l in metrics.splitlines() if l.startswith("serve_request_timeouts_total ")]
got = int(n[0].split()[1]) if n else -1
print("%s serve_request_timeouts_total %d (at least 2)" % ("ok  " if got >= 2 else "FAIL", got))
if got < 2:
    fails.append("serve_request_timeouts_total is %d, expected at least 2" % got)
for f in fails:
    print("FAIL " + f)
sys.exit(1 if fails else 0)
PY
serve_stop
echo "serve slow clients ok"
