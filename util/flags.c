/* util/flags.c: the table-driven flag parser of util/flags.h. */
#include "util/flags.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- spellings ---- */

/* '-' and '_' are one character in flag names. */
static int fold(int c) { return c == '_' ? '-' : c; }

static int same_spelling(const char *a, size_t alen, const char *b, size_t blen) {
  if (alen != blen) return 0;
  for (size_t i = 0; i < alen; i++)
    if (fold((unsigned char)a[i]) != fold((unsigned char)b[i])) return 0;
  return 1;
}

/* The next space-separated alias of *p, advancing *p; 0 when none is left. */
static size_t next_alias(const char **p, const char **alias) {
  const char *s = *p ? *p : "";
  while (*s == ' ') s++;
  size_t n = strcspn(s, " ");
  *alias = s;
  *p = s + n;
  return n;
}

/* arg[0..n) (with its dashes) names flag f. */
static int has_spelling(const util_flag_t *f, const char *arg, size_t n) {
  if (f->name && n > 2 && arg[0] == '-' && arg[1] == '-' &&
      same_spelling(arg + 2, n - 2, f->name, strlen(f->name)))
    return 1;
  const char *p = f->aliases, *alias;
  for (size_t an; (an = next_alias(&p, &alias)) > 0;)
    if (same_spelling(arg, n, alias, an)) return 1;
  return 0;
}

static const util_flag_t *find_flag(const util_flags_spec_t *spec, const char *arg, size_t n) {
  for (size_t k = 0; k < spec->nflags; k++)
    if (has_spelling(&spec->flags[k], arg, n)) return &spec->flags[k];
  return NULL;
}

/* ---- "did you mean" ---- */

/* Optimal string alignment distance (insert, delete, substitute, swap two neighbours),
   '-' and '_' alike. Only called when the lengths differ by at most a few characters, and
   b is a name of the table (short): rows of len(b) + 1. */
