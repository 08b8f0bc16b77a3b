/* serve/grpc_server.c: the listening socket, one thread per connection running its
   nghttp2 server session, a pool thread per call while it runs (serve/call_pool.h),
   gRPC's framing and status trailers, deadlines and the drain (see grpc.h). */
#include "serve/grpc.h"

#include "serve/call_pool.h"
#include "serve/sync.h"

#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_STREAMS 100          /* concurrent calls per connection                     */
/* Call threads per connection. A call answered at its deadline or reset by the client
   leaves nghttp2's count of open streams while its thread still runs, so the stream
   limit alone lets a client that times out or cancels its calls start threads without
   bound; a call over this limit is answered UNAVAILABLE instead. */
#define MAX_WORKERS MAX_STREAMS
#define TICK_MS 100              /* how often a connection checks deadlines and drain   */
#define KEEP_IDLE 256            /* pool threads kept waiting for the next call         */

typedef struct call call_t;
typedef struct gconn gconn_t;

struct serve_grpc {
  serve_grpc_config_t cfg;
  int listen_fd, port;
  int wake[2];                /* a byte here stops the acceptor                         */
  pthread_t acceptor;
  int acceptor_running;
  nghttp2_session_callbacks *callbacks;
  serve_pool_t *pool;         /* the threads of the calls                               */
  pthread_mutex_t mu;         /* everything below                                       */
  pthread_cond_t cv;          /* signalled when a connection ends or a call is answered */
  gconn_t *conns;
  int nconns;
  int calls;                  /* calls begun (HEADERS in), not yet closed               */
  size_t held;                /* bytes of request messages held now, all calls          */
  int draining, stopping;
};

enum { READING, RUNNING, ANSWERED };

struct call {
  serve_pool_task_t task;     /* runs call_main                                         */
  gconn_t *c;
  int32_t id;
  char path[128];
  int grpc;                   /* content-type application/grpc[+proto]                  */
  double t0, deadline;        /* deadline 0: none (no grpc-timeout)                     */
  uint8_t *buf;               /* the length prefix and message as they arrive           */
  size_t len, cap, extra;     /* extra: bytes past the first message (not kept)         */
  size_t reserved;            /* bytes of s->held taken for buf                         */
  int state;
  int working;                /* a call thread has it                                   */
  int closed;                 /* nghttp2 closed its stream                              */
  int reset_after;            /* answered before its request ended: reset once sent     */
  serve_grpc_answer_t ans;
  uint8_t head[5];            /* the answer's length prefix                             */
  size_t sent;                /* bytes of head + body given to nghttp2                  */
  call_t *prev, *next;        /* the connection's open calls                            */
  call_t *done_next;          /* the connection's finished calls (under c->mu)          */
};

struct gconn {
  serve_grpc_t *s;
  int fd, efd;                /* the socket; an eventfd the call threads ring           */
  nghttp2_session *h2;
  double last_io;             /* bytes last read or written                             */
  double last_call;           /* a call last began or ended (or the connection opened) */
  int goaway;
  call_t *open;
  pthread_mutex_t mu;         /* workers, done                                          */
  pthread_cond_t cv;
  int workers;
  call_t *done;
  gconn_t *prev, *next;
};

static void logf_(serve_grpc_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(serve_grpc_t *s, const char *fmt, ...) {
  if (!s->cfg.log) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  s->cfg.log(s->cfg.log_ctx, line);
}

/* ---- answers ---- */

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}

/* gRPC's grpc-message: printable ASCII but '%' as it is, the rest percent-encoded. */
static void percent_encode(const char *in, char *out, size_t len) {
  size_t at = 0;
  for (const unsigned char *p = (const unsigned char *)in; *p && at + 4 < len; p++) {
    if (*p >= 0x20 && *p < 0x7f && *p != '%') out[at++] = (char)*p;
    else at += (size_t)snprintf(out + at, len - at, "%%%02X", *p);
  }
  out[at] = '\0';
}

