/* serve/labels.c: parsing --version-labels and finding a label's version. */
#include "serve/labels.h"

#include "serve/instances.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int serve_labels_parse(const char *text, serve_labels_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const char *p = text;
  while (*p) {
    size_t len = strcspn(p, "=,");
    if (out->n == SERVE_MAX_LABELS)
      return serve_fail(err, errlen, "--version-labels: more than %d labels", SERVE_MAX_LABELS);
    if (len == 0 || len >= sizeof out->name[0] || p[len] != '=')
      return serve_fail(err, errlen, "--version-labels \"%s\": expected LABEL=VERSION[,LABEL="
                        "VERSION...] (e.g. stable=1,canary=2)", text);
    for (size_t i = 0; i < len; i++)
      if (!isalnum((unsigned char)p[i]) && p[i] != '-' && p[i] != '_')
        return serve_fail(err, errlen, "--version-labels: label \"%.*s\" has '%c': use letters, "
                          "digits, '-' and '_'", (int)len, p, p[i]);
    char name[64];
    memcpy(name, p, len);
    name[len] = '\0';
    if (serve_labels_find(out, name))
      return serve_fail(err, errlen, "--version-labels: label %s given twice", name);
    const char *num = p + len + 1;
    char *end;
    errno = 0;
    long v = strtol(num, &end, 10);
    if (end == num || (*end && *end != ',') || v < 1 || errno || !isdigit((unsigned char)*num))
      return serve_fail(err, errlen, "--version-labels: %s=%.*s: the version is not a number >= 1",
                        name, (int)strcspn(num, ","), num);
    memcpy(out->name[out->n], name, len + 1);
    out->version[out->n++] = v;
    p = *end ? end + 1 : end;
    if (*end && !*p)
      return serve_fail(err, errlen, "--version-labels \"%s\" ends with ','", text);
  }
  return 0;
}

long serve_labels_find(const serve_labels_t *l, const char *name) {
  for (int i = 0; l && i < l->n; i++)
    if (strcmp(l->name[i], name) == 0) return l->version[i];
  return 0;
}
