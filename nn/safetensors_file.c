/* nn/safetensors_file.c: read and write safetensors files (any tensors, not just models).

   Layout: u64 little-endian header length N, N bytes of JSON, then the data section.
     {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...,
      "__metadata__": {"key": "value"}}
   Offsets are relative to the start of the data section.

   Reading trusts nothing: the header length is bounded, the JSON is parsed strictly,
   every dtype, shape and byte range is checked against the file size and against the
   other tensors, so a corrupt or truncated file gives NN_ERR_FORMAT naming the problem
   instead of a crash. Each tensor is read into its own 64-byte-aligned slot of one blob,
   so the data pointers are aligned for their dtype whatever offsets the writer chose.
   This code assumes a little-endian host (x86-64, arm64), as the format does. */
#include "nn/nn.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20)  /* the reference implementation's limit */
#define ST_MAX_TENSORS (1 << 20)
#define ST_ALIGN 64
#define ST_MAX_DEPTH 64

static const char *const st_dtype_names[] = {"F32", "F64", "F16", "BF16",
                                             "I8",  "U8",  "I32", "I64"};
static const size_t st_dtype_sizes[] = {4, 8, 2, 2, 1, 1, 4, 8};

size_t nn_st_dtype_size(nn_st_dtype_t dtype) {
  if ((unsigned)dtype >= sizeof st_dtype_sizes / sizeof st_dtype_sizes[0]) return 0;
  return st_dtype_sizes[dtype];
}

/* ---- a strict JSON reader for the header ---- */
typedef struct {
  const char *s, *end, *begin;
  const char *path;
  int failed;
} st_json_t;

static nn_status_t st_fail(st_json_t *j, const char *what) {
  if (!j->failed)
    nn_set_error(NN_ERR_FORMAT, "safetensors file %s: bad header JSON: %s (at header byte %ld)",
                 j->path, what, (long)(j->s - j->begin));
  j->failed = 1;
  return NN_ERR_FORMAT;
}

static void st_ws(st_json_t *j) {
  while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r'))
    j->s++;
}

static int st_peek(st_json_t *j) {
  st_ws(j);
  return j->s < j->end ? (unsigned char)*j->s : -1;
}

static int st_expect(st_json_t *j, char c) {
  if (st_peek(j) != (unsigned char)c) return 0;
  j->s++;
  return 1;
}

static int st_hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  *out = v;
  return 1;
}

/* Parses a JSON string into out (UTF-8, NUL-terminated, at most cap-1 bytes; out may be
   NULL to skip). Returns 1 on success, 0 on a syntax error, -1 when it does not fit. */
static int st_string(st_json_t *j, char *out, size_t cap) {
  if (!st_expect(j, '"')) return 0;
  size_t n = 0;
  int too_long = 0;
  while (j->s < j->end) {
    unsigned char c = (unsigned char)*j->s++;
    unsigned cp;
    if (c == '"') {
      if (out) out[n < cap ? n : cap - 1] = 0;
      return too_long ? -1 : 1;
    }
    if (c < 0x20) return 0;
    if (c != '\\') {  /* raw byte (UTF-8 passes through) */
      if (out) {
        if (n + 1 < cap) out[n++] = (char)c;
        else too_long = 1;
      }
      continue;
    }
    if (j->s >= j->end) return 0;
    char e = *j->s++;
    switch (e) {
      case '"': cp = '"'; break;
      case '\\': cp = '\\'; break;
      case '/': cp = '/'; break;
      case 'b': cp = '\b'; break;
      case 'f': cp = '\f'; break;
      case 'n': cp = '\n'; break;
      case 'r': cp = '\r'; break;
      case 't': cp = '\t'; break;
      case 'u':
        if (j->end - j->s < 4 || !st_hex4(j->s, &cp)) return 0;
        j->s += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {  /* surrogate pair */
          unsigned lo;
          if (j->end - j->s < 6 || j->s[0] != '\\' || j->s[1] != 'u' ||
              !st_hex4(j->s + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
            return 0;
          j->s += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          return 0;
        }
        if (cp == 0) return 0;  /* would truncate a C string */
        break;
      default: return 0;
    }
    char buf[4];
    size_t len;
    if (cp < 0x80) { buf[0] = (char)cp; len = 1; }
    else if (cp < 0x800) { buf[0] = (char)(0xC0 | (cp >> 6)); buf[1] = (char)(0x80 | (cp & 0x3F)); len = 2; }
    else if (cp < 0x10000) { buf[0] = (char)(0xE0 | (cp >> 12)); buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); buf[2] = (char)(0x80 | (cp & 0x3F)); len = 3; }
    else { buf[0] = (char)(0xF0 | (cp >> 18)); buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F)); buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); buf[3] = (char)(0x80 | (cp & 0x3F)); len = 4; }
    if (out) {
      if (n + len < cap) { memcpy(out + n, buf, len); n += len; }
      else too_long = 1;
    }
  }
  return 0;  /* unterminated */
}

