/* test_hvd_ps: the parameter servers of hvd (hvd_ps_*), at np 2-4.
     sync_*:     workers push gradients computed from the values they pulled, for 10
                 steps; every worker ends with the values of the same steps computed here
                 in double (the average of the workers' gradients, SGD), to 1e-5
                 relative: dedicated (num_ps 1 and 2) and colocated, both placements, a
                 variable split over servers; with one server, a worker's small shards
                 go in one message a request.
     async:      4 ranks, worker 0 a straggler (20 ms a step), max_staleness 2: no push
                 ever older than 2 versions on any server, and some older than 0 (so the
                 bound was tested); the final values are the sum of every push.
     mismatch:   rank 2 registers "b" with 11 elements: HVD_ERR_MISMATCH on every rank
                 naming both sizes, and the runtime goes on (a good set runs after it).
     placement:  greedy and round-robin place the shards as TF's strategies would; a
                 fused message is capped (a request of 80 small shards goes as 2).
                 Then finish returns on every rank before any may shut down: with one
                 dedicated server that comes to finish 0.5 s late, the workers (whose
                 DONEs are delivered at once) call hvd_shutdown right after theirs, and
                 the server's finish still returns HVD_OK.
     agg:        2 fake hosts of 2 ranks: local aggregation gives the same values and
                 halves (about) the bytes a host sends to the other; dedicated with it.
   Started alone, it runs each mode under mpirun. */
#include "hvd_test.h"

#include <limits.h>
#include <math.h>

static int R;
static char self_path[1024];

#define NV 4
static const char *const names[NV] = {"a", "b", "c", "d"};
static const size_t counts[NV] = {1000, 10, 3000, 1};
#define TOTAL 4011
#define LR 0.5

static void sgd(void *ctx, size_t var, size_t offset, float *values, float *grad,
                size_t count, uint64_t version) {
  (void)ctx, (void)var, (void)offset, (void)version;
  for (size_t i = 0; i < count; i++) values[i] -= (float)LR * grad[i];
}

static float init_value(size_t i) { return (float)(i % 13) * 0.1f; }
static double coef(size_t i) { return (double)(i % 7 + 1) * 0.25; }

/* Sync: 10 steps of gradient 0.5 v + (w + 1) c_i from the pulled values v. Returns the
   bytes this rank sent to other hosts. */
