/* launcher/slurm.c: the hosts of a SLURM allocation, read as mpirun reads them, so that
   `salloc -N2 --ntasks-per-node=4 hvdrun PROG` (or hvdrun in an sbatch script) starts
   one rank per task on the allocated nodes without -np or -H:
     SLURM_JOB_NODELIST   ns[1-2], node[01-03,7], a,b, rack[1-2]-n[1-2]: a SLURM host list
     SLURM_TASKS_PER_NODE 2(x2),1: tasks of each node in the order of the list
   (SLURM_NODELIST and SLURM_JOB_CPUS_PER_NODE stand in when these are not set). */
#include "launcher/hvdrun.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Expansions of a host list of more names than ranks hvdrun can start are refused before
   they are built ("node[1-999999999]" would take all memory). */
#define MAX_NODES HVDRUN_MAX_RANKS

typedef struct {
  char **v;
  int n, cap;
} names_t;

static void names_push(names_t *a, char *s)   /* takes s */
{
  if (a->n == a->cap) {
    a->cap = a->cap ? a->cap * 2 : 16;
    char **v = realloc(a->v, (size_t)a->cap * sizeof *v);
    if (v == NULL) {
      fprintf(stderr, "hvdrun: error: out of memory\n");
      exit(1);
    }
    a->v = v;
  }
  a->v[a->n++] = s;
}

static void names_free(names_t *a)
{
  for (int i = 0; i < a->n; i++) free(a->v[i]);
  free(a->v);
  a->v = NULL;
  a->n = a->cap = 0;
}

/* A decimal number s[0..len) of at most 9 digits. */
static int parse_uint(const char *s, size_t len, long *out)
{
  if (len == 0 || len > 9) return -1;
  long v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return 0;
}

/* Expands one item without top-level commas, item[0..len), such as "n[1-3,5]x[1-2]",
   appending "<prefix>" to every name of the rest: brackets hold comma-separated numbers
   and lo-hi ranges; a range keeps the width of its low end ("[01-10]": 01 .. 10). */
static int expand_item(const char *prefix, const char *item, size_t len, names_t *out)
{
  const char *open = memchr(item, '[', len);
  if (open == NULL) {
    if (memchr(item, ']', len)) return -1;
    if (out->n >= MAX_NODES) return -2;
    names_push(out, hvdrun_xasprintf("%s%.*s", prefix, (int)len, item));
    return 0;
  }
  const char *end = item + len;
  const char *close = memchr(open, ']', (size_t)(end - open));
  if (close == NULL || close == open + 1) return -1;
  if (memchr(open + 1, '[', (size_t)(close - open - 1))) return -1;
  char *head = hvdrun_xasprintf("%s%.*s", prefix, (int)(open - item), item);
  int rc = 0;
  for (const char *p = open + 1; p < close && rc == 0;) {
    const char *comma = memchr(p, ',', (size_t)(close - p));
    const char *tok_end = comma ? comma : close;
    const char *dash = memchr(p, '-', (size_t)(tok_end - p));
    long lo, hi;
    size_t width = (size_t)((dash ? dash : tok_end) - p);
    if (parse_uint(p, width, &lo) != 0) rc = -1;
    else if (dash && parse_uint(dash + 1, (size_t)(tok_end - dash - 1), &hi) != 0) rc = -1;
    else if (!dash) hi = lo;
    if (rc == 0 && hi < lo) rc = -1;
    if (rc == 0 && hi - lo >= MAX_NODES) rc = -2;
    for (long k = lo; rc == 0 && k <= hi; k++) {
      char *with = hvdrun_xasprintf("%s%0*ld", head, (int)width, k);
      rc = expand_item(with, close + 1, (size_t)(end - close - 1), out);
      free(with);
    }
    p = tok_end + 1;
    if (comma && p == close) rc = -1;   /* "[1,]" */
  }
  free(head);
  return rc;
}

/* The names of a SLURM host list, in its order. 0, -1 (malformed), -2 (too many). */
static int expand_host_list(const char *list, names_t *out)
{
  const char *p = list;
  if (*p == '\0') return -1;
  for (;;) {
    const char *q = p;
    int depth = 0;
    while (*q && (depth > 0 || *q != ',')) {
      if (*q == '[') depth++;
      else if (*q == ']') depth--;
      q++;
    }
    if (q == p) return -1;
    int rc = expand_item("", p, (size_t)(q - p), out);
    if (rc != 0) return rc;
    if (*q == '\0') return 0;
    p = q + 1;
  }
}