/* A non-negative integer without sign, fraction or exponent (shapes and offsets). */
static int st_uint(st_json_t *j, uint64_t *out) {
  st_ws(j);
  if (j->s >= j->end || *j->s < '0' || *j->s > '9') return 0;
  uint64_t v = 0;
  const char *start = j->s;
  while (j->s < j->end && *j->s >= '0' && *j->s <= '9') {
    unsigned d = (unsigned)(*j->s - '0');
    if (v > (UINT64_MAX - d) / 10) return 0;
    v = v * 10 + d;
    j->s++;
  }
  if (j->s - start > 1 && *start == '0') return 0;  /* leading zero */
  if (j->s < j->end && (*j->s == '.' || *j->s == 'e' || *j->s == 'E')) return 0;
  *out = v;
  return 1;
}

static int st_skip_value(st_json_t *j, int depth);

static int st_skip_literal(st_json_t *j, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(j->end - j->s) < n || memcmp(j->s, lit, n) != 0) return 0;
  j->s += n;
  return 1;
}

static int st_skip_number(st_json_t *j) {
  const char *start = j->s;
  if (j->s < j->end && *j->s == '-') j->s++;
  int digits = 0;
  while (j->s < j->end && ((*j->s >= '0' && *j->s <= '9') || *j->s == '.' || *j->s == 'e' ||
                           *j->s == 'E' || *j->s == '+' || *j->s == '-')) {
    digits++;
    j->s++;
  }
  return digits > 0 && j->s > start;
}

static int st_skip_value(st_json_t *j, int depth) {
  if (depth > ST_MAX_DEPTH) return 0;
  int c = st_peek(j);
  if (c == '"') return st_string(j, NULL, 0) == 1;
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    j->s++;
    if (st_expect(j, close)) return 1;
    for (;;) {
      if (c == '{') {
        if (st_string(j, NULL, 0) != 1 || !st_expect(j, ':')) return 0;
      }
      if (!st_skip_value(j, depth + 1)) return 0;
      if (st_expect(j, ',')) continue;
      return st_expect(j, close);
    }
  }
  if (c == 't') return st_skip_literal(j, "true");
  if (c == 'f') return st_skip_literal(j, "false");
  if (c == 'n') return st_skip_literal(j, "null");
  if (c == '-' || (c >= '0' && c <= '9')) return st_skip_number(j);
  return 0;
}