static size_t edit_distance(const char *a, size_t an, const char *b, size_t bn) {
  enum { MAXB = 128 };
  if (bn >= MAXB) return (size_t)-1;
  size_t prev2[MAXB], prev[MAXB], cur[MAXB];
  for (size_t j = 0; j <= bn; j++) prev[j] = j;
  for (size_t i = 1; i <= an; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= bn; j++) {
      int ca = fold((unsigned char)a[i - 1]), cb = fold((unsigned char)b[j - 1]);
      size_t best = prev[j - 1] + (ca != cb);
      if (prev[j] + 1 < best) best = prev[j] + 1;
      if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
      if (i > 1 && j > 1 && ca == fold((unsigned char)b[j - 2]) &&
          fold((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < best)
        best = prev2[j - 2] + 1;
      cur[j] = best;
    }
    memcpy(prev2, prev, (bn + 1) * sizeof *prev);
    memcpy(prev, cur, (bn + 1) * sizeof *prev);
  }
  return prev[bn];
}

/* How many edits still count as a typo of a name of this length: none for one or two
   characters (every short flag is that close to every other), then about one in three. */
static size_t typo_budget(size_t len) {
  return len <= 2 ? 0 : len <= 5 ? 1 : len <= 9 ? 2 : 3;
}

/* A spelling as --help shows it: lead (the "--" of a long name, "" for an alias, which
   has its own dashes) and text[0..n). */
typedef struct {
  const char *lead, *text;
  size_t n;
  const util_flag_t *flag;
} spelling_t;

typedef struct {
  size_t best;               /* 2 x edits (+1 for other dashes) of the closest so far */
  spelling_t closest;
  int prefix_hits;           /* flags with a spelling the typed name begins */
  spelling_t prefixed;
} guess_t;

static void consider(const char *typed, size_t tn, size_t typed_dashes, spelling_t sp,
                     guess_t *g) {
  size_t dashes = sp.lead[0] ? strlen(sp.lead) : strspn(sp.text, "-");
  const char *bare = sp.text + (sp.lead[0] ? 0 : dashes);
  size_t bn = sp.n - (size_t)(bare - sp.text);
  size_t diff = tn > bn ? tn - bn : bn - tn;
  if (diff <= typo_budget(tn)) {
    /* Between spellings as close, the one with the user's dashes (-hostfil: -hostfile). */
    size_t d = edit_distance(typed, tn, bare, bn);
    size_t score = 2 * d + (dashes != typed_dashes);
    if (d <= typo_budget(tn) && score < g->best) g->best = score, g->closest = sp;
  }
  /* "--batch" for "--batch-size": a beginning of one flag only is a guess too. */
  if (tn >= 3 && tn < bn && same_spelling(typed, tn, bare, tn)) {
    if (g->prefixed.flag != sp.flag) {   /* the first spelling of each flag: its name */
      g->prefix_hits++;
      g->prefixed = sp;
    }
  }
}

const char *util_flags_suggest(const util_flags_spec_t *spec, const char *name, char *buf,
                               size_t len) {
  const size_t typed_dashes = strspn(name, "-");
  const char *typed = name + typed_dashes;
  size_t tn = strlen(typed);
  guess_t g = {.best = (size_t)-1};
  for (size_t k = 0; k < spec->nflags; k++) {
    const util_flag_t *f = &spec->flags[k];
    if (f->name)
      consider(typed, tn, typed_dashes, (spelling_t){"--", f->name, strlen(f->name), f}, &g);
    const char *p = f->aliases, *alias;
    for (size_t an; (an = next_alias(&p, &alias)) > 0;)
      consider(typed, tn, typed_dashes, (spelling_t){"", alias, an, f}, &g);
  }
  spelling_t sp = g.closest;
  if (!sp.text && g.prefix_hits == 1) sp = g.prefixed;
  if (!sp.text) return NULL;
  snprintf(buf, len, "%s%.*s", sp.lead, (int)sp.n, sp.text);
  return buf;
}

/* ---- messages ---- */

/* s[0..n) for a message, its middle left out when it is long (a 5000-character value
   would push what the message says off the line). */
static const char *clip(char *out, size_t len, const char *s, size_t n) {
  if (n <= 80) snprintf(out, len, "%.*s", (int)n, s);
  else snprintf(out, len, "%.40s [... %zu bytes left out ...] %s", s, n - 56, s + n - 16);
  return out;
}

/* err = the message, then "; see PROG --help" and the hint, if any. */
static int fail(const util_flags_spec_t *spec, const char *hint, char *err, size_t errlen,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail(const util_flags_spec_t *spec, const char *hint, char *err, size_t errlen,
                const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < errlen)
    snprintf(err + n, errlen - (size_t)n, "; see %s --help%s%s", spec->prog,
             hint ? "; " : "", hint ? hint : "");
  return UTIL_FLAGS_ERROR;
}

static int bad_value(const util_flags_spec_t *spec, const char *flag, const char *v,
                     const char *expected, char *err, size_t errlen) {
  char value[128];
  return fail(spec, NULL, err, errlen, "bad value '%s' for %s: expected %s",
              clip(value, sizeof value, v, strlen(v)), flag, expected);
}

/* What a number flag accepts, for its message: "an integer in [1, 65536]". */
static void expected_range(char *buf, size_t len, const char *what, const util_flag_t *f,
                           double type_min, double type_max) {
  if (!(f->min < f->max) || (f->min <= type_min && f->max >= type_max))
    snprintf(buf, len, "%s", what);
  else if (f->max >= type_max)
    snprintf(buf, len, "%s >= %.17g", what, f->min);
  else
    snprintf(buf, len, "%s in [%.17g, %.17g]", what, f->min, f->max);
}

static int in_range(const util_flag_t *f, double x) {
  return !(f->min < f->max) || (x >= f->min && x <= f->max);
}

/* ---- values ---- */

/* The whole of s is a base-10 integer (no blanks: strtol would skip leading ones). */
static int whole_integer(const char *s, int allow_sign, long long *out) {
  if (!(isdigit((unsigned char)*s) || (allow_sign && (*s == '-' || *s == '+')))) return -1;
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno || *end) return -1;
  *out = x;
  return 0;
}

