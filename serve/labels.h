/* serve/labels.h: version labels (TF Serving's version_labels of its model config):
   --version-labels stable=1,canary=2 names versions, and a request may choose its
   version by label (REST /v1/models/NAME/labels/LABEL, gRPC ModelSpec.version_label).
   A label must name a version served when it is set (serve checks at start). */
#ifndef SERVE_LABELS_H
#define SERVE_LABELS_H

#include <stddef.h>

#define SERVE_MAX_LABELS 16

typedef struct {
  int n;
  char name[SERVE_MAX_LABELS][64];
  long version[SERVE_MAX_LABELS];
} serve_labels_t;

/* "L=N[,L=N...]" (empty: no labels) -> out; 0, or -1 with why in err. A label is
   letters, digits, '-' and '_', unique; N a version number >= 1. */
int serve_labels_parse(const char *text, serve_labels_t *out, char *err, size_t errlen);
/* The version labelled name, or 0 when no label has that name. */
long serve_labels_find(const serve_labels_t *l, const char *name);

#endif /* SERVE_LABELS_H */
