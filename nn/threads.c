/* nn/threads.c: how nn's CPU kernels run: how many threads they use (OpenBLAS's and
   nn's own), nn's small persistent worker pool, and which OpenBLAS kernels ran (a
   report). */
#include "nn/nn.h"
#include "nn/threads_internal.h"

#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <unistd.h>

/* ---- OpenBLAS's kernel set ----
   An OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels by CPU model when it
   is loaded, or as OPENBLAS_CORETYPE says: on one machine the choice moved resnet20's
   training step (1 thread, batch 64) by 12% (Haswell's AVX2 kernels 475 img/s,
   Cooperlake's AVX-512 ones 530, AMD Zen 5). nn leaves the choice to OpenBLAS and the
   user (some machines set OPENBLAS_CORETYPE because older OpenBLAS builds miscompute on
   them) except where OpenBLAS fell back to pre-AVX2 kernels on a CPU with AVX2
   (nn_blas_fix_misdetected_core), and reports it, so a benchmark says which kernels
   ran. The OpenBLAS functions are weak references: the GPU check's plain C SGEMM lacks
   them (an OpenBLAS without DYNAMIC_ARCH has them, with one kernel set built in). */
extern char *openblas_get_corename(void) __attribute__((weak));
extern char *openblas_get_config(void) __attribute__((weak));

static char blas_info[160];
static pthread_once_t blas_info_once = PTHREAD_ONCE_INIT;

static void blas_info_fill(void) {
  const char *core = openblas_get_corename ? openblas_get_corename() : NULL;
  const char *forced = getenv("OPENBLAS_CORETYPE");
  if (!core)
    snprintf(blas_info, sizeof blas_info, "a BLAS that does not name its kernels");
  else if (forced && *forced && getenv("NN_BLAS_CORE_SET"))
    snprintf(blas_info, sizeof blas_info,
             "OpenBLAS %s kernels (OPENBLAS_CORETYPE=%s, set by nn: OpenBLAS did not know "
             "this CPU)", core, forced);
  else if (forced && *forced)
    snprintf(blas_info, sizeof blas_info, "OpenBLAS %s kernels (OPENBLAS_CORETYPE=%s)", core,
             forced);
  else
    snprintf(blas_info, sizeof blas_info, "OpenBLAS %s kernels (OpenBLAS's choice)", core);
}

const char *nn_blas_kernels(void) {
  pthread_once(&blas_info_once, blas_info_fill);
  return blas_info;
}

/* Kernel sets of OpenBLAS that use AVX2 and FMA; any other choice on a CPU that has
   both is a fallback (nn.h, nn_blas_fix_misdetected_core). */
static int blas_core_has_avx2(const char *core) {
  static const char *const avx2_cores[] = {"haswell", "skylakex", "cooperlake",
                                           "sapphirerapids", "zen", "excavator"};
  for (size_t i = 0; i < sizeof avx2_cores / sizeof avx2_cores[0]; i++)
    if (strcasecmp(core, avx2_cores[i]) == 0) return 1;
  return 0;
}

nn_status_t nn_blas_fix_misdetected_core(char **argv) {
#if defined(__x86_64__)
  const char *forced = getenv("OPENBLAS_CORETYPE");
  if (!openblas_get_corename || !openblas_get_config || (forced && *forced)) return NN_OK;
  /* Only a DYNAMIC_ARCH build can switch kernels; and with AT_BASE 0 the program was
     started through the loader itself (ld.so ./prog), where /proc/self/exe is the
     loader, not the program. */
  const char *config = openblas_get_config();
  if (!config || !strstr(config, "DYNAMIC_ARCH") || getauxval(AT_BASE) == 0) return NN_OK;
  /* Test hook (tests/test_blas_core.sh): take OpenBLAS's choice to be this name, so the
     path below runs on CPUs OpenBLAS knows too. */
  const char *assumed = getenv("NN_TEST_BLAS_ASSUME_CORE");
  const char *core = assumed && *assumed ? assumed : openblas_get_corename();
  __builtin_cpu_init();
  if (!core || blas_core_has_avx2(core) || !__builtin_cpu_supports("avx2") ||
      !__builtin_cpu_supports("fma"))
    return NN_OK;
  int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const char *better = avx512 ? "SkylakeX" : "Haswell";
  if (setenv("NN_BLAS_CORE_SET", "1", 1) != 0 ||
      setenv("OPENBLAS_CORETYPE", better, 1) != 0) {
    unsetenv("NN_BLAS_CORE_SET");
    return nn_set_error(NN_ERR_IO, "setenv OPENBLAS_CORETYPE failed: set OPENBLAS_CORETYPE=%s",
                        better);
  }
  unsetenv("NN_TEST_BLAS_ASSUME_CORE");
  execv("/proc/self/exe", argv);
  int e = errno;
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("NN_BLAS_CORE_SET");
  return nn_set_error(NN_ERR_IO,
                      "OpenBLAS chose its %s kernels on a CPU with AVX2; running again with "
                      "better ones failed (execv /proc/self/exe: %s): set OPENBLAS_CORETYPE=%s",
                      core, strerror(e), better);
#else
  (void)argv;
  return NN_OK;
#endif
}

