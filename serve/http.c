/* serve/http.c: routing, request bodies and their limits, responses, the request log and
   the metrics page (see http.h). */
#include "serve/http.h"
#include "serve/sync.h"

#include "util/clock.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The statuses counted on the metrics page (others count as "other"). */
static const int counted_codes[] = {200, 400, 404, 413, 500, 503};
#define NCODES (sizeof counted_codes / sizeof counted_codes[0])

/* An open connection, watched for --request-timeout (see watchdog_main). */
typedef struct conn {
  struct conn *prev, *next;
  MHD_socket fd;
  double since;               /* when the request being read began; 0: none           */
  int cut;                    /* shut down by the watchdog                            */
} conn_t;

struct serve_http {
  serve_http_config_t cfg;
  serve_models_t *models;
  struct MHD_Daemon *daemon;
  int port;
  pthread_mutex_t mu;         /* the counters and the connection list below           */
  int in_flight;              /* requests read, not yet completed                     */
  int draining;
  size_t body_bytes;          /* bytes of request bodies held now                     */
  uint64_t by_code[NCODES + 1];
  uint64_t instances;
  uint64_t timeouts;          /* connections closed by --request-timeout              */
  conn_t *conns;
  int watchdog_stop;
  int watchdog_started;
  pthread_t watchdog;
};

typedef struct {
  double t0;
  char *body;
  size_t len, cap;
  size_t reserved;            /* bytes of s->body_bytes taken for this body          */
  int responded;              /* a response was queued                                */
  int close;                  /* the response closes the connection                   */
  int refused;                /* the status the body was refused with (0: none)       */
  char refusal[160];
  size_t dropped;             /* bytes of a refused body read since                   */
  int status;
  int instances;
  char method[8];
  char url[120];              /* for the log line (cut)                               */
} request_t;

static void logf_(serve_http_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(serve_http_t *s, const char *fmt, ...) {
  if (!s->cfg.log) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  s->cfg.log(s->cfg.log_ctx, line);
}

/* ---- responses ---- */

/* Queues text (malloc'ed, taken over) with status; MHD_NO when MHD refused. */
static enum MHD_Result reply(serve_http_t *s, struct MHD_Connection *c, request_t *r, int status,
                             char *text, const char *type) {
  if (!text) { /* the response text could not be built */
    status = 500;
    text = strdup("{\"error\": \"out of memory\"}");
    if (!text) return MHD_NO;
  }
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(text);
    return MHD_NO;
  }
  int ok = MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type) == MHD_YES;
  serve_lock(&s->mu);
  int draining = s->draining;
  serve_unlock(&s->mu);
  if (ok && (draining || r->close))
    ok = MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close") == MHD_YES;
  enum MHD_Result rc = ok ? MHD_queue_response(c, (unsigned)status, resp) : MHD_NO;
  MHD_destroy_response(resp);
  if (rc == MHD_YES) {
    r->status = status;
    r->responded = 1;
  }
  return rc;
}

static enum MHD_Result reply_json(serve_http_t *s, struct MHD_Connection *c, request_t *r,
                                  int status, json_t *doc) {
  char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
  json_decref(doc);
  return reply(s, c, r, status, text, "application/json");
}

