/* nn/models.c: the built-in models, built by name. Layer and tensor names follow the
   reference definitions: lenet and resnet20 as scripts/peers/torch_models.py;
   resnet18, resnet50, resnet101, vgg16, vgg16_bn and alexnet as torchvision.models
   (the same layers, names, shapes and order: a torchvision state_dict loads as it is,
   python/hvd_models.py from-torchvision checks and converts it). Layers are added in
   PyTorch's registration order, which is both the state_dict order and a valid forward
   order (torchvision computes a block's downsample after its main branch).

   mlp (ours): flatten, fc1 784->512, relu, fc2 512->10.
   trivial (tf_cnn_benchmarks' TrivialModel): flatten of a 3x227x227 image, fc1 to 1
   unit + relu, fc2 to 4096 + relu, fc3 to the logits. */
#include "nn/model_internal.h"

#include <stdio.h>
#include <string.h>

static const char *const model_names[] = {"mlp",      "lenet",    "resnet20", "resnet18",
                                          "resnet50", "resnet101", "vgg16",   "vgg16_bn",
                                          "alexnet",  "trivial",  NULL};

const char *const *nn_model_names(void) { return model_names; }

static int build_mlp(nn_model_t *m) {
  int x = nn_model_add_flatten(m, "flatten", NN_MODEL_INPUT);
  x = nn_model_add_linear(m, "fc1", x, 512, 1);
  x = nn_model_add_relu(m, "relu1", x);
  return nn_model_add_linear(m, "fc2", x, m->num_classes, 1);
}

static int build_lenet(nn_model_t *m) {
  int x = nn_model_add_conv2d(m, "conv1", NN_MODEL_INPUT, 32, 5, 1, 2, 1);
  x = nn_model_add_relu(m, "relu1", x);
  x = nn_model_add_maxpool2d(m, "pool1", x, 2, 2, 0);
  x = nn_model_add_conv2d(m, "conv2", x, 64, 5, 1, 2, 1);
  x = nn_model_add_relu(m, "relu2", x);
  x = nn_model_add_maxpool2d(m, "pool2", x, 2, 2, 0);
  x = nn_model_add_flatten(m, "flatten", x);
  x = nn_model_add_linear(m, "fc1", x, 512, 1);
  x = nn_model_add_relu(m, "relu3", x);
  return nn_model_add_linear(m, "fc2", x, m->num_classes, 1);
}

/* Appends "prefix.suffix" to buf. */
static const char *nm(char *buf, size_t size, const char *prefix, const char *suffix) {
  snprintf(buf, size, "%s.%s", prefix, suffix);
  return buf;
}

/* torch_models.BasicBlock: conv3x3-bn-relu-conv3x3-bn (+ downsample conv1x1-bn) add relu */
static int basic_block(nn_model_t *m, const char *p, int x, int cin, int cout,
                       int stride) {
  char b[96];
  int y = nn_model_add_conv2d(m, nm(b, sizeof b, p, "conv1"), x, cout, 3, stride, 1, 0);
  y = nn_model_add_batchnorm2d(m, nm(b, sizeof b, p, "bn1"), y);
  y = nn_model_add_relu(m, nm(b, sizeof b, p, "relu1"), y);
  y = nn_model_add_conv2d(m, nm(b, sizeof b, p, "conv2"), y, cout, 3, 1, 1, 0);
  y = nn_model_add_batchnorm2d(m, nm(b, sizeof b, p, "bn2"), y);
  int sc = x;
  if (stride != 1 || cin != cout) {
    sc = nn_model_add_conv2d(m, nm(b, sizeof b, p, "downsample.0"), x, cout, 1, stride,
                             0, 0);
    sc = nn_model_add_batchnorm2d(m, nm(b, sizeof b, p, "downsample.1"), sc);
  }
  y = nn_model_add_add(m, nm(b, sizeof b, p, "add"), y, sc);
  return nn_model_add_relu(m, nm(b, sizeof b, p, "relu2"), y);
}

