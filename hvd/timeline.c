/* hvd/timeline.c: HVD_TIMELINE, a Chrome-trace JSON file of every operation on rank 0
   (load it in Perfetto or chrome://tracing). One row ("thread") per tensor name, with
   complete ("X") events NEGOTIATE, QUEUE, MEMCPY_IN_FUSION_BUFFER, the collective,
   MEMCPY_OUT_FUSION_BUFFER.

   Written as it happens: "[" first, then one event per line followed by a comma, each
   line flushed, so a killed run leaves a file that trace viewers still load (they accept
   an unterminated array); hvd_timeline_close ends it with a last event and "]", so a
   clean run leaves strict JSON. */
#include "hvd/timeline.h"
#include "hvd/hvd_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TIMELINE_MAX_ROWS 4096   /* beyond: events share one row named "other" */

struct hvd_timeline {
  FILE *f;
  char **rows;                   /* row i = tid i + 1 */
  int nrows;
};

hvd_status_t hvd_timeline_open(hvd_timeline_t **out, const char *path, char *err,
                               size_t errlen) {
  *out = NULL;
  hvd_timeline_t *t = calloc(1, sizeof(*t));
  if (!t) {
    snprintf(err, errlen, "out of memory opening the timeline");
    return HVD_ERR_NO_MEMORY;
  }
  t->f = fopen(path, "w");
  if (!t->f) {
    snprintf(err, errlen, "cannot open HVD_TIMELINE file \"%s\": %s", path, strerror(errno));
    free(t);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  fprintf(t->f, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,"
                "\"args\":{\"name\":\"hvd rank 0\"}},\n");
  fflush(t->f);
  *out = t;
  return HVD_OK;
}

/* Writes s as the inside of a JSON string. */
static void json_string(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
}

static int row_of(hvd_timeline_t *t, const char *name) {
  for (int i = 0; i < t->nrows; i++)
    if (strcmp(t->rows[i], name) == 0) return i + 1;
  if (t->nrows >= TIMELINE_MAX_ROWS) return TIMELINE_MAX_ROWS + 1;
  if (t->nrows % 64 == 0) {
    char **r = realloc(t->rows, (size_t)(t->nrows + 64) * sizeof(char *));
    if (!r) return TIMELINE_MAX_ROWS + 1;
    t->rows = r;
  }
  char *copy = strdup(name);
  if (!copy) return TIMELINE_MAX_ROWS + 1;
  t->rows[t->nrows++] = copy;
  int tid = t->nrows;
  fprintf(t->f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                "\"args\":{\"name\":\"", tid);
  json_string(t->f, name);
  fprintf(t->f, "\"}},\n");
  return tid;
}

void hvd_timeline_event(hvd_timeline_t *t, const char *key, const char *event,
                        double start_us, double end_us, size_t bytes) {
  if (!t || !t->f) return;
  char dbuf[HVD_KEY_MAX + 32];
  const char *name = hvd_display_name(key, dbuf, sizeof(dbuf));
  int tid = row_of(t, name);
  double dur = end_us - start_us;
  fprintf(t->f, "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                "\"dur\":%.3f,\"args\":{\"tensor\":\"", event, tid,
          start_us - hvd_g.start_us, dur > 0 ? dur : 0.0);
  json_string(t->f, name);
  fprintf(t->f, "\",\"bytes\":%zu}},\n", bytes);
  fflush(t->f);
}

void hvd_timeline_close(hvd_timeline_t *t) {
  if (!t) return;
  if (t->f) {
    fprintf(t->f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":0,"
                  "\"args\":{\"sort_index\":0}}\n]\n");
    fclose(t->f);
  }
  for (int i = 0; i < t->nrows; i++) free(t->rows[i]);
  free(t->rows);
  free(t);
}

void hvd_timeline_op(const char *key, const char *event, double t0, double t1,
                     size_t bytes) {
  if (hvd_g.timeline) hvd_timeline_event(hvd_g.timeline, key, event, t0, t1, bytes);
}
