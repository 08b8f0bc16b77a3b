/* launcher/children.c: hvdrun's children never outlive it. Each child it starts (the MPI
   launcher, the discovery script) leads a process group of its own, which holds what the
   child starts in turn (local ranks, a script's background jobs); hvdrun ends the whole
   group, not only the child:
     - a signal to hvdrun (INT, TERM, HUP) is passed on to the group, and a group still
       there HVDRUN_KILL_AFTER_S later gets SIGKILL (a launcher may ignore SIGTERM);
     - what is left in the group when the child has ended is killed, and reaped: hvdrun
       is a subreaper, so the orphans of its children are its own, not PID 1's;
     - when hvdrun itself dies without a chance to act (SIGKILL, a crash), a guardian
       process does it: it waits on a pipe that only hvdrun holds open, and at its end
       sends the group SIGTERM, then SIGKILL HVDRUN_KILL_AFTER_S later. The child also
       gets SIGTERM from the kernel when hvdrun dies (PR_SET_PDEATHSIG), which covers the
       moment before the guardian is there. */
#include "launcher/hvdrun.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal;

static void on_signal(int sig) { g_signal = sig; }

static const int CAUGHT[HVDRUN_CAUGHT_SIGNALS] = {SIGINT, SIGTERM, SIGHUP};
/* The signals hvdrun was started with ignored (nohup: HUP; a script's background job:
   INT): they stay ignored, in hvdrun and in its children, as they would have been in a
   shell's own child. */
static int g_ignored[HVDRUN_CAUGHT_SIGNALS];

void hvdrun_signals_catch(hvdrun_signals_t *saved)
{
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  g_signal = 0;
  for (int i = 0; i < HVDRUN_CAUGHT_SIGNALS; i++) {
    sigaction(CAUGHT[i], NULL, &saved->old[i]);
    g_ignored[i] = saved->old[i].sa_handler == SIG_IGN;
    if (!g_ignored[i]) sigaction(CAUGHT[i], &sa, NULL);
  }
}

void hvdrun_signals_restore(const hvdrun_signals_t *saved)
{
  for (int i = 0; i < HVDRUN_CAUGHT_SIGNALS; i++) sigaction(CAUGHT[i], &saved->old[i], NULL);
}

int hvdrun_signal_take(void)
{
  /* Blocked while read and cleared, so that one arriving in between is not lost. */
  sigset_t set, old;
  sigemptyset(&set);
  for (int i = 0; i < HVDRUN_CAUGHT_SIGNALS; i++) sigaddset(&set, CAUGHT[i]);
  sigprocmask(SIG_BLOCK, &set, &old);
  int sig = g_signal;
  g_signal = 0;
  sigprocmask(SIG_SETMASK, &old, NULL);
  return sig;
}

void hvdrun_child_setup(pid_t parent)
{
  setpgid(0, 0);
  /* The kernel's word when hvdrun dies before its guardian is there; a child forked
     after hvdrun already died would never get it, so it checks. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(128 + SIGTERM);
  /* hvdrun catches these; the child gets the actions hvdrun was started with back (exec
     would reset a caught one too, but a child that does not exec must not run hvdrun's
     handler): the default, or ignored where hvdrun's were. */
  for (int i = 0; i < HVDRUN_CAUGHT_SIGNALS; i++)
    signal(CAUGHT[i], g_ignored[i] ? SIG_IGN : SIG_DFL);
}

int hvdrun_child_exited(pid_t pid)
{
  siginfo_t si;
  memset(&si, 0, sizeof si);
  /* WNOWAIT: the child stays a zombie, so its process group id cannot be taken by a new
     process before hvdrun has killed what is left in the group. */
  if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) return errno == ECHILD;
  return si.si_pid == pid;
}

int hvdrun_child_reap(pid_t pid)
{
  kill(-pid, SIGKILL);   /* what the child left behind in its group */
  /* The group's orphans are hvdrun's children (hvdrun_adopt_orphans): reaped here too,
     not left as zombies under PID 1. */
  int wstatus = 0, st;
  pid_t got;
  while ((got = waitpid(-pid, &st, 0)) > 0 || (got < 0 && errno == EINTR))
    if (got == pid) wstatus = st;
  return wstatus;
}

int hvdrun_adopt_orphans(char *err)
{
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    return hvdrun_errf(err, "prctl(PR_SET_CHILD_SUBREAPER): %s", strerror(errno));
  return 0;
}

/* The guardian: ends group pgid when the pipe's other end closes without a word. */
static void guard_main(int fd, pid_t pgid)
{
  for (int i = 0; i < HVDRUN_CAUGHT_SIGNALS; i++) signal(CAUGHT[i], SIG_IGN);
  if (fd <= 2) {   /* hvdrun started with 0, 1 or 2 closed: keep the pipe off them */
    int moved = fcntl(fd, F_DUPFD, 3);
    if (moved < 0) _exit(1);
    fd = moved;
  }
  /* Holds none of hvdrun's other files: a pipe it kept open would keep its reader
     waiting. */
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, 0), dup2(null, 1), dup2(null, 2);
  }
  long max_fd = sysconf(_SC_OPEN_MAX);
  if (max_fd < 0 || max_fd > 65536) max_fd = 65536;
  for (int f = 3; f < max_fd; f++)
    if (f != fd) close(f);
  char c;
  ssize_t r;
  while ((r = read(fd, &c, 1)) < 0 && errno == EINTR) {}
  if (r == 1) _exit(0);   /* released: hvdrun has ended the group itself */
  if (kill(-pgid, SIGTERM) != 0) _exit(0);
  double until = util_now_s() + HVDRUN_KILL_AFTER_S;
  /* Zombies still count as members (nothing may reap orphans here): then the full wait. */
  while (util_now_s() < until && kill(-pgid, 0) == 0) usleep(100 * 1000);
  kill(-pgid, SIGKILL);
  _exit(0);
}

int hvdrun_guard_start(pid_t pgid, hvdrun_guard_t *g, char *err)
{
  int fds[2];
  g->pid = -1;
  g->fd = -1;
  /* The write end is close-on-exec: a launcher that held it would keep the guardian
     waiting after hvdrun died. */
  if (pipe2(fds, O_CLOEXEC) != 0)
    return hvdrun_errf(err, "cannot make a pipe for the guardian of process group %d: %s",
                       (int)pgid, strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(fds[0]), close(fds[1]);
    return hvdrun_errf(err, "cannot start the guardian of process group %d: fork: %s",
                       (int)pgid, strerror(e));
  }
  if (pid == 0) {
    close(fds[1]);
    guard_main(fds[0], pgid);
  }
  close(fds[0]);
  g->pid = pid;
  g->fd = fds[1];
  return 0;
}

void hvdrun_guard_release(hvdrun_guard_t *g)
{
  if (g->pid <= 0) return;
  ssize_t w;
  while ((w = write(g->fd, "q", 1)) < 0 && errno == EINTR) {}
  close(g->fd);
  while (waitpid(g->pid, NULL, 0) < 0 && errno == EINTR) {}
  g->pid = -1;
  g->fd = -1;
}
