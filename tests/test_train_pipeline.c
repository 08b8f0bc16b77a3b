/* test_train_pipeline: pipeline model parallelism (train/pipeline.h) trains exactly as
   the unsplit model. For mlp and lenet (no batch norm), S = 2 and 3 stages, M = 1 and 4
   micro-batches, GPipe and 1F1B, and 2 stages x 2 replicas on 4 ranks: after 10 SGD
   steps (momentum 0.9) on the same global batches, every parameter gathered from the
   stages equals the unsplit model's (one model over the whole global batch, on every
   rank) to 1e-5 relative (max |a - b| / max |b|), and so does the loss. resnet20 (batch
   norm) on 2 stages, M = 1 and 4, both schedules: batch norm normalises per micro-batch,
   so its reference is the unsplit model accumulating the gradients of the M
   micro-batches (one step on their mean); weights, running statistics (gathered from
   the stages) and num_batches_tracked agree. Also: a killed stage ends the job; a stopped
   stage 0 of 3 ends both survivors within the peer timeout, each naming rank 0 as hvd's
   census does (stage 2 too, though it waits for stage 1). */
#include "hvd_test.h"
#include "nn/nn.h"
#include "train/pipeline.h"
#include "train/pipeline_internal.h"

#include <math.h>
#include <signal.h>

enum { STEPS = 10, PER_REPLICA = 8 };
static int kill_signal = SIGKILL;

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

/* Batch norm normalises per micro-batch: the unsplit model's reference is then gradient
   accumulation over the M micro-batches of the (one replica's) batch B, each a forward
   in training mode on its own samples, the mean of their gradients one step (train's
   --batches-per-allreduce M at B / M). Returns the mean loss over B. */
static float ref_accumulated(nn_model_t *ref, const float *x, const int32_t *y, int B, int M,
                             size_t per) {
  double loss_sum = 0;
  CHECK(B % M == 0, "equal micro-batches (%d samples, %d micro-batches)", B, M);
  CHECK(nn_model_zero_grads(ref) == NN_OK, "ref zero");
  for (int k = 0, nk = B / M; k < M; k++) {
    float loss = 0;
    CHECK(nn_model_forward(ref, x + (size_t)k * nk * per, nk, 1) == NN_OK, "ref forward");
    CHECK(nn_model_loss(ref, y + k * nk, &loss, NULL) == NN_OK, "ref loss");
    CHECK(nn_model_backward_accumulate(ref, NULL, NULL) == NN_OK, "ref backward");
    loss_sum += (double)loss * nk;
  }
  CHECK(nn_model_scale_grads(ref, 0, nn_model_param_len(ref), 1.0f / M) == NN_OK, "ref mean");
  return (float)(loss_sum / B);
}

static double max_rel(const float *a, const float *b, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; i++) {
    diff = fmax(diff, fabs((double)a[i] - b[i]));
    scale = fmax(scale, fabs((double)b[i]));
  }
  return diff / fmax(scale, 1e-12);
}

