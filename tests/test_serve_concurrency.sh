#!/usr/bin/env bash
# build/serve under load: 64 concurrent clients x 100 batch-1 predict requests (keep-alive
# connections, 200 distinct Fashion-MNIST test images): no error and no wrong answer (each
# answer's class equals the one the server gave that image alone), with server batching on
# (the metrics page must show fewer forward passes than requests: batches formed) and, 16
# clients x 50, with batching off (one forward pass per request). Under a sanitizer
# (HVD_TEST_SANITIZER, set by make SANITIZE=... test) the same 64 and 16 clients send a
# tenth of the requests each (10 and 5: still batches of up to 32 formed) over 64
# distinct images: the instrumented server is several times slower, and that build looks
# for memory errors, not throughput.
set -u
per_client_on=100 per_client_off=50 images=200
if [ -n "${HVD_TEST_SANITIZER:-}" ]; then per_client_on=10 per_client_off=5 images=64; fi
. "$(dirname "$0")/serve_prelude.sh"

fails=0
# run_case NAME CLIENTS REQUESTS SERVE_FLAGS...: serves, loads, checks the metrics.
run_case() {
  local name=$1 clients=$2 requests=$3
  shift 3
  serve_start --log-level warning "$@"
  timeout -k 5 100 /usr/bin/python3 scripts/serve_load.py bench --port "$port" --clients "$clients" \
    --requests "$requests" --images "$images" --label "$name"
  local brc=$?
  if [ $brc -eq 124 ] || [ $brc -eq 137 ]; then
    echo "FAIL $name: the load did not finish within 100 s"; fails=$((fails + 1))
  elif [ $brc -ne 0 ]; then
    echo "FAIL $name: errors or wrong answers (exit $brc)"; fails=$((fails + 1))
  fi
  curl -s "http://127.0.0.1:$port/monitoring/prometheus/metrics" >"$tmp/metrics"
  kill -TERM "$pid"; wait "$pid"; local rc=$?; pid=
  [ $rc -eq 0 ] || { echo "FAIL $name: serve exited $rc"; fails=$((fails + 1)); }
  local fw jobs
  fw=$(sed -n 's/^serve_forward_passes_total //p' "$tmp/metrics")
  jobs=$(sed -n 's/^serve_batched_jobs_total //p' "$tmp/metrics")
  echo "$name: $jobs requests in $fw forward passes"
  [ -n "$fw" ] && [ -n "$jobs" ] || { echo "FAIL $name: no metrics"; fails=$((fails + 1)); return; }
  case "$name" in
    *on*) [ "$fw" -lt $((jobs * 9 / 10)) ] || { echo "FAIL $name: no batching"; fails=$((fails + 1)); } ;;
    *) [ "$fw" -eq "$jobs" ] || { echo "FAIL $name: batched while off"; fails=$((fails + 1)); } ;;
  esac
}
run_case "batching on" 64 "$per_client_on" --max-batch-size 32 --batch-timeout-micros 2000
run_case "batching off" 16 "$per_client_off" --no-enable-batching
[ $fails -eq 0 ] || exit 1
echo "serve concurrency ok"
