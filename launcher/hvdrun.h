/* launcher/hvdrun.h: the pieces of the hvdrun program (internal to launcher/).
   Functions that can fail return 0 on success and -1 on failure with a message in
   err[HVDRUN_ERR_LEN] that says what was wrong and what to do; main() prints it.
   Nothing the user gives (host lists, option values, paths, hostfile lines) is held in
   a fixed-size buffer: strings are sized to what they hold, so nothing is ever cut.
   The one exception is err, a message for people: see hvdrun_errf. */
#ifndef HVDRUN_H
#define HVDRUN_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>

#define HVDRUN_ERR_LEN 1024

/* The most ranks hvdrun starts (-np, or the slots of the hosts when -np is not given),
   and the most slots one host can have, however its lines add up. */
#define HVDRUN_MAX_RANKS 1000000
#define HVDRUN_MAX_HOST_SLOTS 1000000
/* A hostfile line longer than this is refused (a stream without newlines, such as a
   device, must not be read into memory without end). */
#define HVDRUN_MAX_LINE (1 << 20)

/* Writes the message into err[HVDRUN_ERR_LEN]. One that does not fit (it quotes a very
   long value) keeps its beginning and its end, which name the flag or file and say what
   to do, and says how much of the middle it leaves out. Returns -1. */
