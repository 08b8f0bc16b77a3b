/* test_nn_optim: SGD (plain, weight decay, momentum, nesterov), Adam (with L2 and custom
   betas/eps) and AdamW against torch.optim (tests/fixtures/models/optim.safetensors,
   written by scripts/fixtures_models.py: five steps from p0 with fixed gradients and a
   changing learning rate, torch in float64). Error per step: max|a - b| / max|b|, must be
   below 1e-5. Then the learning-rate schedules against their closed forms, and argument
   checks. Run from the repository root. */
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/check.h"

#define FIX "tests/fixtures/models/optim.safetensors"

static const nn_st_tensor_t *need(const nn_st_file_t *f, const char *name,
                                  nn_st_dtype_t dt, size_t numel) {
  const nn_st_tensor_t *t = nn_st_find(f, name);
  if (!t || t->dtype != dt || t->nbytes != numel * nn_st_dtype_size(dt)) {
    printf("FAIL fixture %s: tensor %s missing or of the wrong dtype/size\n", FIX, name);
    failures++;
    return NULL;
  }
  return t;
}

typedef struct {
  const char *name;
  nn_optim_config_t cfg;
  int adam;
} optim_case_t;

static void run_case(const nn_st_file_t *f, const optim_case_t *c, size_t n, int steps) {
  const nn_st_tensor_t *p0 = need(f, "p0", NN_ST_F32, n);
  const nn_st_tensor_t *lr = need(f, c->adam ? "lr_adam" : "lr_sgd", NN_ST_F64, (size_t)steps);
  if (!p0 || !lr) return;
  float p[64];
  memcpy(p, p0->data, n * sizeof(float));
  nn_optim_t *o = NULL;
  nn_status_t s = nn_optim_create(&o, &c->cfg, n);
  CHECK(s == NN_OK, "%s: nn_optim_create: %s", c->name, nn_last_error());
  if (s != NN_OK) return;
  double worst = 0;
  for (int k = 0; k < steps; k++) {
    char name[64];
    snprintf(name, sizeof name, "g%d", k);
    const nn_st_tensor_t *g = need(f, name, NN_ST_F32, n);
    snprintf(name, sizeof name, "%s.step%d", c->name, k);
    const nn_st_tensor_t *want = need(f, name, NN_ST_F32, n);
    if (!g || !want) break;
    double lrk;
    memcpy(&lrk, (const char *)lr->data + k * sizeof(double), sizeof lrk);
    s = nn_optim_step(o, p, (const float *)g->data, (float)lrk);
    CHECK(s == NN_OK, "%s step %d: %s", c->name, k, nn_last_error());
    const float *w = (const float *)want->data;
    double maxd = 0, maxb = 1e-12;
    for (size_t i = 0; i < n; i++) {
      double d = fabs((double)p[i] - (double)w[i]);
      if (d > maxd) maxd = d;
      if (fabs((double)w[i]) > maxb) maxb = fabs((double)w[i]);
    }
    if (maxd / maxb > worst) worst = maxd / maxb;
  }
  CHECK(*nn_optim_step_count(o) == steps, "%s: step count %lld, expected %d", c->name,
        (long long)*nn_optim_step_count(o), steps);
  size_t sc = 0;
  CHECK(nn_optim_state(o, &sc) != NULL && sc == (c->adam ? 2 * n : n),
        "%s: state of %zu floats", c->name, sc);
  printf("%-14s worst relative error over %d steps: %.3g\n", c->name, steps, worst);
  CHECK(worst < 1e-5, "%s: relative error %.3g >= 1e-5", c->name, worst);
  nn_optim_free(o);
}

