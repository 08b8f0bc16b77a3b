/* tests/test_nn_backward_store.c: the model walk's storing backward (the first writer of
   an activation gradient stores it, the later ones add; nn/backward_store_internal.h).
   1. Kernels: the storing form of every convolution path (im2col, 1x1 GEMM, Winograd 3x3
      and 5x5, the direct kernel), of batch norm and of relu, run over an input gradient
      full of NaN, equals bit for bit the adding form run over zeros, with 1 and 2
      threads; the residual add's backward in its four forms, also into one buffer.
   2. A graph whose gradients meet in every way the planner must order: an output read
      by three layers (a convolution and both inputs of an add, x + x) through an
      in-place relu, one read by an add and a max pool, adds of two branches, im2col,
      1x1 and flatten + linear: its parameter gradients with storing equal those of the
      same model built with nn_backward_store 0 (every gradient zeroed, every layer
      adding), value for value; and so must a graph that ends in a flatten whose source
      has another reader (the loss gradient is seeded there before the pass).
   3. The plan for a backend with views of its own (the CUDA backend: a relu over a pool
      and an NHWC flatten own their gradient there): those layers then store their
      input's gradient and their readers store theirs. */
#include "nn/backward_store_internal.h"
#include "nn/model_internal.h"
#include "nn/nn.h"
#include "tests/check.h"
#include "tests/conv_compare.h"

#include <stdint.h>
#include <string.h>

static void fill_nan(float *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = NAN;
}

static void check_conv_store(int c_in, int c_out, int h, int w, int k, int stride, int pad) {
  nn_conv2d_shape_t s = {3, c_in, h, w, c_out, k, k, stride, stride, pad, pad, 0, 0};
  if (nn_conv2d_shape(&s) != NN_OK) {
    CHECK(0, "shape %d->%d %dx%d k%d s%d: %s", c_in, c_out, h, w, k, stride, nn_last_error());
    return;
  }
  unsigned seed = (unsigned)(c_in * 131 + c_out * 7 + k);
  const size_t xn = (size_t)s.n * c_in * h * w, yn = (size_t)s.n * c_out * s.h_out * s.w_out;
  const size_t wn = (size_t)c_out * c_in * k * k;
  float *x = rnd(xn, &seed), *wt = rnd(wn, &seed), *dy = rnd(yn, &seed);
  float *added = calloc(xn, sizeof(float)), *stored = malloc(xn * sizeof(float));
  float *ws = malloc(nn_conv2d_workspace_floats(&s) * sizeof(float) + 64);
  fill_nan(stored, xn);
  nn_status_t a = nn_conv2d_backward_ex(&s, x, wt, dy, added, 1, NULL, NULL, ws);
  nn_status_t b = nn_conv2d_backward_ex(&s, x, wt, dy, stored, 0, NULL, NULL, ws);
  CHECK(a == NN_OK && b == NN_OK, "conv %d->%d: %s", c_in, c_out, nn_last_error());
  CHECK(memcmp(added, stored, xn * sizeof(float)) == 0,
        "conv %d->%d %dx%d k%d s%d p%d (%d threads): stored dx differs from dx added into "
        "zeros (max rel %.3g)", c_in, c_out, h, w, k, stride, pad, nn_threads(),
        rel_err(stored, added, xn));
  free(x), free(wt), free(dy), free(added), free(stored), free(ws);
}

static void check_bn_store(int c, int h, int w) {
  nn_batchnorm2d_shape_t s = {3, c, h, w, 1e-5f, 0.1f};
  const size_t n = (size_t)s.n * c * h * w;
  unsigned seed = (unsigned)(c * 17 + h);
  float *x = rnd(n, &seed), *dy = rnd(n, &seed), *y = malloc(n * sizeof(float));
  float *gamma = rnd((size_t)c, &seed), *beta = rnd((size_t)c, &seed);
  float *mean = calloc((size_t)c, sizeof(float)), *invstd = calloc((size_t)c, sizeof(float));
  float *rm = calloc((size_t)c, sizeof(float)), *rv = calloc((size_t)c, sizeof(float));
  float *dg = calloc((size_t)c, sizeof(float)), *db = calloc((size_t)c, sizeof(float));
  float *added = calloc(n, sizeof(float)), *stored = malloc(n * sizeof(float));
  fill_nan(stored, n);
  nn_status_t st = nn_batchnorm2d_forward_train(&s, x, gamma, beta, rm, rv, y, mean, invstd);
  if (st == NN_OK)
    st = nn_batchnorm2d_backward_ex(&s, x, gamma, mean, invstd, dy, added, 1, dg, db);
  if (st == NN_OK)
    st = nn_batchnorm2d_backward_ex(&s, x, gamma, mean, invstd, dy, stored, 0, dg, db);
  CHECK(st == NN_OK, "batch norm: %s", nn_last_error());
  CHECK(memcmp(added, stored, n * sizeof(float)) == 0,
        "batch norm c%d %dx%d (%d threads): stored dx differs from dx added into zeros", c, h, w,
        nn_threads());
  free(x), free(dy), free(y), free(gamma), free(beta), free(mean), free(invstd);
  free(rm), free(rv), free(dg), free(db), free(added), free(stored);
}

