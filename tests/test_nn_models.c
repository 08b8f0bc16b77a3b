/* test_nn_models: every built-in model against PyTorch's state_dict
   (tests/fixtures/models/<model>_keys.txt, from scripts/fixtures_models.py): parameter
   count, tensor names, order, kinds, dtypes and shapes, and that parameters are laid out
   in state_dict order, each at the next multiple of 64 elements (NN_PARAM_ALIGN). Then, for the models small enough to run here, the
   grad-ready callback of backward: its ready_from values strictly decrease, end at 0, and
   each reported region [ready_from, previous) already holds its final gradient when it is
   reported (compared with grads[] after backward). nn_model_param_starts gives the
   parameters' offsets, strictly ascending. Also unknown names and bad configs.
   Run from the repository root. */
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

/* nn_model_param_starts: the offsets of the non-empty parameter slices, strictly
   ascending (as hvd_grad_buckets_set_params requires), all below param_len. */
static void check_param_starts(const char *name, const nn_model_t *m) {
  const int ns = nn_model_num_slices(m);
  size_t *starts = malloc((size_t)(ns > 0 ? ns : 1) * sizeof *starts);
  size_t want = 0;
  for (int i = 0; i < ns; i++) {
    const nn_slice_t *sl = nn_model_slice(m, i);
    if (sl->kind == NN_SLICE_PARAM && sl->numel > 0) want++;
  }
  CHECK(nn_model_param_starts(m, NULL) == want, "%s: param_starts counts %zu, expected %zu",
        name, nn_model_param_starts(m, NULL), want);
  size_t n = nn_model_param_starts(m, starts);
  CHECK(n == want, "%s: param_starts wrote %zu, expected %zu", name, n, want);
  for (size_t k = 0; k < n; k++) {
    CHECK(starts[k] < nn_model_param_len(m), "%s: start %zu is %zu, not below %zu", name, k,
          starts[k], nn_model_param_len(m));
    if (k > 0)
      CHECK(starts[k] > starts[k - 1], "%s: starts %zu and %zu are %zu, %zu: not ascending",
            name, k - 1, k, starts[k - 1], starts[k]);
    int found = 0;
    for (int i = 0; i < ns && !found; i++) {
      const nn_slice_t *sl = nn_model_slice(m, i);
      found = sl->kind == NN_SLICE_PARAM && sl->offset == starts[k];
    }
    CHECK(found, "%s: start %zu (%zu) is no parameter's offset", name, k, starts[k]);
  }
  free(starts);
}

/* Compares the model's slices with the keys file; returns the PyTorch parameter count. */
static void check_layout(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "tests/fixtures/models/%s_keys.txt", name);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "cannot open %s", path);
  if (!f) return;
  nn_model_config_t cfg = {.batch = 1, .seed = 1};
  nn_model_t *m = NULL;
  nn_status_t s = nn_model_create(&m, name, &cfg);
  CHECK(s == NN_OK, "nn_model_create(%s): %s", name, nn_last_error());
  if (s != NN_OK) {
    fclose(f);
    return;
  }
  char line[512];
  int i = 0, bad = 0;
  long long torch_params = -1;
  size_t next_param = 0, next_buffer = 0;
  int next_counter = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (sscanf(line, "# params %lld", &torch_params) == 1) continue;
    char key[128] = "", dt[8] = "", shape[128] = "";
    int got = sscanf(line, "%127s %7s %127s", key, dt, shape);
    if (got < 2) continue;
    const nn_slice_t *sl = nn_model_slice(m, i);
    if (!sl) {
      CHECK(0, "%s: torch has %s at position %d, nn has no more tensors", name, key, i);
      bad = 1;
      break;
    }
    char ours[128] = "";
    size_t len = 0;
    for (int d = 0; d < sl->ndim; d++)
      len += (size_t)snprintf(ours + len, sizeof ours - len, "%s%d", d ? "," : "",
                              sl->shape[d]);
    const char *our_dt = sl->kind == NN_SLICE_COUNTER ? "I64" : "F32";
    if (strcmp(sl->name, key) || strcmp(our_dt, dt) || strcmp(ours, shape)) {
      if (!bad)
        CHECK(0, "%s: tensor %d is torch's \"%s %s [%s]\", nn's \"%s %s [%s]\"", name, i,
              key, dt, shape, sl->name, our_dt, ours);
      bad = 1;
    }
    /* layout: params contiguous in order, buffers too, counters numbered in order */
    if (sl->kind == NN_SLICE_PARAM) {
      /* each at the next multiple of NN_PARAM_ALIGN (aligned device copies) */
      size_t want = (next_param + NN_PARAM_ALIGN - 1) / NN_PARAM_ALIGN * NN_PARAM_ALIGN;
      CHECK(sl->offset == want && sl->offset % 64 == 0, "%s: %s at offset %zu, expected "
            "%zu (a multiple of 64 after the previous parameter)", name, sl->name,
            sl->offset, want);
      next_param = sl->offset + sl->numel;
    } else if (sl->kind == NN_SLICE_BUFFER) {
      CHECK(sl->offset == next_buffer, "%s: %s at buffer offset %zu, expected %zu", name,
            sl->name, sl->offset, next_buffer);
      next_buffer = sl->offset + sl->numel;
    } else {
      CHECK(sl->offset == (size_t)next_counter, "%s: counter %s index %zu", name, sl->name,
            sl->offset);
      next_counter++;
    }
    i++;
  }
  fclose(f);
  CHECK(i == nn_model_num_slices(m), "%s: torch has %d tensors, nn %d", name, i,
        nn_model_num_slices(m));
  CHECK(torch_params > 0 && (long long)nn_model_num_params(m) == torch_params,
        "%s: %zu parameters, PyTorch has %lld", name, nn_model_num_params(m), torch_params);
  CHECK(next_param == nn_model_param_len(m) && next_buffer == nn_model_num_buffers(m),
        "%s: slices do not cover params/buffers", name);
  printf("%-10s %11zu parameters (PyTorch %lld), %d tensors %s\n", name,
         nn_model_num_params(m), torch_params, i, bad ? "MISMATCH" : "match");
  check_param_starts(name, m);
  nn_model_free(m);
}

