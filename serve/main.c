/* serve: a model trained by train behind TensorFlow Serving's REST API (docs/serve.md).
   This file is the program: flags, signals, the version poll, and every line printed.
   The parts: http.c (API), instances.c (request JSON), batcher.c (batching), versions.c
   (model versions), grpc_server.c and grpc_calls.c (the gRPC API), labels.c (version
   labels). */
#include "nn/nn.h"
#include "serve/grpc.h"
#include "serve/http.h"
#include "serve/instances.h"
#include "serve/versions.h"
#include "util/clock.h"
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

/* Blocks SIGTERM and SIGINT (into sigs) and ignores SIGPIPE. */
static void block_signals(sigset_t *sigs) {
  sigemptyset(sigs);
  sigaddset(sigs, SIGTERM);
  sigaddset(sigs, SIGINT);
  if (pthread_sigmask(SIG_BLOCK, sigs, NULL) != 0) die("%s", "pthread_sigmask failed");
  if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("%s", "ignoring SIGPIPE failed");
}

/* Every --version-labels label must name a version served now (TF Serving refuses
   others too); 0, or -1 with why in err. */
static int check_labels(serve_models_t *models, const serve_labels_t *labels, char *err,
                        size_t errlen) {
  for (int i = 0; i < labels->n; i++) {
    serve_version_t *v = serve_models_acquire(models, labels->version[i]);
    if (v) {
      serve_models_release(models, v);
      continue;
    }
    long nums[1] = {0};
    serve_models_list(models, nums, 1);
    snprintf(err, errlen, "--version-labels: %s=%ld names no version served (serving version "
             "%ld); label a version that is loaded", labels->name[i], labels->version[i], nums[0]);
    return -1;
  }
  return 0;
}

/* gRPC on port (-1: any free one) with REST's model, limits and timeouts. */
static int start_grpc(serve_grpc_t **out, int port, const serve_http_config_t *hc,
                      serve_models_t *models, char *err, size_t errlen) {
  serve_grpc_config_t gc = {.port = port < 0 ? 0 : port,
                            .env = {.models = models, .model_name = hc->model_name,
                                    .input = hc->input, .labels = hc->labels},
                            .max_message_bytes = hc->max_body,
                            .max_inflight_bytes = hc->max_inflight_bytes,
                            .max_connections = hc->max_connections,
                            .idle_timeout_s = hc->idle_timeout_s,
                            .request_timeout_s = hc->request_timeout_s, .log = print_line};
  return serve_grpc_start(out, &gc, err, errlen);
}

/* Both protocols stop taking calls at once, then answer those they have within drain_s.
   Returns how many were left unanswered. */
static int drain(serve_http_t *http, serve_grpc_t *grpc, double drain_s) {
  if (grpc) serve_grpc_quiesce(grpc);
  double t0 = util_now_s();
  int left = serve_http_drain(http, drain_s);
  if (grpc) left += serve_grpc_drain(grpc, fmax(0.0, drain_s - (util_now_s() - t0)));
  if (left > 0)
    fprintf(stderr, "serve: warning: %d request(s) still unanswered after %g s (--drain-timeout); "
                    "closing them\n", left, drain_s);
  return left;
}

/* serve's flags (serve --help). */
typedef struct {
  const char *arch, *model_name, *weights, *base_path, *device, *normalize, *level;
  const char *model_file;     /* --model-file: an ONNX graph with its weights             */
  const char *version_labels;
  int port, batching, max_batch, max_instances, max_conn, idle_timeout, request_timeout;
  int max_per_client, threads, poll_s;
  int grpc_port;             /* -1: any free port; 0: off                              */
  long timeout_us;
  size_t max_body, max_inflight;
  double drain_s;
  serve_labels_t labels;     /* --version-labels, parsed                               */
} opts_t;

/* argv -> o. Returns -1 to serve, else the exit status: 0 after --help (printed), 2 for
   bad flags (said on stderr). */
