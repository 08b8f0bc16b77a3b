/* serve: a model trained by train behind TensorFlow Serving's REST API (docs/serve.md).
   This file is the program: flags, signals, the version poll, and every line printed.
   The parts: http.c (API), instances.c (request JSON), batcher.c (batching), versions.c
   (model versions). */
#include "nn/nn.h"
#include "serve/http.h"
#include "serve/instances.h"
#include "serve/versions.h"
#include "util/flags.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const devices[] = {"cpu", "gpu", NULL};
static const char *const levels[] = {"info", "warning", NULL};

static int quiet_info;

static void print_line(void *ctx, const char *line) {
  (void)ctx;
  if (quiet_info && strncmp(line, "info:", 5) == 0) return;
  fprintf(stderr, "serve: %s\n", line);
}

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "serve: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  exit(1);
}

/* Until SIGTERM or SIGINT (blocked in every thread, taken here): polls the version folders
   every poll_s seconds, saying what changed. Returns the signal. */
static int serve_until_signal(serve_models_t *models, const sigset_t *sigs, int poll_s) {
  for (;;) {
    struct timespec ts = {.tv_sec = poll_s};
    int got = sigtimedwait(sigs, NULL, &ts);
    if (got > 0) return got;
    if (got < 0 && errno != EAGAIN && errno != EINTR) die("sigtimedwait: %s", strerror(errno));
    char msg[1024];
    int p = serve_models_poll(models, msg, sizeof msg);
    if (p > 0) {
      fprintf(stderr, "serve: info: %s\n", msg);
      serve_version_t *v = serve_models_acquire(models, 0);
      if (v) {
        print_line(NULL, v->info.note);
        serve_models_release(models, v);
      }
    } else if (p < 0) {
      fprintf(stderr, "serve: warning: %s\n", msg);
    }
  }
}

