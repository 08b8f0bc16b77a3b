/* data/source.c: what the samples are and where their bytes come from: a folder per class
   (torchvision's ImageFolder, Keras' image_dataset_from_directory: classes are the
   sub-folders sorted by name, label = position), a list file of "path label" lines, or
   TFRecord shards of tf.train.Example (tf_cnn_benchmarks' ImageNet layout). */
#include "data/data.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef struct {
  char **v;
  size_t n, cap;
} strvec_t;

static int sv_push(strvec_t *s, const char *a, const char *b) {
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 64;
    char **g = realloc(s->v, nc * sizeof *g);
    if (!g) return -1;
    s->v = g;
    s->cap = nc;
  }
  size_t la = strlen(a), lb = b ? strlen(b) : 0;
  char *p = malloc(la + lb + 2);
  if (!p) return -1;
  memcpy(p, a, la);
  if (b) {
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
  } else {
    p[la] = 0;
  }
  s->v[s->n++] = p;
  return 0;
}

static void sv_free(strvec_t *s) {
  for (size_t i = 0; i < s->n; i++) free(s->v[i]);
  free(s->v);
  memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int image_ext(const char *name) {
  const char *d = strrchr(name, '.');
  return d && (!strcasecmp(d, ".jpg") || !strcasecmp(d, ".jpeg") || !strcasecmp(d, ".png"));
}

/* The entries of dir (names only, sorted) that pass keep(dir/name). */
static int list_dir(const char *dir,
                    int (*keep)(const char *dir, const char *name, const char *prefix),
                    const char *prefix, strvec_t *out, char *err, size_t errlen) {
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(err, errlen, "%s: cannot open the folder (%s)", dir, strerror(errno));
    return -1;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (!keep(dir, e->d_name, prefix)) continue;
    if (sv_push(out, e->d_name, NULL) != 0) {
      closedir(d);
      snprintf(err, errlen, "%s: out of memory listing the folder", dir);
      return -1;
    }
  }
  closedir(d);
  qsort(out->v, out->n, sizeof *out->v, cmp_str);
  return 0;
}

static int keep_dir(const char *dir, const char *name, const char *prefix) {
  (void)prefix;
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return is_dir(p);
}

static int keep_image(const char *dir, const char *name, const char *prefix) {
  return image_ext(name) && !keep_dir(dir, name, prefix);
}

void data_source_view(const data_source_t *s, size_t begin, size_t count, data_source_t *v) {
  if (begin > s->n) begin = s->n;
  if (count > s->n - begin) count = s->n - begin;
  *v = *s;
  v->view = 1;
  v->n = count;
  if (s->paths) v->paths = s->paths + begin;
  if (s->labels) v->labels = s->labels + begin;
  if (s->rec_file) v->rec_file = s->rec_file + begin;
  if (s->recs) v->recs = s->recs + begin;
  if (s->rec_index) v->rec_index = s->rec_index + begin;
}

void data_source_free(data_source_t *s) {
  if (s->view) {
    memset(s, 0, sizeof *s);
    return;
  }
  for (int i = 0; s->class_names && i < s->num_classes; i++) free(s->class_names[i]);
  free(s->class_names);
  for (size_t i = 0; s->paths && i < s->n; i++) free(s->paths[i]);
  free(s->paths);
  free(s->labels);
  for (size_t i = 0; s->files && i < s->nfiles; i++) free(s->files[i]);
  free(s->files);
  free(s->rec_file);
  free(s->recs);
  free(s->rec_index);
  memset(s, 0, sizeof *s);
}

int data_source_imagefolder(const char *dir, data_source_t *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  s->kind = DATA_IMAGEFOLDER;
  strvec_t classes = {0}, paths = {0};
  int32_t *labels = NULL;
  size_t lcap = 0;
  if (list_dir(dir, keep_dir, NULL, &classes, err, errlen) != 0) goto fail;
  if (classes.n == 0) {
    snprintf(err, errlen, "%s: no class folders (expected %s/CLASS/IMAGE.jpg, as ImageFolder)",
             dir, dir);
    goto fail;
  }
  for (size_t c = 0; c < classes.n; c++) {
    char cdir[4096];
    snprintf(cdir, sizeof cdir, "%s/%s", dir, classes.v[c]);
    strvec_t files = {0};
    if (list_dir(cdir, keep_image, NULL, &files, err, errlen) != 0) goto fail;
    for (size_t i = 0; i < files.n; i++) {
      if (sv_push(&paths, cdir, files.v[i]) != 0) goto oom;
      if (paths.n > lcap) {
        lcap = paths.cap;
        int32_t *g = realloc(labels, lcap * sizeof *labels);
        if (!g) goto oom;
        labels = g;
      }
      labels[paths.n - 1] = (int32_t)c;
    }
    sv_free(&files);
    continue;
  oom:
    sv_free(&files);
    snprintf(err, errlen, "%s: out of memory listing the images", dir);
    goto fail;
  }
  if (paths.n == 0) {
    snprintf(err, errlen, "%s: no .jpg, .jpeg or .png files in its %zu class folders", dir,
             classes.n);
    goto fail;
  }
  s->n = paths.n;
  s->paths = paths.v;
  s->labels = labels;
  s->num_classes = (int)classes.n;
  s->class_names = classes.v;
  return 0;
fail:
  sv_free(&classes);
  sv_free(&paths);
  free(labels);
  return -1;
}