static int whole_number(const char *s, double *out) {
  if (!(isdigit((unsigned char)*s) || *s == '-' || *s == '+' || *s == '.')) return -1;
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (errno == ERANGE && fabs(x) > 1.0) return -1;   /* overflow; underflow is 0 */
  if (*end || !isfinite(x)) return -1;
  *out = x;
  return 0;
}

/* "64", "4K", "1.5M", "2G" (powers of 1024): bytes, below 2^64. */
static int size_value(const char *s, double *out) {
  if (!(isdigit((unsigned char)*s) || *s == '.')) return -1;
  char *end;
  double x = strtod(s, &end);
  switch (toupper((unsigned char)*end)) {
    case 'G': x *= 1024.0 * 1024 * 1024; end++; break;
    case 'M': x *= 1024.0 * 1024; end++; break;
    case 'K': x *= 1024.0; end++; break;
    default: break;
  }
  if (*end || !(x >= 0) || x >= 18446744073709551616.0) return -1;
  *out = x;
  return 0;
}

static int lower_eq(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
  return *a == *b;
}

int util_flags_choice(const char *const *choices, const char *value) {
  for (int k = 0; choices && choices[k]; k++)
    if (lower_eq(choices[k], value)) return k;
  return -1;
}

static void join_choices(char *buf, size_t len, const char *const *choices, const char *sep) {
  size_t used = 0;
  buf[0] = '\0';
  for (int k = 0; choices && choices[k] && used < len; k++) {
    int n = snprintf(buf + used, len - used, "%s%s", k ? sep : "", choices[k]);
    if (n < 0) break;
    used += (size_t)n;
  }
}

static int set_string(const util_flag_t *f, const char *v) {
  if (f->dest_size == 0) {
    *(const char **)f->dest = v;
    return 0;
  }
  if (strlen(v) >= f->dest_size) return -1;
  memcpy(f->dest, v, strlen(v) + 1);
  return 0;
}