/* "2(x2),1" -> counts[]: one per node, *n of them (at most max). 0; -1 when malformed or
   more than max counts; -2 when fewer than max: a list that does not cover every node would leave counts
   unset ("2" for 3 nodes is SLURM's "2(x3)" cut short). */
static int expand_tasks_per_node(const char *s, int *counts, int max, int *n)
{
  *n = 0;
  const char *p = s;
  for (;;) {
    const char *q = p;
    while (isdigit((unsigned char)*q)) q++;
    long tasks, times = 1;
    if (parse_uint(p, (size_t)(q - p), &tasks) != 0 || tasks < 1 || tasks > HVDRUN_MAX_HOST_SLOTS)
      return -1;
    if (q[0] == '(' && q[1] == 'x') {
      const char *r = q + 2;
      while (isdigit((unsigned char)*r)) r++;
      if (*r != ')' || parse_uint(q + 2, (size_t)(r - q - 2), &times) != 0 || times < 1)
        return -1;
      q = r + 1;
    }
    if (times > max - *n) return -1;
    for (long i = 0; i < times; i++) counts[(*n)++] = (int)tasks;
    if (*q == '\0') break;
    if (*q != ',') return -1;
    p = q + 1;
  }
  return *n == max ? 0 : -2;
}

static const char *env_either(const char *a, const char *b, const char **which)
{
  const char *v = getenv(a);
  *which = a;
  if (v == NULL || *v == '\0') {
    v = getenv(b);
    *which = b;
  }
  return v && *v ? v : NULL;
}

int hvdrun_slurm_hosts(hvdrun_hosts_t *h, char *err)
{
  const char *list_var, *tasks_var;
  const char *list = env_either("SLURM_JOB_NODELIST", "SLURM_NODELIST", &list_var);
  if (getenv("SLURM_JOB_ID") == NULL || list == NULL) return 0;
  const char *tasks = env_either("SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE", &tasks_var);
  names_t names = {0};
  int rc = expand_host_list(list, &names);
  if (rc == -1)
    rc = hvdrun_errf(err, "%s='%s' (SLURM allocation): not a SLURM host list such as "
                     "'node[1-3,5],gpu01' (numbers and lo-hi ranges in brackets); give the "
                     "hosts with -H", list_var, list);
  else if (rc == -2)
    rc = hvdrun_errf(err, "%s='%s' (SLURM allocation) names more than %d hosts; give the "
                     "hosts with -H", list_var, list, MAX_NODES);
  if (rc == 0 && tasks == NULL)
    rc = hvdrun_errf(err, "in SLURM allocation %s (%s='%s') but neither SLURM_TASKS_PER_NODE "
                     "nor SLURM_JOB_CPUS_PER_NODE is set; give the hosts with -H host:N",
                     getenv("SLURM_JOB_ID"), list_var, list);
  int *counts = NULL, n = 0;
  if (rc == 0) {
    counts = hvdrun_xmalloc((size_t)names.n * sizeof *counts);
    int got = expand_tasks_per_node(tasks, counts, names.n, &n);
    if (got == -2)
      rc = hvdrun_errf(err, "%s='%s' (SLURM allocation) gives task counts for %d of the %d "
                       "hosts of %s='%s': expected one per host, such as '2(x%d)'; give the "
                       "hosts with -H host:N", tasks_var, tasks, n, names.n, list_var, list,
                       names.n);
    else if (got != 0)
      rc = hvdrun_errf(err, "%s='%s' (SLURM allocation): expected one task count per host "
                       "of %s='%s' (%d hosts), such as '2(x%d)'; give the hosts with -H "
                       "host:N", tasks_var, tasks, list_var, list, names.n, names.n);
  }
  for (int i = 0; rc == 0 && i < names.n; i++) {
    long long total;
    size_t len = strlen(names.v[i]);
    /* Names -H refuses are refused here too: ':' in them, or a leading '-', which ssh
       would take as an option. */
    if (len == 0 || len > 255 || strchr(names.v[i], ':') || names.v[i][0] == '-')
      rc = hvdrun_errf(err, "%s='%s': host '%s' cannot be passed to the MPI launcher; give "
                       "the hosts with -H", list_var, list, names.v[i]);
    else if (hvdrun_hosts_add(h, names.v[i], len, counts[i], &total) != 0)
      rc = hvdrun_errf(err, "%s='%s': host '%s' would have %lld slots; a host has at most %d",
                       list_var, list, names.v[i], total, HVDRUN_MAX_HOST_SLOTS);
  }
  free(counts);
  names_free(&names);
  return rc == 0 ? 1 : -1;
}
