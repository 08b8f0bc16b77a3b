/* test_hvd_plan: rank 0 decides the plan, and every rank runs it.
   1. MPMD launch, each rank with its own HVD_FUSION_THRESHOLD and HVD_CYCLE_TIME (0 and
      64 MiB at np=2; 0, 64 MiB and 3000 at np=3): every rank must hold rank 0's values
      after hvd_init, a rank whose environment differed must say so in one log line, and
      rounds of 64 async allreduces of assorted sizes, dtypes and ops must give exactly
      the closed-form result (integer-valued inputs, so exact on any number of ranks).
      Without one plan, the ranks fused differently and disagreed about lengths.
   2. Device against host memory (CUDA build, no GPU needed): rank 1 answers hvd's
      pointer queries with a stand-in saying one buffer is on CUDA device 0; the
      allreduce of that buffer fails with HVD_ERR_MISMATCH on every rank, the message
      naming the tensor and both devices, and the runtime goes on.
   3. Bad names: empty, over-long, and with a control character anywhere are
      HVD_ERR_INVALID_ARGUMENT at the call, and the runtime goes on. */
#include "hvd/hvd_internal.h"
#include "tests/hvd_test.h"

enum { ROUNDS = 6, K = 64 };

static size_t len_of(int k) { return k % 7 == 0 ? 3001 + (size_t)k : (size_t)(k * 37 % 500) + 1; }
static hvd_dtype_t dtype_of(int k) {
  static const hvd_dtype_t d[] = {HVD_FLOAT32, HVD_FLOAT32, HVD_INT32, HVD_FLOAT64, HVD_INT64};
  return d[k % 5];
}
static hvd_op_t op_of(int k) {
  static const hvd_op_t o[] = {HVD_SUM, HVD_AVERAGE, HVD_SUM, HVD_MAX, HVD_MIN, HVD_SUM};
  return o[k % 6];
}
static long input(int r, int round, int k, size_t i) {
  return (long)((r * 7919u + (unsigned)round * 104729u + (unsigned)k * 31u + i * 13u) % 97);
}
static double expected(int size, int round, int k, size_t i) {
  long sum = 0, mx = -1, mn = 1000;
  for (int r = 0; r < size; r++) {
    long v = input(r, round, k, i);
    sum += v;
    if (v > mx) mx = v;
    if (v < mn) mn = v;
  }
  switch (op_of(k)) {
    case HVD_MAX: return (double)mx;
    case HVD_MIN: return (double)mn;
    case HVD_AVERAGE:
      /* integers: C integer division; floats: the (exact) sum divided, in the dtype */
      if (dtype_of(k) == HVD_FLOAT32) return (double)((float)sum / (float)size);
      return dtype_of(k) == HVD_FLOAT64 ? (double)sum / size : (double)(sum / size);
    default: return (double)sum;
  }
}
static void put(void *buf, hvd_dtype_t d, size_t i, double v) {
  switch (d) {
    case HVD_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case HVD_FLOAT64: ((double *)buf)[i] = v; break;
    case HVD_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v; break;
  }
}
static double get(const void *buf, hvd_dtype_t d, size_t i) {
  switch (d) {
    case HVD_FLOAT32: return ((const float *)buf)[i];
    case HVD_FLOAT64: return ((const double *)buf)[i];
    case HVD_INT32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
  }
}

