/* test_nn_optim_rmsprop: nn's RMSprop (nn/optim.c) against torch.optim.RMSprop
   (PyTorch 1.13, float64): five steps from p0 with fixed gradients and a changing
   learning rate, three configurations (PyTorch's defaults; tf_cnn_benchmarks' decay 0.9,
   momentum 0.9, eps 1.0 with its weight decay; L2 with another alpha and momentum).
   Error per step: max|a - b| / max|b| below 1e-5, as test_nn_optim. One step is also
   worked by hand, and the arguments are checked. The reference rows come from:

     import torch; torch.set_default_dtype(torch.float64)
     p = torch.tensor(P0, requires_grad=True)
     opt = torch.optim.RMSprop([p], lr=LR[0], alpha=..., eps=..., momentum=..., weight_decay=...)
     for k in range(5):
         for g in opt.param_groups: g["lr"] = LR[k]
         p.grad = torch.tensor(G[k]); opt.step(); print(p.tolist())

   with P0, G and LR as p0(), grad() and lr() below (all exact in float32). */
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/check.h"

enum { N = 7, STEPS = 5 };

static float p0(int i) { return (float)(i - 3) * 0.25f; }
static float grad(int k, int i) { return (float)((i * 3 + k * 5) % 11 - 5) * 0.125f; }
static float lr(int k) { return 0.015625f * (float)(k + 1); }

static const double want[3][STEPS][N] = {
  /* rmsprop */
  {
    {-0.593750025, -0.3437500625, -0.406249875, -0.1562499688,
     0.4062499688, 0.656249875, 0.5937500625},
    {-0.593750025, -0.6041666713, -0.09975951581, -0.01593335174,
     0.3300983932, 0.3529911957, 0.873538438},
    {-0.9268676945, -0.3031908457, -0.09975951581, -0.2786961226,
     0.6931690437, 0.5584523836, 0.7706602407},
    {-0.8384859631, -0.5501854033, -0.5396264113, 0.02808298178,
     0.6931690437, 0.2138898291, 1.233672458},
    {-1.224590404, -0.06424743297, -0.4301952814, -0.2159931694,
     0.2117676101, 0.5925262562, 1.233672458},
  },
  /* rmsprop_tf */
  {
    {-0.7418456321, -0.4963796724, -0.2518787121, -0.006745882348,
     0.2567457658, 0.5018785675, 0.7463795382},
    {-0.7271669889, -0.5001393489, -0.2389999577, -0.01220859108,
     0.2655061799, 0.4918186445, 0.7531598382},
    {-0.7304928729, -0.4902955999, -0.221613263, -0.03423357538,
     0.3008373858, 0.4882252311, 0.7573068406},
    {-0.7282590361, -0.4916489483, -0.2315543683, -0.04150927063,
     0.3432342232, 0.4644243616, 0.7933953075},
    {-0.7560425238, -0.461602603, -0.2349706025, -0.06562003738,
     0.3532846167, 0.4615454208, 0.833992837},
  },
  /* rmsprop_wd */
  {
    {-0.6801233698, -0.4301241012, -0.3198745734, -0.0698764993,
     0.3198764962, 0.5698745202, 0.6801240893},
    {-0.6087050362, -0.4763253146, -0.2524537381, -0.07582369915,
     0.3540323601, 0.5035903664, 0.7348015238},
    {-0.7055434041, -0.3731127349, -0.2010389966, -0.2005693236,
     0.5444113879, 0.5452354241, 0.725853933},
    {-0.7267346522, -0.4163472952, -0.3668795396, -0.1411580873,
     0.6693563283, 0.4135710951, 0.9301064077},
    {-0.9184027358, -0.2183407471, -0.4181236025, -0.217996906,
     0.5225792572, 0.50440186, 1.053705255},
  },
};

