/* launcher/hvdrun.h: the pieces of the hvdrun program (internal to launcher/).
   Functions that can fail return 0 on success and -1 on failure with a message in
   err[HVDRUN_ERR_LEN] that says what was wrong and what to do; main() prints it. */
#ifndef HVDRUN_H
#define HVDRUN_H

#include <stddef.h>

#define HVDRUN_ERR_LEN 1024

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

/* ---- hosts (-H and --hostfile) ---- */
typedef struct {
  char *name;
  int slots;
} hvdrun_host_t;

typedef struct {
  hvdrun_host_t *v;
  int n, cap;
} hvdrun_hosts_t;

/* Adds slots to host name (a repeated host adds up, as in OpenMPI). */
void hvdrun_hosts_add(hvdrun_hosts_t *h, const char *name, int slots);
/* "a:2,b,c:4" (a host without :N has one slot). */
int hvdrun_hosts_parse_list(hvdrun_hosts_t *h, const char *list, char *err);
/* OpenMPI lines "host [slots=N] [max_slots=M]" and horovodrun lines "host:N";
   '#' starts a comment. A malformed line is an error naming the file and line. */
int hvdrun_hosts_parse_file(hvdrun_hosts_t *h, const char *path, char *err);
int hvdrun_hosts_total_slots(const hvdrun_hosts_t *h);
void hvdrun_hosts_free(hvdrun_hosts_t *h);

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
  const char *bind_to, *map_by;   /* NULL: defaults                                  */
  char **prog_argv;         /* the program and its arguments, untouched              */
  int prog_argc;
} hvdrun_options_t;

/* Parses argv; never exits. On error returns -1 with the message in err. */
int hvdrun_parse_args(int argc, char **argv, hvdrun_options_t *o, char *err);
void hvdrun_options_free(hvdrun_options_t *o);
void hvdrun_print_help(void);

/* ---- the MPI launcher ---- */
/* Finds the launcher on PATH ($HVD_MPIRUN overrides): path into buf. */
int hvdrun_find_launcher(hvdrun_mpi_t want, char *path, size_t len, char *err);
/* Runs "launcher --version" (fork/exec, no shell) and tells OpenMPI from MPICH;
   version gets the first line of the output. */
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

/* ---- --check-build ---- */
/* Prints the backends and the topology, with the placement of local_size local ranks. */
int hvdrun_check_build(int local_size);

#endif /* HVDRUN_H */