/* ---- grad-ready callback ---- */

typedef struct {
  nn_model_t *m;
  size_t prev;        /* last ready_from (num_params before the first call) */
  int calls, order_ok;
  float *snapshot;    /* gradient values at the moment each region was reported */
} ready_ctx_t;

static void on_ready(void *p, size_t ready_from) {
  ready_ctx_t *c = p;
  c->calls++;
  if (!(ready_from < c->prev)) {
    c->order_ok = 0;
    return;
  }
  const float *g = nn_model_grads(c->m);
  memcpy(c->snapshot + ready_from, g + ready_from, (c->prev - ready_from) * sizeof(float));
  c->prev = ready_from;
}

static void check_grad_ready(const char *name, int batch) {
  nn_model_config_t cfg = {.batch = batch, .seed = 7};
  nn_model_t *m = NULL;
  nn_status_t s = nn_model_create(&m, name, &cfg);
  CHECK(s == NN_OK, "nn_model_create(%s): %s", name, nn_last_error());
  if (s != NN_OK) return;
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  size_t in = (size_t)batch * c * h * w;
  float *x = malloc(in * sizeof(float));
  int32_t *labels = malloc((size_t)batch * sizeof(int32_t));
  size_t np = nn_model_param_len(m);
  ready_ctx_t ctx = {m, np, 0, 1, calloc(np, sizeof(float))};
  if (!x || !labels || !ctx.snapshot) {
    CHECK(0, "out of memory");
    return;
  }
  uint32_t r = 12345;
  for (size_t i = 0; i < in; i++) {
    r = r * 1664525u + 1013904223u;
    x[i] = (float)((r >> 8) & 0xFFFF) / 32768.0f - 1.0f;
  }
  for (int i = 0; i < batch; i++) labels[i] = (i * 7) % nn_model_num_classes(m);
  float loss = 0;
  int correct = 0;
  s = nn_model_forward(m, x, batch, 1);
  CHECK(s == NN_OK, "%s forward: %s", name, nn_last_error());
  s = nn_model_loss(m, labels, &loss, &correct);
  CHECK(s == NN_OK && isfinite(loss) && loss > 0, "%s loss %g: %s", name, (double)loss,
        nn_last_error());
  s = nn_model_backward(m, on_ready, &ctx);
  CHECK(s == NN_OK, "%s backward: %s", name, nn_last_error());
  CHECK(ctx.order_ok, "%s: ready_from did not strictly decrease", name);
  CHECK(ctx.prev == 0, "%s: last ready_from %zu, expected 0", name, ctx.prev);
  size_t changed = 0, nonzero = 0;
  const float *g = nn_model_grads(m);
  for (size_t i = 0; i < np; i++) {
    if (memcmp(&g[i], &ctx.snapshot[i], sizeof(float)) != 0) changed++;
    if (g[i] != 0.0f) nonzero++;
  }
  CHECK(changed == 0, "%s: %zu gradients changed after their region was reported ready",
        name, changed);
  /* trivial's single relu unit is often dead, and alexnet's dropout zeroes half of the
     inputs of its big classifier layers: expect fewer non-zero gradients there. */
  int sparse = strcmp(name, "trivial") == 0 || strcmp(name, "alexnet") == 0;
  CHECK(nonzero > np / (sparse ? 8 : 2), "%s: only %zu of %zu gradients are non-zero",
        name, nonzero, np);
  /* The times of the profile are filled. */
  double tf = 0, tb = 0;
  for (int i = 0; i < nn_model_num_layers(m); i++) {
    double f1, b1;
    nn_model_layer_times(m, i, &f1, &b1);
    tf += f1;
    tb += b1;
  }
  CHECK(tf > 0 && tb > 0, "%s: layer times not recorded", name);
  printf("%-10s grad-ready: %d calls, strictly decreasing to 0, regions final when "
         "reported\n", name, ctx.calls);
  /* A second backward without a new forward is refused. */
  CHECK(nn_model_backward(m, NULL, NULL) == NN_ERR_ARG, "%s: backward twice accepted",
        name);
  free(ctx.snapshot);
  free(x);
  free(labels);
  nn_model_free(m);
}

