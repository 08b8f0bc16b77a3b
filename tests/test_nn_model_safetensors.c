/* test_nn_model_safetensors: model files in PyTorch's layout, both ways.
   - A file torch wrote (tests/fixtures/models/resnet20_weights.safetensors) loads and
     gives torch's eval- and training-mode logits (resnet20_step.safetensors).
   - Files nn writes for lenet, resnet20, mlp, trivial and resnet50 have exactly the
     tensors of PyTorch's state_dict (<model>_keys.txt): names, order, dtypes, shapes.
   - save -> load into another model gives the same floats and counters.
   - Load is strict and all-or-nothing: truncated or garbage file, another model's file,
     wrong shape, wrong dtype, an extra or a missing tensor -> NN_ERR_FORMAT naming the
     file or tensor, and the model is unchanged (compared byte for byte).
   Modes for scripts/torch_roundtrip.py (the live round trip with PyTorch):
     --export DIR [MODEL...]  writes DIR/<model>.safetensors (default lenet and
                   resnet20, after one training step so every tensor is non-trivial; other
                   models at their init) and DIR/<model>_io.safetensors (input, nn's eval
                   and training logits)
     --check DIR   loads DIR/<model>.safetensors written by torch and compares nn's
                   logits with DIR/<model>_io.safetensors (relative error < 1e-4)
   Run from the repository root. */
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"

#define DIR "tests/fixtures/models/"
#define TOL 1e-4

static char tmpdir[256];

static nn_model_t *make(const char *name, int batch, int classes, uint64_t seed) {
  nn_model_config_t cfg = {.batch = batch, .seed = seed, .num_classes = classes};
  nn_model_t *m = NULL;
  nn_status_t s = nn_model_create(&m, name, &cfg);
  CHECK(s == NN_OK, "nn_model_create(%s): %s", name, nn_last_error());
  return m;
}

static double rel_err(const float *a, const float *b, size_t n) {
  double maxd = 0, maxb = 1e-6;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (!(d <= maxd)) maxd = d;
    if (fabs((double)b[i]) > maxb) maxb = fabs((double)b[i]);
  }
  return maxd / maxb;
}

/* Compares the logits of a forward over the fixture's input with its tensor `key`. */
static void check_logits(nn_model_t *m, const nn_st_file_t *io, const char *key,
                         int training, const char *what) {
  const nn_st_tensor_t *x = nn_st_find(io, "input");
  const nn_st_tensor_t *want = nn_st_find(io, key);
  int c, h, w;
  nn_model_input_shape(m, &c, &h, &w);
  size_t per = (size_t)c * h * w * sizeof(float);
  CHECK(x && x->dtype == NN_ST_F32 && x->nbytes % per == 0, "%s: input missing", what);
  if (!x || x->nbytes % per) return;
  int n = (int)(x->nbytes / per);
  size_t k = (size_t)nn_model_num_classes(m);
  CHECK(want && want->dtype == NN_ST_F32 && want->nbytes == n * k * 4, "%s: %s missing",
        what, key);
  if (!want || want->nbytes != n * k * 4) return;
  float *xin = malloc(x->nbytes), *ref = malloc(want->nbytes);
  memcpy(xin, x->data, x->nbytes);
  memcpy(ref, want->data, want->nbytes);
  nn_status_t s = nn_model_forward(m, xin, n, training);
  CHECK(s == NN_OK, "%s forward: %s", what, nn_last_error());
  double e = rel_err(nn_model_logits(m), ref, n * k);
  printf("%-40s %-12s rel err %.2e\n", what, key, e);
  CHECK(e < TOL, "%s: %s relative error %.3g", what, key, e);
  free(xin);
  free(ref);
}

