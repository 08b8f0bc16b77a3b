/* tests/test_onnx_models.c: models read from ONNX files against PyTorch.

   tests/onnx_reference.py exports torchvision's resnet18, mobilenet_v2, vgg11 (with a
   classifier for 32x32 inputs) and a small custom CNN with torch.onnx.export, and saves
   PyTorch's eval forward of a batch and every parameter and running statistic (batch
   norm in training mode: the running statistics too) after 5 SGD steps (momentum 0.9,
   the reference's learning rate) on that batch (tests/onnx_reference.py says why each
   model's batch, learning rate and starting weights keep every ReLU input away from its
   kink). For each model this test builds it with nn_model_from_onnx and checks:
   1. the eval forward equals PyTorch's logits,
   2. after the same SGD steps every tensor (by the graph's names) equals PyTorch's (a
      MatMul's weight, which nn keeps as [out, in], transposed back);
   err = max|ours - torch| / max|torch| per tensor, below 1e-4. Where the reference
   also took the steps in float64 (mobilenet_v2), the test prints PyTorch's float32 error
   and ours against those: the tolerance's measure of what float32 can promise.
   Then the errors: an unsupported op names the node, the op and what is supported; a
   truncated file and an input of rank 2 are clear errors, not crashes; the custom CNN
   (every graph layer kind) moves to a GPU where there is one, else is refused for want
   of a device only.
   Usage: test_onnx_models [DIR]: DIR holds the files already (else the test runs
   tests/onnx_reference.py into a temporary directory, and removes it). */
#include "nn/nn.h"
#include "nn/nn_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL 1e-4

static int failures;

/* rows: got is want's [rows][n / rows] transposed (1: the same layout). */
static double rel_err_t(const float *got, const float *want, size_t n, size_t rows) {
  double maxdiff = 0, maxref = 0;
  size_t cols = n / rows;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[(i % cols) * rows + i / cols] - want[i]);
    if (d > maxdiff || d != d) maxdiff = d;
    if (fabs(want[i]) > maxref) maxref = fabs(want[i]);
  }
  return maxdiff / (maxref > 1e-6 ? maxref : 1e-6);
}

static double rel_err(const float *got, const float *want, size_t n) {
  return rel_err_t(got, want, n, 1);
}

static const nn_st_tensor_t *need(const nn_st_file_t *f, const char *name, nn_st_dtype_t dt) {
  const nn_st_tensor_t *t = nn_st_find(f, name);
  if (!t || t->dtype != dt) {
    printf("  FAIL reference tensor %s missing or of another dtype\n", name);
    failures++;
    return NULL;
  }
  return t;
}

/* The model's tensor of that name (a parameter or a running statistic), or NULL; *rows
   > 1 when it is the transpose of t. */
static const float *model_tensor(nn_model_t *m, const nn_st_tensor_t *t, const char *name,
                                 size_t *numel, size_t *rows) {
  for (int i = 0; i < nn_model_num_slices(m); i++) {
    const nn_slice_t *s = nn_model_slice(m, i);
    if (strcmp(s->name, name) != 0 || s->kind == NN_SLICE_COUNTER) continue;
    *numel = s->numel;
    *rows = s->ndim == 2 && t->ndim == 2 && s->shape[0] != t->shape[0] ? (size_t)t->shape[0] : 1;
    return (s->kind == NN_SLICE_PARAM ? nn_model_params(m) : nn_model_buffers(m)) + s->offset;
  }
  return NULL;
}

/* PyTorch's float64 steps (after64.*, where the reference has them) against its float32
   ones and against ours: nn's float32 error should be the size of PyTorch's own. */
static void report_float64(nn_model_t *m, const nn_st_file_t *ref) {
  double torch32 = 0, ours = 0;
  const char *torch32_at = "", *ours_at = "";
  int compared = 0;
  for (int i = 0; i < ref->count; i++) {
    const nn_st_tensor_t *t = &ref->tensors[i];
    if (strncmp(t->name, "after64.", 8) != 0) continue;
    char name32[256];
    snprintf(name32, sizeof name32, "after.%s", t->name + 8);
    const nn_st_tensor_t *t32 = nn_st_find(ref, name32);
    size_t numel = 0, rows = 1;
    const float *got = model_tensor(m, t, t->name + 8, &numel, &rows);
    if (!t32 || t32->nbytes != t->nbytes || !got || numel * sizeof(float) != t->nbytes) continue;
    double e32 = rel_err(t32->data, t->data, numel), e = rel_err_t(got, t->data, numel, rows);
    if (e32 > torch32) torch32 = e32, torch32_at = t->name + 8;
    if (e > ours) ours = e, ours_at = t->name + 8;
    compared++;
  }
  if (compared)
    printf("  against PyTorch's float64 steps (%d tensors), worst rel err: PyTorch's float32 "
           "%.2e (%s), nn %.2e (%s)\n", compared, torch32, torch32_at, ours, ours_at);
}

