/* launcher/hosts.c: the host list of a job, from -H and from hostfiles, plus the small
   allocation and error helpers the rest of hvdrun shares. Accepts both hostfile dialects:
     OpenMPI:    node1 slots=4 max_slots=8     (max_slots is accepted and ignored)
     horovodrun: node1:4
   and a bare "node1" (one slot). */
#include "launcher/hvdrun.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void out_of_memory(size_t bytes)
{
  fprintf(stderr, "hvdrun: error: out of memory (%zu bytes)\n", bytes);
  exit(1);
}

void *hvdrun_xmalloc(size_t bytes)
{
  void *p = malloc(bytes ? bytes : 1);
  if (p == NULL) out_of_memory(bytes);
  return p;
}

/* realloc to n elements of size bytes, exiting when memory runs out or n * size overflows. */
static void *xrealloc_array(void *p, size_t n, size_t size)
{
  if (size != 0 && n > SIZE_MAX / size) out_of_memory(SIZE_MAX);
  size_t bytes = n * size;
  void *q = realloc(p, bytes ? bytes : 1);
  if (q == NULL) out_of_memory(bytes);
  return q;
}

/* The next capacity of an int-counted array: doubled, and never past INT_MAX. */
static int grow_cap(int cap, int first)
{
  if (cap == 0) return first;
  if (cap > INT_MAX / 2) out_of_memory(SIZE_MAX);
  return cap * 2;
}

char *hvdrun_xstrndup(const char *s, size_t n)
{
  if (n == SIZE_MAX) out_of_memory(n);
  char *p = hvdrun_xmalloc(n + 1);
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *hvdrun_xstrdup(const char *s)
{
  return hvdrun_xstrndup(s, strlen(s));
}

char *hvdrun_xvasprintf(const char *fmt, va_list ap)
{
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) {   /* only for a string longer than INT_MAX */
    fprintf(stderr, "hvdrun: error: cannot format a string: %s\n", strerror(errno));
    exit(1);
  }
  char *p = hvdrun_xmalloc((size_t)n + 1);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  return p;
}

char *hvdrun_xasprintf(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  char *p = hvdrun_xvasprintf(fmt, ap);
  va_end(ap);
  return p;
}

int hvdrun_errf(char *err, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  char *msg = hvdrun_xvasprintf(fmt, ap);
  va_end(ap);
  size_t n = strlen(msg);
  if (n < HVDRUN_ERR_LEN) {
    memcpy(err, msg, n + 1);
  } else {
    /* head + " [... N bytes left out ...] " + tail, cut between UTF-8 characters */
    size_t head = HVDRUN_ERR_LEN / 2, tail = HVDRUN_ERR_LEN / 4;
    while (head > 0 && ((unsigned char)msg[head] & 0xC0) == 0x80) head--;
    size_t from = n - tail;
    while (from < n && ((unsigned char)msg[from] & 0xC0) == 0x80) from++;
    snprintf(err, HVDRUN_ERR_LEN, "%.*s [... %zu bytes left out ...] %s", (int)head,
             msg, from - head, msg + from);
  }
  free(msg);
  return -1;
}

static void argv_take(hvdrun_argv_t *a, char *s)
{
  if (a->n + 2 > a->cap) {
    int cap = grow_cap(a->cap, 16);
    a->v = xrealloc_array(a->v, (size_t)cap, sizeof *a->v);
    a->cap = cap;
  }
  a->v[a->n++] = s;
  a->v[a->n] = NULL;
}

void hvdrun_argv_push(hvdrun_argv_t *a, const char *s)
{
  argv_take(a, hvdrun_xstrdup(s));
}

void hvdrun_argv_pushf(hvdrun_argv_t *a, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  argv_take(a, hvdrun_xvasprintf(fmt, ap));
  va_end(ap);
}

void hvdrun_argv_free(hvdrun_argv_t *a)
{
  for (int i = 0; i < a->n; i++) free(a->v[i]);
  free(a->v);
  a->v = NULL;
  a->n = a->cap = 0;
}

/* FNV-1a of name[0..len). */
static size_t name_hash(const char *name, size_t len)
{
  uint64_t x = 14695981039346656037ull;
  for (size_t i = 0; i < len; i++) x = (x ^ (unsigned char)name[i]) * 1099511628211ull;
  return (size_t)x;
}