static int build_resnet20(nn_model_t *m) {
  int x = nn_model_add_conv2d(m, "conv1", NN_MODEL_INPUT, 16, 3, 1, 1, 0);
  x = nn_model_add_batchnorm2d(m, "bn1", x);
  x = nn_model_add_relu(m, "relu", x);
  static const int widths[3] = {16, 32, 64}, strides[3] = {1, 2, 2};
  int cin = 16;
  for (int s = 0; s < 3; s++) {
    for (int k = 0; k < 3; k++) {
      char p[32];
      snprintf(p, sizeof p, "layer%d.%d", s + 1, k);
      x = basic_block(m, p, x, k == 0 ? cin : widths[s], widths[s], k == 0 ? strides[s] : 1);
    }
    cin = widths[s];
  }
  x = nn_model_add_global_avgpool(m, "avgpool", x);
  return nn_model_add_linear(m, "fc", x, m->num_classes, 1);
}

/* torchvision Bottleneck (v1.5: the stride sits on the 3x3 conv), expansion 4. */
static int bottleneck(nn_model_t *m, const char *p, int x, int inplanes, int planes,
                      int stride) {
  char b[96];
  int y = nn_model_add_conv2d(m, nm(b, sizeof b, p, "conv1"), x, planes, 1, 1, 0, 0);
  y = nn_model_add_batchnorm2d(m, nm(b, sizeof b, p, "bn1"), y);
  y = nn_model_add_relu(m, nm(b, sizeof b, p, "relu1"), y);
  y = nn_model_add_conv2d(m, nm(b, sizeof b, p, "conv2"), y, planes, 3, stride, 1, 0);
  y = nn_model_add_batchnorm2d(m, nm(b, sizeof b, p, "bn2"), y);
  y = nn_model_add_relu(m, nm(b, sizeof b, p, "relu2"), y);
  y = nn_model_add_conv2d(m, nm(b, sizeof b, p, "conv3"), y, planes * 4, 1, 1, 0, 0);
  y = nn_model_add_batchnorm2d(m, nm(b, sizeof b, p, "bn3"), y);
  int sc = x;
  if (stride != 1 || inplanes != planes * 4) {
    sc = nn_model_add_conv2d(m, nm(b, sizeof b, p, "downsample.0"), x, planes * 4, 1,
                             stride, 0, 0);
    sc = nn_model_add_batchnorm2d(m, nm(b, sizeof b, p, "downsample.1"), sc);
  }
  y = nn_model_add_add(m, nm(b, sizeof b, p, "add"), y, sc);
  return nn_model_add_relu(m, nm(b, sizeof b, p, "relu3"), y);
}

static int build_resnet_bottleneck(nn_model_t *m, const int blocks[4]) {
  int x = nn_model_add_conv2d(m, "conv1", NN_MODEL_INPUT, 64, 7, 2, 3, 0);
  x = nn_model_add_batchnorm2d(m, "bn1", x);
  x = nn_model_add_relu(m, "relu", x);
  x = nn_model_add_maxpool2d(m, "maxpool", x, 3, 2, 1);
  int inplanes = 64;
  for (int s = 0; s < 4; s++) {
    int planes = 64 << s;
    for (int k = 0; k < blocks[s]; k++) {
      char p[32];
      snprintf(p, sizeof p, "layer%d.%d", s + 1, k);
      x = bottleneck(m, p, x, inplanes, planes, k == 0 && s > 0 ? 2 : 1);
      inplanes = planes * 4;
    }
  }
  x = nn_model_add_global_avgpool(m, "avgpool", x);
  return nn_model_add_linear(m, "fc", x, m->num_classes, 1);
}

/* torchvision's resnet18: the ImageNet stem, four stages of two BasicBlocks (64, 128,
   256, 512 channels; the first block of stages 2-4 has stride 2 and a downsample). */
static int build_resnet18(nn_model_t *m) {
  int x = nn_model_add_conv2d(m, "conv1", NN_MODEL_INPUT, 64, 7, 2, 3, 0);
  x = nn_model_add_batchnorm2d(m, "bn1", x);
  x = nn_model_add_relu(m, "relu", x);
  x = nn_model_add_maxpool2d(m, "maxpool", x, 3, 2, 1);
  int cin = 64;
  for (int s = 0; s < 4; s++) {
    int planes = 64 << s;
    for (int k = 0; k < 2; k++) {
      char p[32];
      snprintf(p, sizeof p, "layer%d.%d", s + 1, k);
      x = basic_block(m, p, x, k == 0 ? cin : planes, planes, k == 0 && s > 0 ? 2 : 1);
    }
    cin = planes;
  }
  x = nn_model_add_global_avgpool(m, "avgpool", x);
  return nn_model_add_linear(m, "fc", x, m->num_classes, 1);
}

