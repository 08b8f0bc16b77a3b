/* launcher/options.c: hvdrun's command line. mpirun's basic flags and horovodrun's
   tuning flags, up to the program name (or "--"); everything from the program name on
   belongs to the program and is never looked at. The flags are a table for util/flags.h,
   the parser of every program of the project (same syntax, messages and --help); its one
   exception is the message prefix, "hvdrun: error: " (launcher/hvdrun.c), which sets
   hvdrun's lines apart from the ranks' and mpirun's output that follows them. */
#include "launcher/hvdrun.h"

#include "util/flags.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the flags that do more than store a value (util/flags.h CUSTOM): err is
   hvdrun's err[HVDRUN_ERR_LEN], as util_flags_parse passes it on ---- */

static int set_hosts(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  (void)errlen;
  return hvdrun_hosts_parse_list(flag->dest, v[0], err) == 0 ? UTIL_FLAGS_OK : UTIL_FLAG_FAILED;
}

static int set_hostfile(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  (void)errlen;
  return hvdrun_hosts_parse_file(flag->dest, v[0], err) == 0 ? UTIL_FLAGS_OK : UTIL_FLAG_FAILED;
}

static int set_env(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  const char *veq = strchr(v[0], '=');
  size_t nlen = veq ? (size_t)(veq - v[0]) : strlen(v[0]);
  if (!valid_env_name(v[0], nlen)) {
    snprintf(err, errlen, "VAR or VAR=value with VAR a variable name");
    return UTIL_FLAG_BAD_VALUE;
  }
  if (!veq && getenv(v[0]) == NULL) {
    hvdrun_errf(err, "-x %s: %s is not set in this environment (use -x %s=value)", v[0], v[0],
                v[0]);
    return UTIL_FLAG_FAILED;
  }
  hvdrun_argv_push(flag->dest, v[0]);
  return UTIL_FLAGS_OK;
}

static int set_mca(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  (void)err, (void)errlen;
  hvdrun_argv_push(flag->dest, v[0]);
  hvdrun_argv_push(flag->dest, v[1]);
  return UTIL_FLAGS_OK;
}

static int set_fusion_threshold(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  double mb;
  if (parse_number(v[0], &mb) != 0 || mb > 1048576.0) {
    snprintf(err, errlen, "a size in MiB such as 64 (0 = no fusion)");
    return UTIL_FLAG_BAD_VALUE;
  }
  hvdrun_argv_pushf(flag->dest, "HVD_FUSION_THRESHOLD=%.0f", mb * 1048576.0);
  return UTIL_FLAGS_OK;
}

static int set_cycle_time(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  double ms;
  if (parse_number(v[0], &ms) != 0) {
    snprintf(err, errlen, "milliseconds such as 1 or 0.5");
    return UTIL_FLAG_BAD_VALUE;
  }
  hvdrun_argv_pushf(flag->dest, "HVD_CYCLE_TIME=%s", v[0]);   /* as given: the rank parses it */
  return UTIL_FLAGS_OK;
}

static int set_timeline(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  if (*v[0] == '\0') {
    snprintf(err, errlen, "a file name");
    return UTIL_FLAG_BAD_VALUE;
  }
  hvdrun_argv_pushf(flag->dest, "HVD_TIMELINE=%s", v[0]);
  return UTIL_FLAGS_OK;
}

/* Both stall flags: which variable is the flag's name. */
static int set_stall_seconds(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  long s;
  if (parse_count(v[0], 100000000, &s) != 0) {
    snprintf(err, errlen, "whole seconds (0 or more)");
    return UTIL_FLAG_BAD_VALUE;
  }
  hvdrun_argv_pushf(flag->dest, "%s=%ld",
                    strcmp(flag->name, "stall-check-warning-time-seconds") == 0
                        ? "HVD_STALL_CHECK_TIME_SECONDS" : "HVD_STALL_SHUTDOWN_TIME_SECONDS",
                    s);
  return UTIL_FLAGS_OK;
}

