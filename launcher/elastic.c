/* launcher/elastic.c: restart-based elastic runs, with horovodrun's flags
   (--host-discovery-script, --min-np, --max-np, --reset-limit). Before every start
   hvdrun runs the discovery script, which prints the hosts usable now, one "host:slots"
   a line; the job gets min(their slots, --max-np) ranks on them, or does not start when
   that is fewer than --min-np. When the job fails, hvdrun asks the script again and
   starts the whole job anew on what it lists now, at most --reset-limit times. The
   program resumes by itself (train --resume auto). Unlike horovodrun, ranks are not
   added or removed in a running job: a change of hosts costs one restart. */
#include "launcher/hvdrun.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The most a discovery script may take before it counts as failed. */
#define DISCOVERY_TIMEOUT_S 30

/* Waits for the script (process group pid) to end: on a signal to hvdrun the group gets
   it, and SIGKILL HVDRUN_KILL_AFTER_S later; past DISCOVERY_TIMEOUT_S, SIGKILL. What the
   script leaves in its group is killed. Its wait status, *timed_out, *interrupted. */
static int wait_script(pid_t pid, int *timed_out, int *interrupted)
{
  double start = util_now_s(), signalled_at = 0;
  int killed = 0;
  *timed_out = 0;
  while (!hvdrun_child_exited(pid)) {
    int sig = hvdrun_signal_take();
    double t = util_now_s();
    if (sig) {
      kill(-pid, sig);
      if (!*interrupted) signalled_at = t;
      *interrupted = sig;
    }
    if (!killed && *interrupted && t - signalled_at > HVDRUN_KILL_AFTER_S) {
      kill(-pid, SIGKILL);
      killed = 1;
    }
    if (!killed && !*interrupted && t - start > DISCOVERY_TIMEOUT_S) {
      kill(-pid, SIGKILL);
      killed = 1;
      *timed_out = 1;
    }
    usleep(50 * 1000);
  }
  return hvdrun_child_reap(pid);
}

/* Runs the script (through /bin/sh, as horovodrun does) with its output in a temporary
   file, which is then read as a hostfile ("host:slots" lines). *interrupted: the signal
   hvdrun got meanwhile (0: none); the script and its group are ended then. */
static int discover(const char *script, hvdrun_hosts_t *hosts, int *interrupted, char *err)
{
  char path[] = "/tmp/hvdrun-hosts.XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0)
    return hvdrun_errf(err, "--host-discovery-script: cannot make a temporary file: %s",
                       strerror(errno));
  hvdrun_signals_t saved;
  hvdrun_signals_catch(&saved);
  fflush(NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    hvdrun_child_setup(parent);
    dup2(fd, 1);
    close(fd);
    execl("/bin/sh", "sh", "-c", script, (char *)NULL);
    _exit(127);
  }
  close(fd);
  int rc = 0;
  hvdrun_guard_t guard = {.pid = -1, .fd = -1};
  if (pid < 0) {
    rc = hvdrun_errf(err, "--host-discovery-script: fork: %s", strerror(errno));
  } else if (setpgid(pid, pid), hvdrun_guard_start(pid, &guard, err) != 0) {
    kill(-pid, SIGKILL);
    hvdrun_child_reap(pid);
    rc = -1;
  } else {
    int timed_out = 0;
    int wstatus = wait_script(pid, &timed_out, interrupted);
    hvdrun_guard_release(&guard);
    if (*interrupted)
      rc = hvdrun_errf(err, "interrupted (signal %d) while --host-discovery-script '%s' ran: "
                       "ended it and what it started; not starting", *interrupted, script);
    else if (timed_out)
      rc = hvdrun_errf(err, "--host-discovery-script '%s' did not finish in %d s", script,
                       DISCOVERY_TIMEOUT_S);
    else if (!(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0))
      rc = hvdrun_errf(err, "--host-discovery-script '%s' failed (%s %d)", script,
                       WIFEXITED(wstatus) ? "exit status" : "signal",
                       WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus));
  }
  hvdrun_signals_restore(&saved);
  if (rc == 0) {
    hvdrun_hosts_free(hosts);
    char *what = hvdrun_xasprintf("the output of --host-discovery-script '%s'", script);
    char why[HVDRUN_ERR_LEN];
    if (hvdrun_hosts_parse_file_as(hosts, path, what, why) != 0)
      rc = hvdrun_errf(err, "%s", why);
    free(what);
  }
  unlink(path);
  return rc;
}

