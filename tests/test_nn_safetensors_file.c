/* tests/test_nn_safetensors_file.c: nn_st_read / nn_st_write round trips, and every kind
   of corrupt or truncated file gives NN_ERR_FORMAT with a message naming the file.
   Also the small tensor and error helpers of nn.h. */
#include "nn/nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"

static char dir[256];

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    perror(path);
    exit(2);
  }
}

/* Writes an 8-byte length, the header text and `data_len` bytes of data. */
static void write_raw(const char *path, const char *header, size_t data_len) {
  size_t hl = strlen(header);
  unsigned char *buf = calloc(1, 8 + hl + data_len + 1);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  for (size_t i = 0; i < data_len; i++) buf[8 + hl + i] = (unsigned char)i;
  write_bytes(path, buf, 8 + hl + data_len);
  free(buf);
}

static void expect_format(const char *path, const char *what) {
  nn_st_file_t f;
  nn_status_t st = nn_st_read(path, &f);
  CHECK(st == NN_ERR_FORMAT, "%s: expected NN_ERR_FORMAT, got %s (%s)", what,
        nn_status_string(st), nn_last_error());
  if (st == NN_ERR_FORMAT)
    CHECK(strstr(nn_last_error(), path) != NULL, "%s: message lacks the path: %s", what,
          nn_last_error());
  if (st == NN_OK) nn_st_free(&f);
  else CHECK(f.count == 0 && f.tensors == NULL && f.blob == NULL, "%s: file not cleared", what);
}

static void test_round_trip(void) {
  char path[300];
  snprintf(path, sizeof path, "%s/rt.safetensors", dir);
  float a[6] = {1.5f, -2, 3, 4e-30f, 5e30f, -0.0f};
  double b[2] = {3.141592653589793, -1e300};
  int64_t c = 42;  /* a scalar, as num_batches_tracked */
  uint8_t d[3] = {0, 255, 7};
  int32_t e[4] = {-1, 2, -3, 2147483647};
  nn_st_tensor_t ts[6];
  memset(ts, 0, sizeof ts);
  strcpy(ts[0].name, "conv1.weight");
  ts[0].dtype = NN_ST_F32; ts[0].ndim = 2; ts[0].shape[0] = 2; ts[0].shape[1] = 3;
  ts[0].nbytes = sizeof a; ts[0].data = a;
  strcpy(ts[1].name, "we\"ird\\name\n\xc3\xa9");
  ts[1].dtype = NN_ST_F64; ts[1].ndim = 1; ts[1].shape[0] = 2; ts[1].nbytes = sizeof b; ts[1].data = b;
  strcpy(ts[2].name, "bn.num_batches_tracked");
  ts[2].dtype = NN_ST_I64; ts[2].ndim = 0; ts[2].nbytes = 8; ts[2].data = &c;
  strcpy(ts[3].name, "mask");
  ts[3].dtype = NN_ST_U8; ts[3].ndim = 1; ts[3].shape[0] = 3; ts[3].nbytes = 3; ts[3].data = d;
  strcpy(ts[4].name, "empty");
  ts[4].dtype = NN_ST_F32; ts[4].ndim = 2; ts[4].shape[0] = 0; ts[4].shape[1] = 5;
  ts[4].nbytes = 0; ts[4].data = NULL;
  strcpy(ts[5].name, "labels");
  ts[5].dtype = NN_ST_I32; ts[5].ndim = 4; ts[5].shape[0] = 1; ts[5].shape[1] = 2;
  ts[5].shape[2] = 1; ts[5].shape[3] = 2; ts[5].nbytes = sizeof e; ts[5].data = e;

  nn_status_t st = nn_st_write(path, ts, 6);
  CHECK(st == NN_OK, "write: %s", nn_last_error());
  char tmp[320];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK(access(tmp, F_OK) != 0, "%s left behind", tmp);

  nn_st_file_t f;
  st = nn_st_read(path, &f);
  CHECK(st == NN_OK, "read: %s", nn_last_error());
  if (st != NN_OK) return;
  CHECK(f.count == 6, "count %d, expected 6", f.count);
  for (int i = 0; i < 6 && i < f.count; i++) {
    const nn_st_tensor_t *r = nn_st_find(&f, ts[i].name);
    CHECK(r != NULL, "tensor '%s' missing", ts[i].name);
    if (!r) continue;
    CHECK(r == &f.tensors[i], "tensor '%s' not in header order", ts[i].name);
    CHECK(r->dtype == ts[i].dtype && r->ndim == ts[i].ndim && r->nbytes == ts[i].nbytes,
          "tensor '%s': dtype/ndim/nbytes differ", ts[i].name);
    for (int k = 0; k < r->ndim; k++)
      CHECK(r->shape[k] == ts[i].shape[k], "tensor '%s' dim %d: %lld vs %lld", ts[i].name, k,
            (long long)r->shape[k], (long long)ts[i].shape[k]);
    if (r->nbytes) {
      CHECK(memcmp(r->data, ts[i].data, r->nbytes) == 0, "tensor '%s' data differ", ts[i].name);
      CHECK(((uintptr_t)r->data % 8) == 0, "tensor '%s' data not aligned", ts[i].name);
    }
  }
  CHECK(nn_st_find(&f, "nope") == NULL, "found a tensor that is not there");
  nn_st_free(&f);

  /* Overwrite in place works (rename over an existing file). */
  st = nn_st_write(path, ts, 1);
  CHECK(st == NN_OK, "rewrite: %s", nn_last_error());
  st = nn_st_read(path, &f);
  CHECK(st == NN_OK && f.count == 1, "reread: %s count %d", nn_last_error(), f.count);
  if (st == NN_OK) nn_st_free(&f);

  /* Every truncation of a valid file is a format error. */
  FILE *in = fopen(path, "rb");
  unsigned char buf[4096];
  size_t n = fread(buf, 1, sizeof buf, in);
  fclose(in);
  char cut[300];
  snprintf(cut, sizeof cut, "%s/cut.safetensors", dir);
  for (size_t len = 0; len < n; len++) {
    write_bytes(cut, buf, len);
    char what[64];
    snprintf(what, sizeof what, "truncated to %zu of %zu bytes", len, n);
    expect_format(cut, what);
  }
  /* Random byte changes anywhere never crash: they read fine or fail cleanly. */
  srand(7);
  int clean = 0;
  for (int it = 0; it < 3000; it++) {
    unsigned char m[4096];
    memcpy(m, buf, n);
    int flips = 1 + rand() % 3;
    for (int k = 0; k < flips; k++) m[rand() % n] = (unsigned char)(rand() % 256);
    write_bytes(cut, m, n);
    st = nn_st_read(cut, &f);
    CHECK(st == NN_OK || st == NN_ERR_FORMAT, "mutation %d: status %s", it, nn_status_string(st));
    if (st == NN_OK) nn_st_free(&f), clean++;
  }
  printf("round trip ok; 3000 random mutations: %d still valid, rest NN_ERR_FORMAT\n", clean);
}