/* One tensor entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]}. */
static nn_status_t st_tensor_entry(st_json_t *j, nn_st_tensor_t *t, uint64_t off[2]) {
  int have_dtype = 0, have_shape = 0, have_offsets = 0;
  char key[32];
  char msg[400];
  if (!st_expect(j, '{')) return st_fail(j, "a tensor entry is not an object");
  if (st_expect(j, '}')) goto check;
  for (;;) {
    int r = st_string(j, key, sizeof key);
    if (r == 0) return st_fail(j, "expected a key string in a tensor entry");
    if (!st_expect(j, ':')) return st_fail(j, "expected ':'");
    if (r == 1 && strcmp(key, "dtype") == 0) {
      char dt[16];
      if (st_string(j, dt, sizeof dt) != 1) return st_fail(j, "dtype is not a short string");
      int found = -1;
      for (int i = 0; i < (int)(sizeof st_dtype_names / sizeof *st_dtype_names); i++)
        if (strcmp(dt, st_dtype_names[i]) == 0) found = i;
      if (found < 0) {
        snprintf(msg, sizeof msg, "tensor '%s' has unsupported dtype '%s' (known: F32 F64 F16 BF16 I8 U8 I32 I64)", t->name, dt);
        return st_fail(j, msg);
      }
      t->dtype = (nn_st_dtype_t)found;
      have_dtype = 1;
    } else if (r == 1 && strcmp(key, "shape") == 0) {
      if (!st_expect(j, '[')) return st_fail(j, "shape is not an array");
      t->ndim = 0;
      if (!st_expect(j, ']')) {
        for (;;) {
          uint64_t v;
          if (t->ndim >= NN_ST_MAX_DIMS) {
            snprintf(msg, sizeof msg, "tensor '%s' has more than %d dimensions", t->name, NN_ST_MAX_DIMS);
            return st_fail(j, msg);
          }
          if (!st_uint(j, &v) || v > (uint64_t)INT64_MAX)
            return st_fail(j, "a shape entry is not a non-negative integer");
          t->shape[t->ndim++] = (int64_t)v;
          if (st_expect(j, ',')) continue;
          if (!st_expect(j, ']')) return st_fail(j, "expected ',' or ']' in shape");
          break;
        }
      }
      have_shape = 1;
    } else if (r == 1 && strcmp(key, "data_offsets") == 0) {
      if (!st_expect(j, '[') || !st_uint(j, &off[0]) || !st_expect(j, ',') ||
          !st_uint(j, &off[1]) || !st_expect(j, ']'))
        return st_fail(j, "data_offsets is not [begin, end] of non-negative integers");
      have_offsets = 1;
    } else {
      if (!st_skip_value(j, 1)) return st_fail(j, "bad value in a tensor entry");
    }
    if (st_expect(j, ',')) continue;
    if (!st_expect(j, '}')) return st_fail(j, "expected ',' or '}' in a tensor entry");
    break;
  }
check:
  if (!have_dtype || !have_shape || !have_offsets) {
    snprintf(msg, sizeof msg, "tensor '%s' lacks %s", t->name,
             !have_dtype ? "\"dtype\"" : !have_shape ? "\"shape\"" : "\"data_offsets\"");
    return st_fail(j, msg);
  }
  return NN_OK;
}

/* __metadata__: an object whose values are strings, no key twice. Parsed twice: once to
   count the entries and bound their bytes, once into one allocation (the entry array,
   then the strings), stored in *blob_out. */
static int st_meta_key_cmp(const void *a, const void *b) {
  return strcmp(((const nn_st_meta_t *)a)->key, ((const nn_st_meta_t *)b)->key);
}

