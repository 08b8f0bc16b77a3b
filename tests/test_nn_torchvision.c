/* test_nn_torchvision: torchvision's vgg16, vgg16_bn, resnet18 and resnet50 (random
   weights and batch-norm statistics: there is no internet here) converted by
   `python/hvd_models.py from-torchvision` load into nn's models of the same names, whose
   eval forward on two 224x224 images equals torchvision's to 1e-4 relative (the largest
   logit difference over the largest logit); nn's save of each converts back
   (`to-torchvision`) into a state_dict that torchvision loads with strict=True, every
   tensor bit-identical to the original. The torchvision side: tests/torchvision_fixture.py.
   Run from the repository root. */
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

/* The models and their class counts, as tests/torchvision_fixture.py's MODELS. */
static const struct {
  const char *name;
  int classes;
} models[] = {{"vgg16", 1000}, {"vgg16_bn", 10}, {"resnet18", 5}, {"resnet50", 1000}};
enum { NMODELS = sizeof models / sizeof models[0], NIMAGES = 2 };

static int run_fixture(const char *verb, const char *dir) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/torchvision_fixture.py %s %s", verb, dir);
  int rc = system(cmd);
  CHECK(rc == 0, "%s: exit status %d", cmd, rc);
  return rc == 0 ? 0 : -1;
}

/* One model: load, forward, compare, save for the way back. */
static void check_model(const char *dir, int k, const nn_st_file_t *in) {
  const char *name = models[k].name;
  char path[512], key[64];
  snprintf(key, sizeof key, "%s.logits", name);
  const nn_st_tensor_t *images = nn_st_find(in, "images"), *want = nn_st_find(in, key);
  CHECK(images && want, "%s/input.safetensors lacks images or %s", dir, key);
  if (!images || !want) return;
  CHECK(want->ndim == 2 && want->shape[0] == NIMAGES && want->shape[1] == models[k].classes,
        "%s: torchvision's logits are not [%d, %d]", name, NIMAGES, models[k].classes);
  nn_model_config_t cfg = {.batch = NIMAGES, .seed = 1, .num_classes = models[k].classes};
  nn_model_t *m = NULL;
  nn_status_t s = nn_model_create(&m, name, &cfg);
  CHECK(s == NN_OK, "nn_model_create(%s): %s", name, nn_last_error());
  if (s != NN_OK) return;
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
  s = nn_model_load_safetensors(m, path);
  CHECK(s == NN_OK, "%s: loading the converted torchvision weights: %s", name, nn_last_error());
  if (s == NN_OK) s = nn_model_forward(m, images->data, NIMAGES, 0);
  CHECK(s == NN_OK, "%s: forward: %s", name, nn_last_error());
  if (s == NN_OK) {
    const float *got = nn_model_logits(m), *ref = want->data;
    double diff = 0, top = 0;
    size_t count = (size_t)NIMAGES * models[k].classes;
    for (size_t i = 0; i < count; i++) {
      if (fabs((double)got[i] - ref[i]) > diff || isnan(got[i])) diff = fabs((double)got[i] - ref[i]);
      if (fabs((double)ref[i]) > top) top = fabs((double)ref[i]);
    }
    double rel = top > 0 ? diff / top : diff;
    CHECK(rel <= 1e-4, "%s: nn's logits differ from torchvision's by %.3g relative (max "
          "|difference| %.3g, max |logit| %.3g), expected <= 1e-4", name, rel, diff, top);
    printf("%-9s %4d classes: nn's eval logits = torchvision's, %.2g relative\n", name,
           models[k].classes, rel);
    snprintf(path, sizeof path, "%s/%s.export.safetensors", dir, name);
    s = nn_model_save_safetensors(m, path);
    CHECK(s == NN_OK, "%s: saving: %s", name, nn_last_error());
  }
  nn_model_free(m);
  /* The largest files go as soon as they are used. */
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
  remove(path);
}

int main(void) {
  char dir[] = "/tmp/test_nn_torchvision.XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  nn_set_threads(2);
  if (run_fixture("make", dir) == 0) {
    char path[512];
    snprintf(path, sizeof path, "%s/input.safetensors", dir);
    nn_st_file_t in;
    nn_status_t s = nn_st_read(path, &in);
    CHECK(s == NN_OK, "%s: %s", path, nn_last_error());
    if (s == NN_OK) {
      for (int k = 0; k < NMODELS; k++) check_model(dir, k, &in);
      nn_st_free(&in);
      if (failures == 0) run_fixture("check", dir);
    }
  }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "%s failed", cmd);
  return failures ? 1 : 0;
}