/* Dropout (alexnet's classifier): a training forward draws a new mask each step, eval
   mode is deterministic and differs from training mode. */
static void check_dropout(void) {
  nn_model_config_t cfg = {.batch = 2, .seed = 3};
  nn_model_t *m = NULL;
  CHECK(nn_model_create(&m, "alexnet", &cfg) == NN_OK, "%s", nn_last_error());
  if (!m) return;
  size_t in = 2 * 3 * 224 * 224, k = 2 * 1000;
  float *x = malloc(in * sizeof(float)), *a = malloc(k * 4), *b = malloc(k * 4);
  for (size_t i = 0; i < in; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  CHECK(nn_model_forward(m, x, 2, 1) == NN_OK, "%s", nn_last_error());
  memcpy(a, nn_model_logits(m), k * 4);
  CHECK(nn_model_forward(m, x, 2, 1) == NN_OK, "%s", nn_last_error());
  CHECK(memcmp(a, nn_model_logits(m), k * 4) != 0, "alexnet: two training forwards gave "
        "the same logits (dropout mask not redrawn)");
  CHECK(nn_model_forward(m, x, 2, 0) == NN_OK, "%s", nn_last_error());
  memcpy(b, nn_model_logits(m), k * 4);
  CHECK(nn_model_forward(m, x, 2, 0) == NN_OK, "%s", nn_last_error());
  CHECK(memcmp(b, nn_model_logits(m), k * 4) == 0, "alexnet: eval forward not deterministic");
  CHECK(memcmp(a, b, k * 4) != 0, "alexnet: eval equals training (dropout inactive?)");
  printf("alexnet    dropout: new mask per training step, eval deterministic\n");
  free(x);
  free(a);
  free(b);
  nn_model_free(m);
}

static void check_errors(void) {
  nn_model_config_t cfg = {.batch = 2};
  nn_model_t *m = (nn_model_t *)&cfg; /* must be reset to NULL on failure */
  CHECK(nn_model_create(&m, "resnet34", &cfg) == NN_ERR_ARG && m == NULL,
        "unknown model accepted");
  CHECK(strstr(nn_last_error(), "resnet20") && strstr(nn_last_error(), "resnet34") &&
            strstr(nn_last_error(), "vgg16_bn"),
        "message does not list the known models: %s", nn_last_error());
  nn_model_config_t nob = {.batch = 0};
  CHECK(nn_model_create(&m, "lenet", &nob) == NN_ERR_ARG, "batch 0 accepted");
  nn_model_config_t tiny = {.batch = 1, .in_height = 3, .in_width = 3};
  CHECK(nn_model_create(&m, "lenet", &tiny) == NN_ERR_ARG, "3x3 lenet accepted");
  nn_model_config_t odd = {.batch = 1, .in_height = 100, .in_width = 100};
  CHECK(nn_model_create(&m, "vgg16", &odd) == NN_ERR_ARG, "vgg16 at 100x100 accepted");
  /* options that change shapes */
  nn_model_config_t five = {.batch = 3, .num_classes = 5, .in_channels = 1};
  CHECK(nn_model_create(&m, "resnet20", &five) == NN_OK, "%s", nn_last_error());
  if (m) {
    int c, h, w;
    nn_model_input_shape(m, &c, &h, &w);
    CHECK(c == 1 && h == 32 && w == 32 && nn_model_num_classes(m) == 5,
          "resnet20 config: %dx%dx%d, %d classes", c, h, w, nn_model_num_classes(m));
    CHECK(strcmp(nn_model_name(m), "resnet20") == 0, "name %s", nn_model_name(m));
    float x[3 * 32 * 32] = {0};
    CHECK(nn_model_forward(m, x, 4, 1) == NN_ERR_ARG, "forward of 4 > batch 3 accepted");
    CHECK(nn_model_backward(m, NULL, NULL) == NN_ERR_ARG, "backward before loss accepted");
    CHECK(nn_model_forward(m, x, 1, 1) == NN_OK, "%s", nn_last_error());
    int32_t bad_label = 5;
    CHECK(nn_model_loss(m, &bad_label, NULL, NULL) == NN_ERR_ARG, "label 5 of 5 accepted");
    nn_model_free(m);
  }
  const char *const *names = nn_model_names();
  int n = 0;
  while (names[n]) n++;
  CHECK(n == 10, "%d model names", n);
}

int main(void) {
  const char *const *names = nn_model_names();
  for (int i = 0; names[i]; i++) check_layout(names[i]);
  check_grad_ready("mlp", 3);
  check_grad_ready("lenet", 3);
  check_grad_ready("resnet20", 2);
  check_grad_ready("trivial", 2);
  check_grad_ready("alexnet", 2);
  check_dropout();
  check_errors();
  if (failures) {
    printf("test_nn_models: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_nn_models: all passed\n");
  return 0;
}