/* --network-interface: one or more interfaces ("eth0", "ib0,eth0") or subnets
   ("10.0.0.0/8"), as OpenMPI's *_tcp_if_include take them. Checked here so that a
   typo is an error now, not a launcher that cannot connect. */
static int set_network_interface(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  const char *s = v[0];
  int item_len = 0;
  for (const char *p = s;; p++) {
    if (*p == ',' || *p == '\0') {
      if (item_len == 0) {
        snprintf(err, errlen, "an interface such as eth0, or several separated by commas "
                 "(eth0,ib0), or a subnet such as 10.0.0.0/8; no empty item");
        return UTIL_FLAG_BAD_VALUE;
      }
      if (*p == '\0') break;
      item_len = 0;
      continue;
    }
    if (!(isalnum((unsigned char)*p) || strchr("._-:@/", *p)) || (item_len == 0 && *p == '-')) {
      snprintf(err, errlen, "an interface such as eth0, or several separated by commas, or "
               "a subnet such as 10.0.0.0/8 (letters, digits and . _ - : @ / only)");
      return UTIL_FLAG_BAD_VALUE;
    }
    item_len++;
  }
  *(const char **)flag->dest = s;
  return UTIL_FLAGS_OK;
}

/* --mpi-args "...": the words, split as a shell would (launcher/words.c). Given again,
   the words add up. */
static int set_mpi_args(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  (void)errlen;
  return hvdrun_split_words(v[0], "--mpi-args", flag->dest, err) == 0 ? UTIL_FLAGS_OK
                                                                        : UTIL_FLAG_FAILED;
}

static const char *const LOG_LEVELS[] = {"trace", "debug", "info", "warning", "error", NULL};

static int set_log_level(const util_flag_t *flag, char **v, char *err, size_t errlen)
{
  int k = util_flags_choice(LOG_LEVELS, v[0]);
  if (k < 0) {
    snprintf(err, errlen, "one of trace, debug, info, warning, error");
    return UTIL_FLAG_BAD_VALUE;
  }
  hvdrun_argv_pushf(flag->dest, "HVD_LOG_LEVEL=%s", LOG_LEVELS[k]);
  return UTIL_FLAGS_OK;
}

/* ---- the table ---- */

/* What the table writes besides o's fields. */
typedef struct {
  int hierarchical;
  const char *mpi;          /* "openmpi", "mpich" or NULL */
} extra_flags_t;

static const char *const MPI_FLAVOURS[] = {"openmpi", "mpich", NULL};

/* mpirun's single-dash flags are the aliases (-np, -H, -x, -mca, ...); "-x" has no long
   name in mpirun, so none here either. The tuning flags set HVD_* variables in the order
   given, as horovodrun does (a later -x of the same variable still wins). */
