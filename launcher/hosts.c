/* launcher/hosts.c: the host list of a job, from -H and from hostfiles, plus the small
   allocation helpers the rest of hvdrun shares. Accepts both hostfile dialects:
     OpenMPI:    node1 slots=4 max_slots=8     (max_slots is accepted and ignored)
     horovodrun: node1:4
   and a bare "node1" (one slot). */
#include "launcher/hvdrun.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void *hvdrun_xmalloc(size_t bytes)
{
  void *p = malloc(bytes ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "hvdrun: error: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

char *hvdrun_xstrdup(const char *s)
{
  size_t n = strlen(s) + 1;
  char *p = hvdrun_xmalloc(n);
  memcpy(p, s, n);
  return p;
}

void hvdrun_argv_push(hvdrun_argv_t *a, const char *s)
{
  if (a->n + 2 > a->cap) {
    int cap = a->cap ? a->cap * 2 : 16;
    char **v = realloc(a->v, (size_t)cap * sizeof *v);
    if (v == NULL) {
      fprintf(stderr, "hvdrun: error: out of memory\n");
      exit(1);
    }
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = hvdrun_xstrdup(s);
  a->v[a->n] = NULL;
}

void hvdrun_argv_pushf(hvdrun_argv_t *a, const char *fmt, ...)
{
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  hvdrun_argv_push(a, buf);
}

void hvdrun_argv_free(hvdrun_argv_t *a)
{
  for (int i = 0; i < a->n; i++) free(a->v[i]);
  free(a->v);
  a->v = NULL;
  a->n = a->cap = 0;
}

void hvdrun_hosts_add(hvdrun_hosts_t *h, const char *name, int slots)
{
  for (int i = 0; i < h->n; i++) {
    if (strcmp(h->v[i].name, name) == 0) {
      h->v[i].slots += slots;
      return;
    }
  }
  if (h->n == h->cap) {
    int cap = h->cap ? h->cap * 2 : 8;
    hvdrun_host_t *v = realloc(h->v, (size_t)cap * sizeof *v);
    if (v == NULL) {
      fprintf(stderr, "hvdrun: error: out of memory\n");
      exit(1);
    }
    h->v = v;
    h->cap = cap;
  }
  h->v[h->n].name = hvdrun_xstrdup(name);
  h->v[h->n].slots = slots;
  h->n++;
}

int hvdrun_hosts_total_slots(const hvdrun_hosts_t *h)
{
  long total = 0;
  for (int i = 0; i < h->n; i++) total += h->v[i].slots;
  return total > INT_MAX ? INT_MAX : (int)total;
}

void hvdrun_hosts_free(hvdrun_hosts_t *h)
{
  for (int i = 0; i < h->n; i++) free(h->v[i].name);
  free(h->v);
  h->v = NULL;
  h->n = h->cap = 0;
}

/* A slot count: decimal, 1..1000000, nothing else. */
static int parse_slots(const char *s, int *out)
{
  if (*s == '\0') return -1;
  long v = 0;
  for (const char *p = s; *p; p++) {
    if (!isdigit((unsigned char)*p)) return -1;
    v = v * 10 + (*p - '0');
    if (v > 1000000) return -1;
  }
  if (v < 1) return -1;
  *out = (int)v;
  return 0;
}

/* A host name: letters, digits, '-', '.', '_' (and ':' only for IPv6 is not supported:
   ':' separates the slot count). */
static int valid_host_name(const char *s, size_t len)
{
  if (len == 0 || len > 255) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!isalnum(c) && c != '-' && c != '.' && c != '_') return 0;
  }
  return 1;
}

/* One "host" or "host:N" token; returns 0 or -1 (the caller words the error). */
static int parse_host_token(const char *tok, size_t len, char *name, size_t name_len,
                            int *slots)
{
  const char *colon = memchr(tok, ':', len);
  size_t hlen = colon ? (size_t)(colon - tok) : len;
  if (!valid_host_name(tok, hlen) || hlen >= name_len) return -1;
  memcpy(name, tok, hlen);
  name[hlen] = '\0';
  *slots = 1;
  if (colon) {
    char num[32];
    size_t nlen = len - hlen - 1;
    if (nlen == 0 || nlen >= sizeof num) return -1;
    memcpy(num, colon + 1, nlen);
    num[nlen] = '\0';
    if (parse_slots(num, slots) != 0) return -1;
  }
  return 0;
}

int hvdrun_hosts_parse_list(hvdrun_hosts_t *h, const char *list, char *err)
{
  const char *p = list;
  if (*p == '\0') {
    snprintf(err, HVDRUN_ERR_LEN, "-H needs a host list such as 'node1:4,node2:4'");
    return -1;
  }
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char name[256];
    int slots;
    if (parse_host_token(p, len, name, sizeof name, &slots) != 0) {
      snprintf(err, HVDRUN_ERR_LEN,
               "-H '%s': malformed host '%.*s': expected 'host' or 'host:slots' with "
               "slots a positive integer, separated by commas", list, (int)len, p);
      return -1;
    }
    hvdrun_hosts_add(h, name, slots);
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

/* Parses one hostfile line (comment and surrounding blanks already removed). */
static int parse_hostfile_line(hvdrun_hosts_t *h, char *line)
{
  char *save = NULL;
  char *first = strtok_r(line, " \t", &save);
  char name[256];
  int slots = 1, have_colon = strchr(first, ':') != NULL, have_slots_kw = 0;
  if (parse_host_token(first, strlen(first), name, sizeof name, &slots) != 0) return -1;
  for (char *kv = strtok_r(NULL, " \t", &save); kv; kv = strtok_r(NULL, " \t", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq) return -1;
    *eq = '\0';
    const char *key = kv, *val = eq + 1;
    int n;
    if (parse_slots(val, &n) != 0) return -1;
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
  hvdrun_hosts_add(h, name, slots);
  return 0;
}

int hvdrun_hosts_parse_file(hvdrun_hosts_t *h, const char *path, char *err)
{
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, HVDRUN_ERR_LEN, "cannot open hostfile '%s': %s", path, strerror(errno));
    return -1;
  }
  char line[1024];
  int lineno = 0, hosts_before = h->n, rc = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    lineno++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
      snprintf(err, HVDRUN_ERR_LEN, "hostfile '%s' line %d: line longer than %zu characters",
               path, lineno, sizeof line - 2);
      rc = -1;
      break;
    }
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *s = line;
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    if (*s == '\0') continue;
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", s);
    if (parse_hostfile_line(h, s) != 0) {
      snprintf(err, HVDRUN_ERR_LEN,
               "hostfile '%.400s' line %d: malformed entry '%.200s': expected 'host', "
               "'host slots=N' (OpenMPI) or 'host:N' (horovodrun), N a positive integer",
               path, lineno, copy);
      rc = -1;
      break;
    }
  }
  if (rc == 0 && ferror(f)) {
    snprintf(err, HVDRUN_ERR_LEN, "error reading hostfile '%s': %s", path, strerror(errno));
    rc = -1;
  }
  fclose(f);
  if (rc == 0 && h->n == hosts_before) {
    snprintf(err, HVDRUN_ERR_LEN, "hostfile '%s' lists no hosts", path);
    rc = -1;
  }
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
    char path[300];
    struct stat st;
    snprintf(path, sizeof path, "/run/netns/%s", n);
    if (stat(path, &st) != 0) return 0;
  }
  return 1;
}