static int parse_flags(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.arch = "lenet", .device = "cpu", .level = "info", .version_labels = "",
                .port = 8501, .batching = 1, .max_batch = 32, .max_instances = 1024,
                .max_conn = 256, .idle_timeout = 30, .request_timeout = 30,
                .max_per_client = 128, .poll_s = 1,
                .grpc_port = -2, /* not given: 8500, or any free port beside --port 0 */
                .timeout_us = 1000, .max_body = 4u << 20, .max_inflight = 256u << 20,
                .drain_s = 30};
  const util_flag_t table[] = {
      {"model", UTIL_FLAG_CHOICE, &o->arch, .choices = nn_model_names(), .metavar = "NAME",
       .help = "the network the weights are for (train's --model)"},
      {"model-file", UTIL_FLAG_STRING, &o->model_file, .metavar = "FILE.onnx", .def = "",
       .help = "instead of --model and --weights: an ONNX graph with its weights (train "
               "--export-onnx, torch.onnx.export), served as version 1 (docs/onnx.md)"},
      {"model-name", UTIL_FLAG_STRING, &o->model_name, .def = "--model",
       .help = "the NAME in /v1/models/NAME"},
      {"weights", UTIL_FLAG_STRING, &o->weights, .metavar = "FILE", .def = "",
       .help = "a safetensors file from train --export, served as version 1"},
      {"model-base-path", UTIL_FLAG_STRING, &o->base_path, .metavar = "DIR", .def = "",
       .help = "instead of --weights: DIR/N/model.safetensors for versions N; the newest is "
               "served and a newer one is picked up without a restart"},
      {"file-system-poll-wait-seconds", UTIL_FLAG_INT, &o->poll_s, .min = 1, .max = 86400,
       .help = "how often --model-base-path is checked for a new version"},
      {"port", UTIL_FLAG_INT, &o->port, .min = 0, .max = 65535,
       .help = "HTTP port (0: any free port; the line 'listening on port N' says which)"},
      {"grpc-port", UTIL_FLAG_INT, &o->grpc_port, .min = -1, .max = 65535,
       .def = "8500; with --port 0, any free port",
       .help = "gRPC port (TF Serving's PredictionService and ModelService; -1: any free "
               "port, the line 'gRPC port N' says which; 0: no gRPC)"},
      {"version-labels", UTIL_FLAG_STRING, &o->version_labels, .metavar = "L=N,...", .def = "none",
       .help = "labels of versions (stable=1,canary=2): REST /v1/models/NAME/labels/L, gRPC "
               "model_spec.version_label; each must name a version served at start"},
      {"device", UTIL_FLAG_CHOICE, &o->device, .choices = devices,
       .help = "gpu: a build with CUDA and a GPU"},
      {"normalize", UTIL_FLAG_CHOICE, &o->normalize, .choices = serve_normalization_names,
       .def = "what the file records, else fashion-mnist",
       .help = "x = (v - mean) / std per channel, v in [0, 1], with this data set's constants "
               "(train's --dataset), overriding the normalisation the file records"},
      {"enable-batching", UTIL_FLAG_BOOL, &o->batching,
       .help = "run requests that arrive together as one forward pass (--no-enable-batching: "
               "one request per forward pass)"},
      {"max-batch-size", UTIL_FLAG_INT, &o->max_batch, .min = 1, .max = 65536,
       .help = "samples per forward pass"},
      {"batch-timeout-micros", UTIL_FLAG_LONG, &o->timeout_us, .min = 0, .max = 10000000,
       .help = "how long the first request of a batch waits for more"},
      {"threads", UTIL_FLAG_INT, &o->threads, .min = 1, .max = 4096, .def = "all cores",
       .help = "CPU threads of the forward pass"},
      {"max-body-bytes", UTIL_FLAG_SIZE, &o->max_body, .min = 64, .max = 1 << 30,
       .help = "largest request body (413 above) and gRPC request message "
               "(RESOURCE_EXHAUSTED above)"},
      {"max-inflight-body-bytes", UTIL_FLAG_SIZE, &o->max_inflight, .min = 4096, .max = INFINITY,
       .help = "request bodies held in memory at once, all connections (503 above); gRPC "
               "request messages the same, apart (RESOURCE_EXHAUSTED above)"},
      {"max-instances", UTIL_FLAG_INT, &o->max_instances, .min = 1, .max = 1 << 20,
       .help = "samples in one request (400 above)"},
      {"max-connections", UTIL_FLAG_INT, &o->max_conn, .min = 1, .max = 65536,
       .help = "open connections (one thread each)"},
      {"max-connections-per-client", UTIL_FLAG_INT, &o->max_per_client, .min = 1, .max = 65536,
       .help = "open connections from one IP address (more are closed at once; behind a "
               "proxy, every client has the proxy's address)"},
      {"idle-timeout", UTIL_FLAG_INT, &o->idle_timeout, .min = 1, .max = 86400,
       .help = "seconds a silent connection is kept (between requests at most "
               "--request-timeout, which bounds the wait for the next request line too)"},
      {"request-timeout", UTIL_FLAG_INT, &o->request_timeout, .min = 1, .max = 86400,
       .help = "seconds for a whole request to arrive: its first line from the connection's "
               "opening or previous response, its headers and body from that line; a slower "
               "one's connection is closed unanswered"},
      {"drain-timeout", UTIL_FLAG_DOUBLE, &o->drain_s, .min = 0, .max = 86400,
       .help = "at SIGTERM, seconds to wait for the requests already read"},
      {"log-level", UTIL_FLAG_CHOICE, &o->level, .choices = levels,
       .help = "info: a line per request; warning: only problems"},
  };
  const util_flags_spec_t spec = {
      .prog = "serve", .usage = "serve --model NAME (--weights FILE | --model-base-path DIR) [flags]",
      .about = "Serves a model trained by train over TensorFlow Serving's REST API:\n"
               "GET /v1/models/NAME, GET /v1/models/NAME/metadata, POST /v1/models/NAME:predict,\n"
               "POST /v1/models/NAME:classify; and its gRPC API (--grpc-port): PredictionService\n"
               "Predict, Classify and GetModelMetadata, ModelService GetModelStatus.",
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
  if (o->model_file &&
      (o->weights || o->base_path || !nn_model_source_is_onnx(o->model_file))) {
    fprintf(stderr, "serve: --model-file %s: give an ONNX file (FILE.onnx), without "
                    "--weights or --model-base-path; see serve --help\n", o->model_file);
    return 2;
  }
  if (o->model_file) o->arch = o->weights = o->model_file;   /* the graph and its weights */
  if (!o->weights == !o->base_path) {
    fprintf(stderr, "serve: give --weights FILE or --model-base-path DIR (one of them); "
                    "see serve --help\n");
    return 2;
  }
  if (!o->model_name) o->model_name = o->arch;
  if (o->grpc_port == -2) o->grpc_port = o->port == 0 ? -1 : 8500;
  if (serve_labels_parse(o->version_labels, &o->labels, err, sizeof err) != 0) {
    fprintf(stderr, "serve: %s\n", err);
    return 2;
  }
  return -1;
}

