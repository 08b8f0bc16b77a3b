#!/usr/bin/env python3
"""serve_torch_peer.py: the peer build/serve is measured against (scripts/serve_load.py):
the same weights (train --export) in the PyTorch reference model, behind Python's
http.server (ThreadingHTTPServer, HTTP/1.1 keep-alive, a thread per connection), answering
POST /v1/models/NAME:predict {"instances": [...]} with {"predictions": softmax} exactly as
serve does for Fashion-MNIST 28x28 models (same normalisation), one forward per request
under torch.no_grad() (no server-side batching: what a plain PyTorch service does).

Usage: serve_torch_peer.py --weights FILE [--model lenet|mlp] [--port 0] [--threads 1]
Prints "listening on port N"; SIGTERM or Ctrl-C stops it.
"""
import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests"))
from train_torch_eval import MLP, LeNet, load_safetensors  # noqa: E402

MEAN, STD = 0.2860, 0.3530  # fashion-mnist, as train and serve --normalize fashion-mnist


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--model", default="lenet", choices=["lenet", "mlp"])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--max-body-bytes", type=int, default=4 << 20)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = {"lenet": LeNet, "mlp": MLP}[a.model]()
    model.load_state_dict(load_safetensors(a.weights), strict=True)
    model.eval()
    path = "/v1/models/%s:predict" % a.model

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def reply(self, status, doc):
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802 (http.server's name)
            n = int(self.headers.get("Content-Length", "0"))
            if n > a.max_body_bytes:
                self.close_connection = True
                return self.reply(413, {"error": "request body over %d bytes" % a.max_body_bytes})
            data = self.rfile.read(n)
            if self.path != path:
                return self.reply(404, {"error": "Malformed request: POST " + self.path})
            try:
                x = np.asarray(json.loads(data)["instances"], dtype=np.float32).reshape(-1, 1, 28, 28)
            except (ValueError, KeyError, TypeError) as e:
                return self.reply(400, {"error": str(e)})
            with torch.no_grad():
                p = torch.softmax(model((torch.from_numpy(x) - MEAN) / STD), 1)
            self.reply(200, {"predictions": p.tolist()})

        def log_message(self, fmt, *args):  # quiet: the load generator measures
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 256
        daemon_threads = True

    srv = Server(("127.0.0.1", a.port), Handler)
    print("listening on port %d" % srv.server_address[1], flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    srv.server_close()


if __name__ == "__main__":
    main()