enum { NFLAGS = 34 };
static void flag_table(hvdrun_options_t *o, extra_flags_t *x, util_flag_t table[NFLAGS])
{
  const util_flag_t t[] = {
      {NULL, .help = "Processes and hosts (as mpirun):"},
      {"num-proc", UTIL_FLAG_INT, &o->np, .aliases = "-np -n --np -c", .min = 1,
       .max = HVDRUN_MAX_RANKS, .def = "all slots", .help = "number of ranks"},
      {"host", UTIL_FLAG_CUSTOM, &o->hosts, .aliases = "-H -host --hosts", .metavar = "LIST",
       .parse = set_hosts, .help = "hosts and slots: node1:4,node2:4 (no :N = 1 slot)"},
      {"hostfile", UTIL_FLAG_CUSTOM, &o->hosts, .aliases = "-hostfile -machinefile --machinefile",
       .metavar = "FILE", .parse = set_hostfile,
       .help = "one host a line: 'node1 slots=4' (OpenMPI) or 'node1:4' (horovodrun); '#' "
               "starts a comment"},
      {"oversubscribe", UTIL_FLAG_BOOL, &o->oversubscribe, .help = "allow more ranks than slots"},
      {NULL, UTIL_FLAG_CUSTOM, &o->env, .aliases = "-x", .metavar = "VAR[=VALUE]",
       .parse = set_env, .help = "set VAR on every rank (without =VALUE: its value here)"},
      {"mca", UTIL_FLAG_CUSTOM, &o->mca, .aliases = "-mca", .metavar = "KEY VALUE",
       .parse = set_mca, .nvalues = 2, .help = "pass an MCA parameter to OpenMPI's mpirun"},
      {"network-interface", UTIL_FLAG_CUSTOM, &o->network_interface,
       .aliases = "--network-interfaces", .metavar = "IFACE[,IFACE...]",
       .parse = set_network_interface,
       .help = "the interfaces (or subnets) MPI and NCCL use between hosts: OpenMPI's "
               "btl_tcp_if_include and oob_tcp_if_include, MPICH's -iface, and "
               "NCCL_SOCKET_IFNAME on every rank (not for subnets)"},
      {"ssh-port", UTIL_FLAG_INT, &o->ssh_port, .aliases = "-p", .min = 1, .max = 65535,
       .metavar = "PORT", .def = "",
       .help = "the port of ssh (the rsh agent) on the hosts: OpenMPI's plm_rsh_args '-p "
               "PORT'"},
      {"mpi-args", UTIL_FLAG_CUSTOM, &o->mpi_args, .metavar = "\"ARGS\"",
       .parse = set_mpi_args,
       .help = "more arguments for the MPI launcher, split into words as a shell splits "
               "them ('...' and \"...\" quote, a backslash escapes); they come after "
               "hvdrun's own, just before the program"},
      {"bind-to", UTIL_FLAG_STRING, &o->bind_to, .aliases = "-bind-to", .metavar = "WHAT",
       .def = "core, see below", .help = "override the binding default"},
      {"map-by", UTIL_FLAG_STRING, &o->map_by, .aliases = "-map-by", .metavar = "HOW",
       .def = "slot", .help = "override the placement default"},
      {"output-filename", UTIL_FLAG_STRING, &o->output_dir, .metavar = "DIR",
       .help = "each rank's stdout/stderr go to files under DIR"},
      {"start-timeout", UTIL_FLAG_INT, &o->start_timeout, .min = 1, .max = 100000000,
       .metavar = "SECONDS", .def = "",
       .help = "give up when the ranks have not started by then (OpenMPI: "
               "orte_startup_timeout; every rank: HVD_START_TIMEOUT)"},
      {"abort-timeout", UTIL_FLAG_INT, &o->abort_timeout, .min = 1, .max = 100000000,
       .metavar = "SECONDS",
       .help = "after a rank failed, give the MPI launcher this long to end the job, then "
               "end it (its process group) and exit non-zero"},
      {NULL, .help = "Elastic, restart-based (horovodrun's flags):"},
      {"host-discovery-script", UTIL_FLAG_STRING, &o->discovery_script, .metavar = "FILE",
       .help = "prints the usable hosts, one 'host:slots' a line; run before every start, "
               "and the job restarts on what it lists then after a failure"},
      {"min-np", UTIL_FLAG_INT, &o->min_np, .min = 1, .max = HVDRUN_MAX_RANKS, .def = "1",
       .help = "do not start with fewer ranks"},
      {"max-np", UTIL_FLAG_INT, &o->max_np, .min = 1, .max = HVDRUN_MAX_RANKS,
       .def = "all slots", .help = "start at most this many ranks, on only the first hosts they need"},
      {"reset-limit", UTIL_FLAG_INT, &o->reset_limit, .min = 0, .max = 1000000, .def = "3",
       .help = "restarts after failures before giving up"},
      {NULL, .help = "hvd tuning (horovodrun's flags; each sets a variable on every rank):"},
      {"fusion-threshold-mb", UTIL_FLAG_CUSTOM, &o->env, .metavar = "MB",
       .parse = set_fusion_threshold, .help = "HVD_FUSION_THRESHOLD (bytes = MB * 1048576)"},
      {"cycle-time-ms", UTIL_FLAG_CUSTOM, &o->env, .metavar = "MS", .parse = set_cycle_time,
       .help = "HVD_CYCLE_TIME"},
      {"timeline-filename", UTIL_FLAG_CUSTOM, &o->env, .metavar = "FILE",
       .parse = set_timeline, .help = "HVD_TIMELINE"},
      {"stall-check-warning-time-seconds", UTIL_FLAG_CUSTOM, &o->env, .metavar = "S",
       .parse = set_stall_seconds, .help = "HVD_STALL_CHECK_TIME_SECONDS"},
      {"stall-check-shutdown-time-seconds", UTIL_FLAG_CUSTOM, &o->env, .metavar = "S",
       .parse = set_stall_seconds, .help = "HVD_STALL_SHUTDOWN_TIME_SECONDS"},
      {"hierarchical-allreduce", UTIL_FLAG_BOOL, &x->hierarchical,
       .help = "HVD_HIERARCHICAL_ALLREDUCE=1"},
      {"log-level", UTIL_FLAG_CUSTOM, &o->env, .metavar = "LEVEL", .parse = set_log_level,
       .help = "HVD_LOG_LEVEL (trace, debug, info, warning, error)"},
      {NULL, .help = "hvdrun itself:"},
      {"check-build", UTIL_FLAG_BOOL, &o->check_build, .aliases = "-cb",
       .help = "print the compiled-in backends and the local topology"},
      {"verbose", UTIL_FLAG_BOOL, &o->verbose,
       .help = "print the final MPI launcher command before running it"},
      {"dry-run", UTIL_FLAG_BOOL, &o->dry_run, .help = "print the final command and do not run it"},
      {"mpi", UTIL_FLAG_CHOICE, &x->mpi, .choices = MPI_FLAVOURS, .def = "detected",
       .help = "skip detecting the MPI flavour ($HVD_MPIRUN names the launcher)"},
      {"rsh-agent", UTIL_FLAG_STRING, &o->rsh_agent, .metavar = "PATH", .def = "ssh",
       .help = "start remote ranks with PATH (set automatically to scripts/netns-rsh when "
               "every host is one of the namespaces of scripts/netns-hosts.sh)"},
  };
  _Static_assert(sizeof t / sizeof t[0] == NFLAGS, "NFLAGS is the number of entries");
  memcpy(table, t, sizeof t);
}