/* argv: rank 0's fusion threshold, cycle time and cache capacity. */
static int mpmd_body(char **argv) {
  const size_t threshold = (size_t)atol(argv[2]), cache = (size_t)atol(argv[4]);
  const double cycle = atof(argv[3]);
  CHECK_OK(hvd_init());
  const int R = hvd_rank(), N = hvd_size();
  /* Rank 0's values everywhere. */
  CHECK(hvd_g.cfg.fusion_threshold == threshold, "rank %d: fusion threshold %zu in force, "
        "rank 0's is %zu", R, hvd_g.cfg.fusion_threshold, threshold);
  CHECK(hvd_g.cfg.cycle_time_ms == cycle, "rank %d: cycle time %g in force, rank 0's is %g",
        R, hvd_g.cfg.cycle_time_ms, cycle);
  CHECK(hvd_g.cfg.cache_capacity == cache, "rank %d: cache capacity %zu, rank 0's is %zu", R,
        hvd_g.cfg.cache_capacity, cache);
  void *buf[K];
  for (int k = 0; k < K; k++) buf[k] = malloc(len_of(k) * 8);
  for (int round = 0; round < ROUNDS; round++) {
    hvd_request_t req[K];
    /* Odd ranks submit in reverse order: the plan, not the order, lines them up. */
    for (int j = 0; j < K; j++) {
      int k = R % 2 ? K - 1 - j : j;
      for (size_t i = 0; i < len_of(k); i++)
        put(buf[k], dtype_of(k), i, (double)input(R, round, k, i));
      char name[32];
      snprintf(name, sizeof name, "plan.%d", k);
      CHECK_OK(hvd_allreduce_async(name, buf[k], buf[k], len_of(k), dtype_of(k), op_of(k),
                                   &req[k]));
    }
    for (int k = 0; k < K; k++) CHECK_OK(hvd_wait(req[k]));
    for (int k = 0; k < K; k++) {
      size_t wrong = 0, first = 0;
      for (size_t i = 0; i < len_of(k); i++)
        if (get(buf[k], dtype_of(k), i) != expected(N, round, k, i) && wrong++ == 0) first = i;
      CHECK(wrong == 0, "rank %d round %d tensor %d (%s %s, %zu elements): %zu wrong, first "
            "[%zu] = %g, expected %g", R, round, k, hvd_dtype_name(dtype_of(k)),
            hvd_op_name(op_of(k)), len_of(k), wrong, first, get(buf[k], dtype_of(k), first),
            expected(N, round, k, first));
    }
  }
  for (int k = 0; k < K; k++) free(buf[k]);
  printf("rank %d: %d rounds of %d allreduces exact under rank 0's plan\n", R, ROUNDS, K);
  CHECK_OK(hvd_shutdown());
  return 0;
}

#ifdef HVD_WITH_CUDA
static float fake_device_buf[16];
static int fake_count(int *n) { *n = 1; return 0; }
static int fake_set(int device) { (void)device; return 0; }
static int fake_is_device(const void *p, int *yes) {
  *yes = p == (const void *)fake_device_buf;
  return 0;
}
static const char *fake_error(int e) { (void)e; return "fake error"; }
#endif

static void device_mismatch(void) {
#ifdef HVD_WITH_CUDA
  float host[16];
  for (int i = 0; i < 16; i++) host[i] = fake_device_buf[i] = (float)i;
  /* Rank 1's "device" buffer against rank 0's host buffer. */
  void *mine = hvd_rank() == 1 ? (void *)fake_device_buf : (void *)host;
  hvd_status_t s = hvd_allreduce("dev.w", mine, mine, 16, HVD_FLOAT32, HVD_SUM);
  CHECK(s == HVD_ERR_MISMATCH, "rank %d: host against device memory gave %s, expected "
        "HVD_ERR_MISMATCH", hvd_rank(), hvd_status_string(s));
  const char *e = hvd_last_error();
  CHECK(strstr(e, "\"dev.w\"") && strstr(e, "host memory") && strstr(e, "CUDA device 0"),
        "rank %d: the mismatch message does not name the tensor and both devices: %s",
        hvd_rank(), e);
  for (int i = 0; i < 16; i++) host[i] = 1;
  CHECK_OK(hvd_allreduce("dev.after", host, host, 16, HVD_FLOAT32, HVD_SUM));
  CHECK(host[3] == hvd_size(), "rank %d: allreduce after the mismatch gave %g", hvd_rank(),
        host[3]);
#endif
}

