/* serve/http.h: TF Serving's REST API over libmicrohttpd, in front of serve_models.
     GET  /v1/models/NAME[/versions/N]             model_version_status
          (/labels/LABEL in place of /versions/N everywhere: the version labelled so)
     GET  /v1/models/NAME[/versions/N]/metadata    signature_def of serving_default, and
                                                   hvd_export (what the file records)
     POST /v1/models/NAME[/versions/N]:predict     {"instances"|"inputs": ...} ->
                                                   {"predictions"|"outputs": softmax}
     POST /v1/models/NAME[/versions/N]:classify    {"examples": [{"image": S}, ...]} ->
                                                   {"result": [[[label, score], ...], ...]}
   Each request is normalised as the version it runs on asks (serve_version_info_t).
     GET  /monitoring/prometheus/metrics           counters (text)
   Errors are {"error": "..."}: 400 bad JSON, shape or dtype, or an ambiguous body length
   (two Content-Length headers, Content-Length beside Transfer-Encoding, a malformed
   one: the connection is closed after the answer); 404 unknown model, version or path
   (TF Serving's NOT_FOUND); 413 a body over max_body (the body is read and dropped so
   that the client, still sending, sees the answer; with "Expect: 100-continue" it is
   refused before it is sent); 503 over the memory budget of bodies held at once; 500 the
   model failed.
   One thread per connection (a request blocks while its batch runs); at most
   max_connections_per_client from one address, and a request must arrive within
   request_timeout_s (else its connection is closed unanswered), so slow clients cannot
   hold every connection. Every request is logged through cfg.log when it
   completes. Nothing is printed here. */
#ifndef SERVE_HTTP_H
#define SERVE_HTTP_H

#include "serve/instances.h"
#include "serve/labels.h"
#include "serve/versions.h"

#include <stddef.h>

typedef void (*serve_log_fn)(void *ctx, const char *line);

typedef struct {
  int port;                  /* 0: any free port (serve_http_port says which)          */
  const char *model_name;    /* the NAME of the URLs                                   */
  size_t max_body;           /* bytes of one request body (else 413)                   */
  size_t max_inflight_bytes; /* bytes of bodies held at once, all requests (else 503)  */
  int max_connections;
  int max_connections_per_client; /* open connections from one IP address            */
  int idle_timeout_s;        /* a connection silent this long is closed                */
  int request_timeout_s;     /* a request's first line must arrive within this of the
                                connection's opening or previous response, its headers
                                and body within this of that line                      */
  serve_input_spec_t input;  /* shape, normalisation, max_instances                    */
  const serve_labels_t *labels; /* --version-labels: /v1/models/NAME/labels/LABEL; NULL  */
  serve_log_fn log;          /* one line per request and libmicrohttpd's errors; NULL  */
  void *log_ctx;
} serve_http_config_t;

typedef struct serve_http serve_http_t;

int serve_http_start(serve_http_t **out, const serve_http_config_t *cfg, serve_models_t *models,
                     char *err, size_t errlen);
int serve_http_port(const serve_http_t *s);
/* Graceful shutdown, part 1: stops accepting connections, then waits up to timeout_s for
   the requests already read to be answered (responses from now on close their
   connection). Returns how many were still unanswered (0: all). */
int serve_http_drain(serve_http_t *s, double timeout_s);
/* Part 2: closes every connection and frees s. NULL: nothing. */
void serve_http_stop(serve_http_t *s);

#endif /* SERVE_HTTP_H */
