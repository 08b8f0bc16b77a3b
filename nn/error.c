/* nn/error.c: status strings, precision names and the per-thread last-error message.
   Library code never prints: a failing function stores a message here and returns its
   status; the caller decides what to show. Thread-local so that threads do not
   overwrite each other's messages. */
#include "nn/nn.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char nn_error_message[512];

const char *nn_status_string(nn_status_t s) {
  switch (s) {
    case NN_OK: return "ok";
    case NN_ERR_ARG: return "invalid argument";
    case NN_ERR_NO_MEMORY: return "out of memory";
    case NN_ERR_IO: return "input/output error";
    case NN_ERR_FORMAT: return "bad file format";
    case NN_ERR_UNSUPPORTED: return "unsupported";
    case NN_ERR_BACKEND: return "backend error";
  }
  return "unknown status";
}

const char *nn_last_error(void) { return nn_error_message; }

nn_status_t nn_set_error(nn_status_t s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(nn_error_message, sizeof nn_error_message, fmt, ap);
  va_end(ap);
  return s;
}

/* Notices: what nn decided on its own that a user should hear of, such as a slower path
   taken because a library refused the fast one. Each goes to the handler the program
   set, or, by default, as one line on stderr: nn does not decide to be silent about a
   choice that changes its speed. */
static nn_notice_fn notice_fn;
static void *notice_ctx;

void nn_set_notice_handler(nn_notice_fn fn, void *ctx) {
  notice_fn = fn;
  notice_ctx = ctx;
}

void nn_notice(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (notice_fn) {
    notice_fn(line, notice_ctx);
  } else {
    fprintf(stderr, "nn: %s\n", line);
    fflush(stderr);
  }
}

const char *nn_precision_name(nn_precision_t p) {
  switch (p) {
  case NN_PRECISION_FP32: return "fp32";
  case NN_PRECISION_FP16: return "fp16";
  case NN_PRECISION_BF16: return "bf16";
  }
  return "unknown";
}
