/* launcher/command.c: finding the MPI launcher, telling OpenMPI from MPICH, and turning
   hvdrun's options into the launcher's argv. The command is an argv array from start to
   end (execvp, no shell), so arguments with spaces or quotes arrive as they were given. */
#include "launcher/hvdrun.h"
#include "launcher/topology.h"
#include "util/clock.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* The most "launcher --version" may take: it prints a line and exits. */
#define DETECT_TIMEOUT_S 10

/* Looks name up as execvp would: a name with '/' as is, else each PATH entry.
   Returns 0 with the path in *path (a new string), or -1 with the reason in *why. */
static int lookup(const char *name, char **path, const char **why)
{
  struct stat st;
  *path = NULL;
  if (strchr(name, '/')) {
    if (stat(name, &st) != 0) {
      *why = errno == ENOENT ? "no such file" : strerror(errno);
      return -1;
    }
    if (S_ISDIR(st.st_mode)) { *why = "is a directory"; return -1; }
    if (access(name, X_OK) != 0) { *why = "not executable (chmod +x?)"; return -1; }
    *path = hvdrun_xstrdup(name);
    return 0;
  }
  const char *env = getenv("PATH");
  const char *p = env ? env : "/usr/local/bin:/usr/bin:/bin";
  *why = "not found on PATH";
  for (;;) {
    const char *colon = strchr(p, ':');
    size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
    char *cand = dlen ? hvdrun_xasprintf("%.*s/%s", (int)dlen, p, name)
                      : hvdrun_xasprintf("./%s", name);
    if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(cand, X_OK) == 0) {
        *path = cand;
        return 0;
      }
      *why = "found on PATH but not executable";
    }
    free(cand);
    if (!colon) break;
    p = colon + 1;
  }
  return -1;
}

int hvdrun_check_program(const char *prog, char *err)
{
  char *path;
  const char *why = NULL;
  if (*prog == '\0') return hvdrun_errf(err, "the program name is empty");
  if (lookup(prog, &path, &why) == 0) {
    free(path);
    return 0;
  }
  return hvdrun_errf(err, "program '%s' not found: %s%s", prog, why,
                     strchr(prog, '/') ? ""
                     : " (give a path such as ./prog, or add its directory to PATH)");
}

int hvdrun_find_launcher(hvdrun_mpi_t want, char **path, char *err)
{
  const char *forced = getenv("HVD_MPIRUN");
  const char *why = NULL;
  if (forced && *forced) {
    if (lookup(forced, path, &why) == 0) return 0;
    return hvdrun_errf(err, "MPI launcher '%s' (from HVD_MPIRUN) not found: %s", forced,
                       why);
  }
  static const char *openmpi[] = {"mpirun", "mpiexec", NULL};
  static const char *mpich[] = {"mpiexec.hydra", "mpiexec.mpich", "mpiexec", "mpirun", NULL};
  for (const char **c = want == HVDRUN_MPICH ? mpich : openmpi; *c; c++)
    if (lookup(*c, path, &why) == 0) return 0;
  return hvdrun_errf(err,
                     "no MPI launcher found: neither mpirun nor mpiexec is on PATH. Install "
                     "one: apt-get install openmpi-bin libopenmpi-dev (or: apt-get install "
                     "mpich), or name it with HVD_MPIRUN=/path/to/mpirun");
}

/* Reads "launcher --version" (process group pid, output on fd) into out[cap], for at
   most DETECT_TIMEOUT_S. Returns the signal hvdrun got meanwhile (0: none); *timed_out. */
