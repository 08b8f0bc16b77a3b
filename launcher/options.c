/* launcher/options.c: hvdrun's command line. mpirun's basic flags and horovodrun's
   tuning flags, up to the program name (or "--"); everything from the program name on
   belongs to the program and is never looked at. */
#include "launcher/hvdrun.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void hvdrun_print_help(void)
{
  printf(
"usage: hvdrun [options] [--] PROGRAM [ARGS...]\n"
"       hvdrun --check-build\n"
"\n"
"Starts PROGRAM on several ranks through the installed MPI launcher (OpenMPI's mpirun\n"
"or MPICH's mpiexec), with hvd's tuning flags turned into HVD_* variables on every rank.\n"
"Everything after PROGRAM is passed to it untouched.\n"
"\n"
"Processes and hosts (as mpirun):\n"
"  -np N, -n N, --num-proc N   number of ranks (default: all slots)\n"
"  -H, --host LIST             hosts and slots: node1:4,node2:4 (no :N = 1 slot)\n"
"  --hostfile FILE             one host a line: 'node1 slots=4' (OpenMPI) or\n"
"                              'node1:4' (horovodrun); '#' starts a comment\n"
"  --oversubscribe             allow more ranks than slots\n"
"  -x VAR[=VALUE]              set VAR on every rank (without =VALUE: its value here)\n"
"  --mca KEY VALUE             pass an MCA parameter to OpenMPI's mpirun\n"
"  --bind-to WHAT, --map-by HOW   override the binding defaults (below)\n"
"  --output-filename DIR       each rank's stdout/stderr go to files under DIR\n"
"  --start-timeout SECONDS     give up when the ranks have not started by then\n"
"                              (OpenMPI: orte_startup_timeout; every rank: HVD_START_TIMEOUT)\n"
"\n"
"hvd tuning (horovodrun's flags; each sets a variable on every rank):\n"
"  --fusion-threshold-mb MB    HVD_FUSION_THRESHOLD (bytes = MB * 1048576)\n"
"  --cycle-time-ms MS          HVD_CYCLE_TIME\n"
"  --timeline-filename FILE    HVD_TIMELINE\n"
"  --stall-check-warning-time-seconds S    HVD_STALL_CHECK_TIME_SECONDS\n"
"  --stall-check-shutdown-time-seconds S   HVD_STALL_SHUTDOWN_TIME_SECONDS\n"
"  --hierarchical-allreduce    HVD_HIERARCHICAL_ALLREDUCE=1\n"
"  --log-level LEVEL           HVD_LOG_LEVEL (trace, debug, info, warning, error)\n"
"\n"
"hvdrun itself:\n"
"  --check-build               print the compiled-in backends and the local topology\n"
"  --verbose                   print the final MPI launcher command before running it\n"
"  --dry-run                   print the final command and do not run it\n"
"  --mpi openmpi|mpich         skip detecting the MPI flavour ($HVD_MPIRUN names the launcher)\n"
"  --rsh-agent PATH            start remote ranks with PATH instead of ssh (set\n"
"                              automatically to scripts/netns-rsh when every host is one\n"
"                              of the namespaces of scripts/netns-hosts.sh)\n"
"  -h, --help                  this text\n"
"\n"
"Defaults: ranks are placed by slot (consecutive ranks fill a host first, so local\n"
"ranks are neighbours) and each rank is bound to one core (--bind-to core), the CPU\n"
"form of one process per device; with more ranks than cores or slots, or on the\n"
"namespace test hosts (which share this machine's cores), binding is off\n"
"(--bind-to none). As root, --allow-run-as-root is added for OpenMPI.\n"
"\n"
"Examples:\n"
"  hvdrun -np 2 build/examples/hello_allreduce\n"
"  hvdrun -np 4 -H ns1:2,ns2:2 --hierarchical-allreduce build/train --model lenet\n");
}

/* "--name=value" or "--name value": returns the value, advancing *i past it. */
static const char *take_value(int argc, char **argv, int *i, const char *inline_val,
                              const char *flag, char *err)
{
  if (inline_val) return inline_val;
  if (*i + 1 >= argc) {
    hvdrun_errf(err, "option %s needs a value (see hvdrun --help)", flag);
    return NULL;
  }
  return argv[++*i];
}

/* A non-negative decimal number such as "64" or "0.5"; rejects "", "1e3", "-1", "5x". */
static int parse_number(const char *s, double *out)
{
  int digits = 0, dot = 0;
  for (const char *p = s; *p; p++) {
    if (isdigit((unsigned char)*p)) digits++;
    else if (*p == '.' && !dot) dot = 1;
    else return -1;
  }
  if (digits == 0) return -1;
  errno = 0;
  *out = strtod(s, NULL);
  return errno ? -1 : 0;
}