static nn_status_t st_metadata(st_json_t *j, void **blob_out, int *count_out) {
  *blob_out = NULL;
  *count_out = 0;
  if (!st_expect(j, '{')) return st_fail(j, "__metadata__ is not an object");
  const char *start = j->s;
  size_t n = 0, bytes = 0;
  if (!st_expect(j, '}')) {
    for (;;) {
      st_ws(j);
      const char *k0 = j->s;
      if (st_string(j, NULL, 0) != 1 || !st_expect(j, ':'))
        return st_fail(j, "bad key in __metadata__");
      if (st_string(j, NULL, 0) != 1) return st_fail(j, "__metadata__ values must be strings");
      bytes += (size_t)(j->s - k0); /* the key, its colon and the value, raw */
      n++;
      if (st_expect(j, ',')) continue;
      if (!st_expect(j, '}')) return st_fail(j, "expected ',' or '}' in __metadata__");
      break;
    }
  }
  if (n == 0) return NN_OK;
  const char *after = j->s;
  /* A decoded string is never longer than its quoted text: the raw bytes bound them. */
  size_t arr = n * sizeof(nn_st_meta_t), pool = bytes + 2 * n;
  char *blob = malloc(arr + pool);
  nn_st_meta_t *sorted = malloc(arr);
  if (!blob || !sorted) {
    free(blob);
    free(sorted);
    return nn_set_error(NN_ERR_NO_MEMORY, "safetensors file %s: no memory for __metadata__",
                        j->path);
  }
  nn_st_meta_t *meta = (nn_st_meta_t *)blob;
  char *p = blob + arr, *end = blob + arr + pool;
  j->s = start;
  for (size_t i = 0; i < n; i++) {
    if (i) st_expect(j, ',');
    meta[i].key = p;
    st_string(j, p, (size_t)(end - p));
    p += strlen(p) + 1;
    st_expect(j, ':');
    meta[i].value = p;
    st_string(j, p, (size_t)(end - p));
    p += strlen(p) + 1;
  }
  j->s = after;
  memcpy(sorted, meta, arr);
  qsort(sorted, n, sizeof *sorted, st_meta_key_cmp);
  for (size_t i = 1; i < n; i++)
    if (strcmp(sorted[i - 1].key, sorted[i].key) == 0) {
      char msg[200];
      snprintf(msg, sizeof msg, "__metadata__ key '%.80s' appears twice", sorted[i].key);
      free(sorted);
      free(blob);
      return st_fail(j, msg);
    }
  free(sorted);
  *blob_out = blob;
  *count_out = (int)n;
  return NN_OK;
}

typedef struct { uint64_t begin, end; int index; } st_range_t;

static int st_range_cmp(const void *a, const void *b) {
  const st_range_t *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

void nn_st_free(nn_st_file_t *f) {
  if (!f) return;
  free(f->tensors);
  free(f->blob);
  free(f->meta_blob);
  f->tensors = NULL;
  f->blob = NULL;
  f->count = 0;
  f->meta_blob = NULL;
  f->meta = NULL;
  f->meta_count = 0;
}

const char *nn_st_meta_get(const nn_st_file_t *f, const char *key) {
  if (!f || !key) return NULL;
  for (int i = 0; i < f->meta_count; i++)
    if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
  return NULL;
}

const nn_st_tensor_t *nn_st_find(const nn_st_file_t *f, const char *name) {
  if (!f || !name) return NULL;
  for (int i = 0; i < f->count; i++)
    if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
  return NULL;
}

/* Reads exactly n bytes at offset; 0 on error or short read. */
static int st_pread_all(int fd, void *buf, size_t n, off_t offset) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    p += r;
    n -= (size_t)r;
    offset += r;
  }
  return 1;
}

/* One nn_st_read in progress: what it has found so far, freed by st_reader_free unless
   handed to the caller. */
typedef struct {
  const char *path;
  int fd;
  uint64_t hlen, data_start, data_size;
  char *header;
  nn_st_tensor_t *ts;
  uint64_t (*offs)[2];   /* each tensor's data_offsets */
  int count, cap;
  void *meta_blob;
  int meta_count;
  unsigned char *blob;
} st_reader_t;

static void st_reader_free(st_reader_t *r) {
  close(r->fd);
  free(r->header);
  free(r->ts);
  free(r->offs);
  free(r->blob);
  free(r->meta_blob);
}

/* The 8-byte header length, bounded by the format's limit and the file, then the
   header's bytes. */
