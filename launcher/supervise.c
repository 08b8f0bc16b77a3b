/* launcher/supervise.c: runs the MPI launcher as a child and sees it end, whatever
   happens to the hosts. The launcher gets a process group of its own (its local ranks
   inherit it; launcher/children.c); its stdout and stderr pass through hvdrun, which
   watches them for the launcher's own words that a rank has failed ("Primary job
   terminated normally, but 1 process returned a non-zero exit code", "mpirun noticed that
   process rank 0 ... exited on signal 9", MPICH's "BAD TERMINATION"). From the first such
   line the launcher has abort_timeout seconds to end the job: a launcher that cannot reach
   a lost host (a cut link) waits for it without end, so then hvdrun ends the process group
   itself (SIGTERM, then SIGKILL 2 s later) and says why. SIGINT, SIGTERM and SIGHUP sent
   to hvdrun are passed on to the group, which gets SIGKILL when it is still there
   HVDRUN_KILL_AFTER_S later. What the launcher leaves in its group is killed when it
   ends. */
#include "launcher/hvdrun.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* What the launchers print when a rank ends badly or a daemon is lost. */
static const char *const FAILURE_MARKERS[] = {
    "terminated normally, but",                 /* OpenMPI: the first non-zero exit      */
    "noticed that process rank",                /* OpenMPI mpirun / prterun: a signal   */
    "exited with non-zero status, thus causing", /* OpenMPI                              */
    "lost communication with a remote daemon",  /* OpenMPI: a host is gone              */
    "BAD TERMINATION OF ONE OF YOUR APPLICATION", /* MPICH hydra                         */
    NULL};

/* One output stream of the launcher: relayed to fd out, scanned line by line. */
typedef struct {
  int fd, out;
  char line[1024];
  size_t len;
} stream_t;

static int line_is_failure(const char *line)
{
  for (int i = 0; FAILURE_MARKERS[i]; i++)
    if (strstr(line, FAILURE_MARKERS[i])) return 1;
  return 0;
}

static void write_all(int fd, const char *p, size_t n)
{
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;   /* our own output is gone: keep draining the launcher's */
    p += w;
    n -= (size_t)w;
  }
}