static uint64_t run_sync_agg(hvd_ps_mode_t mode, int num_ps, hvd_ps_placement_t placement,
                             hvd_ps_local_agg_t agg) {
  hvd_ps_config_t cfg = {mode, num_ps, placement, 4096, 0, sgd, NULL, agg};
  static float init[TOTAL], values[TOTAL], grads[TOTAL];
  for (size_t i = 0; i < TOTAL; i++) init[i] = init_value(i);
  hvd_ps_t *ps = NULL;
  CHECK_OK(hvd_ps_create(&ps, &cfg, NV, names, counts, init));
  int W = hvd_ps_num_workers(ps), w = hvd_ps_worker_index(ps);
  CHECK(W == hvd_size() - num_ps, "%d workers", W);
  const int T = 10, worker = hvd_ps_is_worker(ps);
  if (worker) {
    memset(values, 0, sizeof(values));
    CHECK_OK(hvd_ps_push_pull(ps, 0, NV, NULL, values));   /* the first values */
    for (size_t i = 0; i < TOTAL; i++)
      CHECK(values[i] == init[i], "pulled value %zu is %g, expected %g", i, values[i], init[i]);
  }
  /* Async applies a push when it arrives: no worker pushes before every worker has pulled
     the first values (else a slow one's first pull sees a fast one's step 0). */
  CHECK_OK(hvd_barrier());
  if (hvd_ps_is_worker(ps)) {
    for (int t = 0; t < T; t++) {
      for (size_t i = 0; i < TOTAL; i++)
        grads[i] = 0.5f * values[i] + (float)((w + 1) * coef(i));
      hvd_request_t r1, r2;   /* two buckets, as backward hands them over */
      CHECK_OK(hvd_ps_push_pull_async(ps, 2, 2, grads, values, &r1));
      CHECK_OK(hvd_ps_push_pull_async(ps, 0, 2, grads, values, &r2));
      CHECK_OK(hvd_wait(r1));
      CHECK_OK(hvd_wait(r2));
    }
    double worst = 0;
    for (size_t i = 0; i < TOTAL; i++) {
      double v = init[i];
      for (int t = 0; t < T; t++) {
        double g = 0;
        for (int k = 0; k < W; k++) g += 0.5 * v + (k + 1) * coef(i);
        v -= LR * g / W;
      }
      double rel = fabs(values[i] - v) / (fabs(v) > 1e-3 ? fabs(v) : 1e-3);
      if (rel > worst) worst = rel;
    }
    CHECK(worst <= 1e-5, "num_ps %d placement %d: values differ from the reference by "
          "%g relative", num_ps, (int)placement, worst);
  }
  CHECK_OK(hvd_ps_finish(ps));
  hvd_ps_stats_t st;
  hvd_ps_stats(ps, &st);
  hvd_ps_free(ps);
  /* Small shards to one server go in one message: a worker of the single dedicated
     server sends one a request at most (the first pull, 2 a step, DONE), not one a shard
     (4 + 4 a step + 1). */
  if (num_ps == 1 && worker && hvd_local_size() == hvd_size())
    CHECK(st.messages_out >= 1 && st.messages_out <= (uint64_t)(2 * T + 2),
          "a worker sent %llu messages for %d steps of 2 requests: were its shards fused?",
          (unsigned long long)st.messages_out, T);
  uint64_t pushes = st.pushes, all = 0;
  CHECK(st.max_staleness == 0, "staleness %llu", (unsigned long long)st.max_staleness);
  CHECK_OK(hvd_allreduce("pushes", &pushes, &all, 1, HVD_INT64, HVD_SUM));
  /* Every worker pushes each shard once a step. */
  CHECK(all > 0 && all % (uint64_t)(T * W) == 0, "%llu pushes in all",
        (unsigned long long)all);
  if (R == 0) printf("%s num_ps %d placement %s: OK (%llu pushes)\n",
                     mode == HVD_PS_SYNC ? "sync" : "async, max_staleness 0", num_ps,
                     placement == HVD_PS_GREEDY ? "greedy" : "round-robin",
                     (unsigned long long)all);
  return st.bytes_out_remote;
}

static void run_sync_as(hvd_ps_mode_t mode, int num_ps, hvd_ps_placement_t placement) {
  run_sync_agg(mode, num_ps, placement, HVD_PS_AGG_AUTO);
}

/* Local aggregation, 2 hosts of 2 ranks (HVD_TEST_LOCAL_SIZE=2): the same values as
   without it, and host 0's ranks send about half the bytes to the other host (pushes and
   answers once per host instead of once per worker: 10 steps, 2M each without, M with,
   plus M for the first pull either way: 11/21 of it). */
static void run_agg(void) {
  CHECK(hvd_local_size() == 2 && hvd_size() == 4, "expected 2 hosts of 2 ranks, local size "
        "%d of %d", hvd_local_size(), hvd_size());
  uint64_t off = run_sync_agg(HVD_PS_SYNC, 0, HVD_PS_GREEDY, HVD_PS_AGG_OFF);
  uint64_t on = run_sync_agg(HVD_PS_SYNC, 0, HVD_PS_GREEDY, HVD_PS_AGG_AUTO);
  uint64_t mine[2] = {R < 2 ? off : 0, R < 2 ? on : 0}, host0[2];
  CHECK_OK(hvd_allreduce("agg.bytes", mine, host0, 2, HVD_INT64, HVD_SUM));
  double ratio = host0[0] ? (double)host0[1] / (double)host0[0] : 0;
  if (R == 0)
    printf("local aggregation: host 0 sent %llu bytes to host 1 without, %llu with "
           "(%.3f)\n", (unsigned long long)host0[0], (unsigned long long)host0[1], ratio);
  CHECK(ratio > 0.45 && ratio < 0.6, "host 0 sent %llu bytes to host 1 with local "
        "aggregation, %llu without: expected about 11/21 of it", (unsigned long long)host0[1],
        (unsigned long long)host0[0]);
  /* Dedicated: rank 0 serves; host 1's workers aggregate, host 0's one pushes alone. */
  run_sync_agg(HVD_PS_SYNC, 1, HVD_PS_ROUND_ROBIN, HVD_PS_AGG_ON);
}

