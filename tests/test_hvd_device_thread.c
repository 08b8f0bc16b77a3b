/* tests/test_hvd_device_thread.c: hvd's background thread selects its rank's GPU before
   any other CUDA call, so that on a node with several GPUs no rank creates a context on
   GPU 0 that is not its own; a rank without a GPU of its own makes no CUDA call there.

   No GPU is needed: the CUDA calls hvd makes before a device is in use go through a
   table (hvd_device_set_probe), which this test fills with stand-ins that say "2 GPUs,
   every pointer is host memory" and record which thread made which call, in order.
   Runs at np=2 (local ranks 0 and 1: GPUs 0 and 1), np=3 (local rank 2: none), and np=3
   where each process sees one GPU (all: that one). */
#include "hvd/hvd_internal.h"
#include "tests/hvd_test.h"

#include <pthread.h>

#ifdef HVD_WITH_CUDA
static int fake_gpus = 2;   /* the GPUs the stand-ins report (argv[1]: gpus=N) */
#define MAX_EVENTS 100000

typedef enum { EV_COUNT, EV_SET, EV_PROBE } ev_kind_t;
typedef struct {
  pthread_t thread;
  ev_kind_t kind;
  int arg;
} event_t;

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static event_t events[MAX_EVENTS];
static int nevents, dropped;

static void record(ev_kind_t kind, int arg) {
  pthread_mutex_lock(&ev_mu);
  if (nevents < MAX_EVENTS) events[nevents++] = (event_t){pthread_self(), kind, arg};
  else dropped++;
  pthread_mutex_unlock(&ev_mu);
}

static int fake_count(int *n) {
  record(EV_COUNT, 0);
  *n = fake_gpus;
  return 0;
}
static int fake_set(int device) {
  record(EV_SET, device);
  return 0;
}
static int fake_is_device(const void *p, int *yes) {
  (void)p;
  record(EV_PROBE, 0);
  *yes = 0;
  return 0;
}
static const char *fake_error(int e) {
  (void)e;
  return "fake error";
}

static int body(void) {
  const hvd_cuda_probe_t fake = {fake_count, fake_set, fake_is_device, fake_error};
  hvd_device_set_probe(&fake);
  const pthread_t user = pthread_self();
  CHECK_OK(hvd_init());
  const int rank = hvd_rank(), local = hvd_local_rank();

  /* Host buffers through every kind of request the background thread inspects. */
  float a[64], b[64];
  for (int i = 0; i < 64; i++) a[i] = (float)(rank + i);
  for (int round = 0; round < 3; round++) {
    char name[32];
    snprintf(name, sizeof name, "t%d", round);
    CHECK_OK(hvd_allreduce(name, a, b, 64, HVD_FLOAT32, HVD_SUM));
  }
  CHECK_OK(hvd_broadcast("bcast", a, 64, HVD_FLOAT32, 0));
  /* hvd_wait_stream of host memory is hvd_wait, also on a rank whose background thread
     chose a GPU (it then waits for the request to complete or to be queued on it) */
  hvd_request_t req = NULL;
  CHECK_OK(hvd_allreduce_async("ws", a, b, 64, HVD_FLOAT32, HVD_SUM, &req));
  CHECK_OK(hvd_wait_stream(req, NULL));
  for (int i = 0; i < 64; i++)
    CHECK(b[i] == a[i] * (float)hvd_size(),   /* a is rank 0's on every rank now */
          "hvd_wait_stream: element %d is %g, expected %g", i, (double)b[i],
          (double)(a[i] * (float)hvd_size()));
  CHECK_STATUS(hvd_wait_stream(NULL, NULL), HVD_ERR_INVALID_ARGUMENT);
  CHECK_OK(hvd_barrier());
  CHECK_OK(hvd_shutdown());
  hvd_device_set_probe(NULL);

  /* local rank i: GPU i; a process that sees one GPU (CUDA_VISIBLE_DEVICES per rank):
     that one; otherwise none of its own */
  const int want = local < fake_gpus ? local : fake_gpus == 1 ? 0 : -1;
  pthread_mutex_lock(&ev_mu);
  CHECK(dropped == 0, "%d events dropped", dropped);
  int bg_events = 0, bg_probes = 0, bg_sets = 0, first_bg = -1;
  for (int i = 0; i < nevents; i++) {
    const event_t *e = &events[i];
    if (pthread_equal(e->thread, user) || e->kind == EV_COUNT) continue;
    bg_events++;
    if (first_bg < 0) first_bg = i;
    if (e->kind == EV_PROBE) bg_probes++;
    if (e->kind == EV_SET) {
      bg_sets++;
      CHECK(e->arg == want, "rank %d (local rank %d, %d GPUs): the background thread "
            "selected GPU %d, not %d", rank, local, fake_gpus, e->arg, want);
    }
  }
  if (want >= 0) {
    CHECK(first_bg >= 0 && events[first_bg].kind == EV_SET,
          "rank %d: the background thread's first CUDA call is a %s, not cudaSetDevice(%d)",
          rank, first_bg < 0 ? "none" : events[first_bg].kind == EV_PROBE
                                           ? "pointer query" : "?", want);
    CHECK(bg_sets == 1, "rank %d: %d device selections on the background thread, "
          "expected 1", rank, bg_sets);
    /* Not vacuous: the thread did look at the buffers, after choosing its GPU. */
    CHECK(bg_probes >= 4, "rank %d: only %d pointer queries on the background thread",
          rank, bg_probes);
  } else {
    CHECK(bg_events == 0, "rank %d (local rank %d, %d GPUs): %d CUDA calls on the "
          "background thread of a rank without a GPU of its own", rank, local, fake_gpus,
          bg_events);
  }
  pthread_mutex_unlock(&ev_mu);
  printf("rank %d (local rank %d): %d background-thread CUDA calls, %d pointer queries, "
         "device selected first: ok\n", rank, local, bg_events, bg_probes);
  return 0;
}
#endif

int main(int argc, char **argv) {
#ifndef HVD_WITH_CUDA
  (void)argc;
  (void)argv;
  printf("skipped: built without CUDA (make CUDA=0): hvd makes no CUDA call\n");
  return 77;
#else
  if (hvd_test_is_rank()) {
    if (argc > 1 && sscanf(argv[1], "gpus=%d", &fake_gpus) != 1) return 2;
    return body();
  }
  /* np=2 on 2 GPUs; np=3 on 2 GPUs (local rank 2 has none); np=3 each seeing 1 GPU */
  const struct { int np; const char *mode; } runs[] = {{2, "gpus=2"}, {3, "gpus=2"},
                                                        {3, "gpus=1"}};
  for (int i = 0; i < 3; i++) {
    int rc = hvd_test_mpirun(argv[0], runs[i].np, runs[i].mode, NULL, 60, NULL, 0);
    if (rc != 0) {
      fprintf(stderr, "FAIL: np=%d %s exited %d\n", runs[i].np, runs[i].mode, rc);
      return 1;
    }
  }
  printf("the background thread selects its GPU before any other CUDA call\n");
  return 0;
#endif
}