/* One start: the hosts the script lists now, and as many ranks as they allow, on only
   as many of those hosts as the ranks need (the launcher gets no host it does not use:
   mpirun -H with thousands of hosts may never start). */
static int start(hvdrun_options_t *o, hvdrun_mpi_t mpi, const char *launcher, int attempt,
                 hvdrun_job_t *job, char *err)
{
  memset(job, 0, sizeof *job);
  if (discover(o->discovery_script, &o->hosts, &job->interrupted, err) != 0) return -1;
  long long slots = hvdrun_hosts_total_slots(&o->hosts);
  int listed = o->hosts.n;
  int min_np = o->min_np > 0 ? o->min_np : 1;
  if (slots < min_np) {
    char *list = hvdrun_hosts_format(&o->hosts);
    hvdrun_errf(err, "elastic: the hosts listed now (%s) have %lld slot(s), fewer than "
                "--min-np %d: not starting", list, slots, min_np);
    free(list);
    return -1;
  }
  long long np = slots;
  if (o->max_np > 0 && np > o->max_np) np = o->max_np;
  if (np > HVDRUN_MAX_RANKS) np = HVDRUN_MAX_RANKS;
  o->np = (int)np;
  hvdrun_hosts_keep_slots(&o->hosts, np);
  char *list = hvdrun_hosts_format(&o->hosts);
  char *of = np < slots ? hvdrun_xasprintf(", which lists %lld slot(s) on %d host(s)", slots,
                                           listed)
                        : hvdrun_xstrdup("");
  printf("hvdrun: elastic: %s %d rank(s) on %s (from %s%s)\n",
         attempt == 0 ? "starting" : "restarting with", o->np, list, o->discovery_script, of);
  free(of);
  free(list);
  hvdrun_argv_t cmd = {0};
  int rc = hvdrun_build_command(o, mpi, launcher, &cmd, err);
  if (rc == 0 && (o->verbose || o->dry_run)) hvdrun_print_command(&cmd);
  if (rc == 0 && o->dry_run) memset(job, 0, sizeof *job);
  else if (rc == 0) rc = hvdrun_run_job(&cmd, o->abort_timeout, job, err);
  hvdrun_argv_free(&cmd);
  return rc;
}

int hvdrun_run_elastic(hvdrun_options_t *o, hvdrun_mpi_t mpi, const char *launcher, char *err)
{
  int limit = o->reset_limit >= 0 ? o->reset_limit : HVDRUN_DEFAULT_RESET_LIMIT;
  for (int attempt = 0;; attempt++) {
    hvdrun_job_t job;
    if (start(o, mpi, launcher, attempt, &job, err) != 0)
      return job.interrupted ? 128 + job.interrupted : 1;
    if (job.status == 0) {
      if (attempt > 0) printf("hvdrun: elastic: the job finished after %d restart(s)\n", attempt);
      return 0;
    }
    if (job.interrupted) {
      hvdrun_errf(err, "interrupted (signal %d): not restarting", job.interrupted);
      return job.status;
    }
    if (attempt >= limit) {
      hvdrun_errf(err, "elastic: the job failed (exit status %d) and the %d restart(s) of "
                  "--reset-limit are used up", job.status, limit);
      return job.status;
    }
    printf("hvdrun: elastic: the job failed (exit status %d%s); asking %s for hosts again "
           "(restart %d of %d)\n", job.status,
           job.ended_by_us ? ", ended by hvdrun" : "", o->discovery_script, attempt + 1, limit);
    fflush(stdout);
    sleep(1);  /* let the ports and processes of the last attempt go */
  }
}