static void check_relu_store(size_t n) {
  unsigned seed = (unsigned)n;
  float *x = rnd(n, &seed), *dy = rnd(n, &seed), *y = malloc(n * sizeof(float));
  float *added = calloc(n, sizeof(float)), *stored = malloc(n * sizeof(float));
  fill_nan(stored, n);
  nn_relu_forward(n, x, y);
  nn_relu_backward(n, y, dy, added);
  nn_relu_backward_store(n, y, dy, stored);
  CHECK(memcmp(added, stored, n * sizeof(float)) == 0,
        "relu of %zu (%d threads): stored dx differs from dx added into zeros", n, nn_threads());
  free(x), free(dy), free(y), free(added), free(stored);
}

/* Every choice of adding or storing, into two buffers and into one (x + x). */
static void check_add_store(size_t n) {
  unsigned seed = (unsigned)n + 5;
  float *dy = rnd(n, &seed), *a0 = rnd(n, &seed), *b0 = rnd(n, &seed);
  float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
  for (int mode = 0; mode < 4; mode++) {
    const int a_add = mode & 1, b_add = mode >> 1;
    memcpy(a, a0, n * sizeof(float));
    memcpy(b, b0, n * sizeof(float));
    nn_add_backward_ex(n, dy, a, a_add, b, b_add);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
      bad += a[i] != (a_add ? a0[i] : 0.0f) + dy[i] || b[i] != (b_add ? b0[i] : 0.0f) + dy[i];
    CHECK(bad == 0, "add backward of %zu (a %s, b %s): %zu wrong", n, a_add ? "adds" : "stores",
          b_add ? "adds" : "stores", bad);
    memcpy(a, a0, n * sizeof(float));
    nn_add_backward_ex(n, dy, a, a_add, a, b_add);   /* x + x */
    bad = 0;
    for (size_t i = 0; i < n; i++) {
      float first = (a_add ? a0[i] : 0.0f) + dy[i];
      bad += a[i] != (b_add ? first : 0.0f) + dy[i];
    }
    CHECK(bad == 0, "add backward of %zu into one buffer (a %s, b %s): %zu wrong", n,
          a_add ? "adds" : "stores", b_add ? "adds" : "stores", bad);
  }
  free(dy), free(a0), free(b0), free(a), free(b);
}

static void check_kernels(void) {
  check_conv_store(4, 6, 9, 7, 3, 2, 1);    /* im2col + col2im */
  check_conv_store(5, 7, 6, 5, 1, 1, 0);    /* 1x1: one GEMM per sample */
  check_conv_store(3, 5, 8, 9, 5, 1, 2);    /* 5x5, few channels: im2col */
  check_conv_store(40, 36, 6, 7, 3, 1, 1);  /* Winograd 3x3 */
  check_conv_store(32, 34, 7, 6, 5, 1, 2);  /* Winograd 5x5 */
  check_conv_store(16, 16, 10, 9, 3, 1, 1); /* the direct kernel (AVX-512), else Winograd */
  check_conv_store(8, 12, 7, 11, 3, 1, 1);  /* the direct kernel, or im2col */
  check_bn_store(5, 7, 3);
  check_bn_store(16, 8, 8);
  check_relu_store(1001);
  check_relu_store((size_t)1 << 19);        /* split over the threads */
  check_add_store(1003);
}

/* ---- 2. a graph with every kind of gradient meeting ---- */

enum { BATCH = 3, CLASSES = 5 };