static void log_answer(gconn_t *c, const call_t *k, int code, const char *msg) {
  double ms = 1e3 * (util_now_s() - k->t0);
  const char *method = strrchr(k->path, '/');
  method = method ? method + 1 : k->path;
  if (code == 0)
    logf_(c->s, "info: gRPC %s OK %.2f ms %d instance(s)", method, ms, k->ans.instances);
  else
    logf_(c->s, "info: gRPC %s %s %.2f ms: %s", method[0] ? method : "(no :path)",
          serve_grpc_code_name(code), ms, msg);
}

/* Trailers-only answer: one HEADERS frame with the status, ending the stream. A call
   whose request is still arriving is reset once it is sent (RST_STREAM NO_ERROR, as gRPC
   servers do: on_frame_sent), so that the client stops sending. */
static void answer_error(gconn_t *c, call_t *k, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void answer_error(gconn_t *c, call_t *k, int code, const char *fmt, ...) {
  char msg[600], enc[1800], st[16];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  percent_encode(msg, enc, sizeof enc);
  snprintf(st, sizeof st, "%d", code);
  nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                      NV("grpc-status", st), NV("grpc-message", enc)};
  k->reset_after = k->state == READING;
  k->state = ANSWERED;
  int rc = nghttp2_submit_response(c->h2, k->id, nva, sizeof nva / sizeof nva[0], NULL);
  if (rc != 0) logf_(c->s, "warning: gRPC: answering a call failed: %s", nghttp2_strerror(rc));
  log_answer(c, k, code, msg);
}

