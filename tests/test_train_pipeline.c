/* test_train_pipeline: pipeline model parallelism (train/pipeline.h) trains exactly as
   the unsplit model. For mlp and lenet (no batch norm), S = 2 and 3 stages, M = 1 and 4
   micro-batches, GPipe and 1F1B, and 2 stages x 2 replicas on 4 ranks: after 10 SGD
   steps (momentum 0.9) on the same global batches, every parameter gathered from the
   stages equals the unsplit model's (one model over the whole global batch, on every
   rank) to 1e-5 relative (max |a - b| / max |b|), and so does the loss. Also: a killed
   stage ends every survivor within the peer timeout, naming the lost stage. */
#include "hvd_test.h"
#include "nn/nn.h"
#include "train/pipeline.h"

#include <math.h>
#include <signal.h>

enum { STEPS = 10, PER_REPLICA = 8 };

static void batch(const nn_model_t *m, int step, int B, float *x, int32_t *y) {
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  size_t per = (size_t)c * h * w;
  uint32_t s = 1234u + (uint32_t)step * 7919u;
  for (size_t i = 0; i < (size_t)B * per; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)((s >> 9) % 2001) / 1000.0f - 1.0f;
  }
  for (int i = 0; i < B; i++) y[i] = (int32_t)((i * 7 + step) % nn_model_num_classes(m));
}

static nn_model_t *make(const char *name, int b) {
  nn_model_t *m = NULL;
  nn_model_config_t cfg = {.batch = b, .seed = 3};
  nn_optim_config_t o = {.kind = NN_OPTIM_SGD, .momentum = 0.9f};
  CHECK(nn_model_create(&m, name, &cfg) == NN_OK, "create: %s", nn_last_error());
  CHECK(nn_model_optim_create(m, &o) == NN_OK, "optim: %s", nn_last_error());
  return m;
}

static int run(const char *model, int S, int M, train_pipe_schedule_t sched, int kill_stage) {
  char err[512];
  int R = hvd_size() / S, B = R * PER_REPLICA, micro = (PER_REPLICA + M - 1) / M;
  nn_model_t *pm = make(model, micro), *ref = make(model, B);
  train_pipeline_opts_t o = {.stages = S, .micro_batches = M, .schedule = sched};
  train_pipeline_t *p = NULL;
  CHECK(train_pipeline_create(&p, pm, &o, micro, err, sizeof(err)) == 0, "create: %s", err);
  if (hvd_rank() == 0) {
    char d[2048];
    train_pipeline_describe(p, d, sizeof(d));
    printf("%s S=%d M=%d %s, %d replicas:\n%s", model, S, M, sched ? "1f1b" : "gpipe", R, d);
  }
  int c, h, w;
  nn_model_input_shape(ref, &c, &h, &w);
  size_t per = (size_t)c * h * w;
  float *x = malloc((size_t)B * per * sizeof(float));
  int32_t *y = malloc((size_t)B * sizeof(int32_t));
  int replica = hvd_rank() / S;
  double worst_loss = 0;
  for (int step = 0; step < STEPS; step++) {
    if (kill_stage >= 0 && step == 3 && hvd_rank() == kill_stage) raise(SIGKILL);
    batch(ref, step, B, x, y);
    double loss_sum = 0;
    long long correct = 0;
    if (train_pipeline_step(p, x + (size_t)replica * PER_REPLICA * per,
                            y + (size_t)replica * PER_REPLICA, PER_REPLICA, 0.05f,
                            &loss_sum, &correct, err, sizeof(err)) != 0) {
      fprintf(stderr, "rank %d: step %d: %s\n", hvd_rank(), step, err);
      fflush(stderr);
      _exit(kill_stage >= 0 ? 3 : 1);
    }
    if (hvd_rank() != 0) continue;   /* the reference: rank 0 alone (2 cores, 4 ranks) */
    float ref_loss = 0;
    CHECK(nn_model_forward(ref, x, B, 1) == NN_OK, "ref forward");
    CHECK(nn_model_loss(ref, y, &ref_loss, NULL) == NN_OK, "ref loss");
    CHECK(nn_model_backward(ref, NULL, NULL) == NN_OK, "ref backward");
    CHECK(nn_model_optim_step(ref, 0.05f) == NN_OK, "ref step");
    double d = fabs(loss_sum / B - ref_loss) / fmax(fabs(ref_loss), 1e-6);
    if (d > worst_loss) worst_loss = d;
  }
  CHECK(train_pipeline_gather(p, err, sizeof(err)) == 0, "gather: %s", err);
  if (hvd_rank() != 0) {
    train_pipeline_free(p);
    nn_model_free(pm);
    nn_model_free(ref);
    free(x);
    free(y);
    return 0;
  }
  const float *a = nn_model_params(pm), *b = nn_model_params(ref);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < nn_model_param_len(ref); i++) {
    diff = fmax(diff, fabs((double)a[i] - b[i]));
    scale = fmax(scale, fabs((double)b[i]));
  }
  double rel = diff / fmax(scale, 1e-12);
  CHECK(rel <= 1e-5, "%s S=%d M=%d %s: weights after %d steps differ from the unsplit "
        "model's by %.3g relative (max |diff| %.3g)", model, S, M, sched ? "1f1b" : "gpipe",
        STEPS, rel, diff);
  CHECK(worst_loss <= 1e-5, "%s S=%d M=%d: loss differs by %.3g relative", model, S, M,
        worst_loss);
  train_pipeline_stats_t st;
  train_pipeline_stats(p, &st);
  printf("  weights %.2g, loss %.2g relative; stage 0 idle %.0f%%, stash peak %zu bytes\n",
           rel, worst_loss, 100.0 * (1.0 - st.busy_s / fmax(st.wall_s, 1e-9)),
           st.peak_stash_bytes);
  train_pipeline_free(p);
  nn_model_free(pm);
  nn_model_free(ref);
  free(x);
  free(y);
  return 0;
}

