/* util/plugin.c: see util/plugin.h. */
#include "util/plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The two fields every table starts with (util/plugin.h). */
typedef struct {
  int abi;
  size_t size;
} plugin_head_t;

/* Where the backend is: next to the library holding anchor, else its bare soname for the
   dynamic loader to find; tried gets the path next to it when it is not there ("" when
   that library's own path is unknown), for the message. */
static void backend_path(const util_plugin_spec_t *spec, char *path, size_t len, char *tried,
                         size_t tried_len) {
  Dl_info self;
  tried[0] = '\0';
  if (dladdr(spec->anchor, &self) != 0 && self.dli_fname != NULL) {
    const char *slash = strrchr(self.dli_fname, '/');
    if (slash != NULL) {
      int n = snprintf(path, len, "%.*s/%s", (int)(slash - self.dli_fname), self.dli_fname,
                       spec->soname);
      if (n > 0 && (size_t)n < len && access(path, F_OK) == 0) return;
      snprintf(tried, tried_len, "%s", path);
    }
  }
  snprintf(path, len, "%s", spec->soname);
}

static void say(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t why_len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_len, fmt, ap);   /* a long path is cut: the message stays whole */
  va_end(ap);
}

/* The table of the opened lib, checked; NULL with why filled when it is refused. */
static const void *table_of(const util_plugin_spec_t *spec, void *lib, const char *path,
                            char *why, size_t why_len) {
  (void)dlerror();   /* an earlier error would be taken for this lookup's */
  void *sym = dlsym(lib, spec->symbol);
  if (sym == NULL) {
    const char *e = dlerror();
    if (e != NULL) say(why, why_len, "%s: %s", path, e);
    else say(why, why_len, "%s: no %s", path, spec->symbol);
    return NULL;
  }
  const void *t = spec->call_entry(sym);
  plugin_head_t head = {-1, 0};
  if (t != NULL) memcpy(&head, t, sizeof head);   /* the table's first two fields */
  if (t != NULL && head.abi == spec->abi && head.size == spec->size &&
      (spec->accept == NULL || spec->accept(t)))
    return t;
  const char *what = spec->accept != NULL ? spec->accept_what : NULL;
  say(why, why_len, "%s is from another build of %s (its table: version %d, %zu bytes; "
      "this lib%s's: %d, %zu%s%s): install lib%s and %s from one build", path,
      spec->library, head.abi, head.size, spec->library, spec->abi, spec->size,
      what ? "; or " : "", what ? what : "", spec->library, spec->soname);
  return NULL;
}

const void *util_plugin_load(const util_plugin_spec_t *spec, char *why, size_t why_len) {
  char path[PATH_MAX], tried[PATH_MAX];
  backend_path(spec, path, sizeof path, tried, sizeof tried);
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char *e = dlerror();
    say(why, why_len, "%s%s%s", e ? e : path, tried[0] ? "; nor is it at " : "", tried);
    return NULL;
  }
  const void *t = table_of(spec, lib, path, why, why_len);
  /* A refused library is unused from here on; one that cannot be unloaded stays
     mapped, harmlessly. */
  if (t == NULL && dlclose(lib) != 0) {
    size_t n = strlen(why);
    if (n < why_len) snprintf(why + n, why_len - n, " (and it could not be unloaded)");
  }
  return t;
}
