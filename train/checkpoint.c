/* train/checkpoint.c: checkpoint files (see train/checkpoint.h for the layout). */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static const char MAGIC[8] = {'H', 'V', 'D', 'C', 'K', 'P', 'T', '1'};

typedef struct {
  int fd;
  uLong crc;
  uint64_t written;
  int failed;
} out_t;

static void out_bytes(out_t *o, const void *p, size_t n) {
  const unsigned char *b = p;
  if (o->failed) return;
  size_t left = n;
  while (left > 0) {
    ssize_t w = write(o->fd, b, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      o->failed = errno;
      return;
    }
    b += w;
    left -= (size_t)w;
  }
  /* crc32 takes uInt lengths: feed it in chunks. */
  b = p;
  for (size_t off = 0; off < n;) {
    size_t chunk = n - off > (1u << 30) ? (1u << 30) : n - off;
    o->crc = crc32(o->crc, b + off, (uInt)chunk);
    off += chunk;
  }
  o->written += n;
}

static void out_le(out_t *o, uint64_t v, int bytes) {
  unsigned char b[8];
  for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
  out_bytes(o, b, (size_t)bytes);
}

int train_ckpt_write(const char *path, const char *meta, const train_ckpt_section_t *sections,
                     int count, char *err, size_t errlen) {
  uint64_t total = 8 + 8 + 4 + strlen(meta) + 4 + 4;
  for (int i = 0; i < count; i++) total += 2 + strlen(sections[i].name) + 8 + sections[i].nbytes;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  out_t o = {.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644), .crc = crc32(0, NULL, 0)};
  if (o.fd < 0) {
    snprintf(err, errlen, "%s: cannot create (%s)", tmp, strerror(errno));
    return -1;
  }
  out_bytes(&o, MAGIC, 8);
  out_le(&o, total, 8);
  out_le(&o, strlen(meta), 4);
  out_bytes(&o, meta, strlen(meta));
  out_le(&o, (uint64_t)count, 4);
  for (int i = 0; i < count; i++) {
    size_t nl = strlen(sections[i].name);
    out_le(&o, nl, 2);
    out_bytes(&o, sections[i].name, nl);
    out_le(&o, sections[i].nbytes, 8);
    out_bytes(&o, sections[i].data, sections[i].nbytes);
  }
  out_le(&o, o.crc & 0xffffffffu, 4);
  if (!o.failed && fsync(o.fd) != 0) o.failed = errno;
  if (close(o.fd) != 0 && !o.failed) o.failed = errno;
  if (!o.failed && o.written != total) o.failed = EIO;
  if (o.failed) {
    snprintf(err, errlen, "%s: write failed (%s)", tmp, strerror(o.failed));
    unlink(tmp);
    return -1;
  }
  if (rename(tmp, path) != 0) {
    snprintf(err, errlen, "%s: cannot rename to %s (%s)", tmp, path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  /* Make the rename itself durable. */
  char dirbuf[4200];
  snprintf(dirbuf, sizeof dirbuf, "%s", path);
  int dfd = open(dirname(dirbuf), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

static uint64_t get_le(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

int train_ckpt_read(const char *path, train_ckpt_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open checkpoint (%s)", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    snprintf(err, errlen, "%s: cannot stat (%s)", path, strerror(errno));
    fclose(f);
    return -1;
  }
  size_t size = (size_t)st.st_size;
  unsigned char *b = malloc(size ? size : 1);
  if (!b) {
    snprintf(err, errlen, "%s: out of memory for %zu bytes", path, size);
    fclose(f);
    return -1;
  }
  size_t got = fread(b, 1, size, f);
  fclose(f);
  if (got != size) {
    snprintf(err, errlen, "%s: read error", path);
    free(b);
    return -1;
  }
  const char *why = NULL;
  if (size < 28 || memcmp(b, MAGIC, 8) != 0) why = "not a hvd train checkpoint (bad magic)";
  else if (get_le(b + 8, 8) != size) why = "truncated or has trailing bytes (length field disagrees)";
  else {
    uLong c = crc32(0, NULL, 0);
    for (size_t off = 0; off < size - 4;) {
      size_t chunk = size - 4 - off > (1u << 30) ? (1u << 30) : size - 4 - off;
      c = crc32(c, b + off, (uInt)chunk);
      off += chunk;
    }
    if ((c & 0xffffffffu) != get_le(b + size - 4, 4)) why = "checksum mismatch (corrupt)";
  }
  size_t pos = 16, end = size - 4;
  if (!why) {
    uint64_t ml = get_le(b + pos, 4);
    pos += 4;
    if (ml > end - pos) why = "corrupt metadata length";
    else {
      out->meta = malloc(ml + 1);
      if (!out->meta) why = "out of memory";
      else {
        memcpy(out->meta, b + pos, ml);
        out->meta[ml] = '\0';
        pos += ml;
      }
    }
  }
  if (!why && end - pos < 4) why = "corrupt section table";
  if (!why) {
    uint64_t n = get_le(b + pos, 4);
    pos += 4;
    if (n > 4096) why = "corrupt section count";
    else {
      out->sections = calloc(n ? n : 1, sizeof *out->sections);
      if (!out->sections) why = "out of memory";
      for (uint64_t i = 0; !why && i < n; i++) {
        if (end - pos < 2) { why = "corrupt section header"; break; }
        size_t nl = (size_t)get_le(b + pos, 2);
        pos += 2;
        if (nl == 0 || nl >= sizeof out->sections[i].name || end - pos < nl + 8) {
          why = "corrupt section name";
          break;
        }
        memcpy(out->sections[i].name, b + pos, nl);
        pos += nl;
        uint64_t nb = get_le(b + pos, 8);
        pos += 8;
        if (nb > end - pos) { why = "corrupt section length"; break; }
        out->sections[i].data = b + pos;
        out->sections[i].nbytes = nb;
        pos += nb;
        out->count++;
      }
      if (!why && pos != end) why = "corrupt layout (bytes left over)";
    }
  }
  if (why) {
    snprintf(err, errlen, "%s: %s", path, why);
    free(b);
    train_ckpt_free(out);
    return -1;
  }
  out->blob = b;
  return 0;
}

const train_ckpt_section_t *train_ckpt_find(const train_ckpt_t *c, const char *name) {
  for (int i = 0; i < c->count; i++)
    if (strcmp(c->sections[i].name, name) == 0) return &c->sections[i];
  return NULL;
}

const char *train_ckpt_meta(const train_ckpt_t *c, const char *key, char *buf, size_t len) {
  size_t kl = strlen(key);
  for (const char *p = c->meta; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t ll = nl ? (size_t)(nl - p) : strlen(p);
    if (ll > kl && strncmp(p, key, kl) == 0 && p[kl] == '=') {
      size_t vl = ll - kl - 1;
      if (vl >= len) vl = len - 1;
      memcpy(buf, p + kl + 1, vl);
      buf[vl] = '\0';
      return buf;
    }
    p = nl ? nl + 1 : p + ll;
  }
  return NULL;
}

int train_ckpt_format(const train_ckpt_t *c, const char *path, int *version, char *err,
                      size_t errlen) {
  char v[128];
  const size_t pl = strlen(TRAIN_CKPT_FORMAT_PREFIX);
  const char *f = train_ckpt_meta(c, "format", v, sizeof v);
  if (!f) {
    snprintf(err, errlen, "%s: no format field in the checkpoint's metadata (this train reads "
             "%s1 to %s%d): not a checkpoint train wrote", path, TRAIN_CKPT_FORMAT_PREFIX,
             TRAIN_CKPT_FORMAT_PREFIX, TRAIN_CKPT_FORMAT);
    return -1;
  }
  /* The prefix, then a version in digits alone ("-2x", "-+2", "- 2" are not versions). */
  long n = -1;
  if (strncmp(f, TRAIN_CKPT_FORMAT_PREFIX, pl) == 0 && f[pl] >= '0' && f[pl] <= '9' &&
      strspn(f + pl, "0123456789") == strlen(f + pl) && strlen(f + pl) <= 9)
    n = strtol(f + pl, NULL, 10);
  if (n < 1 || n > TRAIN_CKPT_FORMAT) {
    snprintf(err, errlen, "%s: checkpoint format %s, this train reads %s1 to %s%d%s", path, f,
             TRAIN_CKPT_FORMAT_PREFIX, TRAIN_CKPT_FORMAT_PREFIX, TRAIN_CKPT_FORMAT,
             n > TRAIN_CKPT_FORMAT ? " (a newer train wrote it: resume with that one)" : "");
    return -1;
  }
  *version = (int)n;
  return 0;
}

void train_ckpt_free(train_ckpt_t *c) {
  free(c->meta);
  free(c->sections);
  free(c->blob);
  memset(c, 0, sizeof *c);
}

static int is_stale_tmp(const char *name) {
  const char *t = strstr(name, ".ckpt.tmp.");
  return t != NULL && t != name;
}

int train_ckpt_remove_stale(const char *dir, int *removed, char *err, size_t errlen) {
  *removed = 0;
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(err, errlen, "%s: cannot list (%s)", dir, strerror(errno));
    return -1;
  }
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!is_stale_tmp(e->d_name)) continue;
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) == 0) {
      (*removed)++;
    } else if (errno != ENOENT && rc == 0) {
      snprintf(err, errlen, "%s: cannot remove (%s)", p, strerror(errno));
      rc = -1;
    }
  }
  closedir(d);
  return rc;
}

static int ends_with_ckpt(const char *name) {
  size_t n = strlen(name);
  return n > 5 && strcmp(name + n - 5, ".ckpt") == 0;
}

int train_ckpt_list(const char *dir, train_ckpt_file_t **files, int *count, char *err,
                    size_t errlen) {
  *files = NULL;
  *count = 0;
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(err, errlen, "%s: cannot list (%s)", dir, strerror(errno));
    return -1;
  }
  int cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!ends_with_ckpt(e->d_name)) continue;
    train_ckpt_file_t f;
    snprintf(f.path, sizeof f.path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(f.path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    f.mtime = (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
    if (*count == cap) {
      cap = cap ? 2 * cap : 16;
      train_ckpt_file_t *grown = realloc(*files, (size_t)cap * sizeof **files);
      if (!grown) {
        snprintf(err, errlen, "%s: out of memory listing checkpoints", dir);
        free(*files);
        *files = NULL;
        *count = 0;
        closedir(d);
        return -1;
      }
      *files = grown;
    }
    (*files)[(*count)++] = f;
  }
  closedir(d);
  return 0;
}
