/* serve/grpc.h: TF Serving's gRPC API (serve/grpc_calls.h) over HTTP/2, beside REST,
   on the same model registry and batcher.
   HTTP/2 is nghttp2's server session, cleartext with prior knowledge (h2c, as gRPC
   clients connect to TF Serving's --port). A call is HEADERS (:path, content-type
   application/grpc, grpc-timeout), one length-prefixed message, END_STREAM; the answer is
   HEADERS, one length-prefixed message and trailers (grpc-status 0), or one HEADERS
   with grpc-status and grpc-message (an error).
   Threads: one per connection (its HTTP/2 session and socket) and one per call while
   it runs (decoding, the batcher, encoding), so the calls of one connection batch
   together; a call's thread is kept for later calls (serve/call_pool.h). Limits: max_message_bytes per message (RESOURCE_EXHAUSTED, said as soon as
   the length prefix is in), max_inflight_bytes for all of them, max_connections, 100
   concurrent calls per connection (SETTINGS_MAX_CONCURRENT_STREAMS), a call's grpc-timeout (DEADLINE_EXCEEDED at the
   deadline, even while its batch runs), request_timeout_s for a call's message to
   arrive, idle_timeout_s for a connection with nothing to do or whose peer reads
   nothing. Nothing is printed: one line per call through cfg.log. */
#ifndef SERVE_GRPC_H
#define SERVE_GRPC_H

#include "serve/grpc_calls.h"

typedef void (*serve_grpc_log_fn)(void *ctx, const char *line);

typedef struct {
  int port;                  /* 0: any free port (serve_grpc_port says which)          */
  serve_grpc_env_t env;      /* the model, its shape, the version labels               */
  size_t max_message_bytes;  /* a request message's bytes (else RESOURCE_EXHAUSTED)    */
  size_t max_inflight_bytes; /* request messages held at once, all calls (else
                                RESOURCE_EXHAUSTED: "server busy")                     */
  int max_connections;
  int idle_timeout_s;
  int request_timeout_s;
  serve_grpc_log_fn log;     /* NULL: silent                                           */
  void *log_ctx;
} serve_grpc_config_t;

typedef struct serve_grpc serve_grpc_t;

int serve_grpc_start(serve_grpc_t **out, const serve_grpc_config_t *cfg, char *err,
                     size_t errlen);
int serve_grpc_port(const serve_grpc_t *g);
/* Graceful shutdown, part 1: stops accepting connections and tells every client
   (GOAWAY) that no call after those it has begun will be taken. */
void serve_grpc_quiesce(serve_grpc_t *g);
/* Part 2: waits up to timeout_s for the calls already begun to be answered. Returns how
   many were still unanswered (0: all). */
int serve_grpc_drain(serve_grpc_t *g, double timeout_s);
/* Part 3: closes every connection, waits for their threads and frees g. NULL: nothing. */
void serve_grpc_stop(serve_grpc_t *g);

#endif /* SERVE_GRPC_H */
