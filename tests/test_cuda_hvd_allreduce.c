/* test_cuda_hvd_allreduce: hvd_allreduce and hvd_broadcast of CUDA device memory, and
   hvd_grad_buckets' float16 compression of device gradients. Runs at any size (mpirun
   with one GPU per local rank) and in one process (size 1; scripts/gpu_check.sh builds
   it against a single-process MPI stub). hvd starts three times in one process (MPI is
   initialised here, so hvd leaves it running between):
     1. flat: one NCCL communicator over the world;
     2. HVD_HIERARCHICAL_ALLREDUCE=1 on one host: ignored (flat), must still work;
     3. HVD_HIERARCHICAL_ALLREDUCE=1 with the test knob HVD_TEST_HIERARCHICAL_ONE_HOST=1:
        the two-level path (NCCL reduce-scatter over the host's ranks, the shard through
        pinned host memory and the host cross-host allreduce, NCCL allgather) even on one
        host; the timeline must show NCCL_HIERARCHICAL_ALLREDUCE.
   In each: sum and average of one tensor, in place and out of place, several small
   tensors at once (fused in the device fusion buffer), a tensor larger than the fusion
   threshold, int32 and float16 allreduce, broadcast, and float16-compressed gradient
   buckets (at size 1 the result is exactly the float16-rounded input, and at any size
   the same as the host path's on a copy of the gradients). The event-driven path: six
   large buckets in flight at once, each written by copies queued on the compute stream
   just before its submission (with no host synchronisation in between: only the
   submission event orders them before the collective), half of them waited for with
   hvd_wait_stream (the compute stream waits, not the host), results compared with the
   host path's allreduce of the same data. Exits 77 without a CUDA device. */
#include "hvd/hvd.h"
#include "hvd/hvd_internal.h"   /* hvd_device_thread_device */
#include "collectives/coll.h"
#include "nn/nn.h"
#include "nn/nn_cuda.h"

#include <stdio.h>

#ifdef HVD_WITH_CUDA
#include "tests/cuda_check.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <unistd.h>