static nn_status_t st_read_header(st_reader_t *r) {
  const char *path = r->path;
  struct stat sb;
  if (fstat(r->fd, &sb) != 0)
    return nn_set_error(NN_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
  uint64_t file_size = (uint64_t)sb.st_size;
  unsigned char lenbuf[8];
  if (file_size < 8 || !st_pread_all(r->fd, lenbuf, 8, 0))
    return nn_set_error(NN_ERR_FORMAT, "safetensors file %s: truncated (%llu bytes, no 8-byte header length)",
                        path, (unsigned long long)file_size);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenbuf[i];
  if (hlen < 2 || hlen > ST_MAX_HEADER)
    return nn_set_error(NN_ERR_FORMAT, "safetensors file %s: header length %llu is outside 2..%u bytes "
                        "(not a safetensors file?)",
                        path, (unsigned long long)hlen, ST_MAX_HEADER);
  if (hlen > file_size - 8)
    return nn_set_error(NN_ERR_FORMAT, "safetensors file %s: truncated (header of %llu bytes but file has %llu)",
                        path, (unsigned long long)hlen, (unsigned long long)file_size);
  r->hlen = hlen;
  r->data_start = 8 + hlen;
  r->data_size = file_size - r->data_start;
  r->header = malloc(hlen);
  if (!r->header) return nn_set_error(NN_ERR_NO_MEMORY, "nn_st_read %s: no memory for header", path);
  if (!st_pread_all(r->fd, r->header, hlen, 8))
    return nn_set_error(NN_ERR_IO, "cannot read header of %s: %s", path, strerror(errno));
  return NN_OK;
}

/* Room for one more tensor entry, doubling, up to ST_MAX_TENSORS. */
static nn_status_t st_grow(st_reader_t *r, st_json_t *j) {
  if (r->count < r->cap) return NN_OK;
  if (r->cap >= ST_MAX_TENSORS) return st_fail(j, "too many tensors");
  int ncap = r->cap ? r->cap * 2 : 16;
  void *nt = realloc(r->ts, (size_t)ncap * sizeof *r->ts);
  if (!nt) return nn_set_error(NN_ERR_NO_MEMORY, "nn_st_read %s: no memory", r->path);
  r->ts = nt;
  void *no = realloc(r->offs, (size_t)ncap * sizeof *r->offs);
  if (!no) return nn_set_error(NN_ERR_NO_MEMORY, "nn_st_read %s: no memory", r->path);
  r->offs = no;
  r->cap = ncap;
  return NN_OK;
}

/* The header object: tensor entries and at most one __metadata__. */
static nn_status_t st_parse_header(st_reader_t *r) {
  st_json_t j = {r->header, r->header + r->hlen, r->header, r->path, 0};
  nn_status_t st;
  int have_meta = 0;
  if (!st_expect(&j, '{')) return st_fail(&j, "the header is not a JSON object (not a safetensors file?)");
  if (!st_expect(&j, '}')) {
    for (;;) {
      nn_st_tensor_t t;
      memset(&t, 0, sizeof t);
      int got = st_string(&j, t.name, sizeof t.name);
      if (got == 0) return st_fail(&j, "expected a tensor name string");
      if (got < 0)
        return nn_set_error(NN_ERR_FORMAT, "safetensors file %s: tensor name '%.40s...' is longer than %zu bytes",
                            r->path, t.name, sizeof t.name - 1);
      if (!st_expect(&j, ':')) return st_fail(&j, "expected ':' after a tensor name");
      if (strcmp(t.name, "__metadata__") == 0) {
        if (have_meta) return st_fail(&j, "__metadata__ appears twice");
        have_meta = 1;
        if ((st = st_metadata(&j, &r->meta_blob, &r->meta_count)) != NN_OK) return st;
      } else {
        if ((st = st_grow(r, &j)) != NN_OK) return st;
        if ((st = st_tensor_entry(&j, &t, r->offs[r->count])) != NN_OK) return st;
        r->ts[r->count++] = t;
      }
      if (st_expect(&j, ',')) continue;
      if (!st_expect(&j, '}')) return st_fail(&j, "expected ',' or '}' after a tensor");
      break;
    }
  }
  if (st_peek(&j) != -1) return st_fail(&j, "trailing bytes after the header object");
  return NN_OK;
}

/* Each tensor's size against its byte range and the file; *blob_size: the aligned slots. */
static nn_status_t st_check_sizes(st_reader_t *r, uint64_t *blob_size) {
  const char *path = r->path;
  *blob_size = 0;
  for (int i = 0; i < r->count; i++) {
    nn_st_tensor_t *t = &r->ts[i];
    uint64_t n = nn_st_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
      uint64_t s = (uint64_t)t->shape[d];
      if (s != 0 && n > UINT64_MAX / s)
        return nn_set_error(NN_ERR_FORMAT, "safetensors file %s: tensor '%s' shape overflows", path, t->name);
      n *= s;
    }
    uint64_t b = r->offs[i][0], e = r->offs[i][1];
    if (b > e || e - b != n)
      return nn_set_error(NN_ERR_FORMAT, "safetensors file %s: tensor '%s' has data_offsets [%llu, %llu] "
                          "but its dtype and shape need %llu bytes", path, t->name,
                          (unsigned long long)b, (unsigned long long)e, (unsigned long long)n);
    if (e > r->data_size)
      return nn_set_error(NN_ERR_FORMAT, "safetensors file %s: tensor '%s' ends at data byte %llu but the "
                          "data section has only %llu bytes (truncated file?)", path, t->name,
                          (unsigned long long)e, (unsigned long long)r->data_size);
    t->nbytes = (size_t)n;
    *blob_size += (n + ST_ALIGN - 1) / ST_ALIGN * ST_ALIGN;
  }
  return NN_OK;
}

