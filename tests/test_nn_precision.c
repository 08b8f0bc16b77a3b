/* test_nn_precision: the parts of mixed precision that do not need a GPU:
   nn_model_set_precision (defaults, validation, a rejected call changes nothing), the
   CPU's refusal to run a half-precision model, and the loss-scale update rule that the
   device kernel runs (nn/cuda/amp_rules.h: backoff, growth, static scale, skip count). */
#include "nn/cuda/amp_rules.h"
#include "nn/model_internal.h"
#include "nn/nn.h"
#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_names(void) {
  CHECK(!strcmp(nn_precision_name(NN_PRECISION_FP32), "fp32"), "fp32 name");
  CHECK(!strcmp(nn_precision_name(NN_PRECISION_FP16), "fp16"), "fp16 name");
  CHECK(!strcmp(nn_precision_name(NN_PRECISION_BF16), "bf16"), "bf16 name");
  CHECK(!strcmp(nn_precision_name((nn_precision_t)9), "unknown"), "unknown name");
}

static nn_model_t *lenet(void) {
  nn_model_config_t cfg = {4, 1, 0, 0, 0, 0};
  nn_model_t *m = NULL;
  CHECK(nn_model_create(&m, "lenet", &cfg) == NN_OK, "create lenet: %s", nn_last_error());
  return m;
}

static void test_defaults_and_validation(void) {
  nn_model_t *m = lenet();
  if (!m) return;
  CHECK(nn_model_precision(m) == NN_PRECISION_FP32, "a new model is fp32");

  nn_precision_config_t fp16 = {NN_PRECISION_FP16, 0, 0, 0, 0, 0, 0};
  CHECK(nn_model_set_precision(m, &fp16) == NN_OK, "fp16: %s", nn_last_error());
  CHECK(nn_model_precision(m) == NN_PRECISION_FP16, "precision is fp16");
  CHECK(m->precision.init_scale == 65536.0f, "fp16 initial scale %g", m->precision.init_scale);
  CHECK(m->precision.growth_factor == 2.0f, "growth %g", m->precision.growth_factor);
  CHECK(m->precision.backoff_factor == 0.5f, "backoff %g", m->precision.backoff_factor);
  CHECK(m->precision.growth_interval == 2000, "interval %d", m->precision.growth_interval);
  CHECK(m->precision.static_scale == 0, "fp16 scale is dynamic");

  nn_precision_config_t bf16 = {NN_PRECISION_BF16, 0, 0, 0, 0, 0, 0};
  CHECK(nn_model_set_precision(m, &bf16) == NN_OK, "bf16: %s", nn_last_error());
  CHECK(m->precision.init_scale == 1.0f, "bf16 initial scale %g", m->precision.init_scale);
  CHECK(m->precision.static_scale == 1, "bf16 scale is static by default");

  nn_precision_config_t bf16_dyn = {NN_PRECISION_BF16, 128.0f, 0, 0, 0, 0, 0};
  CHECK(nn_model_set_precision(m, &bf16_dyn) == NN_OK, "bf16 with a scale");
  CHECK(m->precision.static_scale == 0 && m->precision.init_scale == 128.0f,
        "bf16 with an explicit initial scale is dynamic");

  /* Rejected configurations leave the previous one in place. */
  CHECK(nn_model_set_precision(m, &fp16) == NN_OK, "back to fp16");
  const nn_precision_config_t bad[] = {
      {(nn_precision_t)7, 0, 0, 0, 0, 0, 0},
      {NN_PRECISION_FP16, -1.0f, 0, 0, 0, 0, 0},
      {NN_PRECISION_FP16, INFINITY, 0, 0, 0, 0, 0},
      {NN_PRECISION_FP16, 0, 0.5f, 0, 0, 0, 0},
      {NN_PRECISION_FP16, 0, 0, 1.5f, 0, 0, 0},
      {NN_PRECISION_FP16, 0, 0, -0.5f, 0, 0, 0},
      {NN_PRECISION_FP16, 0, 0, 0, -3, 0, 0},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    nn_status_t s = nn_model_set_precision(m, &bad[i]);
    CHECK(s == NN_ERR_ARG, "bad config %zu accepted (status %d)", i, (int)s);
    CHECK(strstr(nn_last_error(), "nn_model_set_precision") != NULL,
          "error names the call: %s", nn_last_error());
  }
  CHECK(nn_model_precision(m) == NN_PRECISION_FP16 && m->precision.init_scale == 65536.0f,
        "a rejected call changed the configuration");
  CHECK(nn_model_set_precision(NULL, &fp16) == NN_ERR_ARG, "NULL model");

  /* On the CPU nn computes in float32 only: a half-precision model refuses to run. */
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  float *x = calloc((size_t)4 * c * h * w, sizeof(float));
  if (!x) abort();
  nn_status_t s = nn_model_forward(m, x, 4, 1);
  CHECK(s == NN_ERR_UNSUPPORTED, "fp16 forward on the CPU gave status %d", (int)s);
  CHECK(strstr(nn_last_error(), "fp16") && strstr(nn_last_error(), "CUDA"),
        "the error says why: %s", nn_last_error());
  nn_precision_config_t nhwc = {NN_PRECISION_FP32, 0, 0, 0, 0, 0, 7};
  CHECK(nn_model_set_precision(m, &nhwc) == NN_OK, "fp32 channels last");
  CHECK(m->precision.channels_last == 1, "channels_last is a flag: %d",
        m->precision.channels_last);
  s = nn_model_forward(m, x, 4, 1);
  CHECK(s == NN_ERR_UNSUPPORTED, "NHWC forward on the CPU gave status %d", (int)s);
  CHECK(strstr(nn_last_error(), "channels_last") != NULL, "the error says why: %s",
        nn_last_error());
  CHECK(nn_model_set_precision(m, NULL) == NN_OK, "NULL config means fp32");
  CHECK(nn_model_precision(m) == NN_PRECISION_FP32, "fp32 again");
  CHECK(nn_model_forward(m, x, 4, 1) == NN_OK, "fp32 forward: %s", nn_last_error());
  free(x);
  nn_model_free(m);
}