/* Async with max_staleness 0 runs in lockstep: each worker's gradient is applied alone
   (divided by the workers), all computed on the same values: plain SGD then gives the
   sync steps. */
static void run_sync(int num_ps, hvd_ps_placement_t placement) {
  run_sync_as(HVD_PS_SYNC, num_ps, placement);
}

static void run_async(int num_ps, int S) {
  hvd_ps_config_t cfg = {HVD_PS_ASYNC, num_ps, HVD_PS_GREEDY, 4096, S, sgd, NULL, HVD_PS_AGG_AUTO};
  static float init[TOTAL], values[TOTAL], grads[TOTAL];
  for (size_t i = 0; i < TOTAL; i++) init[i] = init_value(i);
  hvd_ps_t *ps = NULL;
  CHECK_OK(hvd_ps_create(&ps, &cfg, NV, names, counts, init));
  int W = hvd_ps_num_workers(ps), w = hvd_ps_worker_index(ps);
  const int T = 20;
  if (hvd_ps_is_worker(ps)) {
    CHECK_OK(hvd_ps_push_pull(ps, 0, NV, NULL, values));
    for (size_t i = 0; i < TOTAL; i++) grads[i] = (float)((w + 1) * coef(i));
    for (int t = 0; t < T; t++) {
      if (w == 0) usleep(20000);   /* the straggler */
      CHECK_OK(hvd_ps_push_pull(ps, 0, NV, grads, values));
    }
  }
  CHECK_OK(hvd_barrier());   /* every push applied: the newest values are final */
  if (hvd_ps_is_worker(ps)) {
    CHECK_OK(hvd_ps_push_pull(ps, 0, NV, NULL, values));
    double worst = 0;
    for (size_t i = 0; i < TOTAL; i++) {
      double v = init[i];
      for (int k = 0; k < W; k++) v -= LR * T * (k + 1) * coef(i) / W;
      double rel = fabs(values[i] - v) / (fabs(v) > 1e-3 ? fabs(v) : 1e-3);
      if (rel > worst) worst = rel;
    }
    CHECK(worst <= 1e-5, "async: final values differ from the sum of the pushes by %g", worst);
  }
  CHECK_OK(hvd_ps_finish(ps));
  hvd_ps_stats_t st;
  hvd_ps_stats(ps, &st);
  hvd_ps_free(ps);
  int64_t mine[2] = {(int64_t)st.max_staleness, (int64_t)st.pushes}, most[2], sum[2];
  CHECK_OK(hvd_allreduce("staleness", mine, most, 2, HVD_INT64, HVD_MAX));
  CHECK_OK(hvd_allreduce("staleness.sum", mine, sum, 2, HVD_INT64, HVD_SUM));
  if (R == 0)
    printf("async num_ps %d S %d: largest staleness %lld, %lld pushes\n", num_ps, S,
           (long long)most[0], (long long)sum[1]);
  CHECK(most[0] <= S, "a push was %lld versions stale, more than max_staleness %d",
        (long long)most[0], S);
  CHECK(most[0] >= 1, "no push was ever stale: the straggler did not test the bound");
}