static void test_foreign_layout(void) {
  /* As another writer might produce: whitespace, metadata, unaligned and reordered
     offsets, \u escapes, unknown fields. */
  char path[300];
  snprintf(path, sizeof path, "%s/foreign.safetensors", dir);
  write_raw(path,
            " { \"__metadata__\" : {\"format\":\"pt\", \"x\":\"\\u00e9\"},\n"
            "  \"b\\u0041\": {\"shape\": [3], \"dtype\": \"U8\", \"data_offsets\": [8, 11], \"extra\": [1, {\"k\": null}]},\n"
            "  \"a\": {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]} } ",
            11);
  nn_st_file_t f;
  nn_status_t st = nn_st_read(path, &f);
  CHECK(st == NN_OK, "foreign: %s", nn_last_error());
  if (st != NN_OK) return;
  const nn_st_tensor_t *b = nn_st_find(&f, "bA");
  const nn_st_tensor_t *a = nn_st_find(&f, "a");
  CHECK(a && b && f.count == 2, "foreign: tensors not found");
  CHECK(f.meta_count == 2 && nn_st_meta_get(&f, "format") &&
        strcmp(nn_st_meta_get(&f, "format"), "pt") == 0 && nn_st_meta_get(&f, "x") &&
        strcmp(nn_st_meta_get(&f, "x"), "\xc3\xa9") == 0 && !nn_st_meta_get(&f, "y"),
        "foreign: __metadata__ not read (%d entries)", f.meta_count);
  if (a && b) {
    const uint8_t *bd = b->data;
    CHECK(bd[0] == 8 && bd[1] == 9 && bd[2] == 10, "foreign: b data %d %d %d", bd[0], bd[1], bd[2]);
    const uint8_t *ad = a->data;
    CHECK(ad[0] == 0 && ad[7] == 7, "foreign: a data");
  }
  nn_st_free(&f);
}