int main(int argc, char **argv) {
  const char *arch = "lenet", *model_name = NULL, *weights = NULL, *base_path = NULL;
  const char *device = "cpu", *normalize = NULL, *level = "info", *model_file = NULL;
  int port = 8501, batching = 1, max_batch = 32, max_instances = 1024, max_conn = 256;
  int idle_timeout = 30, request_timeout = 30, max_per_client = 128, threads = 0, poll_s = 1;
  long timeout_us = 1000;
  size_t max_body = 4u << 20, max_inflight = 256u << 20;
  double drain_s = 30;
  const util_flag_t table[] = {
      {"model", UTIL_FLAG_CHOICE, &arch, .choices = nn_model_names(), .metavar = "NAME",
       .help = "the network the weights are for (train's --model)"},
      {"model-file", UTIL_FLAG_STRING, &model_file, .metavar = "FILE.onnx", .def = "",
       .help = "instead of --model and --weights: an ONNX graph with its weights (train "
               "--export-onnx, torch.onnx.export), served as version 1 (docs/onnx.md)"},
      {"model-name", UTIL_FLAG_STRING, &model_name, .def = "--model",
       .help = "the NAME in /v1/models/NAME"},
      {"weights", UTIL_FLAG_STRING, &weights, .metavar = "FILE", .def = "",
       .help = "a safetensors file from train --export, served as version 1"},
      {"model-base-path", UTIL_FLAG_STRING, &base_path, .metavar = "DIR", .def = "",
       .help = "instead of --weights: DIR/N/model.safetensors for versions N; the newest is "
               "served and a newer one is picked up without a restart"},
      {"file-system-poll-wait-seconds", UTIL_FLAG_INT, &poll_s, .min = 1, .max = 86400,
       .help = "how often --model-base-path is checked for a new version"},
      {"port", UTIL_FLAG_INT, &port, .min = 0, .max = 65535,
       .help = "HTTP port (0: any free port; the line 'listening on port N' says which)"},
      {"device", UTIL_FLAG_CHOICE, &device, .choices = devices,
       .help = "gpu: a build with CUDA and a GPU"},
      {"normalize", UTIL_FLAG_CHOICE, &normalize, .choices = serve_normalization_names,
       .def = "what the file records, else fashion-mnist",
       .help = "x = (v - mean) / std per channel, v in [0, 1], with this data set's constants "
               "(train's --dataset), overriding the normalisation the file records"},
      {"enable-batching", UTIL_FLAG_BOOL, &batching,
       .help = "run requests that arrive together as one forward pass (--no-enable-batching: "
               "one request per forward pass)"},
      {"max-batch-size", UTIL_FLAG_INT, &max_batch, .min = 1, .max = 65536,
       .help = "samples per forward pass"},
      {"batch-timeout-micros", UTIL_FLAG_LONG, &timeout_us, .min = 0, .max = 10000000,
       .help = "how long the first request of a batch waits for more"},
      {"threads", UTIL_FLAG_INT, &threads, .min = 1, .max = 4096, .def = "all cores",
       .help = "CPU threads of the forward pass"},
      {"max-body-bytes", UTIL_FLAG_SIZE, &max_body, .min = 64, .max = 1 << 30,
       .help = "largest request body (413 above)"},
      {"max-inflight-body-bytes", UTIL_FLAG_SIZE, &max_inflight, .min = 4096, .max = INFINITY,
       .help = "request bodies held in memory at once, all connections (503 above)"},
      {"max-instances", UTIL_FLAG_INT, &max_instances, .min = 1, .max = 1 << 20,
       .help = "samples in one request (400 above)"},
      {"max-connections", UTIL_FLAG_INT, &max_conn, .min = 1, .max = 65536,
       .help = "open connections (one thread each)"},
      {"max-connections-per-client", UTIL_FLAG_INT, &max_per_client, .min = 1, .max = 65536,
       .help = "open connections from one IP address (more are closed at once; behind a "
               "proxy, every client has the proxy's address)"},
      {"idle-timeout", UTIL_FLAG_INT, &idle_timeout, .min = 1, .max = 86400,
       .help = "seconds a silent connection is kept (between requests at most "
               "--request-timeout, which bounds the wait for the next request line too)"},
      {"request-timeout", UTIL_FLAG_INT, &request_timeout, .min = 1, .max = 86400,
       .help = "seconds for a whole request to arrive: its first line from the connection's "
               "opening or previous response, its headers and body from that line; a slower "
               "one's connection is closed unanswered"},
      {"drain-timeout", UTIL_FLAG_DOUBLE, &drain_s, .min = 0, .max = 86400,
       .help = "at SIGTERM, seconds to wait for the requests already read"},
      {"log-level", UTIL_FLAG_CHOICE, &level, .choices = levels,
       .help = "info: a line per request; warning: only problems"},
  };
  const util_flags_spec_t spec = {
      .prog = "serve", .usage = "serve --model NAME (--weights FILE | --model-base-path DIR) [flags]",
      .about = "Serves a model trained by train over TensorFlow Serving's REST API:\n"
               "GET /v1/models/NAME, GET /v1/models/NAME/metadata, POST /v1/models/NAME:predict,\n"
               "POST /v1/models/NAME:classify.",
      .flags = table, .nflags = UTIL_FLAGS_COUNT(table),
      .footer = "SIGTERM or SIGINT: stop accepting, answer the requests already read, exit 0."};
  char err[1024];
  int first;
  int rc = util_flags_parse(&spec, argc, argv, &first, err, sizeof err);
  if (rc == UTIL_FLAGS_HELP) {
    util_flags_usage(&spec, stdout);
    return 0;
  }
  if (rc != UTIL_FLAGS_OK) {
    fprintf(stderr, "serve: %s\n", err);
    return 2;
  }
  if (model_file && (weights || base_path || !nn_model_source_is_onnx(model_file))) {
    fprintf(stderr, "serve: --model-file %s: give an ONNX file (FILE.onnx), without "
                    "--weights or --model-base-path; see serve --help\n", model_file);
    return 2;
  }
  if (model_file) arch = weights = model_file;   /* the graph and its weights */
  if (!weights == !base_path) {
    fprintf(stderr, "serve: give --weights FILE or --model-base-path DIR (one of them); "
                    "see serve --help\n");
    return 2;
  }
  if (!model_name) model_name = arch;
  quiet_info = strcmp(level, "warning") == 0;
  if (threads) nn_set_threads(threads);

  /* Signals are taken by sigtimedwait in this thread only: blocked before any thread
     starts, so every thread inherits the mask. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0) die("%s", "pthread_sigmask failed");
  if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("%s", "ignoring SIGPIPE failed");

  serve_models_config_t mc = {.arch = arch, .weights = weights, .base_path = base_path,
                              .normalize = normalize, .default_normalize = "fashion-mnist",
                              .batching = {.max_batch = max_batch,
                                           .batch_timeout_us = timeout_us,
                                           .enabled = batching},
                              .gpu = strcmp(device, "gpu") == 0};
  serve_models_t *models = NULL;
  if (serve_models_open(&models, &mc, err, sizeof err) != 0) die("%s", err);
  serve_version_t *v0 = serve_models_acquire(models, 0);
  long number = v0->number;
  char norm[256];
  snprintf(norm, sizeof norm, "%s (mean %s, std %s)", v0->info.norm_source, v0->info.norm_mean,
           v0->info.norm_std);
  print_line(NULL, v0->info.note);
  serve_models_release(models, v0);

  serve_http_config_t hc = {.port = port, .model_name = model_name, .max_body = max_body,
                            .max_inflight_bytes = max_inflight, .max_connections = max_conn,
                            .max_connections_per_client = max_per_client,
                            .idle_timeout_s = idle_timeout, .request_timeout_s = request_timeout,
                            .log = print_line};
  int classes;
  serve_models_shape(models, &hc.input.c, &hc.input.h, &hc.input.w, &classes);
  hc.input.max_instances = max_instances; /* the normalisation: each version's own */
  serve_http_t *http = NULL;
  if (serve_http_start(&http, &hc, models, err, sizeof err) != 0) {
    serve_models_close(models);
    die("%s", err);
  }
  printf("serve: model %s (%s, input %dx%dx%d, %d classes), version %ld, %s, batching %s "
         "(max batch %d, timeout %ld us), normalisation %s\n",
         model_name, arch, hc.input.h, hc.input.w, hc.input.c, classes, number, device,
         batching ? "on" : "off", max_batch, timeout_us, norm);
  printf("serve: listening on port %d\n", serve_http_port(http));
  fflush(stdout);

  int sig = serve_until_signal(models, &sigs, poll_s);
  fprintf(stderr, "serve: %s: not accepting connections; answering the requests already read\n",
          strsignal(sig));
  int left = serve_http_drain(http, drain_s);
  if (left > 0)
    fprintf(stderr, "serve: warning: %d request(s) still unanswered after %g s (--drain-timeout); "
                    "closing them\n", left, drain_s);
  serve_http_stop(http);
  serve_models_close(models);
  fprintf(stderr, "serve: stopped\n");
  return left > 0 ? 1 : 0;
}