/* torchvision's AdaptiveAvgPool2d(target): an identity when the feature map already has
   the target size (224x224 inputs), an average pool when it divides evenly. */
static int adaptive_avgpool(nn_model_t *m, int x, int target) {
  if (m->status != NN_OK) return NN_LAYER_ERROR;
  const nn_layer_t *l = &m->layers[x];
  if (l->h == target && l->w == target) return x;
  if (l->h == l->w && l->h % target == 0)
    return nn_model_add_avgpool2d(m, "avgpool", x, l->h / target, l->h / target, 0);
  m->status = nn_set_error(NN_ERR_ARG, "nn_model_create(\"%s\"): the feature map is "
                           "%dx%d, which does not pool evenly to %dx%d; use a 224x224 "
                           "input", m->name, l->h, l->w, target, target);
  return NN_LAYER_ERROR;
}

/* vgg16 and vgg16_bn (batch_norm: a BatchNorm2d after every convolution, which keeps
   its bias, as torchvision's). */
static int build_vgg16(nn_model_t *m, int batch_norm) {
  /* torchvision cfg "D": channels, 0 = max pool. features.N counts every module. */
  static const int cfg[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0,
                            512, 512, 512, 0, 512, 512, 512, 0};
  int x = NN_MODEL_INPUT, idx = 0;
  char b[64];
  for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
    if (cfg[i] == 0) {
      snprintf(b, sizeof b, "features.%d", idx++);
      x = nn_model_add_maxpool2d(m, b, x, 2, 2, 0);
    } else {
      snprintf(b, sizeof b, "features.%d", idx++);
      x = nn_model_add_conv2d(m, b, x, cfg[i], 3, 1, 1, 1);
      if (batch_norm) {
        snprintf(b, sizeof b, "features.%d", idx++);
        x = nn_model_add_batchnorm2d(m, b, x);
      }
      snprintf(b, sizeof b, "features.%d", idx++);
      x = nn_model_add_relu(m, b, x);
    }
  }
  x = adaptive_avgpool(m, x, 7);
  x = nn_model_add_flatten(m, "flatten", x);
  x = nn_model_add_linear(m, "classifier.0", x, 4096, 1);
  x = nn_model_add_relu(m, "classifier.1", x);
  x = nn_model_add_dropout(m, "classifier.2", x, 0.5f);
  x = nn_model_add_linear(m, "classifier.3", x, 4096, 1);
  x = nn_model_add_relu(m, "classifier.4", x);
  x = nn_model_add_dropout(m, "classifier.5", x, 0.5f);
  return nn_model_add_linear(m, "classifier.6", x, m->num_classes, 1);
}

static int build_alexnet(nn_model_t *m) {
  int x = nn_model_add_conv2d(m, "features.0", NN_MODEL_INPUT, 64, 11, 4, 2, 1);
  x = nn_model_add_relu(m, "features.1", x);
  x = nn_model_add_maxpool2d(m, "features.2", x, 3, 2, 0);
  x = nn_model_add_conv2d(m, "features.3", x, 192, 5, 1, 2, 1);
  x = nn_model_add_relu(m, "features.4", x);
  x = nn_model_add_maxpool2d(m, "features.5", x, 3, 2, 0);
  x = nn_model_add_conv2d(m, "features.6", x, 384, 3, 1, 1, 1);
  x = nn_model_add_relu(m, "features.7", x);
  x = nn_model_add_conv2d(m, "features.8", x, 256, 3, 1, 1, 1);
  x = nn_model_add_relu(m, "features.9", x);
  x = nn_model_add_conv2d(m, "features.10", x, 256, 3, 1, 1, 1);
  x = nn_model_add_relu(m, "features.11", x);
  x = nn_model_add_maxpool2d(m, "features.12", x, 3, 2, 0);
  x = adaptive_avgpool(m, x, 6);
  x = nn_model_add_flatten(m, "flatten", x);
  x = nn_model_add_dropout(m, "classifier.0", x, 0.5f);
  x = nn_model_add_linear(m, "classifier.1", x, 4096, 1);
  x = nn_model_add_relu(m, "classifier.2", x);
  x = nn_model_add_dropout(m, "classifier.3", x, 0.5f);
  x = nn_model_add_linear(m, "classifier.4", x, 4096, 1);
  x = nn_model_add_relu(m, "classifier.5", x);
  return nn_model_add_linear(m, "classifier.6", x, m->num_classes, 1);
}

