/* test_nn_model_range: a model cut into contiguous layer ranges gives exactly what the
   whole model gives (CPU). For mlp, lenet and resnet20 (batch norm, residual blocks:
   only the cuts nn_model_range_cut_ok allows), every allowed cut into two ranges and
   lenet's cut into three: the ranges chained forward (each reading the previous one's
   output, copied to a buffer as a pipeline receives it) give bit-identical logits, and
   the ranges chained backward (each from the copied gradient of the next) give
   bit-identical parameter gradients, for two micro-batches in flight at once through
   activation stashing (forward 0, forward 1, then backward 0 and backward 1 after
   unstashing each), against nn_model_forward/nn_model_backward_accumulate of the same
   micro-batches one after the other; the same again with each micro-batch in its own
   activation set (nn_model_range_use switching sets, no copies), and a set refuses more
   samples than it was made for and a whole-model pass while in use. A cut across a residual connection is refused, and
   so is one across the second input of an ONNX graph's kinds (mul, concat: the "graph"
   model below, built as nn/onnx_import.c builds one). With resnet20's bottom frozen
   (nn_model_set_frozen), ranges leave the frozen batch norms' running statistics alone
   and no gradient below the lowest trainable layer, as the whole model does. */
#include "nn/graph_kernels_internal.h"
#include "nn/model_internal.h"
#include "nn/nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

enum { MB = 3, NMB = 2 };

static float *input_batch(const nn_model_t *m, int n, unsigned seed) {
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  size_t k = (size_t)n * c * h * w;
  float *x = malloc(k * sizeof(float));
  for (size_t i = 0; i < k; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 16) % 2001) / 1000.0f - 1.0f;
  }
  return x;
}

/* Layers 3 (mul) and 4 (concat) read layers 0 and 1 as their second input: only the
   cuts before layers 1, 5 and 6 keep every input within reach. */
static nn_model_t *make_graph(const nn_model_config_t *cfg) {
  nn_model_t *m = nn_model_begin("graph", cfg, 2, 6, 6, 3);
  if (!m) return NULL;
  const int one[2] = {1, 1};
  int g0 = nn_model_add_gconv(m, "g0", NN_MODEL_INPUT, 4, 3, 3, one, one, one, 2, 1);
  int a1 = nn_model_add_act(m, "a1", g0, NN_ACT_TANH, 0.0f, 0.0f, 0.0f);
  int c2 = nn_model_add_conv2d(m, "c2", a1, 4, 3, 1, 1, 1);
  int m3 = nn_model_add_mul(m, "m3", c2, g0);
  int cat4 = nn_model_add_concat(m, "cat4", m3, a1);
  int f5 = nn_model_add_flatten(m, "f5", cat4);
  nn_model_add_linear(m, "fc6", f5, 3, 1);
  return nn_model_finish(m) == NN_OK ? m : NULL;
}

/* The tensors make() freezes, when set (the bottom of resnet20). */
static const char *const *frozen;
static int num_frozen;

static nn_model_t *make(const char *name) {
  nn_model_t *m = NULL;
  nn_model_config_t cfg = {.batch = MB, .seed = 7};
  if (strcmp(name, "graph") == 0) {
    m = make_graph(&cfg);
    CHECK(m != NULL, "create graph: %s", nn_last_error());
    return m;
  }
  if (num_frozen > 0) {
    CHECK(nn_model_create(&m, name, &cfg) == NN_OK, "create %s: %s", name, nn_last_error());
    CHECK(m && nn_model_set_frozen(m, frozen, num_frozen) == NN_OK, "freeze: %s",
          nn_last_error());
    return m;
  }
  CHECK(nn_model_create(&m, name, &cfg) == NN_OK, "create %s: %s", name, nn_last_error());
  return m;
}

