/* hvd/names.c: status names, the per-thread last error, names of dtypes/ops/kinds. */
#include "hvd/hvd_internal.h"

#include <string.h>

/* Each user thread sees the message of its own last failed call. */
static _Thread_local char last_error[HVD_ERROR_MAX];

const char *hvd_status_string(hvd_status_t s) {
  switch (s) {
    case HVD_OK: return "HVD_OK";
    case HVD_ERR_NOT_INITIALIZED: return "HVD_ERR_NOT_INITIALIZED";
    case HVD_ERR_INVALID_ARGUMENT: return "HVD_ERR_INVALID_ARGUMENT";
    case HVD_ERR_MISMATCH: return "HVD_ERR_MISMATCH";
    case HVD_ERR_DUPLICATE_NAME: return "HVD_ERR_DUPLICATE_NAME";
    case HVD_ERR_SHUTDOWN: return "HVD_ERR_SHUTDOWN";
    case HVD_ERR_PEER_LOST: return "HVD_ERR_PEER_LOST";
    case HVD_ERR_TIMEOUT: return "HVD_ERR_TIMEOUT";
    case HVD_ERR_BACKEND: return "HVD_ERR_BACKEND";
    case HVD_ERR_NO_MEMORY: return "HVD_ERR_NO_MEMORY";
  }
  return "HVD_ERR_UNKNOWN";
}

const char *hvd_last_error(void) { return last_error; }

void hvd_set_error_text(const char *msg) {
  snprintf(last_error, sizeof(last_error), "%s", msg);
}

hvd_status_t hvd_set_error(hvd_status_t s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  return s;
}

size_t hvd_dtype_size(hvd_dtype_t dtype) {
  switch (dtype) {
    case HVD_FLOAT32: case HVD_INT32: return 4;
    case HVD_FLOAT64: case HVD_INT64: return 8;
    case HVD_FLOAT16: case HVD_BFLOAT16: return 2;
    case HVD_INT8: case HVD_UINT8: return 1;
  }
  return 0;
}

const char *hvd_dtype_name(hvd_dtype_t d) {
  static const char *names[] = {"float32", "float64", "float16", "bfloat16",
                                "int8", "uint8", "int32", "int64"};
  return (unsigned)d < 8 ? names[d] : "invalid dtype";
}

const char *hvd_op_name(hvd_op_t op) {
  static const char *names[] = {"sum", "average", "min", "max", "product"};
  return (unsigned)op < 5 ? names[op] : "invalid op";
}

const char *hvd_kind_name(hvd_kind_t k) {
  static const char *names[] = {"allreduce", "broadcast", "allgather", "barrier",
                                "alltoall", "reducescatter", "join"};
  return (unsigned)k < HVD_KIND_COUNT ? names[k] : "invalid operation";
}

const char *hvd_display_name(const char *key, char *buf, size_t len) {
  if (key[0] == HVD_SET_KEY_MARK) {
    /* "\x02" "3" "\x1f" "w1" -> "w1 (process set 3)" */
    const char *sep = strchr(key, HVD_SET_KEY_SEP);
    if (sep == NULL) return key + 1;
    char inner[HVD_KEY_MAX + 32];
    const char *name = hvd_display_name(sep + 1, inner, sizeof(inner));
    snprintf(buf, len, "%s (process set %.*s)", name, (int)(sep - key - 1), key + 1);
    return buf;
  }
  if (key[0] != HVD_AUTO_KEY_MARK) return key;
  /* "\x01allreduce.3" -> "unnamed allreduce #3" */
  const char *dot = strrchr(key, '.');
  if (dot == NULL) {
    snprintf(buf, len, "unnamed %s", key + 1);
  } else {
    snprintf(buf, len, "unnamed %.*s #%s", (int)(dot - key - 1), key + 1, dot + 1);
  }
  return buf;
}