/* ---- layout of an nn-written file against PyTorch's keys ---- */
static void check_written_layout(const char *name) {
  nn_model_t *m = make(name, 1, 0, 3);
  if (!m) return;
  char path[512], keys[256];
  snprintf(path, sizeof path, "%s/%s.safetensors", tmpdir, name);
  nn_status_t s = nn_model_save_safetensors(m, path);
  CHECK(s == NN_OK, "save %s: %s", name, nn_last_error());
  nn_model_free(m);
  nn_st_file_t f;
  s = nn_st_read(path, &f);
  CHECK(s == NN_OK, "read back %s: %s", path, nn_last_error());
  if (s != NN_OK) return;
  snprintf(keys, sizeof keys, DIR "%s_keys.txt", name);
  FILE *kf = fopen(keys, "r");
  CHECK(kf != NULL, "cannot open %s", keys);
  int i = 0, bad = 0;
  char line[512];
  while (kf && fgets(line, sizeof line, kf)) {
    if (line[0] == '#') continue;
    char key[128] = "", dt[8] = "", shape[128] = "";
    if (sscanf(line, "%127s %7s %127s", key, dt, shape) < 2) continue;
    if (i >= f.count) {
      i++;
      continue;
    }
    const nn_st_tensor_t *t = &f.tensors[i];
    char ours[128] = "";
    size_t len = 0;
    for (int d = 0; d < t->ndim; d++)
      len += (size_t)snprintf(ours + len, sizeof ours - len, "%s%lld", d ? "," : "",
                              (long long)t->shape[d]);
    const char *odt = t->dtype == NN_ST_F32 ? "F32" : t->dtype == NN_ST_I64 ? "I64" : "?";
    if (strcmp(t->name, key) || strcmp(odt, dt) || strcmp(ours, shape)) {
      if (!bad)
        CHECK(0, "%s file: tensor %d is \"%s %s [%s]\", torch's \"%s %s [%s]\"", name, i,
              t->name, odt, ours, key, dt, shape);
      bad = 1;
    }
    i++;
  }
  if (kf) fclose(kf);
  CHECK(i == f.count, "%s file has %d tensors, torch's state_dict %d", name, f.count, i);
  printf("%-10s nn-written file: %d tensors, names/order/dtypes/shapes %s\n", name,
         f.count, bad || i != f.count ? "DIFFER" : "as PyTorch");
  nn_st_free(&f);
  unlink(path);
}

/* ---- strict loading ---- */
typedef struct {
  float *params, *buffers;
  int64_t *counters;
  size_t np, nb;
  int nc;
} snapshot_t;

static snapshot_t snap(nn_model_t *m) {
  snapshot_t s;
  s.np = nn_model_param_len(m);
  s.nb = nn_model_num_buffers(m);
  s.nc = 0;
  for (int i = 0; i < nn_model_num_slices(m); i++)
    if (nn_model_slice(m, i)->kind == NN_SLICE_COUNTER) s.nc++;
  s.params = malloc(s.np * 4);
  s.buffers = malloc(s.nb * 4 + 4);
  s.counters = malloc((size_t)s.nc * 8 + 8);
  memcpy(s.params, nn_model_params(m), s.np * 4);
  memcpy(s.buffers, nn_model_buffers(m), s.nb * 4);
  memcpy(s.counters, nn_model_counters(m), (size_t)s.nc * 8);
  return s;
}

static int same(nn_model_t *m, const snapshot_t *s) {
  return memcmp(s->params, nn_model_params(m), s->np * 4) == 0 &&
         memcmp(s->buffers, nn_model_buffers(m), s->nb * 4) == 0 &&
         memcmp(s->counters, nn_model_counters(m), (size_t)s->nc * 8) == 0;
}

static void free_snap(snapshot_t *s) {
  free(s->params);
  free(s->buffers);
  free(s->counters);
}

static void expect_refused(nn_model_t *m, const snapshot_t *s, const char *path,
                           nn_status_t want, const char *needle, const char *what) {
  nn_status_t st = nn_model_load_safetensors(m, path);
  const char *msg = nn_last_error();
  CHECK(st == want, "%s: status %s, expected %s (%s)", what, nn_status_string(st),
        nn_status_string(want), msg);
  CHECK(strstr(msg, needle) != NULL, "%s: message does not name \"%s\": %s", what, needle,
        msg);
  CHECK(same(m, s), "%s: the model changed on a refused load", what);
  printf("refused: %-28s %s\n", what, msg);
}

/* Writes the model's tensors to path with one changed: index `change` gets dtype dt
   (F32 <-> I64 both 4/8 bytes handled), `drop` is left out, `extra` adds a tensor. */
