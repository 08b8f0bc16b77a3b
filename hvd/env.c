/* hvd/env.c: the runtime's configuration from the environment, and its log.
   Every variable HVD_X is also read as HOROVOD_X (HVD_ wins when both are set), so
   scripts written for Horovod keep working. A malformed value fails hvd_init with a
   message naming the variable, the value and what was expected. */
#include "hvd/env.h"
#include "hvd/hvd_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *env_get(const char *suffix, char *used, size_t usedlen) {
  const char *prefixes[2] = {"HVD_", "HOROVOD_"};
  for (int i = 0; i < 2; i++) {
    snprintf(used, usedlen, "%s%s", prefixes[i], suffix);
    const char *v = getenv(used);
    if (v != NULL && v[0] != '\0') return v;
  }
  return NULL;
}

static hvd_status_t env_double(const char *suffix, double def, double *out, char *err,
                               size_t errlen) {
  char used[64];
  const char *v = env_get(suffix, used, sizeof(used));
  *out = def;
  if (v == NULL) return HVD_OK;
  char *end = NULL;
  errno = 0;
  double d = strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !isfinite(d) || d < 0) {
    snprintf(err, errlen, "%s=\"%s\" is not a non-negative number", used, v);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *out = d;
  return HVD_OK;
}

hvd_status_t hvd_config_load(hvd_config_t *c, char *err, size_t errlen) {
  char used[64];
  const char *v;
  hvd_status_t s;
  memset(c, 0, sizeof(*c));

  double fusion;
  if ((s = env_double("FUSION_THRESHOLD", 64.0 * 1024 * 1024, &fusion, err, errlen)))
    return s;
  if (fusion > 1e15) {
    snprintf(err, errlen, "HVD_FUSION_THRESHOLD=%.0f bytes is too large", fusion);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  c->fusion_threshold = (size_t)fusion;
  /* 1 ms: the coordinator waits at most this long for names that some ranks have
     submitted to batch them with those already ready; when nothing else is pending it
     answers at once, so a lone blocking call does not pay it. */
  if ((s = env_double("CYCLE_TIME", 1.0, &c->cycle_time_ms, err, errlen))) return s;
  if ((s = env_double("STALL_CHECK_TIME_SECONDS", 60.0, &c->stall_check_s, err, errlen)))
    return s;
  if ((s = env_double("STALL_SHUTDOWN_TIME_SECONDS", 0.0, &c->stall_shutdown_s, err,
                      errlen)))
    return s;
  double cache;
  if ((s = env_double("CACHE_CAPACITY", 1024.0, &cache, err, errlen))) return s;
  if (cache != (double)(long long)cache || cache > 1e7) {
    snprintf(err, errlen, "HVD_CACHE_CAPACITY=%g: expected a whole number of entries "
             "from 0 (off) to 10000000", cache);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  c->cache_capacity = (size_t)cache;
  if ((s = env_double("PEER_TIMEOUT_SECONDS", 10.0, &c->peer_timeout_s, err, errlen)))
    return s;
  /* Horovod's HOROVOD_START_TIMEOUT (hvdrun sets it): how long hvd_init waits for every
     rank to reach it. */
  if ((s = env_double("START_TIMEOUT", 30.0, &c->start_timeout_s, err, errlen))) return s;
  /* Horovod's switch to turn the inspector off. */
  if ((v = env_get("STALL_CHECK_DISABLE", used, sizeof(used))) && strcmp(v, "0") != 0)
    c->stall_check_s = 0;

  if ((v = env_get("TIMELINE", used, sizeof(used)))) {
    if (strlen(v) >= sizeof(c->timeline)) {
      snprintf(err, errlen, "%s is longer than %zu bytes", used, sizeof(c->timeline) - 1);
      return HVD_ERR_INVALID_ARGUMENT;
    }
    strcpy(c->timeline, v);
  }

  if ((v = env_get("HIERARCHICAL_ALLREDUCE", used, sizeof(used)))) {
    if (strcmp(v, "0") == 0) c->hierarchical = 0;
    else if (strcmp(v, "1") == 0) c->hierarchical = 1;
    else {
      snprintf(err, errlen, "%s=\"%s\": expected 0 or 1", used, v);
      return HVD_ERR_INVALID_ARGUMENT;
    }
  }

  /* Horovod's HOROVOD_THREAD_AFFINITY: one core id per local rank, comma-separated.
     Checked here for form; init checks that there is an entry for this rank. */
  if ((v = env_get("THREAD_AFFINITY", used, sizeof(used)))) {
    size_t len = strlen(v);
    int ok = len < sizeof(c->thread_affinity) && v[0] != ',' && v[len - 1] != ',';
    for (size_t i = 0; ok && i < len; i++)
      ok = (v[i] >= '0' && v[i] <= '9') || (v[i] == ',' && v[i + 1] != ',');
    if (!ok) {
      snprintf(err, errlen, "%s=\"%s\": expected core ids, one per local rank, "
               "comma-separated (e.g. 0,1)", used, v);
      return HVD_ERR_INVALID_ARGUMENT;
    }
    strcpy(c->thread_affinity, v);
  }

  /* How far the background thread yields to the rank's other threads
     (hvd/background.c, background_priority). */
  c->background_nice = -1;
  if ((v = env_get("BACKGROUND_NICE", used, sizeof(used))) && strcmp(v, "auto") != 0) {
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < 0 || n > 19) {
      snprintf(err, errlen, "%s=\"%s\": expected auto or 0-19, how many nice steps "
               "below the rank's threads the background thread runs (0: the same "
               "priority; at most nice 19)", used, v);
      return HVD_ERR_INVALID_ARGUMENT;
    }
    c->background_nice = (int)n;
  }

  c->log_level = HVD_LOG_WARNING;
  if ((v = env_get("LOG_LEVEL", used, sizeof(used)))) {
    const char *names[] = {"trace", "debug", "info", "warning", "error"};
    int found = -1;
    for (int i = 0; i < 5; i++)
      if (strcasecmp(v, names[i]) == 0) found = i;
    if (found < 0 && strcasecmp(v, "warn") == 0) found = HVD_LOG_WARNING;
    if (found < 0 && strcasecmp(v, "fatal") == 0) found = HVD_LOG_ERROR;
    if (found < 0) {
      snprintf(err, errlen, "%s=\"%s\": expected trace, debug, info, warning or error",
               used, v);
      return HVD_ERR_INVALID_ARGUMENT;
    }
    c->log_level = found;
  }
  return HVD_OK;
}

/* The runtime's only output: stall warnings and HVD_LOG_LEVEL diagnostics, on stderr,
   one line each (the caller's text may hold more lines). */
void hvd_log(int level, const char *fmt, ...) {
  if (level < hvd_g.cfg.log_level) return;
  static const char *names[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR"};
  char line[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "[hvd rank %d] %s: %s\n", hvd_g.rank, names[level], line);
  fflush(stderr);
}