int main(int argc, char **argv) {
  if (nn_blas_fix_misdetected_core(argv) != NN_OK)
    fprintf(stderr, "serve: warning: %s\n", nn_last_error());
  opts_t o;
  int rc = parse_flags(argc, argv, &o);
  if (rc >= 0) return rc;
  char err[1024];
  quiet_info = strcmp(o.level, "warning") == 0;
  if (o.threads) nn_set_threads(o.threads);

  /* Signals are taken by sigtimedwait in this thread only: blocked before any thread
     starts, so every thread inherits the mask. */
  sigset_t sigs;
  block_signals(&sigs);

  serve_models_config_t mc = {.arch = o.arch, .weights = o.weights, .base_path = o.base_path,
                              .normalize = o.normalize, .default_normalize = "fashion-mnist",
                              .batching = {.max_batch = o.max_batch,
                                           .batch_timeout_us = o.timeout_us,
                                           .enabled = o.batching},
                              .gpu = strcmp(o.device, "gpu") == 0};
  serve_models_t *models = NULL;
  if (serve_models_open(&models, &mc, err, sizeof err) != 0) die("%s", err);
  serve_version_t *v0 = serve_models_acquire(models, 0);
  long number = v0->number;
  char norm[256];
  snprintf(norm, sizeof norm, "%s (mean %s, std %s)", v0->info.norm_source, v0->info.norm_mean,
           v0->info.norm_std);
  print_line(NULL, v0->info.note);
  serve_models_release(models, v0);
  if (check_labels(models, &o.labels, err, sizeof err) != 0) {
    serve_models_close(models);
    fprintf(stderr, "serve: %s\n", err);
    return 2;
  }

  serve_http_config_t hc = {.port = o.port, .model_name = o.model_name, .max_body = o.max_body,
                            .max_inflight_bytes = o.max_inflight, .max_connections = o.max_conn,
                            .max_connections_per_client = o.max_per_client,
                            .idle_timeout_s = o.idle_timeout,
                            .request_timeout_s = o.request_timeout,
                            .labels = &o.labels, .log = print_line};
  int classes;
  serve_models_shape(models, &hc.input.c, &hc.input.h, &hc.input.w, &classes);
  hc.input.max_instances = o.max_instances; /* the normalisation: each version's own */
  serve_http_t *http = NULL;
  if (serve_http_start(&http, &hc, models, err, sizeof err) != 0) {
    serve_models_close(models);
    die("%s", err);
  }
  serve_grpc_t *grpc = NULL;
  if (o.grpc_port != 0 && start_grpc(&grpc, o.grpc_port, &hc, models, err, sizeof err) != 0) {
    serve_http_stop(http);
    serve_models_close(models);
    die("%s", err);
  }
  printf("serve: model %s (%s, input %dx%dx%d, %d classes), version %ld, %s, batching %s "
         "(max batch %d, timeout %ld us), normalisation %s\n",
         o.model_name, o.arch, hc.input.h, hc.input.w, hc.input.c, classes, number, o.device,
         o.batching ? "on" : "off", o.max_batch, o.timeout_us, norm);
  printf("serve: listening on port %d\n", serve_http_port(http));
  if (grpc) printf("serve: gRPC port %d\n", serve_grpc_port(grpc));
  fflush(stdout);

  int sig = serve_until_signal(models, &sigs, o.poll_s);
  fprintf(stderr, "serve: %s: not accepting connections; answering the requests already read\n",
          strsignal(sig));
  int left = drain(http, grpc, o.drain_s);
  serve_http_stop(http);
  serve_grpc_stop(grpc);
  serve_models_close(models);
  fprintf(stderr, "serve: stopped\n");
  return left > 0 ? 1 : 0;
}