int hvdrun_errf(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The private subnet of the project's test hosts (scripts/netns-hosts.sh). */
#define HVDRUN_NETNS_SUBNET "10.231.0.0/24"

/* A growable NULL-terminated argument vector: what execvp receives. */
typedef struct {
  char **v;
  int n, cap;
} hvdrun_argv_t;

void hvdrun_argv_push(hvdrun_argv_t *a, const char *s);          /* copies s */
void hvdrun_argv_pushf(hvdrun_argv_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void hvdrun_argv_free(hvdrun_argv_t *a);
void *hvdrun_xmalloc(size_t bytes);   /* exits with a message when memory runs out */
char *hvdrun_xstrdup(const char *s);
char *hvdrun_xstrndup(const char *s, size_t n);
/* A new string of exactly the formatted length. */
char *hvdrun_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *hvdrun_xvasprintf(const char *fmt, va_list ap);

/* ---- hosts (-H and --hostfile) ---- */
typedef struct {
  char *name;
  int slots;                /* 1..HVDRUN_MAX_HOST_SLOTS */
} hvdrun_host_t;

typedef struct {
  hvdrun_host_t *v;
  int n, cap;
  /* Where each name is in v, so that a repeated host is found at once in a hostfile of
     many thousand lines: open addressing, -1 for an empty place. */
  int *index;
  size_t index_cap;         /* a power of two, more than twice n; 0: none yet       */
} hvdrun_hosts_t;

/* Adds slots to host name[0..len) (a repeated host adds up, as in OpenMPI). Returns 0,
   or -1 when the host's slots would add up past HVDRUN_MAX_HOST_SLOTS: *total then
   says to how many (the caller words the error). */
int hvdrun_hosts_add(hvdrun_hosts_t *h, const char *name, size_t len, int slots,
                     long long *total);
/* "a:2,b,c:4" (a host without :N has one slot). */
int hvdrun_hosts_parse_list(hvdrun_hosts_t *h, const char *list, char *err);
/* OpenMPI lines "host [slots=N] [max_slots=M]" and horovodrun lines "host:N";
   '#' starts a comment. A malformed line, or one with a NUL byte, is an error naming
   the file and line. */
int hvdrun_hosts_parse_file(hvdrun_hosts_t *h, const char *path, char *err);
/* The same, with the file named in messages as what ("hostfile 'x'"). */
int hvdrun_hosts_parse_file_as(hvdrun_hosts_t *h, const char *path, const char *what,
                               char *err);
/* The sum of the hosts' slots (at most n * HVDRUN_MAX_HOST_SLOTS: no overflow). */
long long hvdrun_hosts_total_slots(const hvdrun_hosts_t *h);
/* Keeps the first hosts whose slots add up to slots, the last of them with only the
   slots needed: the hosts a job of that many ranks uses. Returns how many hosts are left. */
int hvdrun_hosts_keep_slots(hvdrun_hosts_t *h, long long slots);
/* "a:2,b:4": the list for the launcher's -H / -hosts, a new string. */
char *hvdrun_hosts_format(const hvdrun_hosts_t *h);
/* The same for the first hosts whose slots add up to slots, the last of them with only
   the slots needed (all of them when they have fewer): the hosts a job of that many
   ranks runs on, as horovodrun places ranks on the hosts' slots in order. */
char *hvdrun_hosts_format_first(const hvdrun_hosts_t *h, long long slots);
void hvdrun_hosts_free(hvdrun_hosts_t *h);

/* ---- a SLURM allocation (launcher/slurm.c) ---- */
/* Inside an allocation (SLURM_JOB_ID and SLURM_JOB_NODELIST set), adds its hosts with
   their tasks (SLURM_TASKS_PER_NODE) as slots and returns 1; outside one returns 0;
   -1 with err when the allocation's variables cannot be read. */
int hvdrun_slurm_hosts(hvdrun_hosts_t *h, char *err);

/* ---- options ---- */
typedef enum { HVDRUN_MPI_UNKNOWN, HVDRUN_OPENMPI, HVDRUN_MPICH } hvdrun_mpi_t;

typedef struct {
  int np;                   /* -1: not given                                         */
  hvdrun_hosts_t hosts;     /* empty: this machine                                   */
  hvdrun_argv_t env;        /* "VAR=value" or "VAR" (take it from this environment)  */
  hvdrun_argv_t mca;        /* key, value, key, value (OpenMPI --mca)                */
  int verbose, dry_run, oversubscribe, check_build, help;
  const char *output_dir;   /* NULL: none                                            */
  int start_timeout;        /* seconds, -1: not given                                */
  hvdrun_mpi_t mpi;         /* forced by --mpi, else UNKNOWN (detected)              */
  const char *rsh_agent;    /* NULL: automatic for namespace hosts                    */
  const char *network_interface;  /* "eth0" or "eth0,10.0.0.0/8"; NULL: MPI's choice */
  int ssh_port;             /* the rsh agent's port (-p); 0: not given                */
  hvdrun_argv_t mpi_args;   /* --mpi-args split into words, for the launcher as they are */
  const char *bind_to, *map_by;   /* NULL: defaults                                  */
  int abort_timeout;        /* seconds the launcher has to end a job after a rank failed */
  /* elastic (horovodrun's flags; launcher/elastic.c) */
  const char *discovery_script;   /* NULL: not elastic                               */
  int min_np, max_np;       /* -1: not given                                         */
  int reset_limit;          /* -1: not given (HVDRUN_DEFAULT_RESET_LIMIT)            */
  char **prog_argv;         /* the program and its arguments, untouched              */
  int prog_argc;
} hvdrun_options_t;

/* Splits s into words as a POSIX shell splits simple words (blanks separate; '...'
   and "..." quote; a backslash escapes the next character) and appends them to out.
   What a shell would do more than that (expansions: $ ` * ? [ ~; operators: ; & | < >
   ( ); a comment) is refused rather than passed on literally, and so is an unbalanced
   quote: -1 with err naming the character and where it is. what names the words in the
   message ("--mpi-args"). */
int hvdrun_split_words(const char *s, const char *what, hvdrun_argv_t *out, char *err);

/* Parses argv; never exits. On error returns -1 with the message in err. */
int hvdrun_parse_args(int argc, char **argv, hvdrun_options_t *o, char *err);
void hvdrun_options_free(hvdrun_options_t *o);
void hvdrun_print_help(void);

/* ---- the MPI launcher ---- */
/* Finds the launcher on PATH ($HVD_MPIRUN overrides): *path, a new string. */
int hvdrun_find_launcher(hvdrun_mpi_t want, char **path, char *err);
/* Runs "launcher --version" (fork/exec, no shell, at most 10 s, ended with hvdrun) and
   tells OpenMPI from MPICH; version gets the first line of the output, or why there is
   none. A signal to hvdrun meanwhile ends the launcher, then hvdrun. */
hvdrun_mpi_t hvdrun_detect_mpi(const char *launcher, char *version, size_t len);
/* Builds the whole command: launcher, its options, then the program and arguments. */
int hvdrun_build_command(const hvdrun_options_t *o, hvdrun_mpi_t mpi, const char *launcher,
                         hvdrun_argv_t *cmd, char *err);
/* Looks the program up as execvp would; error when missing or not executable. */
int hvdrun_check_program(const char *prog, char *err);
/* Prints cmd on one line, quoting each argument for a POSIX shell where needed. */
void hvdrun_print_command(const hvdrun_argv_t *cmd);

/* True when every host is one of the project's network namespaces (ns1, ns2, ...
   present under /run/netns): the ranks are then started by scripts/netns-rsh. */
int hvdrun_hosts_are_netns(const hvdrun_hosts_t *h);

/* ---- running the launcher (launcher/supervise.c) ---- */
#define HVDRUN_DEFAULT_ABORT_TIMEOUT 10
typedef struct {
  int status;               /* as a shell sees it: 0..255, 128+signal; 1 when ended by us */
  int rank_failed;          /* the launcher said that a rank failed                      */
  int ended_by_us;          /* it had not ended the job abort_timeout s after that       */
  int interrupted;          /* the signal hvdrun got and passed on (0: none)             */
} hvdrun_job_t;
/* Runs cmd in a process group of its own, its output passed through and watched for a
   failed rank; from then on the launcher has abort_timeout seconds before hvdrun ends
   the group. 0 with *job filled in, or -1 with err when it cannot be started. */
int hvdrun_run_job(const hvdrun_argv_t *cmd, int abort_timeout, hvdrun_job_t *job, char *err);

/* ---- hvdrun's children (launcher/children.c) ---- */
/* Seconds a process group has between SIGTERM and SIGKILL. */
#define HVDRUN_KILL_AFTER_S 5
#define HVDRUN_CAUGHT_SIGNALS 3
typedef struct {
  struct sigaction old[HVDRUN_CAUGHT_SIGNALS];
} hvdrun_signals_t;
/* From catch to restore, SIGINT, SIGTERM and SIGHUP are recorded instead of ending
   hvdrun: hvdrun_signal_take says which came last (0: none) and forgets it. */
void hvdrun_signals_catch(hvdrun_signals_t *saved);
void hvdrun_signals_restore(const hvdrun_signals_t *saved);
int hvdrun_signal_take(void);
/* In a child just forked (parent: hvdrun's pid from before the fork): a process group of
   its own, SIGTERM when hvdrun dies, default signal actions. */
void hvdrun_child_setup(pid_t parent);
/* Whether child pid has ended; it is left to hvdrun_child_reap, so that its process
   group id stays its own. */
int hvdrun_child_exited(pid_t pid);
/* Kills what is left in the child's process group, then reaps the child and the group's
   orphans: the child's wait status. */
int hvdrun_child_reap(pid_t pid);
/* Makes hvdrun the parent of its descendants' orphans (PR_SET_CHILD_SUBREAPER). */
int hvdrun_adopt_orphans(char *err);
/* A guardian process: when hvdrun dies before it released the guardian, the guardian
   ends process group pgid (SIGTERM, SIGKILL HVDRUN_KILL_AFTER_S later). */
typedef struct {
  pid_t pid;
  int fd;
} hvdrun_guard_t;
int hvdrun_guard_start(pid_t pgid, hvdrun_guard_t *g, char *err);
void hvdrun_guard_release(hvdrun_guard_t *g);

/* ---- elastic runs (launcher/elastic.c) ---- */
#define HVDRUN_DEFAULT_RESET_LIMIT 3
/* Starts the job on the hosts of o->discovery_script, and again after each failure on
   the hosts it lists then, at most --reset-limit times. Returns hvdrun's exit status;
   when not 0, err says why. Sets o->hosts and o->np for each start. */
int hvdrun_run_elastic(hvdrun_options_t *o, hvdrun_mpi_t mpi, const char *launcher, char *err);

/* ---- --check-build ---- */
/* Prints the backends and the topology, with the placement of local_size local ranks. */
int hvdrun_check_build(int local_size);

#endif /* HVDRUN_H */