/* Feeds the answer's length prefix and message to nghttp2, then the trailers. */
static ssize_t read_answer(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *src, void *user) {
  (void)user;
  call_t *k = src->ptr;
  size_t total = sizeof k->head + k->ans.len, n = total - k->sent;
  if (n > length) n = length;
  for (size_t i = 0; i < n; i++, k->sent++)
    buf[i] = k->sent < sizeof k->head ? k->head[k->sent] : k->ans.body[k->sent - sizeof k->head];
  if (k->sent == total) {
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_nv tr[] = {NV("grpc-status", "0")};
    if (nghttp2_submit_trailer(h2, id, tr, 1) != 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return (ssize_t)n;
}

static void answer_ok(gconn_t *c, call_t *k) {
  uint32_t n = (uint32_t)k->ans.len;
  k->head[0] = 0; /* not compressed */
  k->head[1] = (uint8_t)(n >> 24), k->head[2] = (uint8_t)(n >> 16);
  k->head[3] = (uint8_t)(n >> 8), k->head[4] = (uint8_t)n;
  k->sent = 0;
  k->state = ANSWERED;
  nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
  nghttp2_data_provider dp = {.source.ptr = k, .read_callback = read_answer};
  int rc = nghttp2_submit_response(c->h2, k->id, nva, 2, &dp);
  if (rc != 0) logf_(c->s, "warning: gRPC: answering a call failed: %s", nghttp2_strerror(rc));
  log_answer(c, k, 0, "");
}

/* ---- calls ---- */

static void free_call(call_t *k) {
  if (k->reserved) {
    serve_grpc_t *s = k->c->s;
    serve_lock(&s->mu);
    s->held -= k->reserved;
    serve_unlock(&s->mu);
  }
  free(k->buf);
  free(k->ans.body);
  free(k);
}

/* A call's thread: the method, from message to answer; then hands the call back to its
   connection's thread. */
static void call_main(serve_pool_task_t *task) {
  call_t *k = (call_t *)((char *)task - offsetof(call_t, task));
  gconn_t *c = k->c;
  serve_grpc_call(&c->s->cfg.env, k->path, k->buf + 5, k->len - 5, &k->ans);
  serve_pool_task_ending(c->s->pool);
  serve_lock(&c->mu);
  k->done_next = c->done;
  c->done = k;
  uint64_t one = 1; /* an eventfd counter cannot overflow at one per call */
  if (write(c->efd, &one, sizeof one) != (ssize_t)sizeof one) abort();
  c->workers--;
  serve_check_pthread(pthread_cond_broadcast(&c->cv), "pthread_cond_broadcast");
  serve_unlock(&c->mu);
}

/* The request is in (END_STREAM): checks its framing, then runs it on a call thread. */
static void request_complete(gconn_t *c, call_t *k) {
  size_t declared = k->len >= 5 ? ((size_t)k->buf[1] << 24 | (size_t)k->buf[2] << 16 |
                                   (size_t)k->buf[3] << 8 | k->buf[4]) : 0;
  if (!serve_grpc_known_method(k->path))
    return answer_error(c, k, SERVE_GRPC_UNIMPLEMENTED, "unknown method %s: serve answers "
                        "PredictionService's Predict, Classify and GetModelMetadata, "
                        "ModelService's GetModelStatus", k->path[0] ? k->path : "(no :path)");
  if (!k->grpc)
    return answer_error(c, k, SERVE_GRPC_INVALID_ARGUMENT, "content-type is not "
                        "application/grpc");
  if (k->len < 5)
    return answer_error(c, k, SERVE_GRPC_INVALID_ARGUMENT, "the call has no request message");
  if (k->buf[0] != 0)
    return answer_error(c, k, SERVE_GRPC_UNIMPLEMENTED, "a compressed request message: serve "
                        "reads only uncompressed ones (grpc-encoding identity)");
  if (k->len != 5 + declared || k->extra)
    return answer_error(c, k, SERVE_GRPC_INVALID_ARGUMENT, "%s", k->len < 5 + declared
                        ? "the request message is cut short" : "more than one request message "
                        "in a unary call");
  if (k->deadline && util_now_s() >= k->deadline)
    return answer_error(c, k, SERVE_GRPC_DEADLINE_EXCEEDED, "Deadline Exceeded (grpc-timeout) "
                        "before the call ran");
  k->state = RUNNING;
  serve_lock(&c->mu);
  int busy = c->workers >= MAX_WORKERS;
  if (!busy) c->workers++;
  serve_unlock(&c->mu);
  if (busy)
    return answer_error(c, k, SERVE_GRPC_UNAVAILABLE, "server busy: %d calls of this "
                        "connection still running (cancelled or past their deadline ones "
                        "included); retry", MAX_WORKERS);
  k->working = 1;
  k->task.fn = call_main;
  int rc = serve_pool_run(c->s->pool, &k->task);
  if (rc != 0) {
    serve_lock(&c->mu);
    c->workers--;
    serve_unlock(&c->mu);
    k->working = 0;
    answer_error(c, k, SERVE_GRPC_UNAVAILABLE, "server busy: cannot start a thread for the "
                 "call (%s); retry", strerror(rc));
  }
}

/* Calls whose thread is done: answer them (unless a deadline answered already). */
static void take_finished(gconn_t *c) {
  uint64_t n;
  if (read(c->efd, &n, sizeof n) < 0 && errno != EAGAIN) abort();
  serve_lock(&c->mu);
  call_t *k = c->done;
  c->done = NULL;
  serve_unlock(&c->mu);
  while (k) {
    call_t *next = k->done_next;
    k->working = 0;
    if (k->closed) free_call(k); /* the client reset the stream */
    else if (k->state == ANSWERED) free(k->ans.body), k->ans.body = NULL;
    else if (k->deadline && util_now_s() >= k->deadline)
      answer_error(c, k, SERVE_GRPC_DEADLINE_EXCEEDED, "Deadline Exceeded (grpc-timeout)");
    else if (k->ans.code != 0)
      answer_error(c, k, k->ans.code, "%s", k->ans.message);
    else answer_ok(c, k);
    k = next;
  }
}

/* Every tick: deadlines (grpc-timeout) and requests slower than --request-timeout. */
static void check_times(gconn_t *c) {
  double now = util_now_s();
  for (call_t *k = c->open; k; k = k->next) {
    if (k->state == ANSWERED) continue;
    if (k->deadline && now >= k->deadline)
      answer_error(c, k, SERVE_GRPC_DEADLINE_EXCEEDED, "Deadline Exceeded (grpc-timeout)%s",
                   k->state == RUNNING ? " while the call ran" : " before the request arrived");
    else if (k->state == READING && now - k->t0 > c->s->cfg.request_timeout_s)
      answer_error(c, k, SERVE_GRPC_DEADLINE_EXCEEDED, "the request did not arrive within %d s "
                   "(--request-timeout)", c->s->cfg.request_timeout_s);
  }
}

/* ---- nghttp2's callbacks ---- */

static ssize_t on_send(nghttp2_session *h2, const uint8_t *data, size_t len, int flags,
                       void *user) {
  (void)h2, (void)flags;
  gconn_t *c = user;
  ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? NGHTTP2_ERR_WOULDBLOCK
                                                                     : NGHTTP2_ERR_CALLBACK_FAILURE;
  c->last_io = util_now_s();
  return n;
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *user) {
  gconn_t *c = user;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  call_t *k = calloc(1, sizeof *k);
  if (!k) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
  k->c = c;
  k->id = f->hd.stream_id;
  k->t0 = c->last_call = util_now_s();
  k->next = c->open;
  if (k->next) k->next->prev = k;
  c->open = k;
  serve_lock(&c->s->mu);
  c->s->calls++;
  serve_unlock(&c->s->mu);
  return nghttp2_session_set_stream_user_data(h2, k->id, k) == 0 ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* grpc-timeout: at most 8 digits and a unit (H, M, S, m, u, n); -1 when malformed. */
static double parse_timeout(const uint8_t *v, size_t len) {
  if (len < 2 || len > 9) return -1;
  double x = 0;
  for (size_t i = 0; i + 1 < len; i++) {
    if (v[i] < '0' || v[i] > '9') return -1;
    x = 10 * x + (v[i] - '0');
  }
  switch (v[len - 1]) {
    case 'H': return x * 3600;
    case 'M': return x * 60;
    case 'S': return x;
    case 'm': return x * 1e-3;
    case 'u': return x * 1e-6;
    case 'n': return x * 1e-9;
    default: return -1;
  }
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user) {
  (void)flags, (void)user;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  call_t *k = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (!k) return 0;
#define IS(s) (namelen == sizeof(s) - 1 && memcmp(name, s, namelen) == 0)
  if (IS(":path")) {
    size_t n = valuelen < sizeof k->path ? valuelen : sizeof k->path - 1;
    memcpy(k->path, value, n);
    k->path[n] = '\0';
  } else if (IS("content-type")) {
    static const char ct[] = "application/grpc";
    k->grpc = valuelen >= sizeof ct - 1 && memcmp(value, ct, sizeof ct - 1) == 0 &&
              (valuelen == sizeof ct - 1 || value[sizeof ct - 1] == '+' ||
               value[sizeof ct - 1] == ';');
  } else if (IS("grpc-timeout")) {
    double t = parse_timeout(value, valuelen);
    if (t >= 0) k->deadline = k->t0 + t;
  }
#undef IS
  return 0;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data,
                   size_t len, void *user) {
  (void)flags;
  gconn_t *c = user;
  call_t *k = nghttp2_session_get_stream_user_data(h2, id);
  if (!k || k->state != READING) return 0;
  size_t want = 5; /* the prefix, then the message it declares */
  if (k->len >= 5) want += (size_t)k->buf[1] << 24 | (size_t)k->buf[2] << 16 |
                           (size_t)k->buf[3] << 8 | k->buf[4];
  while (len > 0) {
    if (k->len == want) { /* past the first message: counted, not kept */
      k->extra += len;
      return 0;
    }
    size_t n = want - k->len < len ? want - k->len : len;
    if (k->len + n > k->cap) {
      size_t cap = k->cap ? k->cap : 4096;
      while (cap < k->len + n) cap *= 2;
      if (cap > want) cap = want;
      serve_grpc_t *s = c->s;
      serve_lock(&s->mu);
      int room = s->held + (cap - k->cap) <= s->cfg.max_inflight_bytes;
      if (room) s->held += cap - k->cap;
      serve_unlock(&s->mu);
      if (!room) {
        answer_error(c, k, SERVE_GRPC_RESOURCE_EXHAUSTED, "server busy: request messages in "
                     "memory over %zu bytes (--max-inflight-body-bytes); retry",
                     s->cfg.max_inflight_bytes);
        return 0;
      }
      k->reserved += cap - k->cap;
      uint8_t *b = realloc(k->buf, cap);
      if (!b) {
        answer_error(c, k, SERVE_GRPC_RESOURCE_EXHAUSTED, "out of memory for a %zu-byte "
                     "message", want - 5);
        return 0;
      }
      k->buf = b;
      k->cap = cap;
    }
    memcpy(k->buf + k->len, data, n);
    k->len += n, data += n, len -= n;
    if (k->len == 5) { /* the prefix is in: the size is checked before the message comes */
      size_t declared = (size_t)k->buf[1] << 24 | (size_t)k->buf[2] << 16 |
                        (size_t)k->buf[3] << 8 | k->buf[4];
      if (declared > c->s->cfg.max_message_bytes) {
        answer_error(c, k, SERVE_GRPC_RESOURCE_EXHAUSTED, "received message larger than max "
                     "(%zu vs. %zu; --max-body-bytes)", declared, c->s->cfg.max_message_bytes);
        return 0;
      }
      want += declared;
    }
  }
  return 0;
}

static int on_frame_sent(nghttp2_session *h2, const nghttp2_frame *f, void *user) {
  (void)user;
  if (f->hd.type != NGHTTP2_HEADERS || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
  call_t *k = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (k && k->reset_after) {
    k->reset_after = 0;
    int rc = nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, k->id, NGHTTP2_NO_ERROR);
    if (rc != 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return 0;
}

static int on_frame(nghttp2_session *h2, const nghttp2_frame *f, void *user) {
  if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) ||
      !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
    return 0;
  call_t *k = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (k && k->state == READING) {
    k->state = RUNNING; /* the request is in: an answer now needs no reset */
    request_complete(user, k);
  }
  return 0;
}

static void forget_call(gconn_t *c, call_t *k) {
  c->last_call = util_now_s();
  if (k->prev) k->prev->next = k->next;
  else c->open = k->next;
  if (k->next) k->next->prev = k->prev;
  k->prev = k->next = NULL;
  serve_lock(&c->s->mu);
  c->s->calls--;
  serve_check_pthread(pthread_cond_broadcast(&c->s->cv), "pthread_cond_broadcast");
  serve_unlock(&c->s->mu);
}

static int on_close(nghttp2_session *h2, int32_t id, uint32_t error_code, void *user) {
  (void)error_code;
  gconn_t *c = user;
  call_t *k = nghttp2_session_get_stream_user_data(h2, id);
  if (!k) return 0;
  forget_call(c, k);
  if (k->state != ANSWERED) log_answer(c, k, SERVE_GRPC_CANCELLED, "the client reset the call");
  if (k->working) k->closed = 1; /* its thread's end frees it */
  else free_call(k);
  return 0;
}

/* ---- connections ---- */

/* Reads what the socket has; 0, or -1 when the connection is over (closed, an error, a
   protocol error). */
static int read_some(gconn_t *c) {
  uint8_t buf[16384];
  ssize_t n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  if (n == 0) return -1;
  c->last_io = util_now_s();
  ssize_t used = nghttp2_session_mem_recv(c->h2, buf, (size_t)n);
  if (used < 0) {
    logf_(c->s, "info: gRPC: a connection closed: %s", nghttp2_strerror((int)used));
    return -1;
  }
  return 0;
}

/* The connection's loop: until the client leaves, both sides are done after a GOAWAY,
   it idles past --idle-timeout or serve stops. */
static void serve_connection(gconn_t *c) {
  serve_grpc_t *s = c->s;
  for (;;) {
    serve_lock(&s->mu);
    int draining = s->draining, stopping = s->stopping;
    serve_unlock(&s->mu);
    if (stopping) return;
    if (draining && !c->goaway) {
      c->goaway = 1; /* the calls begun are answered; no later one is taken */
      nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                            nghttp2_session_get_last_proc_stream_id(c->h2), NGHTTP2_NO_ERROR,
                            NULL, 0);
    }
    check_times(c);
    if (nghttp2_session_send(c->h2) != 0) return;
    int wr = nghttp2_session_want_read(c->h2), ww = nghttp2_session_want_write(c->h2);
    serve_lock(&c->mu);
    int working = c->workers > 0 || c->done;
    serve_unlock(&c->mu);
    if (!wr && !ww && !working) return;
    /* Idle: no call for --idle-timeout (PINGs do not count: they would hold the
       connection for ever), or calls whose client reads nothing for that long. The
       first time a GOAWAY, so that the client opens another connection for its next
       call; a client that ignores it is cut after one more period. */
    double now = util_now_s();
    if (!working && now - (c->open ? c->last_io : c->last_call) > s->cfg.idle_timeout_s) {
      if (c->goaway || c->open) {
        logf_(s, "info: gRPC: closed a connection idle for %d s (--idle-timeout)",
              s->cfg.idle_timeout_s);
        return;
      }
      c->goaway = 1;
      c->last_call = now;
      nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                            nghttp2_session_get_last_proc_stream_id(c->h2), NGHTTP2_NO_ERROR,
                            NULL, 0);
      logf_(s, "info: gRPC: closing a connection idle for %d s (--idle-timeout): GOAWAY sent",
            s->cfg.idle_timeout_s);
      continue;
    }
    struct pollfd p[2] = {{c->fd, (short)((wr ? POLLIN : 0) | (ww ? POLLOUT : 0)), 0},
                          {c->efd, POLLIN, 0}};
    int n = poll(p, 2, TICK_MS);
    if (n < 0 && errno != EINTR) return;
    if (n <= 0) continue;
    if (p[1].revents & POLLIN) take_finished(c);
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && read_some(c) != 0) return;
  }
}

static void *conn_main(void *arg) {
  gconn_t *c = arg;
  serve_grpc_t *s = c->s;
  serve_connection(c);
  shutdown(c->fd, SHUT_RDWR); /* the client sees the end now, not after the calls */
  serve_lock(&c->mu);
  while (c->workers > 0) serve_check_pthread(pthread_cond_wait(&c->cv, &c->mu), "pthread_cond_wait");
  serve_unlock(&c->mu);
  take_finished(c);
  nghttp2_session_del(c->h2);
  while (c->open) {
    call_t *k = c->open;
    log_answer(c, k, SERVE_GRPC_UNAVAILABLE, k->state == ANSWERED ? "its answer was not sent: "
               "the connection closed" : "not answered: the connection closed");
    forget_call(c, k);
    free_call(k);
  }
  close(c->fd);
  close(c->efd);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  serve_lock(&s->mu);
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  s->nconns--;
  serve_check_pthread(pthread_cond_broadcast(&s->cv), "pthread_cond_broadcast");
  serve_unlock(&s->mu);
  free(c);
  return NULL;
}

/* A new connection's session, sending our SETTINGS first. 0, or -1 with why. */
static int conn_open(serve_grpc_t *s, int fd, gconn_t **out, const char **why) {
  gconn_t *c = calloc(1, sizeof *c);
  *out = c;
  if (!c) return *why = "out of memory", -1;
  c->s = s;
  c->fd = fd;
  c->last_io = c->last_call = util_now_s();
  c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->efd < 0) return *why = strerror(errno), -1;
  int one = 1; /* an answer is one small write: do not wait for more */
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    return *why = strerror(errno), -1;
  if (pthread_mutex_init(&c->mu, NULL) != 0 || pthread_cond_init(&c->cv, NULL) != 0)
    return *why = "pthread init failed", -1;
  if (nghttp2_session_server_new(&c->h2, s->callbacks, c) != 0)
    return *why = "nghttp2_session_server_new failed", -1;
  /* Windows of 1 MiB per call and 16 MiB per connection: a 64-image request arrives
     without waiting for WINDOW_UPDATEs. */
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS},
                                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
  int rc = nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 2);
  if (rc == 0) rc = nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 1 << 24);
  if (rc != 0) return *why = nghttp2_strerror(rc), -1;
  return 0;
}