/* Writes value v of flag f (spelled so by the user). */
static int set_value(const util_flags_spec_t *spec, const util_flag_t *f, const char *flag,
                     char **values, char *err, size_t errlen) {
  const char *v = values[0];
  char want[256];
  long long i;
  double x;
  switch (f->type) {
    case UTIL_FLAG_BOOL:
      if (strcmp(v, "1") == 0 || lower_eq(v, "true")) *(int *)f->dest = 1;
      else if (strcmp(v, "0") == 0 || lower_eq(v, "false")) *(int *)f->dest = 0;
      else return bad_value(spec, flag, v, "true or false (or 1, 0)", err, errlen);
      return UTIL_FLAGS_OK;
    case UTIL_FLAG_INT:
    case UTIL_FLAG_LONG: {
      const int is_int = f->type == UTIL_FLAG_INT;
      const double lo = is_int ? INT_MIN : (double)LONG_MIN, hi = is_int ? INT_MAX : (double)LONG_MAX;
      expected_range(want, sizeof want, "an integer", f, lo, hi);
      if (whole_integer(v, 1, &i) != 0 || (double)i < lo || (double)i > hi ||
          !in_range(f, (double)i))
        return bad_value(spec, flag, v, want, err, errlen);
      if (is_int) *(int *)f->dest = (int)i;
      else *(long *)f->dest = (long)i;
      return UTIL_FLAGS_OK;
    }
    case UTIL_FLAG_U64: {
      expected_range(want, sizeof want, "a non-negative integer", f, 0, 18446744073709551615.0);
      char *end;
      errno = 0;
      unsigned long long u = isdigit((unsigned char)*v) ? strtoull(v, &end, 10) : 0;
      if (!isdigit((unsigned char)*v) || errno || *end || !in_range(f, (double)u))
        return bad_value(spec, flag, v, want, err, errlen);
      *(uint64_t *)f->dest = (uint64_t)u;
      return UTIL_FLAGS_OK;
    }
    case UTIL_FLAG_FLOAT:
    case UTIL_FLAG_DOUBLE: {
      const double top = f->type == UTIL_FLAG_FLOAT ? FLT_MAX : DBL_MAX;
      expected_range(want, sizeof want, "a number", f, -top, top);
      if (whole_number(v, &x) != 0 || fabs(x) > top || !in_range(f, x))
        return bad_value(spec, flag, v, want, err, errlen);
      if (f->type == UTIL_FLAG_FLOAT) *(float *)f->dest = (float)x;
      else *(double *)f->dest = x;
      return UTIL_FLAGS_OK;
    }
    case UTIL_FLAG_SIZE:
      expected_range(want, sizeof want, "a size in bytes such as 64, 4K, 1.5M or 2G", f, 0,
                     18446744073709551615.0);
      if (size_value(v, &x) != 0 || !in_range(f, x))
        return bad_value(spec, flag, v, want, err, errlen);
      *(size_t *)f->dest = (size_t)x;
      return UTIL_FLAGS_OK;
    case UTIL_FLAG_STRING:
      if (*v == '\0') return bad_value(spec, flag, v, "a non-empty value", err, errlen);
      if (set_string(f, v) != 0) {
        snprintf(want, sizeof want, "at most %zu characters", f->dest_size - 1);
        return bad_value(spec, flag, v, want, err, errlen);
      }
      return UTIL_FLAGS_OK;
    case UTIL_FLAG_CHOICE: {
      int k = util_flags_choice(f->choices, v);
      if (k < 0) {
        char list[200];
        join_choices(list, sizeof list, f->choices, ", ");
        snprintf(want, sizeof want, "one of %s", list);
        return bad_value(spec, flag, v, want, err, errlen);
      }
      set_string(f, f->choices[k]);   /* fits: the program sized dest for its choices */
      return UTIL_FLAGS_OK;
    }
    case UTIL_FLAG_CUSTOM: {
      int rc = f->parse(f, values, err, errlen);
      if (rc == UTIL_FLAG_BAD_VALUE) {
        snprintf(want, sizeof want, "%s", err);
        return bad_value(spec, flag, v, want, err, errlen);
      }
      return rc == UTIL_FLAGS_OK ? UTIL_FLAGS_OK : UTIL_FLAGS_ERROR;
    }
  }
  return fail(spec, NULL, err, errlen, "%s: flag of unknown type %d in the table", flag,
              (int)f->type);
}

static int takes_values(const util_flag_t *f) {
  if (f->type == UTIL_FLAG_BOOL) return 0;
  return f->type == UTIL_FLAG_CUSTOM && f->nvalues > 1 ? f->nvalues : 1;
}

/* ---- parsing ---- */