/* The graph, with the planner storing first-written gradients (store 1) or not. */
static nn_model_t *build_graph(int store) {
  nn_backward_store = store;
  nn_model_config_t cfg = {BATCH, 7, CLASSES, 2, 8, 8};
  nn_model_t *m = nn_model_begin("store-test", &cfg, 2, 8, 8, CLASSES);
  if (!m) return NULL;
  int a = nn_model_add_conv2d(m, "a", NN_MODEL_INPUT, 6, 3, 1, 1, 1);
  int r = nn_model_add_relu(m, "r", a);             /* in place: a has one reader */
  int b = nn_model_add_conv2d(m, "b", r, 6, 3, 1, 1, 0);
  int rr = nn_model_add_add(m, "rr", r, r);         /* x + x: r has three readers */
  int bn = nn_model_add_batchnorm2d(m, "bn", b);
  int br = nn_model_add_relu(m, "br", bn);          /* in place */
  int s = nn_model_add_add(m, "s", br, rr);
  int c = nn_model_add_conv2d(m, "c", s, 8, 3, 2, 1, 1);  /* stride 2: im2col */
  int cr = nn_model_add_relu(m, "cr", c);
  int p = nn_model_add_maxpool2d(m, "p", s, 2, 2, 0);     /* s's second reader */
  int q = nn_model_add_conv2d(m, "q", p, 8, 1, 1, 0, 0);  /* 1x1 */
  int t = nn_model_add_add(m, "t", cr, q);
  int f = nn_model_add_flatten(m, "f", t);
  nn_model_add_linear(m, "fc", f, CLASSES, 1);
  nn_status_t st = nn_model_finish(m);
  nn_backward_store = 1;
  return st == NN_OK ? m : NULL;
}

/* Runs `steps` training steps (no update) of both models on x and checks that their
   parameter gradients are equal (== : a zero's sign may differ) and that at least
   min_nonzero of them are not zero. */
static void compare_steps(nn_model_t *m[2], const float *x, const int32_t *labels, int steps,
                          const char *what, size_t min_nonzero) {
  for (int k = 0; k < 2; k++)
    for (int step = 0; step < steps; step++) {
      nn_status_t st = nn_model_forward(m[k], x, BATCH, 1);
      if (st == NN_OK) st = nn_model_loss(m[k], labels, NULL, NULL);
      if (st == NN_OK) st = nn_model_backward(m[k], NULL, NULL);
      CHECK(st == NN_OK, "%s: step: %s", what, nn_last_error());
    }
  const float *g0 = nn_model_grads(m[0]), *g1 = nn_model_grads(m[1]);
  size_t differ = 0, nonzero = 0;
  for (size_t i = 0; i < m[0]->param_len; i++) {
    differ += !(g0[i] == g1[i]);
    nonzero += g0[i] != 0;
  }
  CHECK(differ == 0, "%s: %zu of %zu parameter gradients differ between storing and adding",
        what, differ, m[0]->param_len);
  CHECK(nonzero >= min_nonzero, "%s: only %zu gradients are not zero", what, nonzero);
}

static void check_graph(void) {
  nn_model_t *m[2] = {build_graph(0), build_graph(1)};
  if (!m[0] || !m[1]) {
    CHECK(0, "building the graph: %s", nn_last_error());
    nn_model_free(m[0]);
    nn_model_free(m[1]);
    return;
  }
  int stored = 0;
  for (int i = 0; i < m[1]->num_layers; i++) {
    stored += m[1]->layers[i].dx_first[0] + m[1]->layers[i].dx_first[1];
    CHECK(!m[0]->layers[i].dx_first[0] && !m[0]->layers[i].dx_first[1],
          "layer %d stores a gradient with nn_backward_store 0", i);
  }
  /* In backward order, the first writer of each gradient: fc (t's, through the
     flatten), t (c's through the in-place relu cr, and q's), q (p's), p (s's), s (bn's
     through br, and rr's), bn (b's), rr (r's = a's, its first input; its second adds),
     so 9; c adds into s's, b into a's. */
  CHECK(stored == 9, "%d first writers, expected 9", stored);
  CHECK(m[1]->layers[1].is_view && m[1]->layers[5].is_view, "the relus should run in place");
  unsigned seed = 99;
  const size_t xn = (size_t)BATCH * 2 * 8 * 8;
  float *x = rnd(xn, &seed);
  const int32_t labels[BATCH] = {1, 4, 0};
  /* Two steps (no update): the second finds the first's gradients in the activation
     gradients, which a layer that adds into a gradient it writes first would pick up. */
  compare_steps(m, x, labels, 2, "graph", m[0]->param_len / 2 + 1);
  printf("graph: %zu parameter gradients, storing equals adding into zeros\n",
         m[0]->param_len);
  free(x);
  nn_model_free(m[0]);
  nn_model_free(m[1]);
}

/* A graph that ends in a view (flatten) whose owner has another reader (a dead relu):
   the loss gradient copied into the owner's gradient is that reader's to add to. */
