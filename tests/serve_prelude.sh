# tests/serve_prelude.sh: sourced by the serve tests that run one server on a lenet that
# train exports. Sets build, tmp (a scratch folder, removed at exit with the server),
# trains $tmp/lenet.safetensors, and defines serve_start.
build=${HVD_BUILD:-build}
for p in "$build/train" "$build/serve"; do
  [ -x "$p" ] || { echo "FAIL: $p is not built (run make)"; exit 1; }
done
tmp=$(mktemp -d "/tmp/$(basename "$0" .sh).XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
timeout -k 5 120 "$build/train" --model lenet --max-train 500 --max-test 100 --epochs 1 \
  --threads 2 --export "$tmp/lenet.safetensors" >"$tmp/train.out" 2>&1 \
  || { echo "FAIL train:"; cat "$tmp/train.out"; exit 1; }

# serve_wait_listening OUT: waits until the server $pid wrote its ports to OUT (60 s at
# most: the machine may be loaded), or it exited; then sets port and grpc_port (gRPC's,
# "" when off), empty when it did not start. OUT must not exist before the server is
# started: the background redirection creates it a moment after `&` returns, and a
# leftover file of an earlier server would be read (or emptied after the look) meanwhile.
serve_wait_listening() {
  for _ in $(seq 600); do
    grep -qs 'listening on port' "$1" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  port=$(sed -n 's/.*listening on port \([0-9]*\)$/\1/p' "$1" 2>/dev/null)
  grpc_port=$(sed -n 's/^serve: gRPC port \([0-9]*\)$/\1/p' "$1" 2>/dev/null)
}

# serve_start FLAG...: serve on that model, port 0 and one thread, with the flags given;
# output in $tmp/serve.out and serve.err. Sets pid, port and grpc_port once it listens,
# or fails the test.
serve_start() {
  rm -f "$tmp/serve.out" "$tmp/serve.err"
  "$build/serve" --model lenet --weights "$tmp/lenet.safetensors" --port 0 --threads 1 \
    "$@" >"$tmp/serve.out" 2>"$tmp/serve.err" &
  pid=$!
  serve_wait_listening "$tmp/serve.out"
  [ -n "$port" ] || { echo "FAIL serve did not start:"; cat "$tmp/serve.err"; exit 1; }
}

# serve_stop: SIGTERM to the server; it must exit 0 (or the test fails).
serve_stop() {
  kill -TERM "$pid"; wait "$pid"; local rc=$?; pid=
  [ $rc -eq 0 ] || { echo "FAIL serve exited $rc after SIGTERM"; tail "$tmp/serve.err"; exit 1; }
}