static void run_mismatch(void) {
  hvd_ps_config_t cfg = {HVD_PS_SYNC, 0, HVD_PS_GREEDY, 0, -1, sgd, NULL, HVD_PS_AGG_AUTO};
  size_t mine[NV];
  memcpy(mine, counts, sizeof(mine));
  if (R == 2) mine[1] = 11;
  hvd_ps_t *ps = NULL;
  CHECK_STATUS(hvd_ps_create(&ps, &cfg, NV, names, mine, NULL), HVD_ERR_MISMATCH);
  const char *want = "variable \"b\": rank 0 registered 10 elements, rank 2 registered 11";
  CHECK(strstr(hvd_last_error(), want) != NULL, "message \"%s\" lacks \"%s\"",
        hvd_last_error(), want);
  CHECK(ps == NULL, "ps set on failure");
  if (R == 0) printf("mismatch: %s\n", hvd_last_error());
  /* Settings differ too. */
  cfg.num_ps = R == 1 ? 1 : 0;
  CHECK_STATUS(hvd_ps_create(&ps, &cfg, NV, names, counts, NULL), HVD_ERR_MISMATCH);
  CHECK(strstr(hvd_last_error(), "rank 0 has mode sync, num_ps 0") != NULL &&
        strstr(hvd_last_error(), "rank 1 has sync, 1,") != NULL, "message \"%s\"",
        hvd_last_error());
  cfg.num_ps = 0;
  CHECK_OK(hvd_ps_create(&ps, &cfg, NV, names, counts, NULL));
  CHECK_OK(hvd_ps_finish(ps));
  hvd_ps_free(ps);
}

static void check_servers(hvd_ps_placement_t placement, const int *want, size_t n) {
  static const char *const pn[] = {"v0", "v1", "v2", "v3", "v4"};
  static const size_t pc[] = {100, 10, 10, 50, 3000};
  hvd_ps_config_t cfg = {HVD_PS_SYNC, 0, placement, 4096, -1, sgd, NULL, HVD_PS_AGG_AUTO};
  hvd_ps_t *ps = NULL;
  CHECK_OK(hvd_ps_create(&ps, &cfg, 5, pn, pc, NULL));
  CHECK(hvd_ps_num_shards(ps) == n, "%zu shards, expected %zu", hvd_ps_num_shards(ps), n);
  for (size_t k = 0; k < n && k < hvd_ps_num_shards(ps); k++) {
    int server;
    size_t var, offset, count;
    hvd_ps_shard(ps, k, &var, &offset, &count, &server);
    CHECK(server == want[k], "%s: shard %zu (variable %zu, offset %zu) on rank %d, "
          "expected %d", placement == HVD_PS_GREEDY ? "greedy" : "round-robin", k, var,
          offset, server, want[k]);
  }
  CHECK_OK(hvd_ps_finish(ps));
  hvd_ps_free(ps);
}

/* A fused message is capped (4 MiB): 80 variables of 64000 bytes (each small enough to
   fuse) to the one server go as 2 messages a request, not one of 5 MB; the values come
   back right. */
static void check_fuse_cap(void) {
  enum { NB = 80, C = 16000 };
  static char bufs[NB][8];
  static const char *bn[NB];
  static size_t bc[NB];
  static float v[NB * C], g[NB * C];
  for (int i = 0; i < NB; i++) {
    snprintf(bufs[i], sizeof(bufs[i]), "f%d", i);
    bn[i] = bufs[i];
    bc[i] = C;
  }
  hvd_ps_config_t cfg = {HVD_PS_SYNC, 1, HVD_PS_GREEDY, 0, -1, sgd, NULL, HVD_PS_AGG_AUTO};
  hvd_ps_t *ps = NULL;
  CHECK_OK(hvd_ps_create(&ps, &cfg, NB, bn, bc, NULL));
  const int T = 3;
  if (hvd_ps_is_worker(ps)) {
    for (size_t i = 0; i < (size_t)NB * C; i++) g[i] = 1.0f;
    for (int t = 0; t < T; t++) CHECK_OK(hvd_ps_push_pull(ps, 0, NB, g, v));
    for (size_t i = 0; i < (size_t)NB * C; i += 997)
      CHECK(fabsf(v[i] + (float)(LR * T)) < 1e-5f, "value %zu is %g, expected %g", i, v[i],
            -LR * T);
  }
  CHECK_OK(hvd_ps_finish(ps));
  hvd_ps_stats_t st;
  hvd_ps_stats(ps, &st);
  hvd_ps_free(ps);
  if (hvd_rank() > 0)   /* the workers (rank 0 serves only) */
    CHECK(st.messages_out >= (uint64_t)(2 * T), "a worker sent %llu messages for %d "
          "requests of 5 MB: is a fused message capped?", (unsigned long long)st.messages_out,
          T);
}

