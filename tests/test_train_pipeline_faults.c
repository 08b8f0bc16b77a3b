/* test_train_pipeline_faults: how a pipeline (train/pipeline.h) fails, on 2 ranks (mlp,
   2 stages, 2 micro-batches, 1F1B), with train's test knobs set on both ranks:
   - HVD_TRAIN_TEST_PIPE_FAIL_STEP=1: step 1 fails on both stages, stage 0 after its first
     forward posted a send, stage 1 with its receives posted. Every point-to-point request
     of the step is then completed or cancelled (none left posted for a later step, the
     gather or hvd_shutdown to meet) and no stash is held; the next step is refused (a
     stale message could match it).
   - HVD_TRAIN_TEST_PIPE_GATHER_NOMEM=1: rank 1 finds no memory in the gather of the
     batch-norm statistics; both ranks fail it, naming rank 1 (none skips a collective
     the other calls), and a gather after it (the knob off) works on both. */
#include "hvd_test.h"
#include "nn/nn.h"
#include "train/pipeline_internal.h"

enum { PER = 8, M = 2 };

static void batch(const nn_model_t *m, int step, float *x, int32_t *y) {
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  for (size_t i = 0; i < (size_t)PER * c * h * w; i++) x[i] = (float)((i * 31 + step) % 17) / 17;
  for (int i = 0; i < PER; i++) y[i] = (i + step) % nn_model_num_classes(m);
}

static void body(void) {
  char err[512];
  nn_model_t *m = NULL;
  nn_model_config_t cfg = {.batch = PER / M, .seed = 3};
  nn_optim_config_t oc = {.kind = NN_OPTIM_SGD, .momentum = 0.9f};
  CHECK(nn_model_create(&m, "mlp", &cfg) == NN_OK, "create: %s", nn_last_error());
  CHECK(nn_model_optim_create(m, &oc) == NN_OK, "optim: %s", nn_last_error());
  train_pipeline_opts_t o = {.stages = 2, .micro_batches = M, .schedule = TRAIN_PIPE_1F1B};
  train_pipeline_t *p = NULL;
  CHECK(train_pipeline_create(&p, m, &o, PER / M, err, sizeof err) == 0, "create: %s", err);
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  float *x = malloc((size_t)PER * c * h * w * sizeof(float));
  int32_t y[PER];
  batch(m, 0, x, y);
  CHECK(train_pipeline_step(p, x, y, PER, 0.05f, NULL, NULL, err, sizeof err) == 0,
        "step 0: %s", err);
  batch(m, 1, x, y);
  CHECK(train_pipeline_step(p, x, y, PER, 0.05f, NULL, NULL, err, sizeof err) != 0 &&
        strstr(err, "HVD_TRAIN_TEST_PIPE_FAIL_STEP"), "step 1 did not fail as the knob "
        "says: %s", err);
  for (int i = 0; i < 4 * M; i++)
    CHECK(p->recv_act[i] == MPI_REQUEST_NULL, "after the failed step, request %d of %d "
          "(receives of activations, of gradients, sends of activations, of gradients; "
          "%d each) is still posted", i, 4 * M, M);
  for (int k = 0; k < M; k++) CHECK(!p->stash[k], "micro-batch %d's stash still held", k);
  CHECK(p->inflight == 0, "micro-batches still in flight: %d", p->inflight);
  CHECK(nn_model_forward(m, x, PER / M, 0) == NN_OK, "after the failed step the model "
        "does not run on its own buffers: %s", nn_last_error());
  batch(m, 2, x, y);
  CHECK(train_pipeline_step(p, x, y, PER, 0.05f, NULL, NULL, err, sizeof err) != 0 &&
        strstr(err, "step 1 failed"), "the step after a failed one was not refused: %s",
        err);
  CHECK(train_pipeline_gather(p, err, sizeof err) != 0 &&
        strstr(err, "rank 1 is out of memory"), "rank %d's gather did not fail for rank "
        "1's memory: %s", hvd_rank(), err);
  p->gather_nomem = 0;
  CHECK(train_pipeline_gather(p, err, sizeof err) == 0, "the gather after a failed one: %s",
        err);
  train_pipeline_free(p);
  nn_model_free(m);
  free(x);
}

int main(int argc, char **argv) {
  (void)argc;
  if (!hvd_test_is_rank()) {
    int rc = hvd_test_mpirun(argv[0], 2, "faults",
                             "HVD_TRAIN_TEST_PIPE_FAIL_STEP=1 HVD_TRAIN_TEST_PIPE_GATHER_NOMEM=1 "
                             "HVD_PEER_TIMEOUT_SECONDS=5", 120, NULL, 0);
    CHECK(rc == 0, "the pipeline's failures on 2 ranks: exit %d (124: a hang)", rc);
    if (rc == 0) printf("a failed pipeline step or gather leaves nothing behind\n");
    return failures ? 1 : 0;
  }
  char err[256];
  CHECK(train_pipeline_mpi_init(err, sizeof(err)) == 0, "%s", err);
  CHECK_OK(hvd_init());
  body();
  CHECK_OK(hvd_shutdown());
  train_pipeline_mpi_finalize();
  return failures ? 1 : 0;
}