/* The reference: whole-model passes of the micro-batches one after the other. */
static void reference(nn_model_t *m, float *const *x, const int32_t (*labels)[MB],
                      float *logits) {
  int k = nn_model_num_classes(m);
  CHECK(nn_model_zero_grads(m) == NN_OK, "zero");
  for (int b = 0; b < NMB; b++) {
    CHECK(nn_model_forward(m, x[b], MB, 1) == NN_OK, "forward: %s", nn_last_error());
    memcpy(logits + (size_t)b * MB * k, nn_model_logits(m), (size_t)MB * k * sizeof(float));
    CHECK(nn_model_loss(m, labels[b], NULL, NULL) == NN_OK, "loss: %s", nn_last_error());
    CHECK(nn_model_backward_accumulate(m, NULL, NULL) == NN_OK, "backward: %s",
          nn_last_error());
  }
}

/* The same through the ranges cut at cuts[0..ncuts), stage by stage, two micro-batches
   in flight per stage. */
static void staged(nn_model_t *m, const int *cuts, int ncuts, float *const *x,
                   const int32_t (*labels)[MB], float *logits, int sets) {
  int L = nn_model_num_layers(m), k = nn_model_num_classes(m);
  int bounds[8];
  int S = ncuts + 1;
  bounds[0] = 0;
  for (int i = 0; i < ncuts; i++) bounds[i + 1] = cuts[i];
  bounds[S] = L;
  float *acts[8][NMB] = {{0}}, *grads[8][NMB] = {{0}};
  void *stash[8][NMB];
  nn_range_acts_t *set[8][NMB] = {{0}};
  CHECK(nn_model_zero_grads(m) == NN_OK, "zero");
  for (int s = 0; s < S; s++)
    for (int b = 0; b < NMB; b++) {
      const float *in = s == 0 ? x[b] : acts[s - 1][b];
      if (sets) {
        CHECK(nn_range_acts_create(m, bounds[s], bounds[s + 1], MB, &set[s][b]) == NN_OK &&
              nn_model_range_use(m, bounds[s], bounds[s + 1], set[s][b]) == NN_OK,
              "activation set: %s", nn_last_error());
      }
      CHECK(nn_model_forward_range(m, bounds[s], bounds[s + 1], in, MB, 1) == NN_OK,
            "forward range %d: %s", s, nn_last_error());
      size_t out = (size_t)MB * nn_model_layer_out_size(m, bounds[s + 1] - 1);
      acts[s][b] = malloc(out * sizeof(float));
      memcpy(acts[s][b], nn_model_layer_out(m, bounds[s + 1] - 1), out * sizeof(float));
      if (s == S - 1) {
        memcpy(logits + (size_t)b * MB * k, acts[s][b], (size_t)MB * k * sizeof(float));
        CHECK(nn_model_loss(m, labels[b], NULL, NULL) == NN_OK, "loss: %s", nn_last_error());
      }
      if (sets) {
        stash[s][b] = NULL;
        continue;
      }
      size_t bytes = nn_model_range_stash_bytes(m, bounds[s], bounds[s + 1], MB);
      CHECK(bytes > 0, "stash size");
      stash[s][b] = malloc(bytes);
      CHECK(nn_model_range_stash(m, bounds[s], bounds[s + 1], stash[s][b]) == NN_OK,
            "stash: %s", nn_last_error());
    }
  for (int s = S - 1; s >= 0; s--)
    for (int b = 0; b < NMB; b++) {
      if (sets)
        CHECK(nn_model_range_use(m, bounds[s], bounds[s + 1], set[s][b]) == NN_OK,
              "use: %s", nn_last_error());
      else
        CHECK(nn_model_range_unstash(m, bounds[s], bounds[s + 1], stash[s][b]) == NN_OK,
              "unstash: %s", nn_last_error());
      const float *dy = s == S - 1 ? NULL : grads[s + 1][b];
      /* Nobody wants the gradient of a flatten of the input (mlp cut after it): that
         range has no parameters and no backward to run. */
      if (s < S - 1 && dy == NULL) continue;
      CHECK(nn_model_backward_range(m, bounds[s], bounds[s + 1], dy, NULL, NULL) == NN_OK,
            "backward range %d: %s", s, nn_last_error());
      const float *dx = nn_model_range_input_grad(m, bounds[s]);
      if (s > 0 && dx != NULL) {
        size_t in = (size_t)MB * nn_model_layer_out_size(m, bounds[s] - 1);
        grads[s][b] = malloc(in * sizeof(float));
        memcpy(grads[s][b], dx, in * sizeof(float));
      }
    }
  if (sets) {
    CHECK(nn_model_forward(m, x[0], MB, 1) != NN_OK, "a whole-model forward ran in a "
          "range's activation set");
    CHECK(nn_model_range_use(m, bounds[0], bounds[1], NULL) == NN_OK, "home: %s",
          nn_last_error());
  }
  for (int s = 0; s < S; s++)
    for (int b = 0; b < NMB; b++) {
      free(acts[s][b]);
      free(grads[s][b]);
      free(stash[s][b]);
      nn_range_acts_free(set[s][b]);
    }
}