static int run(const char *model, int S, int M, train_pipe_schedule_t sched, int kill_stage) {
  char err[512];

  int R = hvd_size() / S, B = R * PER_REPLICA, micro = (PER_REPLICA + M - 1) / M;
  nn_model_t *pm = make(model, micro), *ref = make(model, B);
  int bn = nn_model_num_buffers(ref) > 0;
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
    if (kill_stage >= 0 && step == 3 && hvd_rank() == kill_stage) raise(kill_signal);
    batch(ref, step, B, x, y);
    double loss_sum = 0;
    long long correct = 0;
    if (train_pipeline_step(p, x + (size_t)replica * PER_REPLICA * per,
                            y + (size_t)replica * PER_REPLICA, PER_REPLICA, 0.05f,
                            &loss_sum, &correct, err, sizeof(err)) != 0) {
      fprintf(stderr, "rank %d: step %d: %s\n", hvd_rank(), step, err);
      fflush(stderr);
      /* As train does: the runtime ended (bounded after a failure), then the exit; a
         pause first, so that every survivor has said its line before the first exit
         makes mpirun end the job. */
      if (kill_stage >= 0) {
        sleep(2);
        hvd_shutdown();
      }
      _exit(kill_stage >= 0 ? 3 : 1);
    }
    if (hvd_rank() != 0) continue;   /* the reference: rank 0 alone (2 cores, 4 ranks) */
    float ref_loss = bn ? ref_accumulated(ref, x, y, B, M, per) : 0;
    if (!bn) {
      CHECK(nn_model_forward(ref, x, B, 1) == NN_OK, "ref forward");
      CHECK(nn_model_loss(ref, y, &ref_loss, NULL) == NN_OK, "ref loss");
      CHECK(nn_model_backward(ref, NULL, NULL) == NN_OK, "ref backward");
    }
    CHECK(nn_model_optim_step(ref, 0.05f) == NN_OK, "ref step");
    double d = fabs(loss_sum / B - ref_loss) / fmax(fabs(ref_loss), 1e-6);
    if (d > worst_loss) worst_loss = d;
  }
  CHECK(train_pipeline_average_stats(p, err, sizeof(err)) == 0, "average: %s", err);
  CHECK(train_pipeline_gather(p, err, sizeof(err)) == 0, "gather: %s", err);
  if (hvd_rank() != 0) {
    train_pipeline_free(p);
    nn_model_free(pm);
    nn_model_free(ref);
    free(x);
    free(y);
    return 0;
  }
  double rel = max_rel(nn_model_params(pm), nn_model_params(ref), nn_model_param_len(ref));
  CHECK(rel <= 1e-5, "%s S=%d M=%d %s: weights after %d steps differ from the unsplit "
        "model's by %.3g relative", model, S, M, sched ? "1f1b" : "gpipe", STEPS, rel);
  if (bn) {   /* every stage's running statistics and counters, gathered */
    double rb = max_rel(nn_model_buffers(pm), nn_model_buffers(ref), nn_model_num_buffers(ref));
    CHECK(rb <= 1e-5, "%s S=%d M=%d %s: running statistics differ from the unsplit model's "
          "by %.3g relative", model, S, M, sched ? "1f1b" : "gpipe", rb);
    int nc = 0;
    for (int i = 0; i < nn_model_num_slices(ref); i++)
      nc += nn_model_slice(ref, i)->kind == NN_SLICE_COUNTER;
    for (int i = 0; i < nc; i++)
      CHECK(nn_model_counters(pm)[i] == nn_model_counters(ref)[i] &&
            nn_model_counters(ref)[i] == (int64_t)STEPS * M, "%s M=%d: counter %d is %lld, "
            "the unsplit model's %lld (expected %d)", model, M, i,
            (long long)nn_model_counters(pm)[i], (long long)nn_model_counters(ref)[i],
            STEPS * M);
  }
  CHECK(worst_loss <= 1e-5, "%s S=%d M=%d: loss differs by %.3g relative", model, S, M,
        worst_loss);
  train_pipeline_stats_t st;
  train_pipeline_stats(p, &st);
  /* Memory as designed: one activation set per micro-batch in flight at the peak, all
     back in the pool after the step; 1F1B's stage s holds at most S - s of them. */
  int stage = train_pipeline_stage(p), most = sched == TRAIN_PIPE_1F1B && S - stage < M
                                                   ? S - stage : M;
  CHECK(p->npool <= most && st.peak_stash_bytes == (size_t)p->npool * p->stash_bytes,
        "%s S=%d M=%d stage %d: %d activation sets (at most %d), stash report %zu bytes "
        "for sets of %zu", model, S, M, stage, p->npool, most, st.peak_stash_bytes,
        p->stash_bytes);
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
    /* Stage 0 of 3 stopped: stage 1 waits for it, stage 2 for stage 1 (alive); both end
       naming rank 0, from hvd's census, as collectives would. */
    rc = hvd_test_mpirun(argv[0], 3, "stop", "HVD_PEER_TIMEOUT_SECONDS=3", 60, out,
                         sizeof(out));
    CHECK(rc != 0 && rc != 124, "a stopped stage: exit %d (124: nobody ended)", rc);
    for (int r = 1; r <= 2; r++) {
      char want[64];
      snprintf(want, sizeof(want), "rank %d: step 3: pipeline stage %d", r, r);
      const char *line = strstr(out, want);
      const char *eol = line ? strchr(line, '\n') : NULL;
      const char *named = line ? strstr(line, "rank(s): rank 0 (host") : NULL;
      CHECK(line && named && (!eol || named < eol), "a stopped stage 0: rank %d's error does "
            "not name the lost rank 0 as hvd's census does:\n%s", r, out);
    }
    printf("pipeline training equals the unsplit model\n");
    return failures ? 1 : 0;
  }
  char err[256];
  CHECK(train_pipeline_mpi_init(err, sizeof(err)) == 0, "%s", err);
  CHECK_OK(hvd_init());
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "kill") == 0) {
    run("mlp", 2, 2, TRAIN_PIPE_1F1B, 1);
  } else if (strcmp(mode, "stop") == 0) {
    kill_signal = SIGSTOP;
    run("mlp", 3, 2, TRAIN_PIPE_1F1B, 0);
  } else if (strcmp(mode, "replicas") == 0) {   /* 2 stages x 2 replicas */
    for (int M = 1; M <= 4; M += 3)
      for (int sched = 0; sched < 2; sched++) run("lenet", 2, M, (train_pipe_schedule_t)sched, -1);
  } else {   /* one replica of hvd_size() stages */
    /* resnet20 (batch norm, per micro-batch) on 2 stages only: 2 cores. */
    const char *models[] = {"mlp", "lenet", "resnet20"};
    for (int i = 0; i < (hvd_size() == 2 ? 3 : 2); i++)
      for (int M = 1; M <= 4; M += 3)
        for (int sched = 0; sched < 2; sched++)
          run(models[i], hvd_size(), M, (train_pipe_schedule_t)sched, -1);
  }
  CHECK_OK(hvd_shutdown());
  train_pipeline_mpi_finalize();
  return 0;
}