static enum MHD_Result reply_error(serve_http_t *s, struct MHD_Connection *c, request_t *r,
                                   int status, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result reply_error(serve_http_t *s, struct MHD_Connection *c, request_t *r,
                                   int status, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return reply_json(s, c, r, status, json_pack("{s:s}", "error", msg));
}

/* ---- the routes ---- */

typedef struct {
  char name[128];
  long version;               /* 0: the newest                                        */
  char label[64];             /* /labels/LABEL ("": none), resolved by route          */
  const char *what;           /* "status", "metadata", "predict", "classify"          */
} route_t;

/* /v1/models/NAME[/versions/N][/metadata|:predict|:classify] -> route; 0 or -1 (no such
   path). */
static int parse_route(const char *url, route_t *rt) {
  static const char prefix[] = "/v1/models/";
  if (strncmp(url, prefix, sizeof prefix - 1) != 0) return -1;
  const char *p = url + sizeof prefix - 1;
  size_t n = strcspn(p, "/:");
  if (n == 0 || n >= sizeof rt->name) return -1;
  memcpy(rt->name, p, n);
  rt->name[n] = '\0';
  p += n;
  rt->version = 0;
  rt->label[0] = '\0';
  if (strncmp(p, "/labels/", 8) == 0) {
    p += 8;
    size_t l = strcspn(p, "/:");
    if (l == 0 || l >= sizeof rt->label) return -1;
    memcpy(rt->label, p, l);
    rt->label[l] = '\0';
    p += l;
  } else if (strncmp(p, "/versions/", 10) == 0) {
    p += 10;
    char *end;
    if (*p < '1' || *p > '9') return -1;
    rt->version = strtol(p, &end, 10);
    if (end - p > 15) return -1;
    p = end;
  }
  if (*p == '\0') rt->what = "status";
  else if (strcmp(p, "/metadata") == 0) rt->what = "metadata";
  else if (strcmp(p, ":predict") == 0) rt->what = "predict";
  else if (strcmp(p, ":classify") == 0) rt->what = "classify";
  else return -1;
  return 0;
}

static enum MHD_Result not_served(serve_http_t *s, struct MHD_Connection *c, request_t *r,
                                  const route_t *rt) {
  if (rt->version)
    return reply_error(s, c, r, 404, "Servable not found for request: Specific(%s, %ld)", rt->name,
                       rt->version);
  return reply_error(s, c, r, 404, "Servable not found for request: Latest(%s)", rt->name);
}

static enum MHD_Result get_status(serve_http_t *s, struct MHD_Connection *c, request_t *r,
                                  const route_t *rt) {
  long nums[4];
  int n = serve_models_list(s->models, nums, 4);
  json_t *list = json_array();
  for (int i = 0; list && i < n; i++) {
    if (rt->version && nums[i] != rt->version) continue;
    char v[32];
    snprintf(v, sizeof v, "%ld", nums[i]);
    if (json_array_append_new(list, json_pack("{s:s,s:s,s:{s:s,s:s}}", "version", v, "state",
                                              "AVAILABLE", "status", "error_code", "OK",
                                              "error_message", "")) != 0) {
      json_decref(list);
      list = NULL;
    }
  }
  if (list && json_array_size(list) == 0) {
    json_decref(list);
    return not_served(s, c, r, rt);
  }
  if (!list) return reply(s, c, r, 500, NULL, "");
  return reply_json(s, c, r, 200, json_pack("{s:o}", "model_version_status", list));
}

static enum MHD_Result get_metadata(serve_http_t *s, struct MHD_Connection *c, request_t *r,
                                    const serve_version_t *v) {
  int ch, h, w, classes;
  serve_models_shape(s->models, &ch, &h, &w, &classes);
  char ver[32], dim[4][16]; /* TF Serving writes sizes as strings */
  snprintf(ver, sizeof ver, "%ld", v->number);
  snprintf(dim[0], sizeof dim[0], "%d", h);
  snprintf(dim[1], sizeof dim[1], "%d", w);
  snprintf(dim[2], sizeof dim[2], "%d", ch);
  snprintf(dim[3], sizeof dim[3], "%d", classes);
  /* The signature a Keras model exported for TF Serving shows: batch dimension -1,
     channels last. */
  json_t *in = json_pack("{s:s,s:{s:[{s:s},{s:s},{s:s},{s:s}],s:b},s:s}", "dtype", "DT_FLOAT",
                         "tensor_shape", "dim", "size", "-1", "size", dim[0],
                         "size", dim[1], "size", dim[2],
                         "unknown_rank", 0, "name", "serving_default_input:0");
  json_t *outp = json_pack("{s:s,s:{s:[{s:s},{s:s}],s:b},s:s}", "dtype", "DT_FLOAT",
                           "tensor_shape", "dim", "size", "-1", "size", dim[3],
                           "unknown_rank", 0, "name", "StatefulPartitionedCall:0");
  json_t *sig = json_pack("{s:{s:o},s:{s:o},s:s}", "inputs", "input", in, "outputs",
                          "predictions", outp, "method_name", "tensorflow/serving/predict");
  /* TF Serving's metadata is a map; beside its one entry, signature_def, "hvd_export"
     says what the file records and the normalisation requests get (docs/serve.md). */
  const serve_version_info_t *info = &v->info;
  char shape[64], cls[16];
  snprintf(shape, sizeof shape, "%d,%d,%d", ch, h, w);
  snprintf(cls, sizeof cls, "%d", classes);
  json_t *labels = json_array();
  for (int i = 0; labels && i < classes; i++) {
    char idx[16];
    snprintf(idx, sizeof idx, "%d", i);
    if (json_array_append_new(labels, json_string(info->labels ? info->labels[i] : idx)) != 0) {
      json_decref(labels);
      labels = NULL;
    }
  }
  json_t *exp = json_pack("{s:b,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:o}", "recorded", info->recorded,
                          "model", info->recorded ? info->model : "(not recorded)", "dataset",
                          info->recorded ? info->dataset : "(not recorded)", "input_shape",
                          shape, "num_classes", cls, "norm_mean", info->norm_mean, "norm_std",
                          info->norm_std, "normalization", info->norm_source, "class_names",
                          labels);
  json_t *doc = json_pack("{s:{s:s,s:s,s:s},s:{s:{s:{s:o}},s:o}}", "model_spec", "name",
                          s->cfg.model_name, "signature_name", "", "version", ver, "metadata",
                          "signature_def", "signature_def", "serving_default", sig,
                          "hvd_export", exp);
  return reply_json(s, c, r, 200, doc);
}

/* {"predictions": [[p, ...], ...]} (or "outputs"), built by hand: n * classes floats, each
   with 9 significant digits, which read back as the same float (gRPC answers the float
   itself: both protocols give the same numbers). */
static char *format_predictions(const float *probs, int n, int classes, int columnar) {
  size_t cap = 32 + (size_t)n * ((size_t)classes * 16 + 4);
  char *out = malloc(cap);
  if (!out) return NULL;
  size_t at = (size_t)snprintf(out, cap, "{\"%s\": [", columnar ? "outputs" : "predictions");
  for (int i = 0; i < n; i++) {
    out[at++] = '[';
    for (int j = 0; j < classes; j++)
      at += (size_t)snprintf(out + at, cap - at, "%s%.9g", j ? ", " : "",
                             (double)probs[(size_t)i * classes + j]);
    at += (size_t)snprintf(out + at, cap - at, "]%s", i + 1 < n ? ", " : "");
  }
  snprintf(out + at, cap - at, "]}");
  return out;
}

/* {"result": [[["label", score], ...], ...]}: every class of each example, the highest
   score first (ties in class order); labels are the recorded class names, else the
   class index as a string (TF Serving's labels are strings); scores with 9 significant
   digits, as predictions. */
static char *format_classes(const float *probs, int n, int classes, char *const *labels) {
  size_t cap = 32, width = 0;
  for (int j = 0; j < classes; j++) {
    size_t l = labels ? strlen(labels[j]) : 12;
    width = l > width ? l : width;
  }
  cap += (size_t)n * ((size_t)classes * (6 * width + 32) + 8);
  char *out = malloc(cap);
  int *order = malloc((size_t)classes * sizeof *order);
  if (!out || !order) {
    free(out);
    free(order);
    return NULL;
  }
  size_t at = (size_t)snprintf(out, cap, "{\"result\": [");
  for (int i = 0; i < n; i++) {
    const float *p = probs + (size_t)i * classes;
    for (int j = 0; j < classes; j++) { /* insertion sort: stable, classes is small */
      int k = j;
      while (k > 0 && p[order[k - 1]] < p[j]) {
        order[k] = order[k - 1];
        k--;
      }
      order[k] = j;
    }
    out[at++] = '[';
    for (int j = 0; j < classes; j++) {
      char idx[16];
      const char *label = labels ? labels[order[j]] : idx;
      if (!labels) snprintf(idx, sizeof idx, "%d", order[j]);
      at += (size_t)snprintf(out + at, cap - at, "%s[\"", j ? ", " : "");
      for (const unsigned char *q = (const unsigned char *)label; *q; q++) {
        if (*q == '"' || *q == '\\') at += (size_t)snprintf(out + at, cap - at, "\\%c", *q);
        else if (*q < 0x20) at += (size_t)snprintf(out + at, cap - at, "\\u%04x", *q);
        else out[at++] = (char)*q;
      }
      at += (size_t)snprintf(out + at, cap - at, "\", %.9g]", (double)p[order[j]]);
    }
    at += (size_t)snprintf(out + at, cap - at, "]%s", i + 1 < n ? ", " : "");
  }
  snprintf(out + at, cap - at, "]}");
  free(order);
  return out;
}

/* :predict and :classify: the body -> a batch normalised as version v's file asks ->
   the batcher -> the answer. */
static enum MHD_Result post_run(serve_http_t *s, struct MHD_Connection *c, request_t *r,
                                serve_version_t *v, int classify) {
  serve_instances_t in;
  char err[512];
  serve_input_spec_t spec = serve_version_input(v, &s->cfg.input);
  int prc = classify ? serve_examples_parse(r->body ? r->body : "", r->len, &spec, &in, err,
                                            sizeof err)
                     : serve_instances_parse(r->body ? r->body : "", r->len, &spec, &in, err,
                                             sizeof err);
  if (prc != 0) return reply_error(s, c, r, 400, "%s", err);
  r->instances = in.n;
  int classes = serve_batcher_classes(v->batcher);
  float *probs = malloc((size_t)in.n * (size_t)classes * sizeof(float));
  if (!probs) {
    serve_instances_free(&in);
    return reply_error(s, c, r, 500, "out of memory for %d predictions", in.n);
  }
  serve_job_t job = {.x = in.x, .n = in.n, .probs = probs};
  int rc = serve_batcher_run(v->batcher, &job), columnar = in.columnar;
  serve_instances_free(&in);
  if (rc != 0) {
    free(probs);
    return reply_error(s, c, r, 500, "%s", job.err);
  }
  char *text = classify ? format_classes(probs, job.n, classes, v->info.labels)
                        : format_predictions(probs, job.n, classes, columnar);
  free(probs);
  return reply(s, c, r, 200, text, "application/json");
}

static enum MHD_Result get_metrics(serve_http_t *s, struct MHD_Connection *c, request_t *r) {
  serve_batcher_stats_t st;
  serve_models_stats(s->models, &st);
  char *text = malloc(2048);
  if (!text) return reply(s, c, r, 500, NULL, "");
  size_t at = 0, cap = 2048;
  serve_lock(&s->mu);
  at += (size_t)snprintf(text + at, cap - at, "# TYPE serve_requests_total counter\n");
  for (size_t i = 0; i <= NCODES; i++) {
    char code[16];
    if (i < NCODES) snprintf(code, sizeof code, "%d", counted_codes[i]);
    else snprintf(code, sizeof code, "other");
    at += (size_t)snprintf(text + at, cap - at, "serve_requests_total{code=\"%s\"} %llu\n", code,
                           (unsigned long long)s->by_code[i]);
  }
  at += (size_t)snprintf(text + at, cap - at,
                         "serve_instances_total %llu\nserve_requests_in_flight %d\n"
                         "serve_request_timeouts_total %llu\n",
                         (unsigned long long)s->instances, s->in_flight,
                         (unsigned long long)s->timeouts);
  serve_unlock(&s->mu);
  snprintf(text + at, cap - at,
           "serve_forward_passes_total %llu\nserve_forward_samples_total %llu\n"
           "serve_batched_jobs_total %llu\nserve_model_versions_loaded %d\n",
           (unsigned long long)st.forwards, (unsigned long long)st.samples,
           (unsigned long long)st.jobs, serve_models_loaded(s->models));
  return reply(s, c, r, 200, text, "text/plain; version=0.0.4");
}

static enum MHD_Result route(serve_http_t *s, struct MHD_Connection *c, request_t *r,
                             const char *url, const char *method) {
  int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
  if (get && strcmp(url, "/monitoring/prometheus/metrics") == 0) return get_metrics(s, c, r);
  route_t rt;
  int ok = parse_route(url, &rt) == 0;
  if (ok) ok = strcmp(rt.what, "predict") == 0 || strcmp(rt.what, "classify") == 0 ? post : get;
  if (!ok) return reply_error(s, c, r, 404, "Malformed request: %.16s %.256s", method, url);
  if (strcmp(rt.name, s->cfg.model_name) != 0) return not_served(s, c, r, &rt);
  if (rt.label[0] && !(rt.version = serve_labels_find(s->cfg.labels, rt.label)))
    return reply_error(s, c, r, 404, "Unrecognized servable version label: %s "
                       "(--version-labels)", rt.label);
  if (strcmp(rt.what, "status") == 0) return get_status(s, c, r, &rt);
  serve_version_t *v = serve_models_acquire(s->models, rt.version);
  if (!v) return not_served(s, c, r, &rt);
  enum MHD_Result rc = strcmp(rt.what, "metadata") == 0
                           ? get_metadata(s, c, r, v)
                           : post_run(s, c, r, v, strcmp(rt.what, "classify") == 0);
  serve_models_release(s->models, v);
  return rc;
}

/* ---- bodies and the request's life ---- */

/* Takes bytes more of the shared body budget; 0, or -1 when over it. */
static int reserve(serve_http_t *s, request_t *r, size_t bytes) {
  serve_lock(&s->mu);
  int ok = s->body_bytes + bytes <= s->cfg.max_inflight_bytes;
  if (ok) s->body_bytes += bytes;
  serve_unlock(&s->mu);
  if (ok) r->reserved += bytes;
  return ok ? 0 : -1;
}

/* Refuses the body being uploaded. Most clients (urllib, requests) send the whole body
   before they read: closing the connection under them would reset it and lose the
   answer. So the rest is read and dropped (within --request-timeout, see
   watchdog_main) and the answer comes at its end. */
static enum MHD_Result refuse_upload(serve_http_t *s, request_t *r, int status, const char *fmt,
                                     ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result refuse_upload(serve_http_t *s, request_t *r, int status, const char *fmt,
                                     ...) {
  r->refused = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->refusal, sizeof r->refusal, fmt, ap);
  va_end(ap);
  free(r->body);
  r->body = NULL;
  r->len = r->cap = 0;
  serve_lock(&s->mu);
  s->body_bytes -= r->reserved;
  serve_unlock(&s->mu);
  r->reserved = 0;
  return MHD_YES;
}

static enum MHD_Result take_upload(serve_http_t *s, request_t *r, const char *data, size_t size) {
  if (r->refused) {
    r->dropped += size;
    return MHD_YES;
  }
  if (size > s->cfg.max_body - r->len)
    return refuse_upload(s, r, 413, "request body over %zu bytes (--max-body-bytes)",
                         s->cfg.max_body);
  if (r->len + size > r->cap) {
    size_t cap = r->cap ? r->cap : 4096;
    while (cap < r->len + size) cap *= 2;
    if (cap > s->cfg.max_body) cap = s->cfg.max_body;
    if (reserve(s, r, cap - r->cap) != 0)
      return refuse_upload(s, r, 503, "server busy: request bodies in memory over %zu bytes; "
                           "retry", s->cfg.max_inflight_bytes);
    char *b = realloc(r->body, cap);
    if (!b) return refuse_upload(s, r, 500, "out of memory for a request body (%zu bytes)", cap);
    r->body = b;
    r->cap = cap;
  }
  memcpy(r->body + r->len, data, size);
  r->len += size;
  return MHD_YES;
}

typedef struct {
  int content_length, transfer_encoding;
  const char *te;
} framing_t;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value) {
  (void)kind;
  framing_t *f = cls;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) f->content_length++;
  if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
    f->transfer_encoding++;
    f->te = value ? value : "";
  }
  return MHD_YES;
}