static int read_version(int fd, char *out, size_t cap, int *timed_out)
{
  size_t n = 0;
  double until = util_now_s() + DETECT_TIMEOUT_S;
  int sig = 0;
  *timed_out = 0;
  for (;;) {
    if ((sig = hvdrun_signal_take()) != 0) break;
    double left = until - util_now_s();
    if (left <= 0) {
      *timed_out = 1;
      break;
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int ready = poll(&pf, 1, left < 0.1 ? 1 : 100);
    if (ready <= 0) continue;   /* EINTR (a signal: taken above) or nothing yet */
    ssize_t r = read(fd, out + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
    if (n == cap - 1) break;
  }
  out[n] = '\0';
  return sig;
}

hvdrun_mpi_t hvdrun_detect_mpi(const char *launcher, char *version, size_t len)
{
  snprintf(version, len, "unknown");
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(version, len, "pipe: %s", strerror(errno));
    return HVDRUN_MPI_UNKNOWN;
  }
  /* A launcher that hangs, or ignores SIGTERM, must not keep hvdrun, or outlive it:
     its own process group, a bound, and a guardian (launcher/children.c). */
  hvdrun_signals_t saved;
  hvdrun_signals_catch(&saved);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(version, len, "fork: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    hvdrun_signals_restore(&saved);
    return HVDRUN_MPI_UNKNOWN;
  }
  if (pid == 0) {
    hvdrun_child_setup(parent);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execl(launcher, launcher, "--version", (char *)NULL);
    _exit(127);
  }
  setpgid(pid, pid);
  close(fds[1]);
  char out[8192], why[HVDRUN_ERR_LEN];
  hvdrun_guard_t guard;
  int guarded = hvdrun_guard_start(pid, &guard, why) == 0;
  int timed_out = 0;
  int sig = read_version(fds[0], out, sizeof out, &timed_out);
  close(fds[0]);
  hvdrun_child_reap(pid);
  if (guarded) hvdrun_guard_release(&guard);
  hvdrun_signals_restore(&saved);
  /* Stopped by a signal while asking: nothing of ours runs any more, so the signal now
     takes its ordinary course (hvdrun ends with it). */
  if (sig) {
    raise(sig);
    snprintf(version, len, "interrupted by signal %d", sig);
    return HVDRUN_MPI_UNKNOWN;
  }
  if (timed_out) {
    snprintf(version, len, "no answer in %d s", DETECT_TIMEOUT_S);
    return HVDRUN_MPI_UNKNOWN;
  }

  hvdrun_mpi_t kind = HVDRUN_MPI_UNKNOWN;
  if (strstr(out, "Open MPI") || strstr(out, "OpenRTE")) kind = HVDRUN_OPENMPI;
  else if (strstr(out, "HYDRA") || strstr(out, "MPICH") || strstr(out, "Intel(R) MPI"))
    kind = HVDRUN_MPICH;
  /* OpenMPI: "mpirun (Open MPI) 4.1.4"; Hydra: "HYDRA build details:\n  Version: 4.1". */
  const char *line = out;
  const char *v = strstr(out, "Version:");
  if (kind == HVDRUN_MPICH && v) line = v;
  size_t l = strcspn(line, "\n");
  while (l > 0 && isspace((unsigned char)line[l - 1])) l--;
  if (l > 0) snprintf(version, len, "%s%.*s", kind == HVDRUN_MPICH ? "MPICH/Hydra " : "",
                      (int)l, line);
  return kind;
}

static int is_this_machine(const char *host)
{
  char me[256];
  if (strcmp(host, "localhost") == 0 || strcmp(host, "127.0.0.1") == 0) return 1;
  if (gethostname(me, sizeof me) != 0) return 0;
  me[sizeof me - 1] = '\0';
  size_t n = strlen(host);
  /* "node1" matches "node1.example.com" and the other way round. */
  return strncmp(me, host, n) == 0 && (me[n] == '\0' || me[n] == '.');
}

static int local_core_count(void)
{
  hvdrun_topo_t *t;
  char err[256];
  if (hvdrun_topo_load(&t, err, sizeof err) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
  }
  hvdrun_topo_summary_t s;
  hvdrun_topo_summary(t, &s);
  hvdrun_topo_free(t);
  return s.cores > 0 ? s.cores : 1;
}

static int env_true(const char *name)
{
  const char *v = getenv(name);
  return v && (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0);
}

/* This program's own path (/proc/self/exe), a new string; NULL when unknown. */
static char *own_path(void)
{
  for (size_t cap = 256;; cap *= 2) {
    char *buf = hvdrun_xmalloc(cap);
    ssize_t n = readlink("/proc/self/exe", buf, cap);
    if (n <= 0) {
      int e = errno;
      free(buf);
      errno = e;
      return NULL;
    }
    if ((size_t)n < cap) {   /* else it may have been cut: try a larger buffer */
      buf[n] = '\0';
      return buf;
    }
    free(buf);
  }
}

/* The rsh agent for the namespace hosts: $HVD_RSH_AGENT, else scripts/netns-rsh next to
   the build directory this hvdrun lives in (build/hvdrun -> scripts/netns-rsh).
   *path: a new string. */
static int netns_agent(char **path, char *err)
{
  const char *env = getenv("HVD_RSH_AGENT");
  *path = NULL;
  if (env && *env) {
    *path = hvdrun_xstrdup(env);
  } else {
    char *exe = own_path();
    if (exe == NULL)
      return hvdrun_errf(err, "cannot find hvdrun's own path (/proc/self/exe): %s; pass "
                         "--rsh-agent PATH", strerror(errno));
    char *slash = strrchr(exe, '/');   /* .../build/hvdrun -> .../build */
    if (slash) *slash = '\0';
    slash = strrchr(exe, '/');         /* .../build -> ... */
    if (slash) *slash = '\0';
    *path = hvdrun_xasprintf("%s/scripts/netns-rsh", exe);
    free(exe);
  }
  if (access(*path, X_OK) != 0) {
    hvdrun_errf(err, "the hosts are the project's network namespaces but the rsh agent "
                "'%s' is missing or not executable; pass --rsh-agent PATH or set "
                "HVD_RSH_AGENT", *path);
    free(*path);
    *path = NULL;
    return -1;
  }
  return 0;
}

/* How the slot error names the hosts: the list when short, else its first and last. */
static char *describe_hosts(const hvdrun_hosts_t *h, const char *list)
{
  if (strlen(list) <= 200) return hvdrun_xstrdup(list);
  const hvdrun_host_t *first = &h->v[0], *last = &h->v[h->n - 1];
  return hvdrun_xasprintf("%d hosts: %s:%d, ..., %s:%d", h->n, first->name, first->slots,
                          last->name, last->slots);
}

/* Where the ranks go and how the launcher reaches the hosts: hvdrun's options resolved
   into what both launchers' flags are made of. */
typedef struct {
  int np, have_hosts, oversubscribe, netns;
  char *hosts;               /* the hosts' slots the job runs on, as -H takes them */
  const char *bind_to, *map_by;
  const char *agent;         /* the rsh agent, or NULL: the launcher's own */
  char *agent_found;         /* the namespace hosts' agent, when not given */
  const char *subnet;        /* the namespace hosts' bridge */
} placement_t;

static void placement_free(placement_t *p)
{
  free(p->hosts);
  free(p->agent_found);
  p->hosts = p->agent_found = NULL;
}

/* Binding is off when ranks outnumber cores (bound ranks would pile onto the same cores)
   and on the namespace hosts, which are all this one machine: each host's daemon would
   bind its ranks to the same cores. */
static const char *default_bind_to(const hvdrun_options_t *o, const placement_t *p,
                                   long long slots)
{
  int overloaded = p->np > slots;
  if (!p->have_hosts && p->np > local_core_count()) overloaded = 1;
  for (int i = 0; i < o->hosts.n; i++)
    if (is_this_machine(o->hosts.v[i].name) && o->hosts.v[i].slots > local_core_count())
      overloaded = 1;
  return overloaded || p->netns ? "none" : "core";
}

static int placement_plan(const hvdrun_options_t *o, placement_t *p, char *err)
{
  memset(p, 0, sizeof *p);
  /* Slots: the hosts' slots, or this machine's cores (OpenMPI's default). Counted in a
     long long: many hosts of many slots add up past INT_MAX. */
  p->have_hosts = o->hosts.n > 0;
  long long slots = p->have_hosts ? hvdrun_hosts_total_slots(&o->hosts) : local_core_count();
  p->oversubscribe = o->oversubscribe || env_true("OMPI_MCA_rmaps_base_oversubscribe");
  if (o->np <= 0 && slots > HVDRUN_MAX_RANKS)
    return hvdrun_errf(err, "the hosts have %lld slots in all, more than the %d ranks "
                       "hvdrun starts at most; give the number of ranks with -np N", slots,
                       HVDRUN_MAX_RANKS);
  p->np = o->np > 0 ? o->np : (int)slots;
  /* Fewer ranks than slots: the launcher gets only the first hosts' slots, in order,
     the hosts the job runs on (horovodrun's placement); the rest are left out, not
     handed over for it to use (--map-by node would spread the ranks over them all). */
  p->hosts = hvdrun_hosts_format_first(&o->hosts, p->np);
  if (p->np > slots && !p->oversubscribe) {
    char *which = p->have_hosts ? describe_hosts(&o->hosts, p->hosts)
                                : hvdrun_xstrdup("this machine's cores");
    hvdrun_errf(err, "-np %d is more than the %lld slots available (%s); add slots (-H "
                "host:N, --hostfile) or pass --oversubscribe", p->np, slots, which);
    free(which);
    placement_free(p);
    return -1;
  }

  /* One process per device: on CPU a rank per core, bound to it, ranks of a host placed
     next to each other (map by slot). */
  p->netns = hvdrun_hosts_are_netns(&o->hosts);
  p->bind_to = o->bind_to ? o->bind_to : default_bind_to(o, p, slots);
  p->map_by = o->map_by ? o->map_by : "slot";
  if (!o->rsh_agent && p->netns && netns_agent(&p->agent_found, err) != 0) {
    placement_free(p);
    return -1;
  }
  p->agent = o->rsh_agent ? o->rsh_agent : p->agent_found;
  p->subnet = getenv("HVD_NETNS_SUBNET");
  if (!p->subnet || !*p->subnet) p->subnet = HVDRUN_NETNS_SUBNET;
  return 0;
}

static void push_mca(hvdrun_argv_t *cmd, const char *name, const char *value)
{
  hvdrun_argv_push(cmd, "--mca");
  hvdrun_argv_push(cmd, name);
  hvdrun_argv_push(cmd, value);
}

/* OpenMPI's network flags: the interface asked for, else the namespace hosts' bridge. */
static void push_openmpi_network(const hvdrun_options_t *o, const placement_t *p,
                                 hvdrun_argv_t *cmd)
{
  if (o->network_interface) {
    /* As horovodrun: both the daemons' out-of-band channel and the ranks' TCP
       transport, and NCCL's sockets (a -x given later still wins). */
    push_mca(cmd, "btl_tcp_if_include", o->network_interface);
    push_mca(cmd, "oob_tcp_if_include", o->network_interface);
    if (!strchr(o->network_interface, '/')) {
      hvdrun_argv_push(cmd, "-x");
      hvdrun_argv_pushf(cmd, "NCCL_SOCKET_IFNAME=%s", o->network_interface);
    }
  } else if (p->netns) {
    /* The daemons in the namespaces reach mpirun, and ranks reach each other, only
       over the bridge: keep OpenMPI off every other interface. */
    push_mca(cmd, "oob_tcp_if_include", p->subnet);
    push_mca(cmd, "btl_tcp_if_include", p->subnet);
  }
}

static void push_openmpi(const hvdrun_options_t *o, const placement_t *p, hvdrun_argv_t *cmd)
{
  if (geteuid() == 0) hvdrun_argv_push(cmd, "--allow-run-as-root");
  hvdrun_argv_push(cmd, "-np");
  hvdrun_argv_pushf(cmd, "%d", p->np);
  if (p->have_hosts) {
    hvdrun_argv_push(cmd, "-H");
    hvdrun_argv_push(cmd, p->hosts);
  }
  if (p->oversubscribe) hvdrun_argv_push(cmd, "--oversubscribe");
  hvdrun_argv_push(cmd, "--bind-to");
  hvdrun_argv_push(cmd, p->bind_to);
  hvdrun_argv_push(cmd, "--map-by");
  hvdrun_argv_push(cmd, p->map_by);
  if (o->output_dir) {
    hvdrun_argv_push(cmd, "--output-filename");
    hvdrun_argv_push(cmd, o->output_dir);
  }
  if (o->start_timeout > 0) {
    hvdrun_argv_push(cmd, "--mca");
    hvdrun_argv_push(cmd, "orte_startup_timeout");
    hvdrun_argv_pushf(cmd, "%d", o->start_timeout);
  }
  if (p->agent) push_mca(cmd, "plm_rsh_agent", p->agent);
  if (o->ssh_port > 0) {
    hvdrun_argv_push(cmd, "--mca");
    hvdrun_argv_push(cmd, "plm_rsh_args");
    hvdrun_argv_pushf(cmd, "-p %d", o->ssh_port);
  }
  push_openmpi_network(o, p, cmd);
  for (int i = 0; i + 1 < o->mca.n; i += 2) push_mca(cmd, o->mca.v[i], o->mca.v[i + 1]);
  for (int i = 0; i < o->env.n; i++) {
    hvdrun_argv_push(cmd, "-x");
    hvdrun_argv_push(cmd, o->env.v[i]);
  }
  if (o->start_timeout > 0) {
    hvdrun_argv_push(cmd, "-x");
    hvdrun_argv_pushf(cmd, "HVD_START_TIMEOUT=%d", o->start_timeout);
  }
}

/* hvdrun's options that MPICH's launcher has no flag for. */
static int check_mpich(const hvdrun_options_t *o, const char *launcher, char *err)
{
  if (o->mca.n > 0)
    return hvdrun_errf(err, "--mca %s: MCA parameters are OpenMPI's; the launcher '%s' is "
                       "MPICH's", o->mca.v[0], launcher);
  if (o->ssh_port > 0)
    return hvdrun_errf(err, "--ssh-port %d: MPICH's launcher '%s' takes no arguments for "
                       "ssh; set the port for the hosts in ~/.ssh/config ('Port %d'), or "
                       "use OpenMPI", o->ssh_port, launcher, o->ssh_port);
  if (o->network_interface && strpbrk(o->network_interface, ",/"))
    return hvdrun_errf(err, "--network-interface %s: MPICH's -iface takes one interface "
                       "name (such as eth0), not a list or a subnet", o->network_interface);
  return 0;
}

/* -genv NAME VALUE for each --env / -x: "VAR=value", or "VAR" taken from here. */
static void push_mpich_env(const hvdrun_options_t *o, hvdrun_argv_t *cmd)
{
  for (int i = 0; i < o->env.n; i++) {
    const char *e = o->env.v[i], *eq = strchr(e, '=');
    hvdrun_argv_push(cmd, "-genv");
    if (eq) {
      hvdrun_argv_pushf(cmd, "%.*s", (int)(eq - e), e);
      hvdrun_argv_push(cmd, eq + 1);
    } else {
      const char *val = getenv(e);
      hvdrun_argv_push(cmd, e);
      hvdrun_argv_push(cmd, val ? val : "");
    }
  }
  if (o->start_timeout > 0) {
    hvdrun_argv_push(cmd, "-genv");
    hvdrun_argv_push(cmd, "HVD_START_TIMEOUT");
    hvdrun_argv_pushf(cmd, "%d", o->start_timeout);
  }
}

static void push_mpich(const hvdrun_options_t *o, const placement_t *p, hvdrun_argv_t *cmd)
{
  hvdrun_argv_push(cmd, "-np");
  hvdrun_argv_pushf(cmd, "%d", p->np);
  if (p->have_hosts) {
    hvdrun_argv_push(cmd, "-hosts");
    hvdrun_argv_push(cmd, p->hosts);
  }
  hvdrun_argv_push(cmd, "-bind-to");
  hvdrun_argv_push(cmd, p->bind_to);
  if (o->map_by) {
    hvdrun_argv_push(cmd, "-map-by");
    hvdrun_argv_push(cmd, o->map_by);
  }
  if (o->output_dir) {
    hvdrun_argv_push(cmd, "-outfile-pattern");
    hvdrun_argv_pushf(cmd, "%s/rank.%%r.stdout", o->output_dir);
    hvdrun_argv_push(cmd, "-errfile-pattern");
    hvdrun_argv_pushf(cmd, "%s/rank.%%r.stderr", o->output_dir);
  }
  if (p->agent) {
    hvdrun_argv_push(cmd, "-launcher");
    hvdrun_argv_push(cmd, "rsh");
    hvdrun_argv_push(cmd, "-launcher-exec");
    hvdrun_argv_push(cmd, p->agent);
  }
  if (o->network_interface) {
    hvdrun_argv_push(cmd, "-iface");
    hvdrun_argv_push(cmd, o->network_interface);
    hvdrun_argv_push(cmd, "-genv");
    hvdrun_argv_push(cmd, "NCCL_SOCKET_IFNAME");
    hvdrun_argv_push(cmd, o->network_interface);
  }
  push_mpich_env(o, cmd);
}

int hvdrun_build_command(const hvdrun_options_t *o, hvdrun_mpi_t mpi, const char *launcher,
                         hvdrun_argv_t *cmd, char *err)
{
  placement_t p;
  if (placement_plan(o, &p, err) != 0) return -1;
  int rc = 0;
  hvdrun_argv_push(cmd, launcher);
  if (mpi == HVDRUN_OPENMPI) {
    push_openmpi(o, &p, cmd);
  } else if (mpi == HVDRUN_MPICH) {
    rc = check_mpich(o, launcher, err);
    if (rc == 0) push_mpich(o, &p, cmd);
  } else {
    rc = hvdrun_errf(err, "cannot tell which MPI '%s' belongs to (its --version names "
                     "neither Open MPI nor MPICH/Hydra); pass --mpi openmpi or --mpi mpich",
                     launcher);
  }
  if (rc == 0) {
    /* --mpi-args last, as horovodrun places them: after hvdrun's own options (a launcher
       that takes an option twice mostly keeps the later one), before the program. */
    for (int i = 0; i < o->mpi_args.n; i++) hvdrun_argv_push(cmd, o->mpi_args.v[i]);
    for (int i = 0; i < o->prog_argc; i++) hvdrun_argv_push(cmd, o->prog_argv[i]);
  }
  placement_free(&p);
  return rc;
}

/* Quotes for a POSIX shell only where needed, so the printed line can be pasted. */
static void print_quoted(const char *s)
{
  int plain = *s != '\0';
  for (const char *p = s; *p; p++)
    if (!(isalnum((unsigned char)*p) || strchr("_-./:=,+@%", *p))) plain = 0;
  if (plain) {
    fputs(s, stdout);
    return;
  }
  putchar('\'');
  for (const char *p = s; *p; p++) {
    if (*p == '\'') fputs("'\\''", stdout);
    else putchar(*p);
  }
  putchar('\'');
}

void hvdrun_print_command(const hvdrun_argv_t *cmd)
{
  for (int i = 0; i < cmd->n; i++) {
    if (i) putchar(' ');
    print_quoted(cmd->v[i]);
  }
  putchar('\n');
  fflush(stdout);
}