int util_flags_parse(const util_flags_spec_t *spec, int argc, char **argv,
                     int *first_positional, char *err, size_t errlen) {
  char flag[128];
  int i = 1;
  *first_positional = argc;
  for (; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) { i++; break; }
    if (arg[0] != '-' || arg[1] == '\0') break;   /* the first positional ("-" is one) */
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) return UTIL_FLAGS_HELP;
    /* Only "--name" takes "=value": mpirun's and getopt's single-dash flags do not. */
    const char *eq = arg[1] == '-' ? strchr(arg, '=') : NULL;
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    clip(flag, sizeof flag, arg, n);
    const util_flag_t *f = find_flag(spec, arg, n);
    int negate = 0;
    if (!f && n > 5 && arg[1] == '-' && same_spelling(arg + 2, 3, "no-", 3)) {
      /* --no-NAME: a boolean turned off (--no-NAME=false: on, as some scripts write). */
      char name[128];
      if (n - 3 < sizeof name) {
        snprintf(name, sizeof name, "--%.*s", (int)(n - 5), arg + 5);
        f = find_flag(spec, name, n - 3);
      }
      if (f && f->type != UTIL_FLAG_BOOL) f = NULL;
      negate = 1;
    }
    if (!f) {
      if (n == 6 && same_spelling(arg, n, "--help", 6))
        return fail(spec, NULL, err, errlen, "--help takes no value");
      char guess[160];
      const char *s = util_flags_suggest(spec, flag, guess, sizeof guess);
      char mean[200] = "";
      if (s) snprintf(mean, sizeof mean, " (did you mean %s?)", s);
      return fail(spec, spec->unknown_hint, err, errlen, "unknown flag %s%s", flag, mean);
    }
    char *values[8] = {NULL};
    const int want = takes_values(f);
    if (want == 0) {
      values[0] = eq ? (char *)eq + 1 : "1";
    } else if (eq) {
      if (want > 1)
        return fail(spec, NULL, err, errlen, "%s takes %d values as separate arguments "
                    "(%s %s)", flag, want, flag, f->metavar ? f->metavar : "VALUE ...");
      values[0] = (char *)eq + 1;
    } else {
      if (want > 8 || i + want >= argc) {
        if (want == 1) return fail(spec, NULL, err, errlen, "%s needs a value", flag);
        return fail(spec, NULL, err, errlen, "%s needs %d values (%s %s)", flag, want, flag,
                    f->metavar ? f->metavar : "VALUE ...");
      }
      for (int k = 0; k < want; k++) values[k] = argv[++i];
    }
    if (set_value(spec, f, flag, values, err, errlen) != UTIL_FLAGS_OK) return UTIL_FLAGS_ERROR;
    if (negate) *(int *)f->dest = !*(int *)f->dest;
  }
  *first_positional = i;
  if (i < argc && !spec->positionals) {
    char value[128];
    return fail(spec, NULL, err, errlen, "unexpected argument '%s' (%s takes only flags)",
                clip(value, sizeof value, argv[i], strlen(argv[i])), spec->prog);
  }
  return UTIL_FLAGS_OK;
}

/* ---- --help ---- */

enum { HELP_COLUMN = 30, HELP_WIDTH = 80 };

/* Writes text word-wrapped from column col (the cursor is at column at). */
static void wrap(FILE *f, const char *text, int at, int col) {
  const char *p = text;
  while (*p) {
    size_t w = strcspn(p, " ");
    if (at > col && at + 1 + (int)w > HELP_WIDTH) {
      fprintf(f, "\n%*s", col, "");
      at = col;
    } else if (at > col) {
      fputc(' ', f);
      at++;
    }
    fprintf(f, "%.*s", (int)w, p);
    at += (int)w;
    p += w;
    p += strspn(p, " ");
  }
  fputc('\n', f);
}

static void fmt_size(char *buf, size_t len, size_t v) {
  static const char units[] = "GMK";
  for (int u = 0; u < 3; u++) {
    size_t unit = (size_t)1 << (10 * (3 - u));
    if (v >= unit && v % unit == 0) {
      snprintf(buf, len, "%zu%c", v / unit, units[u]);
      return;
    }
  }
  snprintf(buf, len, "%zu", v);
}

/* The default as --help shows it: the table's, else the value dest holds now. */
static const char *default_text(const util_flag_t *f, char *buf, size_t len) {
  if (f->def) return f->def;
  buf[0] = '\0';
  switch (f->type) {
    case UTIL_FLAG_BOOL: if (*(int *)f->dest) snprintf(buf, len, "on"); break;
    case UTIL_FLAG_INT: snprintf(buf, len, "%d", *(int *)f->dest); break;
    case UTIL_FLAG_LONG: snprintf(buf, len, "%ld", *(long *)f->dest); break;
    case UTIL_FLAG_U64: snprintf(buf, len, "%llu", (unsigned long long)*(uint64_t *)f->dest); break;
    case UTIL_FLAG_FLOAT: snprintf(buf, len, "%g", (double)*(float *)f->dest); break;
    case UTIL_FLAG_DOUBLE: snprintf(buf, len, "%g", *(double *)f->dest); break;
    case UTIL_FLAG_SIZE: fmt_size(buf, len, *(size_t *)f->dest); break;
    case UTIL_FLAG_STRING:
    case UTIL_FLAG_CHOICE: {
      const char *s = f->dest_size ? (const char *)f->dest : *(const char **)f->dest;
      if (s) snprintf(buf, len, "%s", s);
      break;
    }
    case UTIL_FLAG_CUSTOM: break;
  }
  return buf;
}