static int build_trivial(nn_model_t *m) {
  int x = nn_model_add_flatten(m, "flatten", NN_MODEL_INPUT);
  x = nn_model_add_linear(m, "fc1", x, 1, 1);
  x = nn_model_add_relu(m, "relu1", x);
  x = nn_model_add_linear(m, "fc2", x, 4096, 1);
  x = nn_model_add_relu(m, "relu2", x);
  return nn_model_add_linear(m, "fc3", x, m->num_classes, 1);
}

typedef struct {
  const char *name;
  int c, hw, classes;
} model_defaults_t;

static const model_defaults_t defaults[] = {
    {"mlp", 1, 28, 10},         {"lenet", 1, 28, 10},       {"resnet20", 3, 32, 10},
    {"resnet18", 3, 224, 1000}, {"resnet50", 3, 224, 1000}, {"resnet101", 3, 224, 1000},
    {"vgg16", 3, 224, 1000},    {"vgg16_bn", 3, 224, 1000}, {"alexnet", 3, 224, 1000},
    {"trivial", 3, 227, 1000},
};

nn_status_t nn_model_create(nn_model_t **out, const char *name,
                            const nn_model_config_t *cfg) {
  if (!out || !name || !cfg)
    return nn_set_error(NN_ERR_ARG, "nn_model_create: NULL argument");
  *out = NULL;
  const model_defaults_t *d = NULL;
  for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
    if (strcmp(defaults[i].name, name) == 0) d = &defaults[i];
  if (!d)
    return nn_set_error(NN_ERR_ARG, "nn_model_create: unknown model \"%s\"; known: mlp, "
                        "lenet, resnet20, resnet18, resnet50, resnet101, vgg16, vgg16_bn, "
                        "alexnet, trivial",
                        name);
  if (cfg->batch <= 0)
    return nn_set_error(NN_ERR_ARG, "nn_model_create(\"%s\"): batch %d, expected >= 1",
                        name, cfg->batch);
  if (cfg->num_classes < 0 || cfg->in_channels < 0 || cfg->in_height < 0 ||
      cfg->in_width < 0)
    return nn_set_error(NN_ERR_ARG, "nn_model_create(\"%s\"): negative size in the "
                        "config", name);
  int c = cfg->in_channels ? cfg->in_channels : d->c;
  int h = cfg->in_height ? cfg->in_height : d->hw;
  int w = cfg->in_width ? cfg->in_width : d->hw;
  int k = cfg->num_classes ? cfg->num_classes : d->classes;
  nn_model_t *m = nn_model_begin(name, cfg, c, h, w, k);
  if (!m) return NN_ERR_NO_MEMORY;
  if (strcmp(name, "mlp") == 0) build_mlp(m);
  else if (strcmp(name, "lenet") == 0) build_lenet(m);
  else if (strcmp(name, "resnet20") == 0) build_resnet20(m);
  else if (strcmp(name, "resnet18") == 0) build_resnet18(m);
  else if (strcmp(name, "resnet50") == 0) build_resnet_bottleneck(m, (const int[4]){3, 4, 6, 3});
  else if (strcmp(name, "resnet101") == 0) build_resnet_bottleneck(m, (const int[4]){3, 4, 23, 3});
  else if (strcmp(name, "vgg16") == 0) build_vgg16(m, 0);
  else if (strcmp(name, "vgg16_bn") == 0) build_vgg16(m, 1);
  else if (strcmp(name, "alexnet") == 0) build_alexnet(m);
  else build_trivial(m);
  nn_status_t s = nn_model_finish(m);
  if (s != NN_OK) return s;
  *out = m;
  return NN_OK;
}