static void check_last_view(void) {
  nn_model_t *m[2];
  for (int store = 0; store < 2; store++) {
    nn_backward_store = store;
    nn_model_config_t cfg = {BATCH, 3, CLASSES, 2, 6, 6};
    nn_model_t *g = nn_model_begin("last-view", &cfg, 2, 6, 6, CLASSES);
    if (g) {
      int c = nn_model_add_conv2d(g, "c", NN_MODEL_INPUT, CLASSES, 3, 1, 1, 1);
      int p = nn_model_add_global_avgpool(g, "p", c);
      nn_model_add_relu(g, "dead", p);   /* p has two readers: not in place */
      nn_model_add_flatten(g, "f", p);
    }
    m[store] = g && nn_model_finish(g) == NN_OK ? g : NULL;
    nn_backward_store = 1;
  }
  if (!m[0] || !m[1]) {
    CHECK(0, "building the last-view graph: %s", nn_last_error());
    nn_model_free(m[0]);
    nn_model_free(m[1]);
    return;
  }
  unsigned seed = 5;
  float *x = rnd((size_t)BATCH * 2 * 6 * 6, &seed);
  const int32_t labels[BATCH] = {0, 3, 2};
  compare_steps(m, x, labels, 1, "last-view graph", 1);
  free(x);
  nn_model_free(m[0]);
  nn_model_free(m[1]);
}

/* The plan for a backend whose views differ from the model's (nn/cuda/model_cuda.c: a
   relu over a pooling output and an NHWC flatten own their gradient there): each such
   layer then writes its input's gradient, and its readers write its own. */
static void check_backend_views(void) {
  nn_model_config_t cfg = {BATCH, 3, CLASSES, 2, 8, 8};
  nn_model_t *m = nn_model_begin("views", &cfg, 2, 8, 8, CLASSES);
  if (m) {
    int a = nn_model_add_conv2d(m, "a", NN_MODEL_INPUT, 4, 3, 1, 1, 1);
    int p = nn_model_add_maxpool2d(m, "p", a, 2, 2, 0);
    int r = nn_model_add_relu(m, "r", p);                /* in place on the CPU */
    int b = nn_model_add_conv2d(m, "b", r, 4, 3, 1, 1, 0);
    int f = nn_model_add_flatten(m, "f", b);
    nn_model_add_linear(m, "fc", f, CLASSES, 1);
  }
  if (!m || nn_model_finish(m) != NN_OK) {
    CHECK(0, "building the views graph: %s", nn_last_error());
    return;
  }
  enum { A, P, R, B, F, FC, N };
  CHECK(m->num_layers == N && m->layers[R].is_view && m->layers[F].is_view,
        "the relu and the flatten should be views on the CPU");
  /* The model's plan: fc stores b's gradient (through f), b stores p's (through r). */
  const int cpu_first[N] = {0, 1, 0, 1, 0, 1};
  for (int i = 0; i < N; i++)
    CHECK(m->layers[i].dx_first[0] == cpu_first[i], "model views: layer %d dx_first %d, "
          "expected %d", i, m->layers[i].dx_first[0], cpu_first[i]);
  char view[N] = {0}, written[N + 1];
  for (int store = 1; store >= 0; store--) {
    m->backward_store = store;
    nn_model_plan_grad_writes(m, view, written);
    /* No views: every layer but the first (whose input gradient nobody wants) stores its
       input's gradient; each gradient has one writer. */
    for (int i = 0; i < N; i++) {
      int want = store && i != A;
      CHECK(m->layers[i].dx_first[0] == want, "no views (store %d): layer %d dx_first %d, "
            "expected %d", store, i, m->layers[i].dx_first[0], want);
      int unwritten = !store && i != FC;
      CHECK(m->layers[i].dout_unwritten == unwritten, "no views (store %d): layer %d "
            "dout_unwritten %d, expected %d", store, i, m->layers[i].dout_unwritten,
            unwritten);
    }
  }
  m->backward_store = 1;
  for (int i = 0; i < N; i++) view[i] = (char)m->layers[i].is_view;
  nn_model_plan_grad_writes(m, view, written);
  for (int i = 0; i < N; i++)
    CHECK(m->layers[i].dx_first[0] == cpu_first[i] && !m->layers[i].dout_unwritten,
          "model views planned again: layer %d dx_first %d dout_unwritten %d", i,
          m->layers[i].dx_first[0], m->layers[i].dout_unwritten);
  nn_model_free(m);
}

int main(void) {
  for (int t = 1; t <= 2; t++) {
    nn_set_threads(t);
    check_kernels();
  }
  nn_set_threads(1);
  check_graph();
  check_last_view();
  check_backend_views();
  printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