static void check_steps(nn_model_t *m, const nn_st_file_t *ref, const float *x,
                        const int32_t *y, int n) {
  const nn_st_tensor_t *ts = need(ref, "steps", NN_ST_I64), *tlr = need(ref, "lr", NN_ST_F32);
  if (!ts || ts->nbytes != 8 || !tlr || tlr->nbytes != 4) return;
  const int steps = (int)*(const int64_t *)ts->data;
  const float lr = *(const float *)tlr->data;
  if (steps == 0) {
    printf("  (no training steps compared)\n");
    return;
  }
  nn_optim_config_t oc = {.kind = NN_OPTIM_SGD, .momentum = 0.9f};
  if (nn_model_optim_create(m, &oc) != NN_OK) goto fail;
  for (int s = 0; s < steps; s++)
    if (nn_model_forward(m, x, n, 1) != NN_OK || nn_model_loss(m, y, NULL, NULL) != NN_OK ||
        nn_model_backward(m, NULL, NULL) != NN_OK || nn_model_optim_step(m, lr) != NN_OK)
      goto fail;
  double worst = 0;
  int compared = 0;
  for (int i = 0; i < ref->count; i++) {
    const nn_st_tensor_t *t = &ref->tensors[i];
    if (strncmp(t->name, "after.", 6) != 0) continue;
    size_t numel = 0, rows = 1;
    const float *got = model_tensor(m, t, t->name + 6, &numel, &rows);
    if (!got || numel * sizeof(float) != t->nbytes) {
      printf("  FAIL %s: no tensor of that name and size in the model\n", t->name + 6);
      failures++;
      continue;
    }
    double e = rel_err_t(got, t->data, numel, rows);
    if (e > worst) worst = e;
    if (e > TOL) {
      printf("  FAIL %s after %d steps: rel err %.2e\n", t->name + 6, steps, e);
      failures++;
    }
    compared++;
  }
  const nn_st_tensor_t *tm = nn_st_find(ref, "margin");
  printf("  %s %d tensors after %d SGD steps (lr %g), worst rel err %.2e; PyTorch's kink "
         "margin %.2e\n", worst <= TOL && compared ? "ok  " : "FAIL", compared, steps,
         (double)lr, worst, tm && tm->nbytes == 4 ? (double)*(const float *)tm->data : -1.0);
  if (!compared) failures++;
  report_float64(m, ref);
  return;
fail:
  printf("  FAIL training step: %s\n", nn_last_error());
  failures++;
}

static void check_model(const char *dir, const char *name) {
  char path[512], refpath[512];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  snprintf(refpath, sizeof refpath, "%s/%s.ref.safetensors", dir, name);
  printf("%s\n", name);
  nn_st_file_t ref;
  if (nn_st_read(refpath, &ref) != NN_OK) {
    printf("  FAIL %s\n", nn_last_error());
    failures++;
    return;
  }
  const nn_st_tensor_t *tx = need(&ref, "x", NN_ST_F32), *ty = need(&ref, "y", NN_ST_I64),
                       *tl = need(&ref, "logits", NN_ST_F32);
  nn_model_t *m = NULL;
  if (tx && ty && tl) {
    int n = (int)ty->shape[0];
    nn_model_config_t cfg = {.batch = n, .seed = 1};
    if (nn_model_from_onnx(&m, path, &cfg) != NN_OK) {
      printf("  FAIL %s\n", nn_last_error());
      failures++;
    } else {
      int32_t y[64];
      for (int i = 0; i < n && i < 64; i++) y[i] = (int32_t)((const int64_t *)ty->data)[i];
      if (nn_model_forward(m, tx->data, n, 0) != NN_OK) {
        printf("  FAIL forward: %s\n", nn_last_error());
        failures++;
      } else {
        size_t k = (size_t)n * nn_model_num_classes(m);
        double e = k * sizeof(float) == tl->nbytes ? rel_err(nn_model_logits(m), tl->data, k)
                                                   : INFINITY;
        printf("  %s eval forward of %d layers, rel err %.2e\n", e <= TOL ? "ok  " : "FAIL",
               nn_model_num_layers(m), e);
        if (!(e <= TOL)) failures++;
        check_steps(m, &ref, tx->data, y, n);
      }
    }
  }
  nn_model_free(m);
  nn_st_free(&ref);
}