static void write_variant(nn_model_t *m, const char *path, int retype, int drop, int extra) {
  int n = nn_model_num_slices(m);
  nn_st_tensor_t *ts = calloc((size_t)n + 1, sizeof *ts);
  static float zero8[2];
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (i == drop) continue;
    const nn_slice_t *sl = nn_model_slice(m, i);
    nn_st_tensor_t *t = &ts[k++];
    snprintf(t->name, sizeof t->name, "%s", sl->name);
    t->ndim = sl->ndim;
    for (int d = 0; d < sl->ndim; d++) t->shape[d] = sl->shape[d];
    if (sl->kind == NN_SLICE_COUNTER) {
      t->dtype = NN_ST_I64;
      t->data = nn_model_counters(m) + sl->offset;
      t->nbytes = 8;
      if (i == retype) { /* torch would never write a float counter */
        t->dtype = NN_ST_F64;
        t->data = zero8;
      }
    } else {
      t->dtype = NN_ST_F32;
      t->data = (sl->kind == NN_SLICE_PARAM ? nn_model_params(m) : nn_model_buffers(m)) +
                sl->offset;
      t->nbytes = sl->numel * 4;
    }
  }
  if (extra) {
    nn_st_tensor_t *t = &ts[k++];
    snprintf(t->name, sizeof t->name, "extra.weight");
    t->dtype = NN_ST_F32;
    t->ndim = 1;
    t->shape[0] = 2;
    t->data = zero8;
    t->nbytes = 8;
  }
  nn_status_t s = nn_st_write(path, ts, k);
  CHECK(s == NN_OK, "writing %s: %s", path, nn_last_error());
  free(ts);
}

static int copy_truncated(const char *src, const char *dst, long keep) {
  FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
  if (!in || !out) {
    if (in) fclose(in);
    if (out) fclose(out);
    return -1;
  }
  char buf[4096];
  long done = 0;
  size_t r;
  while (done < keep && (r = fread(buf, 1, sizeof buf, in)) > 0) {
    size_t w = r;
    if (done + (long)w > keep) w = (size_t)(keep - done);
    if (fwrite(buf, 1, w, out) != w) break;
    done += (long)w;
  }
  fclose(in);
  fclose(out);
  return 0;
}

