/* launcher/hvdrun.c: hvdrun's main. Parses the options, checks what can be checked
   before starting anything (program, launcher, slots), builds the MPI launcher's argv
   and runs it as a child (launcher/supervise.c): its exit status is hvdrun's, signals
   to hvdrun are passed on, and a job whose launcher does not end it after a rank failed
   is ended by hvdrun. With --host-discovery-script: launcher/elastic.c. Inside a SLURM
   allocation, without -H or --hostfile, the hosts and slots are the allocation's
   (launcher/slurm.c), as with mpirun. */
#include "launcher/hvdrun.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p, for --output-filename. */
static int make_dirs(const char *dir, char *err)
{
  char *path = hvdrun_xstrdup(dir);
  int rc = 0;
  for (char *p = path + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      if (mkdir(path, 0777) != 0 && errno != EEXIST) {
        rc = hvdrun_errf(err, "--output-filename: cannot create '%s': %s", path,
                         strerror(errno));
        break;
      }
      *p = c;
      if (c == '\0') break;
    }
  }
  free(path);
  return rc;
}

static int fail(int code, const char *err)
{
  fprintf(stderr, "hvdrun: error: %s\n", err);
  return code;
}

int main(int argc, char **argv)
{
  hvdrun_options_t o;
  char err[HVDRUN_ERR_LEN];
  if (hvdrun_parse_args(argc, argv, &o, err) != 0) {
    hvdrun_options_free(&o);
    return fail(2, err);
  }
  if (o.help) {
    hvdrun_print_help();
    hvdrun_options_free(&o);
    return 0;
  }
  if (o.check_build) {
    int rc = hvdrun_check_build(o.hosts.n == 0 ? o.np : -1);
    hvdrun_options_free(&o);
    return rc;
  }

  if (o.hosts.n == 0 && !o.discovery_script) {
    int in_slurm = hvdrun_slurm_hosts(&o.hosts, err);
    if (in_slurm < 0) {
      hvdrun_options_free(&o);
      return fail(2, err);
    }
    if (in_slurm && (o.verbose || o.dry_run)) {
      char *list = hvdrun_hosts_format(&o.hosts);
      printf("hvdrun: SLURM job %s: hosts %s\n", getenv("SLURM_JOB_ID"), list);
      free(list);
    }
  }

  /* Without it the group's orphans would be left to PID 1: not fatal, said once. */
  if (!o.dry_run && hvdrun_adopt_orphans(err) != 0)
    fprintf(stderr, "hvdrun: warning: %s: what the MPI launcher leaves behind is reaped by "
            "PID 1, if at all\n", err);

  int rc = 0;
  char *launcher = NULL;
  hvdrun_argv_t cmd = {0};
  if (hvdrun_check_program(o.prog_argv[0], err) != 0) {
    rc = fail(127, err);
  } else if (hvdrun_find_launcher(o.mpi, &launcher, err) != 0) {
    rc = fail(127, err);
  } else {
    hvdrun_mpi_t mpi = o.mpi;
    char version[256] = "";
    if (mpi == HVDRUN_MPI_UNKNOWN) mpi = hvdrun_detect_mpi(launcher, version, sizeof version);
    if (mpi == HVDRUN_MPI_UNKNOWN) {
      hvdrun_errf(err, "cannot tell which MPI '%s' belongs to (its --version: %s); pass "
                  "--mpi openmpi or --mpi mpich", launcher, version);
      rc = fail(2, err);
    } else if (o.output_dir && !o.dry_run && make_dirs(o.output_dir, err) != 0) {
      rc = fail(1, err);
    } else if (o.discovery_script) {
      rc = hvdrun_run_elastic(&o, mpi, launcher, err);
      if (rc != 0) fail(rc, err);
    } else if (hvdrun_build_command(&o, mpi, launcher, &cmd, err) != 0) {
      rc = fail(2, err);
    } else {
      if (o.verbose || o.dry_run) hvdrun_print_command(&cmd);
      if (!o.dry_run) {
        hvdrun_job_t job;
        if (hvdrun_run_job(&cmd, o.abort_timeout, &job, err) != 0) rc = fail(127, err);
        else rc = job.status;
      }
    }
  }
  free(launcher);
  hvdrun_argv_free(&cmd);
  hvdrun_options_free(&o);
  return rc;
}