/* nn_model_from_onnx on path fails with status `want`, its message holding each of
   the words. */
static void check_error(const char *what, const char *path, nn_status_t want,
                        const char *const *words) {
  nn_model_config_t cfg = {.batch = 2, .seed = 1};
  nn_model_t *m = NULL;
  nn_status_t s = nn_model_from_onnx(&m, path, &cfg);
  int ok = s == want && m == NULL;
  for (int i = 0; ok && words[i]; i++) ok = strstr(nn_last_error(), words[i]) != NULL;
  printf("%s %s: %s\n", ok ? "ok  " : "FAIL", what, nn_last_error());
  if (!ok) failures++;
  nn_model_free(m);
}

/* The custom CNN (every graph layer kind) moves to the GPU where there is one; without,
   the move is refused for want of a device (nn/cuda/graph_cuda_internal.h has kernels for
   every kind), and the model stays on the CPU. */
static void check_device(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/custom.onnx", dir);
  nn_model_config_t cfg = {.batch = 2, .seed = 1};
  nn_model_t *m = NULL;
  if (nn_model_from_onnx(&m, path, &cfg) != NN_OK) {
    printf("FAIL device: %s\n", nn_last_error());
    failures++;
    return;
  }
  nn_status_t s = nn_model_to_device(m, NN_DEVICE_CUDA);
  int ok = nn_cuda_available() ? s == NN_OK && nn_model_device(m) == NN_DEVICE_CUDA
                               : s == NN_ERR_UNSUPPORTED && nn_model_device(m) == NN_DEVICE_CPU &&
                                     !strstr(nn_last_error(), "layer");
  printf("%s the custom CNN on the GPU: %s\n", ok ? "ok  " : "FAIL",
         s == NN_OK ? "moved" : nn_last_error());
  if (!ok) failures++;
  nn_model_free(m);
}

static void check_errors(const char *dir) {
  char path[512], cut[512];
  snprintf(path, sizeof path, "%s/unsupported_op.onnx", dir);
  check_error("unsupported op", path, NN_ERR_UNSUPPORTED,
              (const char *const[]){"upsample", "Resize", "supported: Conv", NULL});
  snprintf(path, sizeof path, "%s/rank2_input.onnx", dir);
  check_error("input of rank 2", path, NN_ERR_UNSUPPORTED,
              (const char *const[]){"rank 2", "[N, C, H, W]", NULL});
  /* The custom model cut in half. */
  snprintf(path, sizeof path, "%s/custom.onnx", dir);
  snprintf(cut, sizeof cut, "%s/truncated.onnx", dir);
  FILE *in = fopen(path, "rb"), *out = fopen(cut, "wb");
  static char buf[1 << 16];
  size_t got = in ? fread(buf, 1, sizeof buf, in) : 0;
  if (out) fwrite(buf, 1, got / 2, out);
  if (in) fclose(in);
  if (out) fclose(out);
  check_error("truncated file", cut, NN_ERR_FORMAT,
              (const char *const[]){"truncated.onnx", "truncated or corrupt", NULL});
  remove(cut);
  snprintf(path, sizeof path, "%s/no-such-file.onnx", dir);
  check_error("missing file", path, NN_ERR_IO, (const char *const[]){"cannot open", NULL});
}

int main(int argc, char **argv) {
  static const char *const models[] = {"custom", "resnet18", "mobilenet_v2", "vgg11"};
  char tmp[] = "/tmp/test_onnx_models.XXXXXX";
  const char *dir = argc > 1 ? argv[1] : NULL;
  if (!dir) {
    if (!mkdtemp(tmp)) {
      perror("mkdtemp");
      return 1;
    }
    dir = tmp;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/onnx_reference.py %s > %s/log 2>&1",
             dir, dir);
    if (system(cmd) != 0) {
      printf("FAIL tests/onnx_reference.py (torch, torchvision and onnx for "
             "/usr/bin/python3: scripts/install-deps.sh); its output:\n");
      snprintf(cmd, sizeof cmd, "tail -20 %s/log; rm -rf %s", dir, dir);
      if (system(cmd) != 0) printf("(could not show it)\n");
      return 1;
    }
  }
  nn_set_threads(1);
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) check_model(dir, models[i]);
  check_errors(dir);
  check_device(dir);
  if (dir == tmp) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) printf("could not remove %s\n", tmp);
  }
  printf("%s\n", failures ? "FAILED" : "all ok");
  return failures ? 1 : 0;
}