/* The workers go on to hvd_shutdown (body) as soon as their finish returns. */
static void finish_late_server(void) {
  hvd_ps_config_t cfg = {HVD_PS_SYNC, 1, HVD_PS_GREEDY, 0, -1, sgd, NULL, HVD_PS_AGG_AUTO};
  hvd_ps_t *ps = NULL;
  CHECK_OK(hvd_ps_create(&ps, &cfg, NV, names, counts, NULL));
  if (R == 0) usleep(500 * 1000);
  CHECK_OK(hvd_ps_finish(ps));
  hvd_ps_free(ps);
}

static int body(const char *mode) {
  CHECK_OK(hvd_init());
  R = hvd_rank();
  if (strcmp(mode, "sync") == 0) {
    run_sync(0, HVD_PS_GREEDY);
    run_sync(0, HVD_PS_ROUND_ROBIN);
    run_sync(1, HVD_PS_GREEDY);
    if (hvd_size() > 2) run_sync(2, HVD_PS_ROUND_ROBIN);
  } else if (strcmp(mode, "async") == 0) {
    run_async(0, 2);
    run_async(1, 1);
    run_sync_as(HVD_PS_ASYNC, 0, HVD_PS_GREEDY);
    run_sync_as(HVD_PS_ASYNC, 1, HVD_PS_ROUND_ROBIN);
  } else if (strcmp(mode, "agg") == 0) {
    run_agg();
  } else if (strcmp(mode, "mismatch") == 0) {
    run_mismatch();
  } else if (strcmp(mode, "placement") == 0) {
    /* v4 (12000 bytes) is cut into 3 parts of 4000 (split_bytes 4096, 3 servers).
       Greedy: loads 400, 40, 40 after v0-v2; v3 to the lowest of the least (rank 1);
       v4's parts to rank 2, then 1, then 0 (never two on one server). */
    const int greedy[] = {0, 1, 2, 1, 2, 1, 0};
    const int rr[] = {0, 1, 2, 0, 1, 2, 0};
    check_servers(HVD_PS_GREEDY, greedy, 7);
    check_servers(HVD_PS_ROUND_ROBIN, rr, 7);
    check_fuse_cap();
    finish_late_server();
    if (R == 0) printf("placement: OK\n");
  } else {
    CHECK(0, "unknown mode %s", mode);
  }
  CHECK_OK(hvd_shutdown());
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (hvd_test_is_rank()) return body(argc > 1 ? argv[1] : "");
  if (!realpath(argv[0], self_path)) snprintf(self_path, sizeof(self_path), "%s", argv[0]);
  struct { const char *mode; int np; const char *env; } runs[] = {
      {"sync", 2, ""}, {"sync", 3, ""}, {"sync", 4, ""}, {"async", 4, ""}, {"mismatch", 3, ""},
      {"placement", 3, ""}, {"agg", 4, "HVD_TEST_LOCAL_SIZE=2"}};
  int ok = 1;
  for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    char env[256];
    snprintf(env, sizeof(env), "HVD_PEER_TIMEOUT_SECONDS=20 %s", runs[i].env);
    int rc = hvd_test_mpirun(self_path, runs[i].np, runs[i].mode, env, 120, NULL, 0);
    if (rc != 0) {
      printf("FAIL %s at np %d: exit %d\n", runs[i].mode, runs[i].np, rc);
      ok = 0;
    }
  }
  printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
