/* test_hvd_hierarchical: HVD_HIERARCHICAL_ALLREDUCE=1 on 4 ranks cut into 2 hosts x 2
   (HVD_TEST_LOCAL_SIZE=2) and 6 ranks as 2 x 3: the topology reports the hosts, rank 0's
   info line says the hierarchical path is on, and allreduces (fused and not, every op,
   AVERAGE included) give exact results. With the setting on one host (4 x 1 local) the
   runtime says it falls back to the flat ring. */
#include "hvd_test.h"

#include <stdint.h>

static int body(void) {
  CHECK_OK(hvd_init());
  int R = hvd_rank(), N = hvd_size();
  const char *ls = getenv("HVD_TEST_LOCAL_SIZE");
  int L = ls ? atoi(ls) : N;
  CHECK(hvd_local_size() == L && hvd_local_rank() == R % L, "local %d/%d", hvd_local_rank(),
        hvd_local_size());
  CHECK(hvd_cross_size() == N / L && hvd_cross_rank() == R / L, "cross %d/%d",
        hvd_cross_rank(), hvd_cross_size());
  enum { K = 12 };
  int32_t *b[K];
  hvd_request_t req[K];
  const hvd_op_t ops[4] = {HVD_SUM, HVD_MAX, HVD_MIN, HVD_AVERAGE};
  for (int k = 0; k < K; k++) {
    size_t n = (size_t)(k * 1237 % 5000) + (k == 3 ? 300000 : 1);
    b[k] = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) b[k][i] = (int32_t)((i + (size_t)R * 5 + (size_t)k) % 11);
    char name[32];
    snprintf(name, sizeof(name), "h.%d", k);
    CHECK_OK(hvd_allreduce_async(name, b[k], b[k], n, HVD_INT32, ops[k % 4], &req[k]));
  }
  for (int k = 0; k < K; k++) {
    CHECK_OK(hvd_wait(req[k]));
    size_t n = (size_t)(k * 1237 % 5000) + (k == 3 ? 300000 : 1);
    for (size_t i = 0; i < n; i++) {
      int64_t sum = 0, mx = -1, mn = 100;
      for (int r = 0; r < N; r++) {
        int64_t v = (int64_t)((i + (size_t)r * 5 + (size_t)k) % 11);
        sum += v;
        if (v > mx) mx = v;
        if (v < mn) mn = v;
      }
      int64_t want = k % 4 == 0 ? sum : k % 4 == 1 ? mx : k % 4 == 2 ? mn : sum / N;
      CHECK(b[k][i] == want, "tensor %d element %zu: %d, expected %lld", k, i, b[k][i],
            (long long)want);
    }
    free(b[k]);
  }
  CHECK_OK(hvd_shutdown());
  return 0;
}

static char out[1 << 16];

int main(int argc, char **argv) {
  (void)argc;
  if (hvd_test_is_rank()) return body();
  int ok = hvd_test_mpirun(argv[0], 4, "", "HVD_TEST_LOCAL_SIZE=2 HVD_HIERARCHICAL_ALLREDUCE=1 "
                           "HVD_LOG_LEVEL=info", 60, out, sizeof(out)) == 0 &&
           strstr(out, "4 ranks on 2 hosts (local size 2); hierarchical allreduce on") != NULL;
  ok = ok && hvd_test_mpirun(argv[0], 6, "", "HVD_TEST_LOCAL_SIZE=3 HVD_HIERARCHICAL_ALLREDUCE=1 "
                             "HVD_LOG_LEVEL=info", 60, out, sizeof(out)) == 0 &&
       strstr(out, "6 ranks on 2 hosts (local size 3); hierarchical allreduce on") != NULL;
  ok = ok && hvd_test_mpirun(argv[0], 4, "", "HVD_HIERARCHICAL_ALLREDUCE=1 HVD_LOG_LEVEL=info",
                             60, out, sizeof(out)) == 0 &&
       strstr(out, "ignored: all ranks are on one host") != NULL;
  printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