/* nn_st_write_meta: the entries come back in order, with escapes; a file without them
   has none; bad entries are refused before anything is written. */
static void test_metadata(void) {
  char path[300];
  snprintf(path, sizeof path, "%s/meta.safetensors", dir);
  float v[2] = {1, 2};
  nn_st_tensor_t t;
  memset(&t, 0, sizeof t);
  strcpy(t.name, "w");
  t.dtype = NN_ST_F32; t.ndim = 1; t.shape[0] = 2; t.nbytes = sizeof v; t.data = v;
  const nn_st_meta_t meta[] = {{"model", "lenet"}, {"norm_mean", "0.286"},
                               {"odd \"key\"", "line\nbreak \xc3\xa9"}, {"empty", ""}};
  nn_status_t st = nn_st_write_meta(path, &t, 1, meta, 4);
  CHECK(st == NN_OK, "write_meta: %s", nn_last_error());
  nn_st_file_t f;
  st = nn_st_read(path, &f);
  CHECK(st == NN_OK, "read back: %s", nn_last_error());
  if (st == NN_OK) {
    CHECK(f.count == 1 && f.meta_count == 4, "read back: %d tensors, %d metadata", f.count,
          f.meta_count);
    for (int i = 0; i < 4 && i < f.meta_count; i++)
      CHECK(strcmp(f.meta[i].key, meta[i].key) == 0 && strcmp(f.meta[i].value, meta[i].value) == 0,
            "entry %d: '%s' = '%s'", i, f.meta[i].key, f.meta[i].value);
    const char *m = nn_st_meta_get(&f, "norm_mean");
    CHECK(m && strcmp(m, "0.286") == 0, "nn_st_meta_get: %s", m ? m : "NULL");
    const nn_st_tensor_t *w = nn_st_find(&f, "w");
    CHECK(w && ((float *)w->data)[1] == 2, "tensor beside the metadata");
    nn_st_free(&f);
    CHECK(f.meta == NULL && f.meta_count == 0, "nn_st_free leaves metadata");
  }
  /* Metadata alone (no tensor), and a file without metadata. */
  st = nn_st_write_meta(path, NULL, 0, meta, 1);
  CHECK(st == NN_OK && nn_st_read(path, &f) == NN_OK && f.count == 0 && f.meta_count == 1,
        "metadata only: %s", nn_last_error());
  nn_st_free(&f);
  st = nn_st_write(path, &t, 1);
  CHECK(st == NN_OK && nn_st_read(path, &f) == NN_OK && f.meta_count == 0 &&
        nn_st_meta_get(&f, "model") == NULL, "no metadata: %s", nn_last_error());
  nn_st_free(&f);
  snprintf(path, sizeof path, "%s/meta_bad.safetensors", dir);
  const nn_st_meta_t twice[] = {{"a", "1"}, {"a", "2"}}, empty[] = {{"", "1"}},
                     null_value[] = {{"a", NULL}};
  CHECK(nn_st_write_meta(path, &t, 1, twice, 2) == NN_ERR_ARG, "a key twice accepted");
  CHECK(nn_st_write_meta(path, &t, 1, empty, 1) == NN_ERR_ARG, "an empty key accepted");
  CHECK(nn_st_write_meta(path, &t, 1, null_value, 1) == NN_ERR_ARG, "a NULL value accepted");
  CHECK(access(path, F_OK) != 0, "a refused metadata write left a file");
}