/* No two tensors may share bytes, nor two share a name. */
static nn_status_t st_check_disjoint(const st_reader_t *r) {
  const char *path = r->path;
  const nn_st_tensor_t *ts = r->ts;
  int count = r->count;
  if (count <= 0) return NN_OK;
  st_range_t *ranges = malloc((size_t)count * sizeof *ranges);
  if (!ranges) return nn_set_error(NN_ERR_NO_MEMORY, "nn_st_read %s: no memory", path);
  for (int i = 0; i < count; i++) ranges[i] = (st_range_t){r->offs[i][0], r->offs[i][1], i};
  qsort(ranges, (size_t)count, sizeof *ranges, st_range_cmp);
  uint64_t prev_end = 0;
  int prev = -1;
  nn_status_t st = NN_OK;
  for (int i = 0; i < count && st == NN_OK; i++) {
    if (ranges[i].begin == ranges[i].end) continue;  /* empty tensors occupy nothing */
    if (prev >= 0 && ranges[i].begin < prev_end)
      st = nn_set_error(NN_ERR_FORMAT, "safetensors file %s: tensors '%s' and '%s' overlap", path,
                        ts[ranges[prev].index].name, ts[ranges[i].index].name);
    prev = i;
    prev_end = ranges[i].end;
  }
  free(ranges);
  if (st != NN_OK) return st;
  for (int a = 0; a < count; a++)
    for (int b = a + 1; b < count; b++)
      if (strcmp(ts[a].name, ts[b].name) == 0)
        return nn_set_error(NN_ERR_FORMAT, "safetensors file %s: tensor '%s' appears twice", path, ts[a].name);
  return NN_OK;
}

/* Each tensor's bytes into its own ST_ALIGN-aligned slot of one blob. */
static nn_status_t st_read_data(st_reader_t *r, uint64_t blob_size) {
  const char *path = r->path;
  if (blob_size > SIZE_MAX - ST_ALIGN)
    return nn_set_error(NN_ERR_FORMAT, "safetensors file %s: data too large", path);
  r->blob = aligned_alloc(ST_ALIGN, (size_t)(blob_size ? blob_size : ST_ALIGN));
  if (!r->blob)
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_st_read %s: cannot allocate %llu bytes", path,
                        (unsigned long long)blob_size);
  size_t pos = 0;
  for (int i = 0; i < r->count; i++) {
    nn_st_tensor_t *t = &r->ts[i];
    t->data = r->blob + pos;
    if (t->nbytes && !st_pread_all(r->fd, r->blob + pos, t->nbytes, (off_t)(r->data_start + r->offs[i][0])))
      return nn_set_error(NN_ERR_IO, "cannot read tensor '%s' of %s: %s", t->name, path,
                          errno ? strerror(errno) : "short read");
    pos += (t->nbytes + ST_ALIGN - 1) / ST_ALIGN * ST_ALIGN;
  }
  return NN_OK;
}