static void conn_free_unstarted(gconn_t *c) {
  if (!c) return;
  if (c->h2) nghttp2_session_del(c->h2);
  if (c->efd > 0) close(c->efd);
  free(c);
}

static void accept_one(serve_grpc_t *s) {
  int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      logf_(s, "warning: gRPC: accepting a connection: %s", strerror(errno));
      usleep(100000); /* the limit stays a while: do not spin on it */
    }
    return;
  }
  serve_lock(&s->mu);
  int full = s->nconns >= s->cfg.max_connections;
  serve_unlock(&s->mu);
  if (full) {
    logf_(s, "warning: gRPC: a connection refused: %d open (--max-connections)",
          s->cfg.max_connections);
    close(fd);
    return;
  }
  gconn_t *c;
  const char *why = "";
  if (conn_open(s, fd, &c, &why) != 0) {
    logf_(s, "warning: gRPC: a connection closed at once: %s", why);
    conn_free_unstarted(c);
    close(fd);
    return;
  }
  serve_lock(&s->mu);
  c->next = s->conns;
  if (c->next) c->next->prev = c;
  s->conns = c;
  s->nconns++;
  serve_unlock(&s->mu);
  pthread_attr_t attr;
  pthread_t t;
  int rc = pthread_attr_init(&attr);
  if (rc == 0) rc = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (rc == 0) rc = pthread_create(&t, &attr, conn_main, c);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    logf_(s, "warning: gRPC: a connection closed at once: no thread: %s", strerror(rc));
    serve_lock(&s->mu);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->nconns--;
    serve_unlock(&s->mu);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    conn_free_unstarted(c);
    close(fd);
  }
}