/* Reads what is there; returns -1 at end of stream, else whether a failure line ended. */
static int stream_pump(stream_t *s)
{
  char buf[4096];
  ssize_t n = read(s->fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
  if (n <= 0) return -1;
  write_all(s->out, buf, (size_t)n);
  int failed = 0;
  for (ssize_t i = 0; i < n; i++) {
    if (buf[i] != '\n' && s->len + 1 < sizeof s->line) {
      s->line[s->len++] = buf[i];
      continue;
    }
    s->line[s->len] = '\0';
    failed |= line_is_failure(s->line);
    s->len = 0;
  }
  return failed;
}

static int status_of(int wstatus)
{
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

static int exec_failed(const hvdrun_argv_t *cmd, int e, char *err)
{
  size_t longest = 0;
  for (int i = 0; i < cmd->n; i++)
    if (strlen(cmd->v[i]) > longest) longest = strlen(cmd->v[i]);
  /* Linux takes at most 32 pages (128 KiB) in one argument: a -H list of thousands of
     hosts can be longer. */
  if (e == E2BIG)
    return hvdrun_errf(err, "cannot run the MPI launcher '%s': %s (its longest argument has "
                       "%zu characters, Linux takes at most 131072 in one and the host "
                       "list is one: for this many hosts run mpirun with its own --hostfile)",
                       cmd->v[0], strerror(e), longest);
  return hvdrun_errf(err, "cannot run the MPI launcher '%s': %s", cmd->v[0], strerror(e));
}

/* Starts cmd in a process group of its own with its stdout and stderr on pipes (*out,
   *errp). Its pid, or -1 with err (an exec failure is reported back through a pipe that
   closes on a successful exec). */
static pid_t spawn(const hvdrun_argv_t *cmd, int *out, int *errp, char *err)
{
  int pout[2], perr[2], pexec[2];
  if (pipe(pout) != 0 || pipe(perr) != 0 || pipe2(pexec, O_CLOEXEC) != 0)
    return hvdrun_errf(err, "cannot make a pipe for the MPI launcher: %s", strerror(errno));
  fflush(NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return hvdrun_errf(err, "cannot start the MPI launcher: fork: %s", strerror(errno));
  if (pid == 0) {
    hvdrun_child_setup(parent);
    dup2(pout[1], 1);
    dup2(perr[1], 2);
    close(pout[0]), close(pout[1]), close(perr[0]), close(perr[1]), close(pexec[0]);
    execvp(cmd->v[0], cmd->v);
    int e = errno;
    write_all(pexec[1], (const char *)&e, sizeof e);
    _exit(127);
  }
  setpgid(pid, pid);  /* also here: whichever runs first */
  close(pout[1]), close(perr[1]), close(pexec[1]);
  int e = 0;
  ssize_t got;
  while ((got = read(pexec[0], &e, sizeof e)) < 0 && errno == EINTR) {}
  close(pexec[0]);
  if (got == (ssize_t)sizeof e) {
    hvdrun_child_reap(pid);
    close(pout[0]), close(perr[0]);
    return exec_failed(cmd, e, err);
  }
  *out = pout[0];
  *errp = perr[0];
  return pid;
}

/* The launcher has had HVDRUN_KILL_AFTER_S since the signal passed on to it. */
static void kill_after_signal(pid_t pid, int sig)
{
  fprintf(stderr, "hvdrun: error: the MPI launcher has not ended %d s after signal %d "
          "was passed on to it: killing its process group %d (SIGKILL)\n",
          HVDRUN_KILL_AFTER_S, sig, (int)pid);
  kill(-pid, SIGKILL);
}

int hvdrun_run_job(const hvdrun_argv_t *cmd, int abort_timeout, hvdrun_job_t *job, char *err)
{
  memset(job, 0, sizeof *job);
  int fd_out = -1, fd_err = -1;
  hvdrun_signals_t saved;
  hvdrun_signals_catch(&saved);   /* before the fork: a signal then is passed on too */
  pid_t pid = spawn(cmd, &fd_out, &fd_err, err);
  hvdrun_guard_t guard = {.pid = -1, .fd = -1};
  if (pid < 0 || hvdrun_guard_start(pid, &guard, err) != 0) {
    if (pid > 0) {
      kill(-pid, SIGTERM);
      hvdrun_child_reap(pid);
      close(fd_out), close(fd_err);
    }
    hvdrun_signals_restore(&saved);
    return -1;
  }

  stream_t st[2] = {{.fd = fd_out, .out = 1}, {.fd = fd_err, .out = 2}};
  int open_streams = 2, exited = 0, killed_at = 0, sig_killed = 0;
  double failed_at = 0, drain_until = 0, signalled_at = 0;
  for (;;) {
    int sig = hvdrun_signal_take();
    if (sig) {
      if (!exited) kill(-pid, sig);
      if (!job->interrupted) signalled_at = util_now_s();
      job->interrupted = sig;
    }
    if (!exited && hvdrun_child_exited(pid)) {
      exited = 1;
      drain_until = util_now_s() + 1.0;  /* a rank left behind may hold the pipes open */
    }
    if (exited && (open_streams == 0 || util_now_s() > drain_until)) break;
    double t = util_now_s();
    if (!exited && job->interrupted && !sig_killed && t - signalled_at > HVDRUN_KILL_AFTER_S) {
      kill_after_signal(pid, job->interrupted);
      sig_killed = 1;
    }
    if (!exited && job->rank_failed && t - failed_at > abort_timeout && !killed_at) {
      fprintf(stderr, "hvdrun: error: a rank failed %d s ago and the MPI launcher has not "
              "ended the job (a host it cannot reach?): ending it (process group %d)\n",
              abort_timeout, (int)pid);
      kill(-pid, SIGTERM);
      job->ended_by_us = 1;
      killed_at = 1;
    } else if (!exited && killed_at && t - failed_at > abort_timeout + 2.0) {
      kill(-pid, SIGKILL);
    }
    struct pollfd pf[2];
    int k = 0;
    for (int i = 0; i < 2; i++)
      if (st[i].fd >= 0) pf[k++] = (struct pollfd){.fd = st[i].fd, .events = POLLIN};
    if (k > 0) poll(pf, (nfds_t)k, 100);
    else usleep(100 * 1000);
    for (int i = 0, j = 0; i < 2; i++) {
      if (st[i].fd < 0) continue;
      short rev = pf[j++].revents;
      if (!(rev & (POLLIN | POLLHUP | POLLERR))) continue;
      int r = stream_pump(&st[i]);
      if (r < 0) {
        close(st[i].fd);
        st[i].fd = -1;
        open_streams--;
      } else if (r > 0 && !job->rank_failed) {
        job->rank_failed = 1;
        failed_at = util_now_s();
      }
    }
  }
  for (int i = 0; i < 2; i++)
    if (st[i].fd >= 0) close(st[i].fd);
  int wstatus = hvdrun_child_reap(pid);
  hvdrun_guard_release(&guard);
  hvdrun_signals_restore(&saved);
  job->status = job->ended_by_us ? 1 : sig_killed ? 128 + job->interrupted : status_of(wstatus);
  return 0;
}