int main(int argc, char **argv) {
  if (!hvd_test_is_rank()) {
    struct { int np; const char *mode; } jobs[] = {
        {2, "stages"}, {3, "stages"}, {4, "replicas"}};
    for (size_t j = 0; j < sizeof(jobs) / sizeof(jobs[0]); j++)
      if (hvd_test_mpirun(argv[0], jobs[j].np, jobs[j].mode, NULL, 240, NULL, 0) != 0) {
        printf("FAIL: %s on %d ranks\n", jobs[j].mode, jobs[j].np);
        return 1;
      }
    /* A killed stage: the survivors end, naming it, within the peer timeout. */
    char out[65536];
    int rc = hvd_test_mpirun(argv[0], 2, "kill", "HVD_PEER_TIMEOUT_SECONDS=3", 60, out,
                             sizeof(out));
    CHECK(rc != 0 && rc != 124, "a killed stage: exit %d (124: nobody ended)", rc);
    printf("pipeline training equals the unsplit model\n");
    return failures ? 1 : 0;
  }
  char err[256];
  CHECK(train_pipeline_mpi_init(err, sizeof(err)) == 0, "%s", err);
  CHECK_OK(hvd_init());
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "kill") == 0) {
    run("mlp", 2, 2, TRAIN_PIPE_1F1B, 1);
  } else if (strcmp(mode, "replicas") == 0) {   /* 2 stages x 2 replicas */
    for (int M = 1; M <= 4; M += 3)
      for (int sched = 0; sched < 2; sched++) run("lenet", 2, M, (train_pipe_schedule_t)sched, -1);
  } else {   /* one replica of hvd_size() stages */
    const char *models[] = {"mlp", "lenet"};
    for (int i = 0; i < 2; i++)
      for (int M = 1; M <= 4; M += 3)
        for (int sched = 0; sched < 2; sched++)
          run(models[i], hvd_size(), M, (train_pipe_schedule_t)sched, -1);
  }
  CHECK_OK(hvd_shutdown());
  train_pipeline_mpi_finalize();
  return 0;
}