/* Where the body ends must be beyond doubt: libmicrohttpd takes the first of two
   Content-Length headers, a proxy in front may take the other and pass the rest on as
   a second request (request smuggling). NULL when it is, else why not (in why). */
static const char *ambiguous_length(struct MHD_Connection *c, char *why, size_t len) {
  framing_t f = {0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
  if (f.content_length > 1)
    snprintf(why, len, "%d Content-Length headers: a request has at most one", f.content_length);
  else if (f.transfer_encoding > 1)
    snprintf(why, len, "%d Transfer-Encoding headers: a request has at most one",
             f.transfer_encoding);
  else if (f.transfer_encoding && f.content_length)
    snprintf(why, len, "both Transfer-Encoding and Content-Length: a request has one or the other");
  else if (f.transfer_encoding && strcasecmp(f.te, "chunked") != 0)
    snprintf(why, len, "Transfer-Encoding \"%.40s\": serve reads only \"chunked\"", f.te);
  else
    return NULL;
  return why;
}

/* The connection whose request this thread is reading (one thread per connection). */
static _Thread_local struct MHD_Connection *reading;
static _Thread_local int answered_length; /* answer_bad_length answered it            */

/* libmicrohttpd 0.9.75 answers a malformed or too large Content-Length itself (its own
   400 or 413 page, without calling on_request), but then sends its status line and
   headers twice. Its log line about it is the one hook there is: from on_mhd_error,
   in the connection's thread, before anything is sent, our answer is written on the
   socket here and the socket shut for writing, so that libmicrohttpd's own fails and
   it closes the connection. 0, or -1 (then its answer goes as it is). */
static int answer_bad_length(serve_http_t *s, struct MHD_Connection *c, unsigned status) {
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  char msg[200];
  if (status == 413)
    snprintf(msg, sizeof msg, "request body of %.24s bytes is over %zu bytes (--max-body-bytes)",
             cl ? cl : "?", s->cfg.max_body);
  else
    snprintf(msg, sizeof msg, "Content-Length \"%.40s\" is not a number of bytes", cl ? cl : "");
  json_t *doc = json_pack("{s:s}", "error", msg);
  char *body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
  json_decref(doc);
  char out[512];
  int n = body ? snprintf(out, sizeof out, "HTTP/1.1 %u %s\r\nConnection: close\r\nContent-Type: "
                          "application/json\r\nContent-Length: %zu\r\n\r\n%s", status,
                          status == 413 ? "Content Too Large" : "Bad Request", strlen(body), body)
               : -1;
  free(body);
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci || n <= 0 || (size_t)n >= sizeof out) {
    logf_(s, "warning: the %u answer (%s) could not be made: %s", status, msg,
          !ci ? "no socket" : "out of memory");
    return -1;
  }
  ssize_t sent;
  do sent = send(ci->connect_fd, out, (size_t)n, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  if (sent != n || shutdown(ci->connect_fd, SHUT_WR) != 0) {
    logf_(s, "warning: the %u answer (%s) could not be written: %s", status, msg,
          sent < 0 || sent == n ? strerror(errno) : "short write");
    return -1;
  }
  serve_lock(&s->mu);
  size_t i = 0;
  while (i < NCODES && counted_codes[i] != (int)status) i++;
  s->by_code[i]++;
  serve_unlock(&s->mu);
  logf_(s, "info: a request answered %u: %s; connection closed", status, msg);
  answered_length = 1;
  return 0;
}

/* Starts (on) or stops the --request-timeout clock of c's connection. */
static void request_clock(serve_http_t *s, struct MHD_Connection *c, int on) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  conn_t *k = ci ? ci->socket_context : NULL;
  if (!k) return;
  serve_lock(&s->mu);
  k->since = on ? util_now_s() : 0;
  serve_unlock(&s->mu);
}