static void bad_names(void) {
  char longname[HVD_NAME_MAX + 2];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  const char *bad[] = {"", longname, "\x01x", "a\tb", "grad\n", "w\x7f"};
  float x[4] = {1, 2, 3, 4};
  void *out = NULL;
  size_t n = 0;
  hvd_request_t req = (hvd_request_t)&n;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_STATUS(hvd_allreduce(bad[i], x, x, 4, HVD_FLOAT32, HVD_SUM),
                 HVD_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(hvd_allreduce_async(bad[i], x, x, 4, HVD_FLOAT32, HVD_SUM, &req),
                 HVD_ERR_INVALID_ARGUMENT);
    CHECK(req == NULL, "a refused submission left a request handle");
    CHECK_STATUS(hvd_broadcast(bad[i], x, 4, HVD_FLOAT32, 0), HVD_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(hvd_allgather(bad[i], x, 4, HVD_FLOAT32, &out, &n), HVD_ERR_INVALID_ARGUMENT);
  }
  /* The longest allowed name is fine, and the runtime goes on. */
  longname[HVD_NAME_MAX] = '\0';
  CHECK_OK(hvd_allreduce(longname, x, x, 4, HVD_FLOAT32, HVD_SUM));
  CHECK(x[1] == 2.0f * hvd_size(), "allreduce after bad names gave %g", x[1]);
}

static int checks_body(void) {
#ifdef HVD_WITH_CUDA
  const hvd_cuda_probe_t fake = {fake_count, fake_set, fake_is_device, fake_error};
  const char *wr = getenv("OMPI_COMM_WORLD_RANK");
  if (wr && atoi(wr) == 1) hvd_device_set_probe(&fake);
#endif
  CHECK_OK(hvd_init());
  device_mismatch();
  bad_names();
  CHECK_OK(hvd_shutdown());
  printf("rank %d: device mismatch and bad names: ok\n", hvd_rank());
  return 0;
}

/* Per-rank environments: threshold, cycle time, cache capacity. */
typedef struct { const char *threshold, *cycle, *cache; } tuning_t;

/* `mpirun -np 1 -x A prog : -np 1 -x B prog ...`: one rank per environment. */
static int mpmd(const char *self, int np, const tuning_t *env, char *out, size_t outlen) {
  char cmd[4096];
  size_t n = (size_t)snprintf(cmd, sizeof cmd, "timeout -k 5 120 mpirun --allow-run-as-root "
                              "--oversubscribe --bind-to none");
  for (int r = 0; r < np; r++)
    n += (size_t)snprintf(cmd + n, sizeof cmd - n, "%s -np 1 -x HVD_FUSION_THRESHOLD=%s "
                          "-x HVD_CYCLE_TIME=%s -x HVD_CACHE_CAPACITY=%s '%s' mpmd %s %s %s",
                          r ? " :" : "", env[r].threshold, env[r].cycle, env[r].cache, self,
                          env[0].threshold, env[0].cycle, env[0].cache);
  snprintf(cmd + n, sizeof cmd - n, " 2>&1");
  printf("== %s\n", cmd);
  fflush(stdout);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t len = 0;
  char line[4096];
  while (fgets(line, sizeof line, p)) {
    fputs(line, stdout);
    size_t l = strlen(line);
    if (len + l < outlen) { memcpy(out + len, line, l); len += l; }
  }
  out[len] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv) {
  if (hvd_test_is_rank()) {
    if (argc > 4 && strcmp(argv[1], "mpmd") == 0) return mpmd_body(argv);
    return checks_body();
  }
  static char out[1 << 16];
  /* The case (rank 0 fuses nothing, rank 1 everything), and the other way
     round, where rank 0's plan fuses and rank 1 on its own would not. */
  static const tuning_t cases[2][3] = {
    {{"0", "0", "7"}, {"67108864", "5", "1024"}, {"3000", "2", "0"}},
    {{"67108864", "3", "1024"}, {"0", "0", "0"}, {"3000", "2", "5"}}};
  static const char *const says[2] = {
    "HVD_FUSION_THRESHOLD=0 (this rank's environment: 67108864)",
    "HVD_FUSION_THRESHOLD=67108864 (this rank's environment: 0)"};
  for (int c = 0; c < 2; c++)
    for (int np = 2; np <= 3; np++) {
      if (mpmd(argv[0], np, cases[c], out, sizeof out) != 0) {
        printf("FAIL: MPMD run %d at np=%d\n", c, np);
        return 1;
      }
      /* Rank 1's values differ: one line, naming the values in force. */
      const char *l = strstr(out, "[hvd rank 1] WARNING: rank 0's tuning is in force");
      if (!l || !strstr(l, says[c]) || !strstr(l, "HVD_CYCLE_TIME=")) {
        printf("FAIL: run %d np=%d: rank 1 did not say which of its values rank 0 "
               "overrode\n", c, np);
        return 1;
      }
      if (strstr(out, "[hvd rank 0] WARNING: rank 0's tuning")) {
        printf("FAIL: rank 0 reported overriding its own values\n");
        return 1;
      }
    }
  for (int np = 2; np <= 3; np++)
    if (hvd_test_mpirun(argv[0], np, "checks", NULL, 60, NULL, 0) != 0) {
      printf("FAIL: checks at np=%d\n", np);
      return 1;
    }
  printf("every rank runs rank 0's plan and tuning; device mismatches and bad names are "
         "refused\n");
  return 0;
}