int data_source_filelist(const char *list, data_source_t *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  s->kind = DATA_FILELIST;
  FILE *f = fopen(list, "r");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open (%s)", list, strerror(errno));
    return -1;
  }
  char base[4096];
  snprintf(base, sizeof base, "%s", list);
  char *slash = strrchr(base, '/');
  if (slash) *slash = 0;
  else strcpy(base, ".");
  strvec_t paths = {0};
  int32_t *labels = NULL;
  size_t lcap = 0;
  char line[8192];
  int lineno = 0, maxl = -1;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
      snprintf(err, errlen, "%s, line %d: longer than %zu characters", list, lineno,
               sizeof line - 2);
      goto fail;
    }
    while (len && isspace((unsigned char)line[len - 1])) line[--len] = 0;
    char *p = line;
    while (isspace((unsigned char)*p)) p++;
    if (!*p || *p == '#') continue;
    char *sp = p + strlen(p);
    while (sp > p && !isspace((unsigned char)sp[-1])) sp--;
    char *end;
    errno = 0;
    long lab = sp > p ? strtol(sp, &end, 10) : -1;
    if (sp == p || *end || errno || lab < 0 || lab > 1000000) {
      snprintf(err, errlen, "%s, line %d: expected 'PATH LABEL' with LABEL 0..1000000, got "
               "'%s'", list, lineno, p);
      goto fail;
    }
    while (sp > p && isspace((unsigned char)sp[-1])) *--sp = 0;
    int pushed = p[0] == '/' ? sv_push(&paths, p, NULL) : sv_push(&paths, base, p);
    if (pushed != 0) goto oom;
    if (paths.n > lcap) {
      lcap = paths.cap;
      int32_t *g = realloc(labels, lcap * sizeof *labels);
      if (!g) goto oom;
      labels = g;
    }
    labels[paths.n - 1] = (int32_t)lab;
    if (lab > maxl) maxl = (int)lab;
  }
  if (ferror(f)) {
    snprintf(err, errlen, "%s: read error (%s)", list, strerror(errno));
    goto fail;
  }
  if (paths.n == 0) {
    snprintf(err, errlen, "%s: no 'PATH LABEL' lines", list);
    goto fail;
  }
  fclose(f);
  s->n = paths.n;
  s->paths = paths.v;
  s->labels = labels;
  s->num_classes = maxl + 1;
  return 0;
oom:
  snprintf(err, errlen, "%s: out of memory", list);
fail:
  fclose(f);
  sv_free(&paths);
  free(labels);
  return -1;
}

static int keep_prefix(const char *dir, const char *name, const char *prefix) {
  return strncmp(name, prefix, strlen(prefix)) == 0 && !keep_dir(dir, name, prefix);
}