static int parse_count(const char *s, long max, long *out)
{
  if (*s == '\0') return -1;
  long v = 0;
  for (const char *p = s; *p; p++) {
    if (!isdigit((unsigned char)*p)) return -1;
    v = v * 10 + (*p - '0');
    if (v > max) return -1;
  }
  *out = v;
  return 0;
}

static int valid_env_name(const char *s, size_t len)
{
  if (len == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return 0;
  for (size_t i = 1; i < len; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return 0;
  return 1;
}

/* One option: flag is argv[*i] without its "=value" part (inline_val: that value, or
   NULL); *i advances past the values it takes. */
static int parse_option(int argc, char **argv, int *ip, const char *flag,
                        const char *inline_val, hvdrun_options_t *o, char *err)
{
  int i = *ip;
  const char *arg = argv[i];
#define IS(name) (strcmp(flag, name) == 0)
#define VALUE() take_value(argc, argv, &i, inline_val, flag, err)
#define NO_VALUE()                                                                     \
  do {                                                                                 \
    if (inline_val)                                                                    \
      return hvdrun_errf(err, "option %s takes no value (got '%s')", flag, inline_val); \
  } while (0)
  const char *v;
  if (IS("-h") || IS("--help")) { NO_VALUE(); o->help = 1; }
  else if (IS("-np") || IS("-n") || IS("--np") || IS("--num-proc") || IS("-c")) {
    long n;
    if (!(v = VALUE())) return -1;
    if (parse_count(v, HVDRUN_MAX_RANKS, &n) != 0 || n < 1) {
      hvdrun_errf(err, "%s '%s': expected a positive number of ranks (at most %d)", flag,
                  v, HVDRUN_MAX_RANKS);
      return -1;
    }
    o->np = (int)n;
  } else if (IS("-H") || IS("--host") || IS("--hosts") || IS("-host")) {
    if (!(v = VALUE())) return -1;
    if (hvdrun_hosts_parse_list(&o->hosts, v, err) != 0) return -1;
  } else if (IS("--hostfile") || IS("-hostfile") || IS("--machinefile") ||
             IS("-machinefile")) {
    if (!(v = VALUE())) return -1;
    if (hvdrun_hosts_parse_file(&o->hosts, v, err) != 0) return -1;
  } else if (IS("-x")) {
    if (!(v = VALUE())) return -1;
    const char *veq = strchr(v, '=');
    size_t nlen = veq ? (size_t)(veq - v) : strlen(v);
    if (!valid_env_name(v, nlen)) {
      hvdrun_errf(err,
                  "-x '%s': expected VAR or VAR=value with VAR a variable name", v);
      return -1;
    }
    if (!veq && getenv(v) == NULL) {
      hvdrun_errf(err,
                  "-x %s: %s is not set in this environment (use -x %s=value)", v, v, v);
      return -1;
    }
    hvdrun_argv_push(&o->env, v);
  } else if (IS("--mca") || IS("-mca")) {
    const char *key, *val;
    if (inline_val) {
      hvdrun_errf(err, "%s takes two values: --mca KEY VALUE", flag);
      return -1;
    }
    if (i + 2 >= argc) {
      hvdrun_errf(err, "%s needs a key and a value: --mca KEY VALUE", flag);
      return -1;
    }
    key = argv[++i];
    val = argv[++i];
    hvdrun_argv_push(&o->mca, key);
    hvdrun_argv_push(&o->mca, val);
  } else if (IS("--fusion-threshold-mb")) {
    double mb;
    if (!(v = VALUE())) return -1;
    if (parse_number(v, &mb) != 0 || mb > 1048576.0) {
      hvdrun_errf(err, "--fusion-threshold-mb '%s': expected a size in MiB such as 64 "
                  "(0 = no fusion)", v);
      return -1;
    }
    hvdrun_argv_pushf(&o->env, "HVD_FUSION_THRESHOLD=%.0f", mb * 1048576.0);
  } else if (IS("--cycle-time-ms")) {
    double ms;
    if (!(v = VALUE())) return -1;
    if (parse_number(v, &ms) != 0) {
      hvdrun_errf(err, "--cycle-time-ms '%s': expected milliseconds such as 1 or 0.5", v);
      return -1;
    }
    hvdrun_argv_pushf(&o->env, "HVD_CYCLE_TIME=%s", v);
  } else if (IS("--timeline-filename")) {
    if (!(v = VALUE())) return -1;
    if (*v == '\0') {
      hvdrun_errf(err, "--timeline-filename needs a file name");
      return -1;
    }
    hvdrun_argv_pushf(&o->env, "HVD_TIMELINE=%s", v);
  } else if (IS("--stall-check-warning-time-seconds") ||
             IS("--stall-check-shutdown-time-seconds")) {
    long s;
    if (!(v = VALUE())) return -1;
    if (parse_count(v, 100000000, &s) != 0) {
      hvdrun_errf(err, "%s '%s': expected whole seconds (0 or more)", flag, v);
      return -1;
    }
    hvdrun_argv_pushf(&o->env, "%s=%ld",
                      IS("--stall-check-warning-time-seconds")
                          ? "HVD_STALL_CHECK_TIME_SECONDS" : "HVD_STALL_SHUTDOWN_TIME_SECONDS",
                      s);
  } else if (IS("--hierarchical-allreduce")) {
    NO_VALUE();
    hvdrun_argv_push(&o->env, "HVD_HIERARCHICAL_ALLREDUCE=1");
  } else if (IS("--log-level")) {
    if (!(v = VALUE())) return -1;
    static const char *levels[] = {"trace", "debug", "info", "warning", "error"};
    const char *level = NULL;
    for (size_t k = 0; k < sizeof levels / sizeof levels[0]; k++)
      if (strcasecmp(v, levels[k]) == 0) level = levels[k];
    if (!level) {
      hvdrun_errf(err,
                  "--log-level '%s': expected one of trace, debug, info, warning, error", v);
      return -1;
    }
    hvdrun_argv_pushf(&o->env, "HVD_LOG_LEVEL=%s", level);
  } else if (IS("--verbose")) { NO_VALUE(); o->verbose = 1; }
  else if (IS("--dry-run")) { NO_VALUE(); o->dry_run = 1; }
  else if (IS("--oversubscribe")) { NO_VALUE(); o->oversubscribe = 1; }
  else if (IS("--check-build") || IS("-cb")) { NO_VALUE(); o->check_build = 1; }
  else if (IS("--output-filename")) {
    if (!(v = VALUE())) return -1;
    if (*v == '\0') {
      hvdrun_errf(err, "--output-filename needs a directory");
      return -1;
    }
    o->output_dir = v;
  } else if (IS("--start-timeout")) {
    long s;
    if (!(v = VALUE())) return -1;
    if (parse_count(v, 100000000, &s) != 0 || s < 1) {
      hvdrun_errf(err, "--start-timeout '%s': expected whole seconds (1 or more)", v);
      return -1;
    }
    o->start_timeout = (int)s;
  } else if (IS("--mpi")) {
    if (!(v = VALUE())) return -1;
    if (strcasecmp(v, "openmpi") == 0) o->mpi = HVDRUN_OPENMPI;
    else if (strcasecmp(v, "mpich") == 0) o->mpi = HVDRUN_MPICH;
    else {
      hvdrun_errf(err, "--mpi '%s': expected openmpi or mpich", v);
      return -1;
    }
  } else if (IS("--rsh-agent")) {
    if (!(v = VALUE())) return -1;
    o->rsh_agent = v;
  } else if (IS("--bind-to") || IS("-bind-to")) {
    if (!(v = VALUE())) return -1;
    o->bind_to = v;
  } else if (IS("--map-by") || IS("-map-by")) {
    if (!(v = VALUE())) return -1;
    o->map_by = v;
  } else {
    hvdrun_errf(err,
                "unknown option '%s' (see hvdrun --help; options for the program go after "
                "its name, or after --)", arg);
    return -1;
  }
#undef IS
#undef VALUE
#undef NO_VALUE
  *ip = i;
  return 0;
}

int hvdrun_parse_args(int argc, char **argv, hvdrun_options_t *o, char *err)
{
  memset(o, 0, sizeof *o);
  o->np = -1;
  o->start_timeout = -1;
  int i;
  for (i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) { i++; break; }
    if (arg[0] != '-' || arg[1] == '\0') break;   /* the program ("-" alone is a name) */
    /* Split "--flag=value"; only long options take the inline form. */
    const char *eq = strchr(arg, '=');
    int split = arg[1] == '-' && eq;
    char *flag = split ? hvdrun_xstrndup(arg, (size_t)(eq - arg)) : hvdrun_xstrdup(arg);
    int rc = parse_option(argc, argv, &i, flag, split ? eq + 1 : NULL, o, err);
    free(flag);
    if (rc != 0) return -1;
  }
  o->prog_argv = argv + i;
  o->prog_argc = argc - i;
  if (!o->help && !o->check_build && o->prog_argc == 0)
    return hvdrun_errf(err, "no program to run: usage: hvdrun [options] [--] PROGRAM "
                       "[ARGS...] (see --help)");
  return 0;
}

void hvdrun_options_free(hvdrun_options_t *o)
{
  hvdrun_hosts_free(&o->hosts);
  hvdrun_argv_free(&o->env);
  hvdrun_argv_free(&o->mca);
}