static void test_torch_file_and_strictness(void) {
  nn_model_t *m = make("resnet20", 4, 0, 99);
  if (!m) return;
  nn_status_t s = nn_model_load_safetensors(m, DIR "resnet20_weights.safetensors");
  CHECK(s == NN_OK, "loading the torch-written file: %s", nn_last_error());
  CHECK(nn_model_counters(m)[0] == 5, "num_batches_tracked %lld, torch wrote 5",
        (long long)nn_model_counters(m)[0]);
  nn_st_file_t io;
  s = nn_st_read(DIR "resnet20_step.safetensors", &io);
  CHECK(s == NN_OK, "%s", nn_last_error());
  if (s == NN_OK) {
    /* eval first: the training forward moves the running statistics */
    check_logits(m, &io, "logits_eval", 0, "torch-written resnet20");
    check_logits(m, &io, "logits", 1, "torch-written resnet20");
    nn_st_free(&io);
  }
  /* Reload so the snapshot is the torch file's state. */
  s = nn_model_load_safetensors(m, DIR "resnet20_weights.safetensors");
  CHECK(s == NN_OK, "%s", nn_last_error());
  snapshot_t before = snap(m);
  char path[512];

  snprintf(path, sizeof path, "%s/truncated.safetensors", tmpdir);
  CHECK(copy_truncated(DIR "resnet20_weights.safetensors", path, 500000) == 0, "copy");
  expect_refused(m, &before, path, NN_ERR_FORMAT, "truncated.safetensors", "truncated file");

  snprintf(path, sizeof path, "%s/garbage.safetensors", tmpdir);
  FILE *g = fopen(path, "wb");
  if (g) { /* a header length of 16, then 16 bytes of broken JSON */
    static const char bad[] = "\x10\0\0\0\0\0\0\0{\"a\": [1, 2 oops";
    fwrite(bad, 1, sizeof bad - 1, g);
    fclose(g);
  }
  expect_refused(m, &before, path, NN_ERR_FORMAT, "garbage.safetensors", "garbage header");

  nn_model_t *other = make("lenet", 1, 0, 5);
  snprintf(path, sizeof path, "%s/lenet.safetensors", tmpdir);
  if (other) {
    CHECK(nn_model_save_safetensors(other, path) == NN_OK, "%s", nn_last_error());
    nn_model_free(other);
  }
  expect_refused(m, &before, path, NN_ERR_FORMAT, "lenet.safetensors",
                 "file of another model");
  /* ... and says which tensor differs and which model it was loaded into */
  CHECK(strstr(nn_last_error(), "\"conv1.weight\"") && strstr(nn_last_error(), "resnet20"),
        "file of another model: the message names neither the tensor nor the model: %s",
        nn_last_error());

  nn_model_t *five = make("resnet20", 1, 5, 5);
  snprintf(path, sizeof path, "%s/resnet20_5.safetensors", tmpdir);
  if (five) {
    CHECK(nn_model_save_safetensors(five, path) == NN_OK, "%s", nn_last_error());
    nn_model_free(five);
  }
  expect_refused(m, &before, path, NN_ERR_FORMAT, "fc.weight", "wrong shape");

  snprintf(path, sizeof path, "%s/dtype.safetensors", tmpdir);
  write_variant(m, path, 5 /* bn1.num_batches_tracked */, -1, 0);
  expect_refused(m, &before, path, NN_ERR_FORMAT, "bn1.num_batches_tracked", "wrong dtype");

  snprintf(path, sizeof path, "%s/extra.safetensors", tmpdir);
  write_variant(m, path, -1, -1, 1);
  expect_refused(m, &before, path, NN_ERR_FORMAT, "extra.weight", "extra tensor");

  snprintf(path, sizeof path, "%s/missing.safetensors", tmpdir);
  write_variant(m, path, -1, nn_model_num_slices(m) - 1, 0);
  expect_refused(m, &before, path, NN_ERR_FORMAT, "fc.bias", "missing tensor");

  snprintf(path, sizeof path, "%s/does-not-exist.safetensors", tmpdir);
  nn_status_t st = nn_model_load_safetensors(m, path);
  CHECK(st != NN_OK && same(m, &before), "missing file: %s", nn_status_string(st));

  /* save -> load into a differently initialised model: identical state */
  snprintf(path, sizeof path, "%s/resnet20_rt.safetensors", tmpdir);
  CHECK(nn_model_save_safetensors(m, path) == NN_OK, "%s", nn_last_error());
  nn_model_t *m2 = make("resnet20", 1, 0, 12345);
  if (m2) {
    CHECK(nn_model_load_safetensors(m2, path) == NN_OK, "%s", nn_last_error());
    CHECK(same(m2, &before), "save -> load changed the state");
    printf("save -> load: identical params, running statistics and counters\n");
    nn_model_free(m2);
  }
  const char *names[] = {"truncated", "garbage", "lenet", "resnet20_5", "dtype", "extra",
                         "missing", "resnet20_rt"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/%s.safetensors", tmpdir, names[i]);
    unlink(path);
  }
  free_snap(&before);
  nn_model_free(m);
}

/* ---- live round trip modes ---- */

static void fill_input(float *x, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;
  }
}

/* lenet and resnet20 take one training step first, so running statistics and counters
   are not defaults; the big models (structure checks only) do not. */