int data_source_tfrecord(const char *dir, const char *prefix, data_source_t *s, char *err,
                         size_t errlen) {
  memset(s, 0, sizeof *s);
  s->kind = DATA_TFRECORD;
  strvec_t names = {0};
  if (list_dir(dir, keep_prefix, prefix, &names, err, errlen) != 0) return -1;
  if (names.n == 0) {
    snprintf(err, errlen, "%s: no TFRecord files %s* (tf_cnn_benchmarks' layout: %s/train-* "
             "and %s/validation-*)", dir, prefix, dir, dir);
    sv_free(&names);
    return -1;
  }
  s->files = calloc(names.n, sizeof *s->files);
  if (!s->files) goto oom;
  s->nfiles = names.n;
  for (size_t i = 0; i < names.n; i++) {
    size_t l = strlen(dir) + strlen(names.v[i]) + 2;
    if (!(s->files[i] = malloc(l))) goto oom;
    snprintf(s->files[i], l, "%s/%s", dir, names.v[i]);
  }
  sv_free(&names);
  for (size_t i = 0; i < s->nfiles; i++) {
    data_record_t *r;
    size_t n;
    if (data_tfrecord_index(s->files[i], &r, &n, err, errlen) != 0) goto fail;
    data_record_t *g1 = realloc(s->recs, (s->n + n + 1) * sizeof *g1);
    if (g1) s->recs = g1;
    uint32_t *g2 = realloc(s->rec_file, (s->n + n + 1) * sizeof *g2);
    if (g2) s->rec_file = g2;
    uint32_t *g3 = realloc(s->rec_index, (s->n + n + 1) * sizeof *g3);
    if (g3) s->rec_index = g3;
    if (!g1 || !g2 || !g3) {
      free(r);
      goto oom;
    }
    for (size_t k = 0; k < n; k++) {
      s->recs[s->n + k] = r[k];
      s->rec_file[s->n + k] = (uint32_t)i;
      s->rec_index[s->n + k] = (uint32_t)k;
    }
    s->n += n;
    free(r);
  }
  if (s->n == 0) {
    snprintf(err, errlen, "%s: the %zu files %s* hold no records", dir, s->nfiles, prefix);
    goto fail;
  }
  return 0;
oom:
  sv_free(&names);
  snprintf(err, errlen, "%s: out of memory indexing TFRecords", dir);
fail:
  data_source_free(s);
  return -1;
}

void data_source_name(const data_source_t *s, size_t i, char *buf, size_t len) {
  if (i >= s->n) snprintf(buf, len, "sample %zu", i);
  else if (s->kind == DATA_TFRECORD)
    snprintf(buf, len, "%s, record %u", s->files[s->rec_file[i]], s->rec_index[i]);
  else snprintf(buf, len, "%s", s->paths[i]);
}

static int read_file(const char *path, data_read_buf_t *b, size_t *len, char *err,
                     size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open (%s)", strerror(errno));
    return -1;
  }
  struct stat st;
  int rc = -1;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "not a regular file");
  } else if ((uint64_t)st.st_size > DATA_MAX_FILE_BYTES) {
    snprintf(err, errlen, "%lld bytes, more than the %u an image file may have",
             (long long)st.st_size, DATA_MAX_FILE_BYTES);
  } else {
    size_t need = (size_t)st.st_size + 1;
    if (b->cap < need) {
      uint8_t *g = realloc(b->file, need);
      if (g) {
        b->file = g;
        b->cap = need;
      }
    }
    if (b->cap < need) snprintf(err, errlen, "out of memory (%zu bytes)", need);
    else if (fread(b->file, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
      snprintf(err, errlen, "read error (%s)", ferror(f) ? strerror(errno) : "file shrank");
    else {
      *len = (size_t)st.st_size;
      rc = 0;
    }
  }
  fclose(f);
  return rc;
}

int data_source_read(const data_source_t *s, size_t i, data_read_buf_t *b,
                     const uint8_t **bytes, size_t *len, int32_t *label, char *err,
                     size_t errlen) {
  char what[4200], why[512];
  data_source_name(s, i, what, sizeof what);
  if (s->kind != DATA_TFRECORD) {
    if (read_file(s->paths[i], b, len, why, sizeof why) != 0) {
      snprintf(err, errlen, "%s: %s", what, why);
      return -1;
    }
    *bytes = b->file;
    *label = s->labels[i];
    return 0;
  }
  /* The record's own CRC error already names the file and record. */
  if (data_tfrecord_read(s->files[s->rec_file[i]], s->rec_index[i], s->recs[i], &b->file,
                         &b->cap, err, errlen) != 0)
    return -1;
  free(b->image);
  b->image = NULL;
  int64_t lab;
  if (data_example_parse(b->file, (size_t)s->recs[i].length, &b->image, len, &lab, why,
                         sizeof why) != 0) {
    snprintf(err, errlen, "%s: %s", what, why);
    return -1;
  }
  if (lab < 1 || lab > 1000000) {
    snprintf(err, errlen, "%s: image/class/label %lld, expected 1.. (1-based, as "
             "tf_cnn_benchmarks' ImageNet)", what, (long long)lab);
    return -1;
  }
  *bytes = b->image;
  *label = (int32_t)(lab - 1);
  return 0;
}

void data_read_buf_free(data_read_buf_t *b) {
  free(b->file);
  free(b->image);
  memset(b, 0, sizeof *b);
}
