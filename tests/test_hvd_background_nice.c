/* test_hvd_background_nice: the background thread's priority (HVD_BACKGROUND_NICE, nice
   steps below the rank's threads, at most nice 19). Started alone, it runs itself at
   np=2 five times: the default (auto: 19 steps on a machine without a GPU, 0 on one
   with), HVD_BACKGROUND_NICE=7 and =0, and under `nice -n 3` auto and 7 (the steps count
   from the rank's nice value: 19 and 10). Each rank finds its thread named
   hvd_background in /proc and checks its nice value, and that every other thread of the
   rank kept the rank's own (a nice value set for the whole process would slow the
   caller's computation too); then allreduces give exact sums: async ones polled with
   hvd_test, so the lowered thread runs them, then waited for, then a blocking one.
   Malformed values fail hvd_init: test_hvd_init. */
#include "hvd/hvd_internal.h"
#include "hvd/background.h"
#include "tests/hvd_test.h"

#include <dirent.h>
#include <time.h>

/* The nice value of thread tid of this process (field 19 of its stat line), or -100. */
static int thread_nice(const char *tid) {
  char path[300], line[1024];
  snprintf(path, sizeof(path), "/proc/self/task/%s/stat", tid);
  FILE *f = fopen(path, "r");
  if (!f) return -100;
  size_t n = fread(line, 1, sizeof(line) - 1, f);
  fclose(f);
  line[n] = '\0';
  /* The command name in parentheses may hold spaces: count fields after its ')'. */
  char *p = strrchr(line, ')');
  if (!p) return -100;
  int field = 2, nice_value = -100;
  for (char *tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " "))
    if (++field == 19) {
      nice_value = atoi(tok);
      break;
    }
  return nice_value;
}

/* Finds the thread named hvd_background: its nice value in *bg_nice; returns how many
   threads are so named, and the count of other threads whose nice is not base in
   *others. */
static int scan_threads(int base, int *bg_nice, int *others) {
  DIR *d = opendir("/proc/self/task");
  CHECK(d != NULL, "cannot open /proc/self/task");
  int named = 0;
  *others = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[64] = "";
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;   /* the thread ended meanwhile */
    if (!fgets(comm, sizeof(comm), f)) comm[0] = '\0';
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    int n = thread_nice(e->d_name);
    if (n == -100) continue;   /* ended between the two reads */
    if (strcmp(comm, "hvd_background") == 0) {
      named++;
      *bg_nice = n;
    } else if (n != base) {
      (*others)++;
    }
  }
  closedir(d);
  return named;
}

static void rank_body(const char *mode) {
  char self[32];
  snprintf(self, sizeof(self), "%ld", (long)gettid());
  const int base = thread_nice(self);   /* the rank's own, before hvd starts a thread */
  CHECK(base >= -20 && base <= 19, "cannot read this thread's nice value");
  CHECK_OK(hvd_init());
  const int steps = strcmp(mode, "seven") == 0 ? 7
                    : strcmp(mode, "zero") == 0 ? 0
                    : hvd_device_host_only() && !hvd_machine_has_nvidia_gpu() ? 19
                                                                             : 0;
  const int want = base + steps < 19 ? base + steps : 19;
  /* hvd_init returns before the thread has set itself up; a collective completes only
     after that (the loop's turns start once it has). */
  CHECK_OK(hvd_barrier());
  int bg_nice = -100, others = 0;
  int named = scan_threads(base, &bg_nice, &others);
  CHECK(named == 1, "%d threads named hvd_background, expected 1", named);
  CHECK(bg_nice == want, "mode %s from nice %d: the background thread runs at nice %d, "
        "expected %d", mode, base, bg_nice, want);
  CHECK(others == 0, "mode %s: %d other threads of the rank left nice %d", mode, others, base);
  /* The lowered thread still does its work: blocking calls (run by the caller) and async
     ones submitted together (run by the background thread while the caller sleeps). */
  enum { N = 100003, K = 4 };
  float *x = malloc(K * N * sizeof(float));
  CHECK(x != NULL, "out of memory");
  for (int round = 0; round < 3; round++) {
    hvd_request_t req[K];
    for (int k = 0; k < K; k++) {
      for (int i = 0; i < N; i++) x[k * N + i] = (float)(hvd_rank() + 1 + k + i % 7);
      char name[32];
      snprintf(name, sizeof(name), "nice.%d", k);
      CHECK_OK(hvd_allreduce_async(name, x + k * N, x + k * N, N, HVD_FLOAT32, HVD_SUM,
                                   &req[k]));
    }
    if (round % 2 == 0) {
      /* Polled: no caller runs the turns, the background thread does. */
      for (int k = 0; k < K; k++)
        for (int done = 0; !done;) {
          CHECK_OK(hvd_test(req[k], &done));
          struct timespec nap = {0, 200000};
          if (!done) nanosleep(&nap, NULL);
        }
    } else {
      for (int k = 0; k < K; k++) CHECK_OK(hvd_wait(req[k]));
    }
    for (int k = 0; k < K; k++)
      for (int i = 0; i < N; i++) {
        float sum = 0;
        for (int r = 0; r < hvd_size(); r++) sum += (float)(r + 1 + k + i % 7);
        CHECK(x[k * N + i] == sum, "round %d tensor %d element %d: %g, expected %g", round, k,
              i, x[k * N + i], sum);
      }
    double one = hvd_rank() + 1;
    CHECK_OK(hvd_allreduce("nice.blocking", &one, &one, 1, HVD_FLOAT64, HVD_SUM));
    CHECK(one == hvd_size() * (hvd_size() + 1) / 2.0, "blocking allreduce gave %g", one);
  }
  free(x);
  CHECK_OK(hvd_shutdown());
}

int main(int argc, char **argv) {
  if (hvd_test_is_rank()) {
    rank_body(argc > 1 ? argv[1] : "auto");
    return 0;
  }
  const char *modes[] = {"auto", "seven", "zero", "auto", "seven"};
  const char *envs[] = {"", "HVD_BACKGROUND_NICE=7", "HVD_BACKGROUND_NICE=0", "nice -n 3",
                        "HVD_BACKGROUND_NICE=7 nice -n 3"};
  for (int m = 0; m < 5; m++)
    if (hvd_test_mpirun(argv[0], 2, modes[m], envs[m], 60, NULL, 0) != 0) {
      printf("FAIL: mode %s (%s)\n", modes[m], envs[m]);
      return 1;
    }
  printf("the background thread runs the nice steps asked for below the rank's threads, "
         "which keep theirs\n");
  return 0;
}