#define HOK(expr)                                                                  \
  do {                                                                             \
    hvd_status_t s_ = (expr);                                                      \
    if (s_ != HVD_OK) {                                                            \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #expr,           \
              hvd_status_string(s_), hvd_last_error());                            \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

#define CUDA_RT_OK(expr)                                                           \
  do {                                                                             \
    cudaError_t e_ = (expr);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                 \
              cudaGetErrorString(e_));                                             \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static void ok_line(int ok, const char *phase, const char *what) {
  char line[128];
  snprintf(line, sizeof line, "%s: %s", phase, what);
  printf("%-4s %s\n", ok ? "ok" : "FAIL", line);
  if (!ok) cc_failures++;
}

static double compare(const char *phase, const char *what, const float *got_dev,
                      const float *want, size_t n, double tol) {
  char line[128];
  snprintf(line, sizeof line, "%s: %s", phase, what);
  return cc_compare(line, got_dev, 1, want, n, tol);
}

static float half_round(float x) { return coll_half_to_float(coll_float_to_half(x)); }

/* Several buckets in flight: each bucket's data is produced on the compute stream by a
   chain of device copies queued just before hvd_allreduce_async (no synchronisation),
   from a buffer that differs per rank; all are submitted before the first wait. The
   result must equal the host path's allreduce of the same data. */
static void check_in_flight(const char *phase) {
  enum { NB = 6 };
  const size_t n = 4u << 20;   /* 16 MB per bucket: the copies take a while */
  const int rank = hvd_rank();
  cudaStream_t cs = (cudaStream_t)nn_cuda_stream();
  float *src[NB], *tmp[NB], *dst[NB], *host[NB];
  hvd_request_t req[NB];
  for (int b = 0; b < NB; b++) {
    host[b] = cc_random(n);
    for (size_t i = 0; i < n; i += 97) host[b][i] += (float)(rank + b);
    src[b] = cc_dev(host[b], n);
    tmp[b] = cc_dev(NULL, n);
    dst[b] = cc_dev(NULL, n);
  }
  CC_OK(nn_cuda_synchronize());
  for (int b = 0; b < NB; b++) {
    CUDA_RT_OK(cudaMemcpyAsync(tmp[b], src[b], n * sizeof(float), cudaMemcpyDeviceToDevice,
                               cs));
    CUDA_RT_OK(cudaMemcpyAsync(dst[b], tmp[b], n * sizeof(float), cudaMemcpyDeviceToDevice,
                               cs));
    char name[32];
    snprintf(name, sizeof name, "inflight.%d", b);
    HOK(hvd_allreduce_async(name, dst[b], dst[b], n, HVD_FLOAT32, HVD_SUM, &req[b]));
  }
  /* newest first; the odd ones let the compute stream wait instead of the host (the
     comparison below reads the result through that stream) */
  for (int b = NB - 1; b >= 0; b--)
    HOK(b % 2 ? hvd_wait_stream(req[b], cs) : hvd_wait(req[b]));
  for (int b = 0; b < NB; b++) {
    char name[32], what[96];
    snprintf(name, sizeof name, "inflight.host.%d", b);
    HOK(hvd_allreduce(name, host[b], host[b], n, HVD_FLOAT32, HVD_SUM));
    snprintf(what, sizeof what, "bucket %d of %d in flight = host path", b + 1, NB);
    /* sum order may differ between NCCL and the ring beyond two ranks */
    compare(phase, what, dst[b], host[b], n, hvd_size() <= 2 ? 0 : 1e-5);
    nn_cuda_free(src[b]);
    nn_cuda_free(tmp[b]);
    nn_cuda_free(dst[b]);
    free(host[b]);
  }
}

/* The float16-compressed buckets of device gradients against the host path's on a copy. */
static void check_fp16_host_path(const char *phase, hvd_op_t op) {
  const size_t n = 300007;
  float *h = cc_random(n);
  for (size_t i = 0; i < n; i += 5) h[i] *= 300.0f + (float)hvd_rank();
  float *d = cc_dev(h, n);
  hvd_grad_buckets_t *gd = NULL, *gh = NULL;
  HOK(hvd_grad_buckets_create(&gd, d, n, 256 << 10, 32 << 10, HVD_COMPRESSION_FP16, op));
  for (size_t from = n; from > 0;) {   /* every bucket submitted before the first wait */
    from = from > 50000 ? from - 50000 : 0;
    HOK(hvd_grad_buckets_ready(gd, from));
  }
  HOK(hvd_grad_buckets_wait(gd));
  HOK(hvd_grad_buckets_create(&gh, h, n, 256 << 10, 32 << 10, HVD_COMPRESSION_FP16, op));
  HOK(hvd_grad_buckets_wait(gh));
  char what[96];
  snprintf(what, sizeof what, "fp16 buckets %s (%zu) = host path",
           op == HVD_AVERAGE ? "average" : "sum", hvd_grad_buckets_num(gd));
  compare(phase, what, d, h, n, hvd_size() <= 2 ? 0 : 2e-3);
  hvd_grad_buckets_free(gd);
  hvd_grad_buckets_free(gh);
  nn_cuda_free(d);
  free(h);
}

/* Float16 compression of device gradients through hvd_grad_buckets: several buckets,
   some submitted during a simulated backward, the rest in wait(); two steps. */
static void check_fp16_buckets(const char *phase, hvd_op_t op) {
  int size = hvd_size();
  size_t n = 100003;
  float *h = cc_random(n), *want = cc_host(n);
  for (size_t i = 0; i < n; i += 7) h[i] *= 1000.0f;   /* a wider range of exponents */
  for (size_t i = 0; i < n; i++) {
    float r = half_round(h[i]);
    want[i] = op == HVD_AVERAGE ? r : r * (float)size;
  }
  /* Exact at size 1 (the cast and back, times 1); float16 sums round otherwise. */
  double tol = size == 1 ? 0 : 2e-3;
  float *d = cc_dev(h, n);
  hvd_grad_buckets_t *gb = NULL;
  HOK(hvd_grad_buckets_create(&gb, d, n, 64 << 10, 16 << 10, HVD_COMPRESSION_FP16, op));
  char what[96];
  for (int step = 0; step < 2; step++) {
    if (step == 1) CC_OK(nn_cuda_to_device(d, h, n * sizeof(float)));
    if (step == 0)   /* backward finishes the end of the buffer first */
      for (size_t from = n; from > 0;) {
        from = from > 30000 ? from - 30000 : 0;
        HOK(hvd_grad_buckets_ready(gb, from));
      }
    HOK(hvd_grad_buckets_wait(gb));
    snprintf(what, sizeof what, "fp16 buckets %s, step %d (%zu buckets)",
             op == HVD_AVERAGE ? "average" : "sum", step + 1, hvd_grad_buckets_num(gb));
    compare(phase, what, d, want, n, tol);
  }
  hvd_grad_buckets_free(gb);
  nn_cuda_free(d);
  free(h);
  free(want);
}

static void run_checks(const char *phase) {
  int size = hvd_size();
  CC_OK(nn_cuda_set_device(hvd_local_rank()));
  hvd_cuda_set_stream(nn_cuda_stream());
  /* one tensor, out of place, sum; a count no local size divides evenly (remainder) */
  size_t n = 100003;
  float *h = cc_random(n), *want = cc_host(n);
  for (size_t i = 0; i < n; i++) want[i] = h[i] * (float)size;
  float *d = cc_dev(h, n), *r = cc_dev(NULL, n);
  HOK(hvd_allreduce("one", d, r, n, HVD_FLOAT32, HVD_SUM));
  compare(phase, "allreduce sum, out of place", r, want, n, 1e-6);
  /* in place, average: unchanged at any size for identical inputs */
  HOK(hvd_allreduce("avg", d, d, n, HVD_FLOAT32, HVD_AVERAGE));
  compare(phase, "allreduce average, in place", d, h, n, 1e-6);
  /* fewer elements than most local sizes */
  float h3[3] = {1.5f, -2.25f, 3.0f}, w3[3];
  for (int i = 0; i < 3; i++) w3[i] = h3[i] * (float)size;
  float *d3 = cc_dev(h3, 3);
  HOK(hvd_allreduce("three", d3, d3, 3, HVD_FLOAT32, HVD_SUM));
  compare(phase, "allreduce sum of 3 elements", d3, w3, 3, 1e-6);
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
    compare(phase, "fused small tensor", ds[k], hs[k], 1000 + 17 * k, 1e-6);
  }
  /* larger than the default fusion threshold (64 MiB): 20M floats */
  size_t big = 20u << 20;
  float *hb = cc_host(big);
  for (size_t i = 0; i < big; i++) hb[i] = (float)(i % 1000) * 0.25f;
  float *db = cc_dev(hb, big);
  HOK(hvd_allreduce("big", db, db, big, HVD_FLOAT32, HVD_AVERAGE));
  compare(phase, "allreduce average, 80 MB tensor", db, hb, big, 1e-6);
  /* int32 sum */
  int32_t hi[1000], gi[1000];
  for (int i = 0; i < 1000; i++) hi[i] = i - 500;
  int32_t *di = cc_dev_bytes(hi, sizeof hi);
  HOK(hvd_allreduce("ints", di, di, 1000, HVD_INT32, HVD_SUM));
  CC_OK(nn_cuda_to_host(gi, di, sizeof gi));
  int ok = 1;
  for (int i = 0; i < 1000; i++) ok &= gi[i] == hi[i] * size;
  ok_line(ok, phase, "allreduce int32 sum");
  /* float16 sum of small integers (exact in float16 at any size up to 2048 / 64) */
  enum { NH = 4099 };
  static uint16_t hh[NH], gh[NH];
  for (int i = 0; i < NH; i++) hh[i] = coll_float_to_half((float)(i % 64 - 32));
  uint16_t *dh = cc_dev_bytes(hh, sizeof hh);
  HOK(hvd_allreduce("halves", dh, dh, NH, HVD_FLOAT16, HVD_SUM));
  CC_OK(nn_cuda_to_host(gh, dh, sizeof gh));
  ok = 1;
  for (int i = 0; i < NH; i++)
    ok &= coll_half_to_float(gh[i]) == (float)((i % 64 - 32) * size);
  ok_line(ok, phase, "allreduce float16 sum");
  /* broadcast from rank 0: d is loaded afresh (the in-place average above is exact at 1
     or 2 ranks, but x/n summed n times may round at 3, 4, ...), and every other rank
     starts from different data, so the result is h only if rank 0's data arrived */
  {
    int rank = hvd_rank();
    float *mine = cc_host(n);
    for (size_t i = 0; i < n; i++) mine[i] = rank == 0 ? h[i] : h[i] * (float)(rank + 1) + 1.0f;
    CC_OK(nn_cuda_to_device(d, mine, n * sizeof(float)));
    free(mine);
  }
  HOK(hvd_broadcast("bcast", d, n, HVD_FLOAT32, 0));
  compare(phase, hvd_rank() == 0 ? "broadcast (root keeps its data)" : "broadcast (root's data)",
          d, h, n, 0);
  check_fp16_buckets(phase, HVD_SUM);
  check_fp16_buckets(phase, HVD_AVERAGE);
  check_fp16_host_path(phase, HVD_SUM);
  check_fp16_host_path(phase, HVD_AVERAGE);
  check_in_flight(phase);

  nn_cuda_free(d);
  nn_cuda_free(r);
  nn_cuda_free(d3);
  nn_cuda_free(db);
  nn_cuda_free(di);
  nn_cuda_free(dh);
  for (int k = 0; k < K; k++) {
    nn_cuda_free(ds[k]);
    free(hs[k]);
  }
  free(h);
  free(want);
  free(hb);
}