/* The headers are in: checks the framing and the declared length. */
static enum MHD_Result first_call(serve_http_t *s, struct MHD_Connection *c, const char *url,
                                  const char *method, void **con_cls) {
  request_t *r = calloc(1, sizeof *r);
  if (!r) return MHD_NO;
  r->t0 = util_now_s();
  snprintf(r->method, sizeof r->method, "%s", method);
  snprintf(r->url, sizeof r->url, "%s", url);
  *con_cls = r;
  serve_lock(&s->mu);
  s->in_flight++;
  serve_unlock(&s->mu);
  char why[160];
  if (ambiguous_length(c, why, sizeof why)) {
    r->close = 1;
    return reply_error(s, c, r, 400, "%s (a proxy and serve could disagree where the body ends)",
                       why);
  }
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) {
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    if (expect && strcasecmp(expect, "100-continue") == 0) /* the body waits for our word */
      return reply_error(s, c, r, 413, "request body of %.24s bytes is over %zu bytes "
                         "(--max-body-bytes)", cl, s->cfg.max_body);
    return refuse_upload(s, r, 413, "request body of %.24s bytes is over %zu bytes "
                         "(--max-body-bytes)", cl, s->cfg.max_body);
  }
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **con_cls) {
  (void)version;
  serve_http_t *s = cls;
  request_t *r = *con_cls;
  if (!r) return first_call(s, c, url, method, con_cls);
  if (*size > 0) {
    enum MHD_Result rc = take_upload(s, r, data, *size);
    *size = 0;
    return rc;
  }
  request_clock(s, c, 0); /* the whole request is in */
  if (r->responded) return MHD_YES;
  if (r->refused) return reply_error(s, c, r, r->refused, "%s", r->refusal);
  return route(s, c, r, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  serve_http_t *s = cls;
  request_clock(s, c, 1); /* the connection waits for its next request */
  request_t *r = *con_cls;
  if (!r) return;
  static const char *const why[] = {"", "an error", "a timeout", "the server stopping",
                                    "a read error", "the client closing"};
  const char *reason = (unsigned)toe < sizeof why / sizeof why[0] ? why[toe] : "an unknown cause";
  double ms = 1e3 * (util_now_s() - r->t0);
  if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
    logf_(s, "info: %s %s %d %.2f ms %d instance(s)", r->method, r->url, r->status, ms,
          r->instances);
  else
    logf_(s, "info: %s %s ended by %s after %.2f ms (%s)", r->method, r->url, reason, ms,
          r->responded ? "its response was not sent" : "no response");
  serve_lock(&s->mu);
  size_t i = 0;
  while (i < NCODES && counted_codes[i] != r->status) i++;
  s->by_code[i]++;
  s->instances += (uint64_t)r->instances;
  s->body_bytes -= r->reserved;
  s->in_flight--;
  serve_unlock(&s->mu);
  free(r->body);
  free(r);
  *con_cls = NULL;
}

/* ---- connections and --request-timeout ---- */

/* A connection opens (its clock starts: its first request is due) or closes. The
   socket is closed only after CLOSED is heard, so a descriptor in s->conns is always
   its connection's. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  serve_http_t *s = cls;
  conn_t *k = *socket_context;
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    if (!k) return;
    serve_lock(&s->mu);
    if (k->prev) k->prev->next = k->next;
    else s->conns = k->next;
    if (k->next) k->next->prev = k->prev;
    serve_unlock(&s->mu);
    free(k);
    *socket_context = NULL;
    return;
  }
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  k = ci ? calloc(1, sizeof *k) : NULL;
  if (!k) {
    logf_(s, "warning: %s: a connection goes without --request-timeout",
          ci ? "out of memory" : "libmicrohttpd gave no socket");
    return;
  }
  k->fd = ci->connect_fd;
  k->since = util_now_s();
  serve_lock(&s->mu);
  k->next = s->conns;
  if (k->next) k->next->prev = k;
  s->conns = k;
  serve_unlock(&s->mu);
  *socket_context = k;
}

/* A request's first line is in: its headers and body are due within --request-timeout. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c) {
  (void)uri;
  reading = c;
  request_clock(cls, c, 1);
  return NULL;
}

/* A client that sends a byte every few seconds is never idle for --idle-timeout: a few
   hundred of them would hold every connection for ever (slowloris). Every 100 ms, the
   connections whose request has been arriving for over --request-timeout are shut
   down; libmicrohttpd's thread then sees the socket end and closes the connection. */
static void *watchdog_main(void *arg) {
  serve_http_t *s = arg;
  for (;;) {
    int cut = 0, failed = 0, err = 0;
    serve_lock(&s->mu);
    if (s->watchdog_stop) {
      serve_unlock(&s->mu);
      return NULL;
    }
    double now = util_now_s();
    for (conn_t *k = s->conns; k; k = k->next) {
      if (k->cut || k->since == 0 || now - k->since <= s->cfg.request_timeout_s) continue;
      k->cut = 1;
      if (shutdown(k->fd, SHUT_RDWR) == 0 || errno == ENOTCONN) {
        cut++;
      } else {
        failed++;
        err = errno;
      }
    }
    s->timeouts += (uint64_t)cut;
    serve_unlock(&s->mu);
    if (cut)
      logf_(s, "info: closed %d connection(s) whose request did not arrive within %d s "
            "(--request-timeout)", cut, s->cfg.request_timeout_s);
    if (failed)
      logf_(s, "warning: shutting down %d connection(s) past --request-timeout failed: %s",
            failed, strerror(err));
    struct timespec pause = {.tv_nsec = 100000000L};
    nanosleep(&pause, NULL);
  }
}

static void on_mhd_error(void *cls, const char *fmt, va_list ap) {
  serve_http_t *s = cls;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  msg[strcspn(msg, "\n")] = '\0';
  static const char too_large[] = "Too large value of 'Content-Length' header";
  static const char malformed[] = "Failed to parse `Content-Length' header";
  int bad = strncmp(msg, too_large, sizeof too_large - 1) == 0 ? 413
            : strncmp(msg, malformed, sizeof malformed - 1) == 0 ? 400 : 0;
  if (bad && reading && answer_bad_length(s, reading, (unsigned)bad) == 0) return;
  /* libmicrohttpd's word on the answer it then fails to send: said already */
  if (answered_length && (strncmp(msg, "Error processing request", 24) == 0 ||
                          strncmp(msg, "Failed to send the response headers", 35) == 0))
    return;
  logf_(s, "warning: libmicrohttpd: %s", msg);
}

int serve_http_start(serve_http_t **out, const serve_http_config_t *cfg, serve_models_t *models,
                     char *err, size_t errlen) {
  *out = NULL;
  serve_http_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  s->cfg = *cfg;
  s->models = models;
  int rc = pthread_mutex_init(&s->mu, NULL);
  if (rc != 0) {
    snprintf(err, errlen, "pthread init: %s", strerror(rc));
    free(s);
    return -1;
  }
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                   MHD_USE_ITC | MHD_USE_ERROR_LOG;
  s->daemon = MHD_start_daemon(
      flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
      MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, s,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_connections_per_client,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
      MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
      MHD_OPTION_URI_LOG_CALLBACK, on_request_line, s,
      MHD_OPTION_END);
  if (!s->daemon) {
    snprintf(err, errlen, "cannot listen on port %d (in use, or not allowed)", cfg->port);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return -1;
  }
  rc = pthread_create(&s->watchdog, NULL, watchdog_main, s);
  if (rc != 0) {
    snprintf(err, errlen, "starting the --request-timeout thread: %s", strerror(rc));
    serve_http_stop(s);
    return -1;
  }
  s->watchdog_started = 1;
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
  s->port = di ? di->port : cfg->port;
  *out = s;
  return 0;
}

int serve_http_port(const serve_http_t *s) { return s->port; }

int serve_http_drain(serve_http_t *s, double timeout_s) {
  MHD_socket fd = MHD_quiesce_daemon(s->daemon);
  if (fd != MHD_INVALID_SOCKET) close(fd);
  serve_lock(&s->mu);
  s->draining = 1;
  double deadline = util_now_s() + timeout_s;
  /* A request read just before the quiesce may start a moment later: wait for a quiet
     spell of 100 ms, not just one moment at zero. */
  for (;;) {
    while (s->in_flight > 0 && util_now_s() < deadline) {
      serve_unlock(&s->mu);
      usleep(10000);
      serve_lock(&s->mu);
    }
    if (s->in_flight > 0 || util_now_s() >= deadline) break;
    serve_unlock(&s->mu);
    usleep(100000);
    serve_lock(&s->mu);
    if (s->in_flight == 0) break;
  }
  int left = s->in_flight;
  serve_unlock(&s->mu);
  return left;
}

void serve_http_stop(serve_http_t *s) {
  if (!s) return;
  if (s->watchdog_started) {
    serve_lock(&s->mu);
    s->watchdog_stop = 1;
    serve_unlock(&s->mu);
    serve_check_pthread(pthread_join(s->watchdog, NULL), "pthread_join");
  }
  MHD_stop_daemon(s->daemon); /* hears every connection closed: s->conns empties */
  pthread_mutex_destroy(&s->mu);
  free(s);
}