static int export_models(const char *dir, int count, char **names) {
  static char *defaults[] = {"lenet", "resnet20"};
  if (count == 0) {
    count = 2;
    names = defaults;
  }
  for (int j = 0; j < count; j++) {
    int small = strcmp(names[j], "lenet") == 0 || strcmp(names[j], "resnet20") == 0;
    const int n = small ? 4 : 2;
    nn_model_t *m = make(names[j], n, 0, 2024);
    if (!m) return 1;
    int c, h, w;
    nn_model_input_shape(m, &c, &h, &w);
    size_t in = (size_t)n * c * h * w, k = (size_t)nn_model_num_classes(m);
    float *x = malloc(in * 4), *le = malloc(n * k * 4), *lt = malloc(n * k * 4);
    int32_t labels[4] = {1, 3, 5, 7};
    if (small) {
      fill_input(x, in, 77);
      nn_optim_config_t oc = {.kind = NN_OPTIM_SGD, .momentum = 0.9f};
      nn_optim_t *o = NULL;
      CHECK(nn_optim_create(&o, &oc, nn_model_param_len(m)) == NN_OK, "%s", nn_last_error());
      CHECK(nn_model_forward(m, x, n, 1) == NN_OK, "%s", nn_last_error());
      CHECK(nn_model_loss(m, labels, NULL, NULL) == NN_OK, "%s", nn_last_error());
      CHECK(nn_model_backward(m, NULL, NULL) == NN_OK, "%s", nn_last_error());
      CHECK(nn_optim_step(o, nn_model_params(m), nn_model_grads(m), 0.05f) == NN_OK, "%s",
            nn_last_error());
      nn_optim_free(o);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, names[j]);
    CHECK(nn_model_save_safetensors(m, path) == NN_OK, "%s", nn_last_error());
    fill_input(x, in, 99);
    CHECK(nn_model_forward(m, x, n, 0) == NN_OK, "%s", nn_last_error());
    memcpy(le, nn_model_logits(m), n * k * 4);
    CHECK(nn_model_forward(m, x, n, 1) == NN_OK, "%s", nn_last_error());
    memcpy(lt, nn_model_logits(m), n * k * 4);
    nn_st_tensor_t ts[3] = {
        {.name = "input", .dtype = NN_ST_F32, .ndim = 4, .shape = {n, c, h, w},
         .nbytes = in * 4, .data = x},
        {.name = "logits_eval", .dtype = NN_ST_F32, .ndim = 2, .shape = {n, (int64_t)k},
         .nbytes = n * k * 4, .data = le},
        {.name = "logits", .dtype = NN_ST_F32, .ndim = 2, .shape = {n, (int64_t)k},
         .nbytes = n * k * 4, .data = lt},
    };
    snprintf(path, sizeof path, "%s/%s_io.safetensors", dir, names[j]);
    CHECK(nn_st_write(path, ts, 3) == NN_OK, "%s", nn_last_error());
    printf("exported %s/%s.safetensors and %s_io.safetensors\n", dir, names[j], names[j]);
    free(x);
    free(le);
    free(lt);
    nn_model_free(m);
  }
  return failures ? 1 : 0;
}

static int check_models(const char *dir) {
  const char *names[] = {"lenet", "resnet20"};
  for (int j = 0; j < 2; j++) {
    nn_model_t *m = make(names[j], 8, 0, 1);
    if (!m) return 1;
    char path[512], what[64];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, names[j]);
    nn_status_t s = nn_model_load_safetensors(m, path);
    CHECK(s == NN_OK, "loading torch's %s: %s", path, nn_last_error());
    snprintf(path, sizeof path, "%s/%s_io.safetensors", dir, names[j]);
    nn_st_file_t io;
    if (s == NN_OK && nn_st_read(path, &io) == NN_OK) {
      snprintf(what, sizeof what, "torch-written %s", names[j]);
      check_logits(m, &io, "logits_eval", 0, what);
      check_logits(m, &io, "logits", 1, what);
      nn_st_free(&io);
    } else {
      CHECK(0, "%s", nn_last_error());
    }
    nn_model_free(m);
  }
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  nn_set_threads(1);
  if (argc >= 3 && strcmp(argv[1], "--export") == 0)
    return export_models(argv[2], argc - 3, argv + 3);
  if (argc == 3 && strcmp(argv[1], "--check") == 0) return check_models(argv[2]);
  if (argc != 1) {
    fprintf(stderr, "usage: %s [--export DIR [MODEL...] | --check DIR]\n"
            "  no argument: the test (run from the repository root)\n", argv[0]);
    return 2;
  }
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/nn_model_st_XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmpdir)) {
    printf("FAIL: cannot create a temporary directory %s\n", tmpdir);
    return 1;
  }
  test_torch_file_and_strictness();
  const char *layouts[] = {"lenet", "resnet20", "mlp", "trivial", "resnet50"};
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
    check_written_layout(layouts[i]);
  rmdir(tmpdir);
  if (failures) {
    printf("test_nn_model_safetensors: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_nn_model_safetensors: all passed\n");
  return 0;
}