/* ---- thread count ----
   Under a multi-rank launcher every rank is its own process on a shared machine, so the
   default is 1 thread to avoid oversubscription; alone, all online cores. */
static int nn_thread_count;  /* 0: not decided yet */
static pthread_once_t nn_threads_once = PTHREAD_ONCE_INIT;

static int env_int(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  return atoi(v);
}

static void nn_threads_default(void) {
  if (nn_thread_count > 0) return;  /* nn_set_threads came first */
  int n;
  if (env_int("OMPI_COMM_WORLD_SIZE") > 1 || env_int("PMI_SIZE") > 1) {
    n = 1;
  } else {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    n = cores > 0 ? (int)cores : 1;
  }
  if (n > NN_MAX_THREADS) n = NN_MAX_THREADS;
  nn_thread_count = n;
  openblas_set_num_threads(n);
}

void nn_set_threads(int n) {
  if (n < 1) n = 1;
  if (n > NN_MAX_THREADS) n = NN_MAX_THREADS;
  nn_thread_count = n;
  pthread_once(&nn_threads_once, nn_threads_default);  /* no-op now: count is set */
  openblas_set_num_threads(n);
}

int nn_threads(void) {
  pthread_once(&nn_threads_once, nn_threads_default);
  return nn_thread_count;
}

void nn_blas_single_begin(void) { openblas_set_num_threads(1); }
void nn_blas_single_end(void) { openblas_set_num_threads(nn_threads()); }

/* ---- worker pool ----
   One job at a time (pool_run serialises callers). A job is published by bumping
   `generation` under the mutex; workers grab task indices from an atomic counter, and
   the last one to finish signals the caller. Workers are created on first need and
   live until the process exits. */
static pthread_mutex_t pool_run = PTHREAD_MUTEX_INITIALIZER;  /* one job at a time */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;
static int pool_started;           /* worker threads running (excluding callers) */
static unsigned long pool_generation;
static int pool_active;            /* workers wanted for the current job (1..)      */
static nn_task_fn pool_fn;
static void *pool_ctx;
static int pool_tasks;
static atomic_int pool_next;
static int pool_finished;          /* workers (incl. caller) done with this job     */
static _Thread_local int in_parallel;

static void pool_work(int worker) {
  for (;;) {
    int t = atomic_fetch_add(&pool_next, 1);
    if (t >= pool_tasks) break;
    pool_fn(pool_ctx, t, worker);
  }
}

static void *pool_main(void *arg) {
  int worker = (int)(intptr_t)arg;
  in_parallel = 1;
  unsigned long seen = 0;
  pthread_mutex_lock(&pool_mu);
  for (;;) {
    while (pool_generation == seen) pthread_cond_wait(&pool_wake, &pool_mu);
    seen = pool_generation;
    if (worker >= pool_active) continue;  /* not needed for this job */
    pthread_mutex_unlock(&pool_mu);
    pool_work(worker);
    pthread_mutex_lock(&pool_mu);
    if (++pool_finished == pool_active) pthread_cond_signal(&pool_done);
  }
  return NULL;
}

int nn_parallel_workers(int tasks) {
  int n = nn_threads();
  if (in_parallel) return 1;
  return tasks < n ? (tasks > 0 ? tasks : 1) : n;
}

void nn_parallel_for(int tasks, nn_task_fn fn, void *ctx) {
  int workers = nn_parallel_workers(tasks);
  if (workers > 1 && pthread_mutex_trylock(&pool_run) != 0) workers = 1;  /* busy */
  if (workers <= 1) {
    for (int t = 0; t < tasks; t++) fn(ctx, t, 0);
    return;
  }
  pthread_mutex_lock(&pool_mu);
  while (pool_started < workers - 1) {
    pthread_t th;
    if (pthread_create(&th, NULL, pool_main, (void *)(intptr_t)(pool_started + 1)) != 0)
      break;  /* fewer workers: the loop below still covers every task */
    pthread_detach(th);
    pool_started++;
  }
  if (workers > pool_started + 1) workers = pool_started + 1;
  pool_fn = fn;
  pool_ctx = ctx;
  pool_tasks = tasks;
  atomic_store(&pool_next, 0);
  pool_active = workers;
  pool_finished = 0;
  pool_generation++;
  pthread_cond_broadcast(&pool_wake);
  pthread_mutex_unlock(&pool_mu);

  in_parallel = 1;
  pool_work(0);
  in_parallel = 0;

  pthread_mutex_lock(&pool_mu);
  if (++pool_finished != pool_active) {
    while (pool_finished != pool_active) pthread_cond_wait(&pool_done, &pool_mu);
  }
  pthread_mutex_unlock(&pool_mu);
  pthread_mutex_unlock(&pool_run);
}