static void usage_entry(FILE *f, const util_flag_t *fl) {
  static const char *const metavars[] = {
      [UTIL_FLAG_INT] = "N", [UTIL_FLAG_LONG] = "N", [UTIL_FLAG_U64] = "N",
      [UTIL_FLAG_FLOAT] = "X", [UTIL_FLAG_DOUBLE] = "X", [UTIL_FLAG_SIZE] = "SIZE",
      [UTIL_FLAG_STRING] = "VALUE", [UTIL_FLAG_CHOICE] = "VALUE", [UTIL_FLAG_CUSTOM] = "VALUE"};
  char choices[400] = "", list[400], lhs[512], def[64], text[1200];
  join_choices(choices, sizeof choices, fl->choices, "|");
  join_choices(list, sizeof list, fl->choices, ", ");
  /* A short list of choices is the value's name; a long one goes into the text. */
  int choices_in_lhs = fl->type == UTIL_FLAG_CHOICE && !fl->metavar && strlen(choices) <= 24;
  const char *metavar = fl->type == UTIL_FLAG_BOOL ? NULL
                        : fl->metavar              ? fl->metavar
                        : choices_in_lhs           ? choices
                                                   : metavars[fl->type];
  size_t used = 0;
  const char *p = fl->aliases, *alias;
  for (size_t an; (an = next_alias(&p, &alias)) > 0 && used < sizeof lhs;)
    used += (size_t)snprintf(lhs + used, sizeof lhs - used, "%s%.*s", used ? ", " : "",
                             (int)an, alias);
  if (fl->name && used < sizeof lhs)
    used += (size_t)snprintf(lhs + used, sizeof lhs - used, "%s--%s", used ? ", " : "",
                             fl->name);
  if (metavar && used < sizeof lhs) snprintf(lhs + used, sizeof lhs - used, " %s", metavar);
  int n = snprintf(text, sizeof text, "%s", fl->help ? fl->help : "");
  if (fl->type == UTIL_FLAG_CHOICE && !choices_in_lhs && n >= 0 && (size_t)n < sizeof text)
    n += snprintf(text + n, sizeof text - (size_t)n, " (one of %s)", list);
  const char *d = default_text(fl, def, sizeof def);
  if (*d && n >= 0 && (size_t)n < sizeof text)
    snprintf(text + n, sizeof text - (size_t)n, " (default %s)", d);
  int at = fprintf(f, "  %s", lhs);
  if (at > HELP_COLUMN - 1) {
    fprintf(f, "\n");
    at = 0;
  }
  fprintf(f, "%*s", HELP_COLUMN - at, "");
  wrap(f, text, HELP_COLUMN, HELP_COLUMN);
}

void util_flags_usage(const util_flags_spec_t *spec, FILE *f) {
  fprintf(f, "usage: %s\n", spec->usage);
  if (spec->about) fprintf(f, "%s", spec->about);
  /* A table that opens with a heading names its own groups. */
  if (spec->nflags == 0 || spec->flags[0].name || spec->flags[0].aliases) fprintf(f, "\nflags:\n");
  for (size_t k = 0; k < spec->nflags; k++) {
    const util_flag_t *fl = &spec->flags[k];
    if (fl->name || fl->aliases) usage_entry(f, fl);
    else fprintf(f, "\n%s\n", fl->help);   /* a heading between groups of flags */
  }
  fprintf(f, "  %-*s", HELP_COLUMN - 2, "-h, --help");
  wrap(f, "this text", HELP_COLUMN, HELP_COLUMN);
  fprintf(f, "\nFlags take --name value or --name=value, with '-' and '_' alike in names; "
             "booleans\ntake --name, --name=true|false or --no-name.\n");
  if (spec->footer) fprintf(f, "%s", spec->footer);
}