nn_status_t nn_st_read(const char *path, nn_st_file_t *f) {
  if (!f || !path) return nn_set_error(NN_ERR_ARG, "nn_st_read: path or file is NULL");
  memset(f, 0, sizeof *f);
  st_reader_t r = {.path = path};
  r.fd = open(path, O_RDONLY | O_CLOEXEC);
  if (r.fd < 0) return nn_set_error(NN_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  uint64_t blob_size = 0;
  nn_status_t st = st_read_header(&r);
  if (st == NN_OK) st = st_parse_header(&r);
  if (st == NN_OK) st = st_check_sizes(&r, &blob_size);
  if (st == NN_OK) st = st_check_disjoint(&r);
  if (st == NN_OK) st = st_read_data(&r, blob_size);
  if (st == NN_OK) {
    f->count = r.count;
    f->tensors = r.ts;
    f->blob = r.blob;
    f->meta_count = r.meta_count;
    f->meta = r.meta_blob;
    f->meta_blob = r.meta_blob;
    r.ts = NULL;
    r.blob = NULL;
    r.meta_blob = NULL;
  }
  st_reader_free(&r);
  return st;
}

/* ---- writing ---- */
typedef struct { char *p; size_t len, cap; int oom; } st_buf_t;

static void st_put(st_buf_t *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t ncap = b->cap ? b->cap : 256;
    while (b->len + n + 1 > ncap) ncap *= 2;
    char *np = realloc(b->p, ncap);
    if (!np) { b->oom = 1; return; }
    b->p = np;
    b->cap = ncap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void st_puts(st_buf_t *b, const char *s) { st_put(b, s, strlen(s)); }

static void st_put_json_string(st_buf_t *b, const char *s) {
  st_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; st_put(b, esc, 2); }
    else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); st_put(b, esc, 6); }
    else st_put(b, (const char *)&c, 1);
  }
  st_put(b, "\"", 1);
}

static int st_write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return 0;
    p += w;
    n -= (size_t)w;
  }
  return 1;
}

nn_status_t nn_st_write(const char *path, const nn_st_tensor_t *tensors, int count) {
  return nn_st_write_meta(path, tensors, count, NULL, 0);
}