/* The place of name in h->index: where it is, or the empty place where it would go. */
static size_t index_slot(const hvdrun_hosts_t *h, const char *name, size_t len)
{
  size_t mask = h->index_cap - 1, k = name_hash(name, len) & mask;
  for (;; k = (k + 1) & mask) {
    int at = h->index[k];
    if (at < 0) return k;
    if (strncmp(h->v[at].name, name, len) == 0 && h->v[at].name[len] == '\0') return k;
  }
}

/* Makes room in the index for one more host (it stays under half full). */
static void index_reserve(hvdrun_hosts_t *h)
{
  if ((size_t)h->n + 1 <= h->index_cap / 2) return;
  size_t cap = h->index_cap ? h->index_cap * 2 : 16;
  if (cap > SIZE_MAX / 2 / sizeof *h->index) out_of_memory(SIZE_MAX);
  free(h->index);
  h->index = xrealloc_array(NULL, cap, sizeof *h->index);
  h->index_cap = cap;
  for (size_t k = 0; k < cap; k++) h->index[k] = -1;
  for (int i = 0; i < h->n; i++)
    h->index[index_slot(h, h->v[i].name, strlen(h->v[i].name))] = i;
}

int hvdrun_hosts_add(hvdrun_hosts_t *h, const char *name, size_t len, int slots,
                     long long *total)
{
  *total = slots;
  index_reserve(h);
  size_t k = index_slot(h, name, len);
  if (h->index[k] >= 0) {
    int i = h->index[k];
    *total = (long long)h->v[i].slots + slots;   /* both <= HVDRUN_MAX_HOST_SLOTS */
    if (*total <= HVDRUN_MAX_HOST_SLOTS) {
      h->v[i].slots += slots;
      return 0;
    }
    return -1;
  }
  if (h->n == h->cap) {
    int cap = grow_cap(h->cap, 8);
    h->v = xrealloc_array(h->v, (size_t)cap, sizeof *h->v);
    h->cap = cap;
  }
  h->v[h->n].name = hvdrun_xstrndup(name, len);
  h->v[h->n].slots = slots;
  h->index[k] = h->n;
  h->n++;
  return 0;
}

long long hvdrun_hosts_total_slots(const hvdrun_hosts_t *h)
{
  /* Each host has at most HVDRUN_MAX_HOST_SLOTS (1e6) and there are at most INT_MAX
     hosts, so the sum stays below 2.2e15: far inside a long long. */
  long long total = 0;
  for (int i = 0; i < h->n; i++) total += h->v[i].slots;
  return total;
}

int hvdrun_hosts_keep_slots(hvdrun_hosts_t *h, long long slots)
{
  long long kept = 0;
  int n = 0;
  while (n < h->n && kept < slots) {
    if (h->v[n].slots > slots - kept) h->v[n].slots = (int)(slots - kept);
    kept += h->v[n++].slots;
  }
  if (n == h->n) return n;
  for (int i = n; i < h->n; i++) free(h->v[i].name);
  h->n = n;
  /* The index still names the hosts let go: rebuilt for the ones kept. */
  for (size_t k = 0; k < h->index_cap; k++) h->index[k] = -1;
  for (int i = 0; i < h->n; i++)
    h->index[index_slot(h, h->v[i].name, strlen(h->v[i].name))] = i;
  return n;
}

char *hvdrun_hosts_format(const hvdrun_hosts_t *h)
{
  return hvdrun_hosts_format_first(h, hvdrun_hosts_total_slots(h));
}

char *hvdrun_hosts_format_first(const hvdrun_hosts_t *h, long long slots)
{
  size_t len = 1;
  for (int i = 0; i < h->n; i++) len += strlen(h->v[i].name) + 2 + 10;   /* ",name:slots" */
  char *s = hvdrun_xmalloc(len), *p = s;
  *p = '\0';
  long long kept = 0;
  for (int i = 0; i < h->n && kept < slots; i++) {
    int n = h->v[i].slots > slots - kept ? (int)(slots - kept) : h->v[i].slots;
    p += sprintf(p, "%s%s:%d", i ? "," : "", h->v[i].name, n);
    kept += n;
  }
  return s;
}

void hvdrun_hosts_free(hvdrun_hosts_t *h)
{
  for (int i = 0; i < h->n; i++) free(h->v[i].name);
  free(h->v);
  free(h->index);
  h->v = NULL;
  h->index = NULL;
  h->index_cap = 0;
  h->n = h->cap = 0;
}

