/* test_train_step: the training step train and cnn_bench share (train/step.c), on the CPU
   without communication (buckets NULL), against the same step written out by hand with
   nn's calls:
   - an even step (n * size == total) is forward, backward and the optimizer step, the
     gradients unscaled;
   - an uneven step (a shorter tail shard) scales the gradients by size * n / total
     before the optimizer uses them;
   - an empty step (n = 0) zeroes the gradients and still takes the optimizer step
     (plain SGD: the parameters do not move);
   - the loss and correct count are this rank's, the phase clock never goes backwards,
     and a failure names the part that failed. */
#include "train/step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

enum { BATCH = 4 };

static nn_model_t *make_model(void) {
  nn_model_config_t cfg = {.batch = BATCH, .seed = 11};
  nn_model_t *m = NULL;
  CHECK(nn_model_create(&m, "mlp", &cfg) == NN_OK, "%s", nn_last_error());
  if (!m) exit(1);
  nn_optim_config_t oc = {.kind = NN_OPTIM_SGD};   /* no momentum: a step is -lr * g */
  CHECK(nn_model_optim_create(m, &oc) == NN_OK, "%s", nn_last_error());
  return m;
}

/* The step by hand: forward, loss, backward, gradients times scale, SGD step. */
static void reference_step(nn_model_t *m, const float *x, const int32_t *y, int n,
                           float scale, float lr, float *loss) {
  CHECK(nn_model_forward(m, x, n, 1) == NN_OK, "%s", nn_last_error());
  int correct;
  CHECK(nn_model_loss(m, y, loss, &correct) == NN_OK, "%s", nn_last_error());
  CHECK(nn_model_backward(m, NULL, NULL) == NN_OK, "%s", nn_last_error());
  float *g = nn_model_grads(m);
  for (size_t i = 0; i < nn_model_param_len(m); i++) g[i] *= scale;
  CHECK(nn_model_optim_step(m, lr) == NN_OK, "%s", nn_last_error());
}

static float max_diff(const float *a, const float *b, size_t n) {
  float d = 0;
  for (size_t i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
  return d;
}

/* One step of train_step_run on n of total samples over `size` ranks against the
   reference with the scale size * n / total. */
static void check_step(const char *what, int n, int total, int size, const float *x,
                       const int32_t *y) {
  nn_model_t *a = make_model(), *b = make_model();
  const size_t np = nn_model_param_len(a);
  CHECK(max_diff(nn_model_params(a), nn_model_params(b), np) == 0, "%s: same start", what);
  train_step_t st = {.model = a, .buckets = NULL, .size = size};
  const float lr = 0.5f;
  CHECK(train_step_run(&st, x, y, n, total, lr, TRAIN_STEP_FETCH_LOSS) == 0,
        "%s: failed in %s: %s", what, st.failed ? st.failed : "?", nn_last_error());
  float ref_loss = 0;
  reference_step(b, x, y, n, (float)((double)size * n / total), lr, &ref_loss);
  float d = max_diff(nn_model_params(a), nn_model_params(b), np);
  CHECK(d <= 1e-6f, "%s: parameters differ from the hand-written step by %g", what, d);
  CHECK(fabsf(st.loss - ref_loss) <= 1e-6f, "%s: loss %g, expected %g", what, st.loss,
        ref_loss);
  CHECK(st.correct >= 0 && st.correct <= n, "%s: %d correct of %d", what, st.correct, n);
  for (int p = 0; p < TRAIN_NUM_PHASES; p++)
    CHECK(st.phase_start[p + 1] >= st.phase_start[p], "%s: phase %s ends before it starts",
          what, train_phase_names[p]);
  nn_model_free(a);
  nn_model_free(b);
}

int main(void) {
  nn_model_t *probe = make_model();
  int c, h, w;
  nn_model_input_shape(probe, &c, &h, &w);
  const size_t nx = (size_t)BATCH * c * h * w;
  float *x = malloc(nx * sizeof(float));
  if (!x) return 1;
  for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 29) % 97) / 97.0f - 0.5f;
  int32_t y[BATCH] = {2, 7, 1, 8};
  nn_model_free(probe);

  check_step("even step", BATCH, BATCH * 2, 2, x, y);
  check_step("uneven tail step", 3, BATCH + 3, 2, x, y);   /* scale 2 * 3 / 7 */
  check_step("one rank", BATCH, BATCH, 1, x, y);

  /* An empty step: zero gradients, and plain SGD leaves the parameters where they are,
     whatever the gradients held before. */
  nn_model_t *m = make_model();
  const size_t np = nn_model_param_len(m);
  float *before = malloc(np * sizeof(float));
  if (!before) return 1;
  float *g = nn_model_grads(m);
  for (size_t i = 0; i < np; i++) g[i] = 1.0f;
  memcpy(before, nn_model_params(m), np * sizeof(float));
  train_step_t st = {.model = m, .size = 2};
  CHECK(train_step_run(&st, NULL, NULL, 0, BATCH, 0.5f, TRAIN_STEP_FETCH_LOSS) == 0,
        "empty step failed in %s", st.failed ? st.failed : "?");
  CHECK(max_diff(before, nn_model_params(m), np) == 0, "an empty step moved the parameters");
  float gmax = 0;
  for (size_t i = 0; i < np; i++) gmax = fmaxf(gmax, fabsf(g[i]));
  CHECK(gmax == 0, "an empty step left gradients of up to %g", gmax);
  CHECK(isnan(st.loss) && st.correct == 0, "an empty step has no loss (%g, %d correct)",
        st.loss, st.correct);

  /* A failure names its part: a model without an optimizer fails at the update. */
  nn_model_config_t cfg = {.batch = BATCH, .seed = 11};
  nn_model_t *bare = NULL;
  CHECK(nn_model_create(&bare, "mlp", &cfg) == NN_OK, "%s", nn_last_error());
  st = (train_step_t){.model = bare, .size = 1};
  CHECK(train_step_run(&st, x, y, BATCH, BATCH, 0.5f, 0) == -1, "a step without optimizer");
  CHECK(st.failed && strcmp(st.failed, "optimizer step") == 0 && st.nn_status == NN_ERR_ARG,
        "the failure is named '%s' (%s)", st.failed ? st.failed : "(none)",
        nn_status_string(st.nn_status));
  nn_model_free(bare);
  nn_model_free(m);
  free(before);
  free(x);
  if (failures) return 1;
  printf("ok: train_step_run matches the step written out by hand (even, uneven, empty)\n");
  return 0;
}