static void test_loss_scale_rule(void) {
  nn_cuda_amp_t a = {65536.0f, 0, 0, 0, 0};
  /* Clean steps grow the scale every interval steps. */
  for (int i = 0; i < 3; i++) nn_amp_update_rule(&a, 2.0f, 0.5f, 3, 0);
  CHECK(a.scale == 131072.0f && a.growth_tracker == 0, "grew after 3 clean steps: %g %d",
        a.scale, a.growth_tracker);
  nn_amp_update_rule(&a, 2.0f, 0.5f, 3, 0);
  CHECK(a.scale == 131072.0f && a.growth_tracker == 1, "one clean step: %g %d", a.scale,
        a.growth_tracker);
  /* An overflow backs off, resets the count of clean steps and clears the flag. */
  a.found_inf = 1;
  nn_amp_update_rule(&a, 2.0f, 0.5f, 3, 0);
  CHECK(a.scale == 65536.0f && a.growth_tracker == 0 && a.skipped == 1 && a.found_inf == 0,
        "backoff: scale %g tracker %d skipped %lld flag %d", a.scale, a.growth_tracker,
        a.skipped, a.found_inf);
  /* Growth never reaches inf. */
  nn_cuda_amp_t big = {3e38f, 0, 0, 0, 0};
  nn_amp_update_rule(&big, 2.0f, 0.5f, 1, 0);
  CHECK(big.scale == 3e38f && isfinite(big.scale), "growth stopped short of inf: %g",
        big.scale);
  /* A static scale never changes, but skipped steps are still counted. */
  nn_cuda_amp_t st = {1.0f, 1, 0, 0, 0};
  nn_amp_update_rule(&st, 2.0f, 0.5f, 1, 1);
  nn_amp_update_rule(&st, 2.0f, 0.5f, 1, 1);
  CHECK(st.scale == 1.0f && st.skipped == 1 && st.found_inf == 0,
        "static: scale %g skipped %lld", st.scale, st.skipped);
}

/* Notices (how a slower path taken on the GPU is said) reach the program's handler,
   formatted, once per call; NULL puts back the default (stderr). */
static char notice_seen[128];
static int notice_calls;
static void on_notice(const char *line, void *ctx) {
  notice_calls++;
  snprintf(notice_seen, sizeof notice_seen, "%s%s", (const char *)ctx, line);
}
static void test_notice_handler(void) {
  nn_set_notice_handler(on_notice, "ctx:");
  nn_notice("cuDNN refused %s in %s", "batch norm", "bf16 NHWC");
  CHECK(notice_calls == 1 && strcmp(notice_seen, "ctx:cuDNN refused batch norm in bf16 NHWC") == 0,
        "notice handler got %d call(s), \"%s\"", notice_calls, notice_seen);
  nn_set_notice_handler(NULL, NULL);
  nn_notice("to stderr");
  CHECK(notice_calls == 1, "the handler was called after it was removed");
}

int main(void) {
  test_notice_handler();
  test_names();
  test_defaults_and_validation();
  test_loss_scale_rule();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("mixed-precision configuration and loss-scale rule: all checks passed\n");
  return 0;
}