/* A slot count s[0..len): decimal, 1..HVDRUN_MAX_HOST_SLOTS, nothing else. */
static int parse_slots(const char *s, size_t len, int *out)
{
  if (len == 0) return -1;
  long v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
    if (v > HVDRUN_MAX_HOST_SLOTS) return -1;
  }
  if (v < 1) return -1;
  *out = (int)v;
  return 0;
}

/* A host name: 1..255 letters, digits, '-', '.', '_' (':' separates the slot count, so
   IPv6 addresses are not supported), not beginning with '-': mpirun passes the name to
   ssh, which would take "-oProxyCommand=..." or "-np" as an option. */
static int valid_host_name(const char *s, size_t len)
{
  if (len == 0 || len > 255 || s[0] == '-') return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!isalnum(c) && c != '-' && c != '.' && c != '_') return 0;
  }
  return 1;
}

/* One "host" or "host:N" token tok[0..len): the name is tok[0..*name_len).
   Returns 0 or -1 (the caller words the error). */
static int parse_host_token(const char *tok, size_t len, size_t *name_len, int *slots)
{
  const char *colon = memchr(tok, ':', len);
  size_t hlen = colon ? (size_t)(colon - tok) : len;
  if (!valid_host_name(tok, hlen)) return -1;
  *name_len = hlen;
  *slots = 1;
  if (colon && parse_slots(colon + 1, len - hlen - 1, slots) != 0) return -1;
  return 0;
}

#define HOST_NAME_SYNTAX                                                               \
  "host names of at most 255 letters, digits, '-', '.', '_', not beginning with '-'"
#define HOST_SYNTAX "slots a positive integer up to 1000000 and " HOST_NAME_SYNTAX

/* How an error names a -H list: whole when short, else by its length. */
static char *describe_list(const char *list)
{
  size_t n = strlen(list);
  if (n <= 200) return hvdrun_xasprintf("-H '%s'", list);
  return hvdrun_xasprintf("-H (a list of %zu characters)", n);
}

int hvdrun_hosts_parse_list(hvdrun_hosts_t *h, const char *list, char *err)
{
  const char *p = list;
  if (*p == '\0')
    return hvdrun_errf(err, "-H needs a host list such as 'node1:4,node2:4'");
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p), name_len;
    int slots;
    long long total;
    if (parse_host_token(p, len, &name_len, &slots) != 0) {
      char *what = describe_list(list);
      hvdrun_errf(err, "%s: malformed host '%.*s': expected 'host' or 'host:slots' "
                  "separated by commas, with " HOST_SYNTAX, what, (int)len, p);
      free(what);
      return -1;
    }
    if (hvdrun_hosts_add(h, p, name_len, slots, &total) != 0) {
      char *what = describe_list(list);
      hvdrun_errf(err, "%s: host '%.*s' would have %lld slots in all (a repeated host "
                  "adds up); a host has at most %d", what, (int)name_len, p, total,
                  HVDRUN_MAX_HOST_SLOTS);
      free(what);
      return -1;
    }
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

/* Parses one hostfile line (comment and surrounding blanks already removed).
   Returns 0, -1 for a malformed line, -2 when the host's slots add up past the most
   a host can have (*total: to how many). */
static int parse_hostfile_line(hvdrun_hosts_t *h, char *line, const char **name,
                               size_t *name_len, long long *total)
{
  char *save = NULL;
  char *first = strtok_r(line, " \t", &save);
  int slots = 1, have_colon = strchr(first, ':') != NULL, have_slots_kw = 0;
  if (parse_host_token(first, strlen(first), name_len, &slots) != 0) return -1;
  *name = first;
  for (char *kv = strtok_r(NULL, " \t", &save); kv; kv = strtok_r(NULL, " \t", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq) return -1;
    *eq = '\0';
    const char *key = kv, *val = eq + 1;
    int n;
    if (parse_slots(val, strlen(val), &n) != 0) return -1;
    if (strcmp(key, "slots") == 0) {
      if (have_colon || have_slots_kw) return -1;   /* two slot counts for one host */
      slots = n;
      have_slots_kw = 1;
    } else if (strcmp(key, "max_slots") == 0 || strcmp(key, "max-slots") == 0) {
      /* accepted for OpenMPI compatibility; hvdrun limits to slots */
    } else {
      return -1;
    }
  }
  return hvdrun_hosts_add(h, first, *name_len, slots, total) == 0 ? 0 : -2;
}