static void compare_mode(const char *name, const int *cuts, int ncuts, int sets) {
  nn_model_t *whole = make(name), *cut = make(name);
  if (!whole || !cut) return;
  int k = nn_model_num_classes(whole);
  float *x[NMB];
  int32_t labels[NMB][MB];
  for (int b = 0; b < NMB; b++) {
    x[b] = input_batch(whole, MB, 11u + (unsigned)b);
    for (int i = 0; i < MB; i++) labels[b][i] = (int32_t)((b * MB + i * 3) % k);
  }
  float *l1 = calloc((size_t)NMB * MB * k, sizeof(float));
  float *l2 = calloc((size_t)NMB * MB * k, sizeof(float));
  reference(whole, x, labels, l1);
  staged(cut, cuts, ncuts, x, labels, l2, sets);
  char where[64] = "";
  if (sets) snprintf(where, sizeof(where), " (activation sets)");
  for (int i = 0; i < ncuts; i++)
    snprintf(where + strlen(where), sizeof(where) - strlen(where), " %d", cuts[i]);
  CHECK(memcmp(l1, l2, (size_t)NMB * MB * k * sizeof(float)) == 0,
        "%s cut before layers%s: logits differ from the whole model's", name, where);
  size_t n = nn_model_param_len(whole), bad = 0, first = 0;
  const float *g1 = nn_model_grads(whole), *g2 = nn_model_grads(cut);
  for (size_t i = 0; i < n; i++)
    if (g1[i] != g2[i] && bad++ == 0) first = i;
  CHECK(bad == 0, "%s cut before layers%s: %zu of %zu gradients differ (first at %zu: %g "
        "vs %g)", name, where, bad, n, first, bad ? g2[first] : 0.0, bad ? g1[first] : 0.0);
  const float *b1 = nn_model_buffers(whole), *b2 = nn_model_buffers(cut);
  CHECK(memcmp(b1, b2, nn_model_num_buffers(whole) * sizeof(float)) == 0,
        "%s cut before layers%s: running statistics differ", name, where);
  for (int b = 0; b < NMB; b++) free(x[b]);
  free(l1);
  free(l2);
  nn_model_free(whole);
  nn_model_free(cut);
}

/* Both ways of keeping micro-batches in flight: copies (stash) and activation sets. */
static void compare(const char *name, const int *cuts, int ncuts) {
  compare_mode(name, cuts, ncuts, 0);
  compare_mode(name, cuts, ncuts, 1);
}

/* A set holds at most the samples it was made for; a whole-model pass needs the
   model's own buffers back. */
