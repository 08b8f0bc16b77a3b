/* test_cuda_hvd_allreduce: hvd_allreduce and hvd_broadcast of CUDA device memory in one
   process (size 1: NCCL with one rank): sum and average of one tensor, several small
   tensors submitted together (fused in the device fusion buffer), a tensor larger than
   the fusion threshold, in place and out of place, float32 and int32; results are
   checked on the host. Exits 77 without a CUDA device. */
#include "hvd/hvd.h"
#include "nn/nn.h"
#include "nn/nn_cuda.h"

#include <stdio.h>

#ifdef HVD_WITH_CUDA
#include "tests/cuda_check.h"

#define HOK(expr)                                                                  \
  do {                                                                             \
    hvd_status_t s_ = (expr);                                                      \
    if (s_ != HVD_OK) {                                                            \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #expr,           \
              hvd_status_string(s_), hvd_last_error());                            \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

int main(void) {
  cc_require_device();
  HOK(hvd_init());
  int size = hvd_size();
  CC_OK(nn_cuda_set_device(hvd_local_rank()));
  hvd_cuda_set_stream(nn_cuda_stream());
  /* one tensor, out of place, sum */
  size_t n = 100003;
  float *h = cc_random(n), *want = cc_host(n);
  for (size_t i = 0; i < n; i++) want[i] = h[i] * (float)size;
  float *d = cc_dev(h, n), *r = cc_dev(NULL, n);
  HOK(hvd_allreduce("one", d, r, n, HVD_FLOAT32, HVD_SUM));
  cc_compare("allreduce sum, out of place", r, 1, want, n, 1e-6);
  /* in place, average: unchanged at any size for identical inputs */
  HOK(hvd_allreduce("avg", d, d, n, HVD_FLOAT32, HVD_AVERAGE));
  cc_compare("allreduce average, in place", d, 1, h, n, 1e-6);
  /* several small tensors at once: fused */
  enum { K = 8 };
  float *hs[K], *ds[K];
  hvd_request_t req[K];
  for (int k = 0; k < K; k++) {
    hs[k] = cc_random(1000 + 17 * k);
    ds[k] = cc_dev(hs[k], 1000 + 17 * k);
  }
  for (int k = 0; k < K; k++) {
    char name[32];
    snprintf(name, sizeof name, "small.%d", k);
    HOK(hvd_allreduce_async(name, ds[k], ds[k], 1000 + 17 * k, HVD_FLOAT32, HVD_SUM, &req[k]));
  }
  for (int k = 0; k < K; k++) HOK(hvd_wait(req[k]));
  for (int k = 0; k < K; k++) {
    for (int i = 0; i < 1000 + 17 * k; i++) hs[k][i] *= (float)size;
    cc_compare("fused small tensor", ds[k], 1, hs[k], 1000 + 17 * k, 1e-6);
  }
  /* larger than the default fusion threshold (64 MiB): 20M floats */
  size_t big = 20u << 20;
  float *hb = cc_host(big);
  for (size_t i = 0; i < big; i++) hb[i] = (float)(i % 1000) * 0.25f;
  float *db = cc_dev(hb, big);
  HOK(hvd_allreduce("big", db, db, big, HVD_FLOAT32, HVD_AVERAGE));
  cc_compare("allreduce average, 80 MB tensor", db, 1, hb, big, 1e-6);
  /* int32 sum */
  int32_t hi[1000], gi[1000];
  for (int i = 0; i < 1000; i++) hi[i] = i - 500;
  int32_t *di = cc_dev_bytes(hi, sizeof hi);
  HOK(hvd_allreduce("ints", di, di, 1000, HVD_INT32, HVD_SUM));
  CC_OK(nn_cuda_to_host(gi, di, sizeof gi));
  int ok = 1;
  for (int i = 0; i < 1000; i++) ok &= gi[i] == hi[i] * size;
  printf("%-4s allreduce int32 sum\n", ok ? "ok" : "FAIL");
  if (!ok) cc_failures++;
  /* broadcast from rank 0 */
  HOK(hvd_broadcast("bcast", d, n, HVD_FLOAT32, 0));
  cc_compare("broadcast (root keeps its data)", d, 1, h, n, 0);
  HOK(hvd_shutdown());
  if (cc_failures) {
    printf("%d check(s) failed\n", cc_failures);
    return 1;
  }
  printf("all device allreduce checks passed\n");
  return 0;
}
#else
int main(void) {
  printf("skipped: no CUDA device (this build has no CUDA: make CUDA=1)\n");
  return 77;
}
#endif