static void *acceptor_main(void *arg) {
  serve_grpc_t *s = arg;
  for (;;) {
    struct pollfd p[2] = {{s->listen_fd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) {
      logf_(s, "warning: gRPC: poll on the listening socket: %s; not accepting", strerror(errno));
      return NULL;
    }
    if (p[1].revents) return NULL;
    if (p[0].revents & POLLIN) accept_one(s);
  }
}

/* ---- the server ---- */

static int listen_on(serve_grpc_t *s, int port, char *err, size_t errlen) {
  s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->listen_fd < 0) return serve_fail(err, errlen, "gRPC socket: %s", strerror(errno));
  int one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t alen = sizeof a;
  if (setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(s->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(s->listen_fd, 128) != 0 ||
      getsockname(s->listen_fd, (struct sockaddr *)&a, &alen) != 0)
    return serve_fail(err, errlen, "cannot listen on gRPC port %d: %s (--grpc-port; 0: off)",
                      port, strerror(errno));
  s->port = ntohs(a.sin_port);
  return 0;
}

static int make_callbacks(serve_grpc_t *s) {
  if (nghttp2_session_callbacks_new(&s->callbacks) != 0) return -1;
  nghttp2_session_callbacks_set_send_callback(s->callbacks, on_send);
  nghttp2_session_callbacks_set_on_begin_headers_callback(s->callbacks, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(s->callbacks, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(s->callbacks, on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(s->callbacks, on_frame);
  nghttp2_session_callbacks_set_on_stream_close_callback(s->callbacks, on_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(s->callbacks, on_frame_sent);
  return 0;
}

int serve_grpc_start(serve_grpc_t **out, const serve_grpc_config_t *cfg, char *err,
                     size_t errlen) {
  *out = NULL;
#ifdef HVD_NO_PROTOBUF
  (void)cfg;
  return serve_fail(err, errlen, "this serve was built without protobuf-c (make PROTOBUF=none): "
                    "no gRPC; run it with --grpc-port 0, or rebuild with PROTOBUF=system");
#endif
  serve_grpc_t *s = calloc(1, sizeof *s);
  if (!s) return serve_fail(err, errlen, "out of memory");
  s->cfg = *cfg;
  s->listen_fd = s->wake[0] = s->wake[1] = -1;
  int rc = pthread_mutex_init(&s->mu, NULL) || pthread_cond_init(&s->cv, NULL) ? -1 : 0;
  if (rc != 0) serve_fail(err, errlen, "pthread init failed");
  if (rc == 0 && make_callbacks(s) != 0) rc = serve_fail(err, errlen, "out of memory (nghttp2)");
  if (rc == 0 && !(s->pool = serve_pool_new(KEEP_IDLE)))
    rc = serve_fail(err, errlen, "out of memory (the call threads)");
  if (rc == 0 && pipe2(s->wake, O_CLOEXEC) != 0)
    rc = serve_fail(err, errlen, "pipe: %s", strerror(errno));
  if (rc == 0) rc = listen_on(s, cfg->port, err, errlen);
  if (rc == 0 && (rc = pthread_create(&s->acceptor, NULL, acceptor_main, s)) != 0)
    rc = serve_fail(err, errlen, "starting the gRPC thread: %s", strerror(rc));
  if (rc != 0) {
    serve_grpc_stop(s);
    return -1;
  }
  s->acceptor_running = 1;
  *out = s;
  return 0;
}

int serve_grpc_port(const serve_grpc_t *g) { return g->port; }

static void stop_accepting(serve_grpc_t *s) {
  if (!s->acceptor_running) return;
  char b = 0;
  if (write(s->wake[1], &b, 1) != 1) abort(); /* a fresh pipe has room for a byte */
  serve_check_pthread(pthread_join(s->acceptor, NULL), "pthread_join");
  s->acceptor_running = 0;
  close(s->listen_fd);
  s->listen_fd = -1;
}

void serve_grpc_quiesce(serve_grpc_t *g) {
  stop_accepting(g);
  serve_lock(&g->mu);
  g->draining = 1;
  serve_unlock(&g->mu);
}

int serve_grpc_drain(serve_grpc_t *g, double timeout_s) {
  serve_grpc_quiesce(g);
  double deadline = util_now_s() + timeout_s;
  serve_lock(&g->mu);
  while ((g->calls > 0 || g->nconns > 0) && util_now_s() < deadline) {
    serve_unlock(&g->mu);
    usleep(10000);
    serve_lock(&g->mu);
  }
  int left = g->calls;
  serve_unlock(&g->mu);
  return left;
}

void serve_grpc_stop(serve_grpc_t *g) {
  if (!g) return;
  stop_accepting(g);
  serve_lock(&g->mu);
  g->stopping = 1;
  for (gconn_t *c = g->conns; c; c = c->next) shutdown(c->fd, SHUT_RDWR);
  while (g->nconns > 0) serve_check_pthread(pthread_cond_wait(&g->cv, &g->mu), "pthread_cond_wait");
  serve_unlock(&g->mu);
  serve_pool_free(g->pool); /* its tasks ended with their connections */
  if (g->listen_fd >= 0) close(g->listen_fd);
  if (g->wake[0] >= 0) close(g->wake[0]), close(g->wake[1]);
  if (g->callbacks) nghttp2_session_callbacks_del(g->callbacks);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g);
}