static void set_limits(void) {
  nn_model_t *m = make("lenet");
  if (!m) return;
  float *x = input_batch(m, MB, 5u);
  nn_range_acts_t *a = NULL;
  int L = nn_model_num_layers(m);
  CHECK(nn_range_acts_create(m, 0, L, MB - 1, &a) == NN_OK, "set: %s", nn_last_error());
  CHECK(nn_range_acts_create(m, 0, L, MB + 1, &(nn_range_acts_t *){NULL}) != NN_OK,
        "a set larger than the model's batch was made");
  CHECK(nn_model_range_use(m, 0, L - 1, a) != NN_OK, "a set was used for another range");
  CHECK(nn_model_range_use(m, 0, L, a) == NN_OK, "use: %s", nn_last_error());
  CHECK(nn_model_forward_range(m, 0, L, x, MB, 1) != NN_OK && strstr(nn_last_error(), "set"),
        "a forward of %d samples ran in a set of %d", MB, MB - 1);
  CHECK(nn_model_forward_range(m, 0, L, x, MB - 1, 1) == NN_OK, "forward in the set: %s",
        nn_last_error());
  CHECK(nn_model_range_use(m, 0, L, NULL) == NN_OK, "home: %s", nn_last_error());
  CHECK(nn_model_forward(m, x, MB, 1) == NN_OK, "whole forward at home: %s", nn_last_error());
  nn_range_acts_free(a);
  /* A model freed with a set in use gives its own buffers back first (no double free). */
  CHECK(nn_range_acts_create(m, 0, L, MB, &a) == NN_OK &&
        nn_model_range_use(m, 0, L, a) == NN_OK, "set: %s", nn_last_error());
  nn_model_free(m);
  nn_range_acts_free(a);
  free(x);
}

int main(void) {
  set_limits();
  const char *models[] = {"mlp", "lenet", "resnet20", "graph"};
  for (int i = 0; i < 4; i++) {
    nn_model_t *m = make(models[i]);
    if (!m) continue;
    int L = nn_model_num_layers(m), tried = 0;
    for (int c = 1; c < L; c++) {
      if (!nn_model_range_cut_ok(m, c)) continue;
      /* resnet20: a few cuts suffice (each is a full model's pass) */
      if (i == 2 && tried >= 3 && c != L - 1) continue;
      compare(models[i], &c, 1);
      tried++;
    }
    CHECK(tried > 0, "%s: no allowed cut", models[i]);
    if (i == 2) {
      /* Inside a residual block (the first block's second convolution reads its
         first's output, the add reads the block's input): no cut there. */
      int refused = 0;
      for (int c = 1; c < L; c++) refused += !nn_model_range_cut_ok(m, c);
      CHECK(refused > 0, "resnet20: every cut allowed, residual connections ignored");
    }
    if (i == 3)
      for (int c = 2; c <= 4; c++)
        CHECK(!nn_model_range_cut_ok(m, c), "graph: the cut before layer %d allowed, "
              "though a later mul or concat reads a layer before it", c);
    printf("%s: %d layers, %d cuts checked\n", models[i], L, tried);
    nn_model_free(m);
  }
  int three[2] = {3, 7};
  compare("lenet", three, 2);
  /* resnet20 with its stem and first stage (layers 0-23) frozen: a cut in the frozen
     part, one above it and the last. */
  const char *bottom[] = {"conv1.*", "bn1.*", "layer1.*"};
  frozen = bottom;
  num_frozen = 3;
  nn_model_t *r = make("resnet20");
  if (r) {
    int L = nn_model_num_layers(r), cuts[3] = {0, 0, L - 1}, n = 0;
    for (int c = 1; c < L && n < 2; c++)
      if (nn_model_range_cut_ok(r, c) && (n == 0 || c >= 26)) cuts[n++] = c;
    for (int k = 0; k < 3; k++)
      if (cuts[k] > 0) compare("resnet20", &cuts[k], 1);
    nn_model_free(r);
  }
  num_frozen = 0;
  /* Errors */
  nn_model_t *m = make("mlp");
  float x[4] = {0};
  CHECK(nn_model_forward_range(m, 2, 1, x, 1, 1) == NN_ERR_ARG, "empty range accepted");
  CHECK(nn_model_backward_range(m, 0, 2, NULL, NULL, NULL) == NN_ERR_ARG,
        "backward without a forward accepted");
  nn_model_free(m);
  printf("%s\n", failures ? "FAILED" : "layer ranges equal the whole model");
  return failures ? 1 : 0;
}