static util_flags_spec_t flag_spec(const util_flag_t *table)
{
  return (util_flags_spec_t){
      .prog = "hvdrun", .flags = table, .nflags = NFLAGS,
      .usage = "hvdrun [options] [--] PROGRAM [ARGS...]\n       hvdrun --check-build",
      .about =
          "\nStarts PROGRAM on several ranks through the installed MPI launcher (OpenMPI's\n"
          "mpirun or MPICH's mpiexec), with hvd's tuning flags turned into HVD_* variables\n"
          "on every rank. Everything after PROGRAM is passed to it untouched.\n",
      .unknown_hint = "options for the program go after its name, or after --",
      .positionals = 1,
      .footer =
          "\nDefaults: ranks are placed by slot (consecutive ranks fill a host first, so local\n"
          "ranks are neighbours) and each rank is bound to one core (--bind-to core), the CPU\n"
          "form of one process per device; with more ranks than cores or slots, or on the\n"
          "namespace test hosts (which share this machine's cores), binding is off\n"
          "(--bind-to none). As root, --allow-run-as-root is added for OpenMPI.\n"
          "\n"
          "Examples:\n"
          "  hvdrun -np 2 build/examples/hello_allreduce\n"
          "  hvdrun -np 4 -H ns1:2,ns2:2 --hierarchical-allreduce build/train --model lenet\n"
          "  hvdrun -np 8 -H node1:4,node2:4 --network-interface eth0 -p 2222 \\\n"
          "         --mpi-args \"--mca btl ^openib -x LD_LIBRARY_PATH\" build/train\n"};
}