nn_status_t nn_st_write_meta(const char *path, const nn_st_tensor_t *tensors, int count,
                             const nn_st_meta_t *meta, int meta_count) {
  if (!path || count < 0 || (count > 0 && !tensors) || meta_count < 0 ||
      (meta_count > 0 && !meta))
    return nn_set_error(NN_ERR_ARG, "nn_st_write: NULL path/tensors/metadata or negative count "
                        "%d / %d", count, meta_count);
  for (int i = 0; i < meta_count; i++) {
    if (!meta[i].key || !meta[i].key[0] || !meta[i].value)
      return nn_set_error(NN_ERR_ARG, "nn_st_write %s: metadata entry %d has an empty key or a "
                          "NULL value", path, i);
    for (int k = 0; k < i; k++)
      if (strcmp(meta[k].key, meta[i].key) == 0)
        return nn_set_error(NN_ERR_ARG, "nn_st_write %s: metadata key '%s' appears twice", path,
                            meta[i].key);
  }
  st_buf_t h = {0};
  uint64_t offset = 0;
  char num[64];
  st_puts(&h, "{");
  if (meta_count > 0) {
    st_puts(&h, "\"__metadata__\":{");
    for (int i = 0; i < meta_count; i++) {
      if (i) st_puts(&h, ",");
      st_put_json_string(&h, meta[i].key);
      st_puts(&h, ":");
      st_put_json_string(&h, meta[i].value);
    }
    st_puts(&h, count > 0 ? "}," : "}");
  }
  for (int i = 0; i < count; i++) {
    const nn_st_tensor_t *t = &tensors[i];
    size_t es = nn_st_dtype_size(t->dtype);
    if (es == 0 || t->ndim < 0 || t->ndim > NN_ST_MAX_DIMS || t->name[0] == 0 ||
        memchr(t->name, 0, sizeof t->name) == NULL || strcmp(t->name, "__metadata__") == 0) {
      free(h.p);
      return nn_set_error(NN_ERR_ARG, "nn_st_write %s: tensor %d has a bad dtype, ndim or name", path, i);
    }
    uint64_t n = es;
    for (int d = 0; d < t->ndim; d++) {
      if (t->shape[d] < 0) {
        free(h.p);
        return nn_set_error(NN_ERR_ARG, "nn_st_write %s: tensor '%s' has negative dimension %lld",
                            path, t->name, (long long)t->shape[d]);
      }
      n *= (uint64_t)t->shape[d];
    }
    if (n != t->nbytes || (n > 0 && !t->data)) {
      free(h.p);
      return nn_set_error(NN_ERR_ARG, "nn_st_write %s: tensor '%s' has nbytes %zu but its shape needs %llu (or data is NULL)",
                          path, t->name, t->nbytes, (unsigned long long)n);
    }
    for (int k = 0; k < i; k++)
      if (strcmp(tensors[k].name, t->name) == 0) {
        free(h.p);
        return nn_set_error(NN_ERR_ARG, "nn_st_write %s: tensor name '%s' appears twice", path, t->name);
      }
    if (i) st_puts(&h, ",");
    st_put_json_string(&h, t->name);
    st_puts(&h, ":{\"dtype\":\"");
    st_puts(&h, st_dtype_names[t->dtype]);
    st_puts(&h, "\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
      st_puts(&h, num);
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
             (unsigned long long)(offset + n));
    st_puts(&h, num);
    offset += n;
  }
  st_puts(&h, "}");
  /* Pad with spaces so the data section starts 8-byte aligned, as the reference writer. */
  while (!h.oom && (8 + h.len) % 8 != 0) st_puts(&h, " ");
  if (h.oom) {
    free(h.p);
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_st_write %s: no memory for the header", path);
  }

  size_t plen = strlen(path);
  char *tmp = malloc(plen + 5);
  if (!tmp) {
    free(h.p);
    return nn_set_error(NN_ERR_NO_MEMORY, "nn_st_write %s: no memory", path);
  }
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);
  nn_status_t st = NN_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    st = nn_set_error(NN_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    goto done;
  }
  unsigned char lenbuf[8];
  uint64_t hl = h.len;
  for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)(hl >> (8 * i));
  int ok = st_write_all(fd, lenbuf, 8) && st_write_all(fd, h.p, h.len);
  for (int i = 0; ok && i < count; i++)
    if (tensors[i].nbytes) ok = st_write_all(fd, tensors[i].data, tensors[i].nbytes);
  if (!ok) {
    st = nn_set_error(NN_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    goto done;
  }
  if (fsync(fd) != 0) {
    st = nn_set_error(NN_ERR_IO, "cannot fsync %s: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    goto done;
  }
  if (close(fd) != 0) {
    st = nn_set_error(NN_ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
    unlink(tmp);
    goto done;
  }
  if (rename(tmp, path) != 0) {
    st = nn_set_error(NN_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    unlink(tmp);
    goto done;
  }
  /* Make the rename itself durable: fsync the directory (best effort on odd filesystems). */
  char *dcopy = strdup(path);
  if (dcopy) {
    int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)fsync(dfd);
      close(dfd);
    }
    free(dcopy);
  }
done:
  free(tmp);
  free(h.p);
  return st;
}