static void test_against_torch(void) {
  nn_st_file_t f;
  nn_status_t s = nn_st_read(FIX, &f);
  CHECK(s == NN_OK, "cannot read %s: %s", FIX, nn_last_error());
  if (s != NN_OK) return;
  const size_t n = 37;
  const int steps = 5;
  const optim_case_t cases[] = {
      {"sgd", {.kind = NN_OPTIM_SGD}, 0},
      {"sgd_wd", {.kind = NN_OPTIM_SGD, .weight_decay = 1e-2f}, 0},
      {"sgd_momentum", {.kind = NN_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 5e-4f}, 0},
      {"sgd_nesterov",
       {.kind = NN_OPTIM_SGD, .momentum = 0.9f, .nesterov = 1, .weight_decay = 1e-2f}, 0},
      {"adam", {.kind = NN_OPTIM_ADAM}, 1},
      {"adam_wd",
       {.kind = NN_OPTIM_ADAM, .weight_decay = 1e-2f, .beta1 = 0.8f, .beta2 = 0.99f,
        .eps = 1e-6f}, 1},
      {"adamw", {.kind = NN_OPTIM_ADAMW, .weight_decay = 1e-2f}, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&f, &cases[i], n, steps);
  nn_st_free(&f);
}

static void near(const char *what, float got, double want) {
  double tol = 1e-6 * fmax(1.0, fabs(want));
  CHECK(fabs((double)got - want) <= tol, "%s: %.9g, expected %.9g", what, (double)got, want);
}

static void test_schedules(void) {
  nn_lr_schedule_t c = {.kind = NN_LR_CONSTANT, .base_lr = 0.4f};
  near("constant at 0", nn_lr_at(&c, 0.0), 0.4);
  near("constant at 7.5", nn_lr_at(&c, 7.5), 0.4);

  /* warm-up from 0.1 to 0.4 over 2 epochs, then constant */
  c.warmup_epochs = 2.0f;
  c.warmup_start_lr = 0.1f;
  near("warm-up at 0", nn_lr_at(&c, 0.0), 0.1);
  near("warm-up at 0.5", nn_lr_at(&c, 0.5), 0.1 + 0.3 * 0.25);
  near("warm-up at 1.5", nn_lr_at(&c, 1.5), 0.1 + 0.3 * 0.75);
  near("warm-up end", nn_lr_at(&c, 2.0), 0.4);
  near("after warm-up", nn_lr_at(&c, 3.0), 0.4);

  nn_lr_schedule_t st = {.kind = NN_LR_STEP, .base_lr = 1.0f, .step_epochs = 3.0f,
                         .gamma = 0.1f};
  near("step at 0", nn_lr_at(&st, 0.0), 1.0);
  near("step at 2.99", nn_lr_at(&st, 2.99), 1.0);
  near("step at 3", nn_lr_at(&st, 3.0), 0.1);
  near("step at 6.5", nn_lr_at(&st, 6.5), 0.01);
  st.warmup_epochs = 1.0f;
  st.warmup_start_lr = 0.25f;
  near("step warm-up at 0.5", nn_lr_at(&st, 0.5), 0.625);
  near("step after warm-up at 4", nn_lr_at(&st, 4.0), 0.1);

  nn_lr_schedule_t co = {.kind = NN_LR_COSINE, .base_lr = 0.5f, .total_epochs = 10.0f,
                         .min_lr = 0.01f};
  for (double e = 0; e <= 12.0; e += 0.75) {
    double t = e / 10.0 > 1.0 ? 1.0 : e / 10.0;
    char what[64];
    snprintf(what, sizeof what, "cosine at %.2f", e);
    near(what, nn_lr_at(&co, e), 0.01 + 0.49 * 0.5 * (1 + cos(M_PI * t)));
  }
  co.warmup_epochs = 2.0f;
  co.warmup_start_lr = 0.05f;
  near("cosine warm-up at 1", nn_lr_at(&co, 1.0), 0.275);
  near("cosine start after warm-up", nn_lr_at(&co, 2.0), 0.5);
  near("cosine middle after warm-up", nn_lr_at(&co, 6.0), 0.01 + 0.49 * 0.5);
  near("cosine end", nn_lr_at(&co, 10.0), 0.01);
}

static void test_arguments(void) {
  nn_optim_t *o = NULL;
  nn_optim_config_t bad = {.kind = NN_OPTIM_SGD, .nesterov = 1};
  CHECK(nn_optim_create(&o, &bad, 4) == NN_ERR_ARG && o == NULL,
        "nesterov without momentum accepted");
  CHECK(strstr(nn_last_error(), "nesterov") != NULL, "message: %s", nn_last_error());
  nn_optim_config_t badw = {.kind = NN_OPTIM_ADAM, .weight_decay = -1.0f};
  CHECK(nn_optim_create(&o, &badw, 4) == NN_ERR_ARG, "negative weight decay accepted");
  nn_optim_config_t badk = {.kind = (nn_optim_kind_t)42};
  CHECK(nn_optim_create(&o, &badk, 4) == NN_ERR_ARG, "unknown kind accepted");
  nn_optim_config_t ok = {.kind = NN_OPTIM_SGD, .momentum = 0.9f};
  CHECK(nn_optim_create(&o, &ok, 4) == NN_OK, "%s", nn_last_error());
  float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1};
  CHECK(nn_optim_step(o, p, g, NAN) == NN_ERR_ARG, "NaN lr accepted");
  CHECK(nn_optim_step(o, p, g, -0.1f) == NN_ERR_ARG, "negative lr accepted");
  CHECK(p[0] == 1.0f, "a refused step changed the parameters");
  nn_optim_free(o);
}

int main(void) {
  test_against_torch();
  test_schedules();
  test_arguments();
  if (failures) {
    printf("test_nn_optim: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_nn_optim: all passed\n");
  return 0;
}