static void options_init(hvdrun_options_t *o)
{
  memset(o, 0, sizeof *o);
  o->np = -1;
  o->start_timeout = -1;
  o->abort_timeout = HVDRUN_DEFAULT_ABORT_TIMEOUT;
  o->min_np = o->max_np = o->reset_limit = -1;
}

void hvdrun_print_help(void)
{
  hvdrun_options_t o;
  extra_flags_t x = {0};
  util_flag_t table[NFLAGS];
  options_init(&o);
  flag_table(&o, &x, table);
  util_flags_spec_t spec = flag_spec(table);
  util_flags_usage(&spec, stdout);
}

int hvdrun_parse_args(int argc, char **argv, hvdrun_options_t *o, char *err)
{
  options_init(o);
  extra_flags_t x = {0};
  util_flag_t table[NFLAGS];
  flag_table(o, &x, table);
  util_flags_spec_t spec = flag_spec(table);
  int first;
  int rc = util_flags_parse(&spec, argc, argv, &first, err, HVDRUN_ERR_LEN);
  if (rc == UTIL_FLAGS_HELP) {
    o->help = 1;
    return 0;
  }
  if (rc != UTIL_FLAGS_OK) return -1;
  if (x.hierarchical) hvdrun_argv_push(&o->env, "HVD_HIERARCHICAL_ALLREDUCE=1");
  if (x.mpi) o->mpi = strcmp(x.mpi, "mpich") == 0 ? HVDRUN_MPICH : HVDRUN_OPENMPI;
  o->prog_argv = argv + first;
  o->prog_argc = argc - first;
  int elastic_only = o->min_np > 0 || o->max_np > 0 || o->reset_limit >= 0;
  if (elastic_only && !o->discovery_script)
    return hvdrun_errf(err, "--min-np, --max-np and --reset-limit are for elastic runs: give "
                       "--host-discovery-script too");
  if (o->discovery_script && o->hosts.n > 0)
    return hvdrun_errf(err, "--host-discovery-script finds the hosts itself: leave out -H "
                       "and --hostfile");
  /* The same MCA parameter twice would leave OpenMPI to pick one: say which flag to drop. */
  for (int i = 0; i + 1 < o->mca.n; i += 2) {
    const char *key = o->mca.v[i];
    if (o->ssh_port > 0 && strcmp(key, "plm_rsh_args") == 0)
      return hvdrun_errf(err, "--ssh-port %d and --mca plm_rsh_args '%s' both set the rsh "
                         "agent's arguments: give the port in one of them (-p %d inside "
                         "plm_rsh_args)", o->ssh_port, o->mca.v[i + 1], o->ssh_port);
    if (o->network_interface && (strcmp(key, "btl_tcp_if_include") == 0 ||
                                 strcmp(key, "oob_tcp_if_include") == 0))
      return hvdrun_errf(err, "--network-interface %s and --mca %s %s both choose the "
                         "interfaces: give one of them", o->network_interface, key,
                         o->mca.v[i + 1]);
  }
  if (o->min_np > 0 && o->max_np > 0 && o->min_np > o->max_np)
    return hvdrun_errf(err, "--min-np %d is more than --max-np %d", o->min_np, o->max_np);
  if (!o->check_build && o->prog_argc == 0)
    return hvdrun_errf(err, "no program to run: usage: hvdrun [options] [--] PROGRAM "
                       "[ARGS...] (see hvdrun --help)");
  return 0;
}

void hvdrun_options_free(hvdrun_options_t *o)
{
  hvdrun_hosts_free(&o->hosts);
  hvdrun_argv_free(&o->env);
  hvdrun_argv_free(&o->mca);
  hvdrun_argv_free(&o->mpi_args);
}