static void run_case(int c, nn_optim_config_t cfg, const char *name) {
  float p[N], g[N];
  for (int i = 0; i < N; i++) p[i] = p0(i);
  nn_optim_t *o = NULL;
  nn_status_t s = nn_optim_create(&o, &cfg, N);
  CHECK(s == NN_OK, "%s: nn_optim_create: %s", name, nn_last_error());
  if (s != NN_OK) return;
  double worst = 0;
  for (int k = 0; k < STEPS; k++) {
    for (int i = 0; i < N; i++) g[i] = grad(k, i);
    s = nn_optim_step(o, p, g, lr(k));
    CHECK(s == NN_OK, "%s step %d: %s", name, k, nn_last_error());
    double maxd = 0, maxb = 1e-12;
    for (int i = 0; i < N; i++) {
      maxd = fmax(maxd, fabs((double)p[i] - want[c][k][i]));
      maxb = fmax(maxb, fabs(want[c][k][i]));
    }
    worst = fmax(worst, maxd / maxb);
  }
  size_t count = 0;
  CHECK(nn_optim_state(o, &count) != NULL && count == 2 * N, "%s: state of %zu floats, "
        "expected %d (mean square, momentum buffer)", name, count, 2 * N);
  CHECK(*nn_optim_step_count(o) == STEPS, "%s: step count %lld", name,
        (long long)*nn_optim_step_count(o));
  printf("%-12s worst relative error over %d steps: %.3g\n", name, STEPS, worst);
  CHECK(worst < 1e-5, "%s: relative error %.3g >= 1e-5", name, worst);
  nn_optim_free(o);
}

/* By hand, PyTorch's defaults (alpha 0.99, eps 1e-8): p = -0.75, g = -0.625, lr 1/64:
   s = 0.01 * 0.390625 = 0.00390625, sqrt(s) = 0.0625, d = -0.625 / 0.0625 = -10,
   p = -0.75 + 10 / 64 = -0.59375 (alpha is 0.99f in float: s within 1e-8). */
static void test_by_hand(void) {
  nn_optim_config_t cfg = {.kind = NN_OPTIM_RMSPROP};
  nn_optim_t *o = NULL;
  CHECK(nn_optim_create(&o, &cfg, 1) == NN_OK, "%s", nn_last_error());
  float p = -0.75f, g = -0.625f;
  CHECK(nn_optim_step(o, &p, &g, 1.0f / 64) == NN_OK, "%s", nn_last_error());
  CHECK(fabs(p - -0.59375) < 1e-6, "one step by hand: %.9g, expected -0.59375", (double)p);
  size_t count;
  const float *st = nn_optim_state(o, &count);
  CHECK(st && fabs(st[0] - 0.00390625) < 1e-8 && st[1] == 0.0f,
        "state after one step: mean square %.9g (expected 0.00390625), buffer %g (0 without "
        "momentum)", st ? (double)st[0] : -1.0, st ? (double)st[1] : -1.0);
  nn_optim_free(o);
}

static void test_arguments(void) {
  nn_optim_t *o = NULL;
  nn_optim_config_t bad_alpha = {.kind = NN_OPTIM_RMSPROP, .beta2 = 1.5f};
  CHECK(nn_optim_create(&o, &bad_alpha, 4) == NN_ERR_ARG && o == NULL, "alpha 1.5 accepted");
  CHECK(strstr(nn_last_error(), "RMSprop alpha") != NULL, "message: %s", nn_last_error());
  nn_optim_config_t bad_mom = {.kind = NN_OPTIM_RMSPROP, .momentum = -0.1f};
  CHECK(nn_optim_create(&o, &bad_mom, 4) == NN_ERR_ARG, "negative momentum accepted");
  nn_optim_config_t bad_eps = {.kind = NN_OPTIM_RMSPROP, .eps = -1.0f};
  CHECK(nn_optim_create(&o, &bad_eps, 4) == NN_ERR_ARG, "negative eps accepted");
  nn_optim_config_t bad_wd = {.kind = NN_OPTIM_RMSPROP, .weight_decay = -1.0f};
  CHECK(nn_optim_create(&o, &bad_wd, 4) == NN_ERR_ARG, "negative weight decay accepted");
}

int main(void) {
  run_case(0, (nn_optim_config_t){.kind = NN_OPTIM_RMSPROP}, "rmsprop");
  run_case(1, (nn_optim_config_t){.kind = NN_OPTIM_RMSPROP, .beta2 = 0.9f, .eps = 1.0f,
                                  .momentum = 0.9f, .weight_decay = 4e-5f}, "rmsprop_tf");
  run_case(2, (nn_optim_config_t){.kind = NN_OPTIM_RMSPROP, .beta2 = 0.95f, .eps = 1e-6f,
                                  .momentum = 0.5f, .weight_decay = 1e-2f}, "rmsprop_wd");
  test_by_hand();
  test_arguments();
  if (failures) {
    printf("test_nn_optim_rmsprop: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_nn_optim_rmsprop: all passed\n");
  return 0;
}