/* Reads one line of f into *buf (grown as needed, without the '\n'), stopping at the
   first NUL byte. Returns 1 with *len for a line, 0 at end of file (or on a read error:
   ferror tells), -1 at a NUL byte (*len: its offset), -2 for a line longer than
   HVDRUN_MAX_LINE. */
static int read_line(FILE *f, char **buf, size_t *cap, size_t *len)
{
  size_t n = 0;
  int c;
  while ((c = getc(f)) != EOF && c != '\n') {
    if (c == '\0') {
      *len = n;
      return -1;
    }
    if (n >= HVDRUN_MAX_LINE) return -2;
    if (n + 2 > *cap) {
      *cap = *cap ? *cap * 2 : 256;
      *buf = xrealloc_array(*buf, *cap, 1);
    }
    (*buf)[n++] = (char)c;
  }
  if (c == EOF && n == 0) return 0;
  if (n + 1 > *cap) {   /* an empty line before anything was allocated */
    *cap = n + 1;
    *buf = xrealloc_array(*buf, *cap, 1);
  }
  (*buf)[n] = '\0';
  *len = n;
  return 1;
}

int hvdrun_hosts_parse_file_as(hvdrun_hosts_t *h, const char *path, const char *what,
                               char *err)
{
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return hvdrun_errf(err, "cannot open %s: %s", what, strerror(errno));
  char *line = NULL;
  size_t cap = 0, len;
  long lineno = 0;
  int hosts_before = h->n, rc = 0, got;
  while ((got = read_line(f, &line, &cap, &len)) != 0) {
    lineno++;
    if (got == -1) {
      rc = hvdrun_errf(err, "%s line %ld: NUL byte at column %zu (a hostfile "
                       "is text: one host a line)", what, lineno, len + 1);
      break;
    }
    if (got == -2) {
      rc = hvdrun_errf(err, "%s line %ld: longer than %d bytes (a hostfile "
                       "is text: one host a line)", what, lineno, HVDRUN_MAX_LINE);
      break;
    }
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *s = line;
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    if (*s == '\0') continue;
    char *entry = hvdrun_xstrdup(s);   /* s is cut up by the parse */
    const char *name = NULL;
    size_t name_len = 0;
    long long total = 0;
    int bad = parse_hostfile_line(h, s, &name, &name_len, &total);
    if (bad == -1)
      rc = hvdrun_errf(err, "%s line %ld: malformed entry '%s': expected 'host', "
                       "'host slots=N' (OpenMPI) or 'host:N' (horovodrun), with N a "
                       "positive integer up to 1000000 and " HOST_NAME_SYNTAX, what,
                       lineno, entry);
    else if (bad == -2)
      rc = hvdrun_errf(err, "%s line %ld: host '%.*s' would have %lld slots in "
                       "all (a repeated host adds up); a host has at most %d", what,
                       lineno, (int)name_len, name, total, HVDRUN_MAX_HOST_SLOTS);
    free(entry);
    if (rc != 0) break;
  }
  if (rc == 0 && ferror(f))
    rc = hvdrun_errf(err, "error reading %s: %s", what, strerror(errno));
  free(line);
  fclose(f);
  if (rc == 0 && h->n == hosts_before)
    rc = hvdrun_errf(err, "%s lists no hosts", what);
  return rc;
}

int hvdrun_hosts_parse_file(hvdrun_hosts_t *h, const char *path, char *err)
{
  char *what = hvdrun_xasprintf("hostfile '%s'", path);
  int rc = hvdrun_hosts_parse_file_as(h, path, what, err);
  free(what);
  return rc;
}

int hvdrun_hosts_are_netns(const hvdrun_hosts_t *h)
{
  if (h->n == 0) return 0;
  for (int i = 0; i < h->n; i++) {
    const char *n = h->v[i].name;
    if (n[0] != 'n' || n[1] != 's' || n[2] == '\0') return 0;
    for (const char *p = n + 2; *p; p++)
      if (!isdigit((unsigned char)*p)) return 0;
    char *path = hvdrun_xasprintf("/run/netns/%s", n);
    struct stat st;
    int found = stat(path, &st) == 0;
    free(path);
    if (!found) return 0;
  }
  return 1;
}