int main(void) {
  cc_require_device();
  /* MPI is ours, so that hvd_shutdown leaves it running and hvd can start again. */
  int provided = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS ||
      provided < MPI_THREAD_SERIALIZED) {
    fprintf(stderr, "MPI_Init_thread failed or gave thread level %d\n", provided);
    return 1;
  }

  setenv("HVD_HIERARCHICAL_ALLREDUCE", "0", 1);
  unsetenv("HVD_TEST_HIERARCHICAL_ONE_HOST");
  HOK(hvd_init());
  run_checks("flat");
  /* The background thread chose its rank's GPU before its first CUDA call (the CPU
     side of this is tests/test_hvd_device_thread.c). */
  ok_line(hvd_device_thread_device() == hvd_local_rank(), "flat",
          "hvd's background thread selected GPU local_rank first");
  HOK(hvd_shutdown());

  setenv("HVD_HIERARCHICAL_ALLREDUCE", "1", 1);
  HOK(hvd_init());
  run_checks(hvd_cross_size() > 1 ? "hierarchical (hosts)" : "hierarchical=1, one host");
  HOK(hvd_shutdown());

  char timeline[] = "/tmp/test_cuda_hvd_allreduce.XXXXXX";
  int fd = mkstemp(timeline);
  if (fd < 0) {
    perror("mkstemp");
    return 1;
  }
  close(fd);
  setenv("HVD_TEST_HIERARCHICAL_ONE_HOST", "1", 1);
  setenv("HVD_TIMELINE", timeline, 1);
  HOK(hvd_init());
  int rank = hvd_rank();
  run_checks("hierarchical, forced");
  HOK(hvd_shutdown());
  unsetenv("HVD_TIMELINE");
  if (rank == 0) {
    /* the two-level device path really ran */
    FILE *f = fopen(timeline, "r");
    char buf[4096];
    int seen = 0;
    while (f && fgets(buf, sizeof buf, f))
      if (strstr(buf, "NCCL_HIERARCHICAL_ALLREDUCE")) seen = 1;
    if (f) fclose(f);
    ok_line(seen, "hierarchical, forced", "timeline shows NCCL_HIERARCHICAL_ALLREDUCE");
  }
  unlink(timeline);
  MPI_Finalize();
  return cc_finish("all device allreduce checks passed");
}
#else
int main(void) {
  printf("skipped: no CUDA device (this build has no CUDA: make CUDA=1)\n");
  return 77;
}
#endif