static void test_corrupt_headers(void) {
  struct { const char *header; size_t data; const char *what; } cases[] = {
    {"[]", 0, "header is an array"},
    {"{", 0, "unterminated object"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "missing closing brace"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, "trailing bytes"},
    {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "missing dtype"},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing shape"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing offsets"},
    {"{\"a\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "shape larger than range"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 8, "begin after end"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 3, "range past the end"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "negative dimension"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, "float dimension"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8, "overlapping tensors"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate name"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "shape overflow"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "too many dims"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999999]}}", 4, "offset overflow"},
    {"{\"__metadata__\":{\"k\":1}}", 0, "non-string metadata"},
    {"{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"3\"}}", 0, "metadata key twice"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "two metadata objects"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}", 4, "nesting too deep"},
    {"{\"a\\ud800\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "lone surrogate"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, "trailing comma"},
    {"{\"a\x01\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "control char in name"},
  };
  char path[300];
  snprintf(path, sizeof path, "%s/bad.safetensors", dir);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_raw(path, cases[i].header, cases[i].data);
    expect_format(path, cases[i].what);
  }
  /* A too-long name. */
  char big[400];
  snprintf(big, sizeof big, "{\"%0200d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0);
  write_raw(path, big, 4);
  expect_format(path, "name longer than 127 bytes");
  /* Header length beyond the file, and beyond the 100 MB limit. */
  unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
  write_bytes(path, huge, 10);
  expect_format(path, "header length 2^63");
  unsigned char over[16] = {0x00, 0x00, 0x00, 0x07, 0, 0, 0, 0, '{', '}'};
  write_bytes(path, over, 10);
  expect_format(path, "header length 112 MiB");
  write_bytes(path, "", 0);
  expect_format(path, "empty file");
  /* A valid empty header is fine. */
  write_raw(path, "{}", 0);
  nn_st_file_t f;
  nn_status_t st = nn_st_read(path, &f);
  CHECK(st == NN_OK && f.count == 0, "empty header: %s", nn_last_error());
  if (st == NN_OK) nn_st_free(&f);
}

static void test_errors_and_tensors(void) {
  nn_st_file_t f;
  char path[300];
  snprintf(path, sizeof path, "%s/missing/x.safetensors", dir);
  CHECK(nn_st_read(path, &f) == NN_ERR_IO, "missing file: %s", nn_last_error());
  float v = 1;
  nn_st_tensor_t t;
  memset(&t, 0, sizeof t);
  strcpy(t.name, "v");
  t.dtype = NN_ST_F32; t.ndim = 1; t.shape[0] = 1; t.nbytes = 4; t.data = &v;
  CHECK(nn_st_write(path, &t, 1) == NN_ERR_IO, "write into a missing dir: %s", nn_last_error());
  t.nbytes = 8;
  snprintf(path, sizeof path, "%s/bad_nbytes.safetensors", dir);
  CHECK(nn_st_write(path, &t, 1) == NN_ERR_ARG, "nbytes mismatch accepted");
  CHECK(access(path, F_OK) != 0, "a failed write left a file");
  CHECK(nn_st_dtype_size(NN_ST_BF16) == 2 && nn_st_dtype_size(NN_ST_I64) == 8 &&
        nn_st_dtype_size((nn_st_dtype_t)99) == 0, "dtype sizes");

  CHECK(nn_set_error(NN_ERR_ARG, "value %d", 7) == NN_ERR_ARG, "nn_set_error return");
  CHECK(strcmp(nn_last_error(), "value 7") == 0, "last error '%s'", nn_last_error());
  CHECK(strcmp(nn_status_string(NN_ERR_FORMAT), "bad file format") == 0, "status string");

  nn_tensor_t x;
  int shape[4] = {2, 3, 4, 5};
  CHECK(nn_tensor_create(&x, 4, shape) == NN_OK, "create: %s", nn_last_error());
  CHECK(nn_tensor_numel(&x) == 120 && x.stride[0] == 60 && x.stride[1] == 20 &&
        x.stride[2] == 5 && x.stride[3] == 1 && x.owns_data, "create: shape/strides");
  float sum = 0;
  for (size_t i = 0; i < 120; i++) sum += x.data[i];
  CHECK(sum == 0, "create: not zero-filled");
  nn_tensor_t vw = nn_tensor_view(x.data, 2, shape);
  CHECK(vw.data == x.data && !vw.owns_data && nn_tensor_numel(&vw) == 6 && vw.stride[0] == 3,
        "view");
  nn_tensor_free(&vw);
  nn_tensor_free(&x);
  CHECK(x.data == NULL && x.ndim == 0, "free clears");
  int badshape[1] = {-3};
  CHECK(nn_tensor_create(&x, 1, badshape) == NN_ERR_ARG, "negative shape accepted");
  CHECK(nn_tensor_create(&x, 5, shape) == NN_ERR_ARG, "ndim 5 accepted");

  nn_set_threads(2);
  CHECK(nn_threads() == 2, "threads %d", nn_threads());
  nn_set_threads(0);
  CHECK(nn_threads() == 1, "threads clamp %d", nn_threads());
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/test_nn_st.XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_round_trip();
  test_foreign_layout();
  test_metadata();
  test_corrupt_headers();
  test_errors_and_tensors();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) {
    printf("%d checks failed\n", failures);
    return 1;
  }
  printf("all safetensors/tensor checks passed\n");
  return 0;
}
