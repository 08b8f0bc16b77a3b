/* test_hvd_response_cache: the response cache's eviction order and hit counts
   (hvd/response_cache.c), without MPI.
     order:  capacity 3; a, b, c stored, a touched (a hit): d must evict b, the least
             recently used, and take its slot; then e evicts c, f evicts a.
     replay: 20 names drawn in a skewed pattern (a few hot names, many cold ones), 5000
             accesses, capacities 1..12: the hits (a lookup that finds the name, then a
             touch, as hvd/background.c does) and the misses (a put) must match a
             reference LRU kept here as a plain recency array, access by access, and so
             must the set of names in the cache. Evicting the most recent entry instead
             gives other hit counts (the hot names are pushed out at once). */
#include "hvd/response_cache.h"
#include "tests/check.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static hvd_cache_sig_t sig_of(int i) {
  hvd_cache_sig_t s = {1, 2, 0, 0, 0, i + 1, 0};
  return s;
}

static int put(hvd_response_cache_t *c, const char *key, int i) {
  hvd_cache_sig_t s = sig_of(i);
  return hvd_cache_put(c, key, strlen(key), &s, key, strlen(key));
}

static int slot_of(hvd_response_cache_t *c, const char *key) {
  return hvd_cache_lookup(c, key, strlen(key), NULL);
}

static void check_order(void) {
  hvd_response_cache_t *c = hvd_cache_create(3);
  CHECK(c != NULL, "hvd_cache_create(3)");
  if (!c) return;
  CHECK(put(c, "a", 0) && put(c, "b", 1) && put(c, "c", 2), "put a, b, c");
  CHECK(slot_of(c, "a") == 0 && slot_of(c, "b") == 1 && slot_of(c, "c") == 2,
        "slots a %d b %d c %d, want 0 1 2 (the lowest free slot)", slot_of(c, "a"),
        slot_of(c, "b"), slot_of(c, "c"));
  hvd_cache_touch(c, slot_of(c, "a"));   /* a hit: a is now the most recent */
  CHECK(put(c, "d", 3), "put d");
  CHECK(slot_of(c, "b") < 0, "b (least recently used) was not evicted; slot %d",
        slot_of(c, "b"));
  CHECK(slot_of(c, "d") == 1, "d took slot %d, want b's slot 1", slot_of(c, "d"));
  CHECK(slot_of(c, "a") == 0 && slot_of(c, "c") == 2, "a (slot %d) and c (slot %d) must "
        "stay", slot_of(c, "a"), slot_of(c, "c"));
  CHECK(put(c, "e", 4), "put e");
  CHECK(slot_of(c, "c") < 0 && slot_of(c, "e") == 2, "e must evict c (slot 2): c %d e %d",
        slot_of(c, "c"), slot_of(c, "e"));
  CHECK(put(c, "f", 5), "put f");
  CHECK(slot_of(c, "a") < 0 && slot_of(c, "f") == 0, "f must evict a (slot 0): a %d f %d",
        slot_of(c, "a"), slot_of(c, "f"));
  hvd_cache_sig_t s;
  CHECK(slot_of(c, "d") == 1 && hvd_cache_lookup(c, "d", 1, &s) == 1 && s.count == 4,
        "d's entry lost or its signature changed (count %lld)", (long long)s.count);
  size_t len = 0;
  const void *w = hvd_cache_wire(c, slot_of(c, "e"), &len);
  CHECK(w && len == 1 && memcmp(w, "e", 1) == 0, "e's stored response is wrong");
  hvd_cache_free(c);
}

#define NAMES 20
#define ACCESSES 5000

/* The reference: names ordered from most to least recently used. */
typedef struct {
  int order[NAMES], n, cap;
} model_t;

/* Accesses name k in the model; returns 1 on a hit. */
static int model_access(model_t *m, int k) {
  int at = -1;
  for (int i = 0; i < m->n; i++)
    if (m->order[i] == k) at = i;
  int hit = at >= 0;
  if (!hit) at = m->n < m->cap ? m->n++ : m->n - 1;   /* the last one is evicted */
  memmove(&m->order[1], &m->order[0], (size_t)at * sizeof(int));
  m->order[0] = k;
  return hit;
}

static void check_replay(int cap) {
  hvd_response_cache_t *c = hvd_cache_create((size_t)cap);
  CHECK(c != NULL, "hvd_cache_create(%d)", cap);
  if (!c) return;
  model_t m = {.n = 0, .cap = cap};
  uint64_t x = 88172645463325252ull;   /* xorshift: the same sequence every run */
  int hits = 0, want_hits = 0, bad = 0;
  for (int a = 0; a < ACCESSES && !bad; a++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    /* 3 hot names take 3/4 of the accesses */
    int k = (x % 4) ? (int)((x >> 8) % 3) : 3 + (int)((x >> 8) % (NAMES - 3));
    char key[16];
    snprintf(key, sizeof(key), "grad.%d", k);
    int s = slot_of(c, key);
    if (s >= 0) {
      hits++;
      hvd_cache_touch(c, s);
    } else {
      CHECK(put(c, key, k), "put %s", key);
    }
    want_hits += model_access(&m, k);
    if (hits != want_hits) {
      CHECK(0, "capacity %d, access %d (%s): %d hits so far, the reference LRU has %d",
            cap, a, key, hits, want_hits);
      bad = 1;
    }
    for (int i = 0; i < NAMES && !bad; i++) {
      char name[16];
      snprintf(name, sizeof(name), "grad.%d", i);
      int in_model = 0;
      for (int j = 0; j < m.n; j++) in_model |= m.order[j] == i;
      if ((slot_of(c, name) >= 0) != in_model) {
        CHECK(0, "capacity %d, after access %d: %s is %s the cache, the reference LRU "
              "says %s", cap, a, name, in_model ? "not in" : "in", in_model ? "in" : "out");
        bad = 1;
      }
    }
  }
  printf("capacity %2d: %d hits of %d accesses (reference LRU: %d)\n", cap, hits, ACCESSES,
         want_hits);
  hvd_cache_free(c);
}

int main(void) {
  check_order();
  for (int cap = 1; cap <= 12; cap++) check_replay(cap);
  printf(failures ? "FAIL\n" : "PASS\n");
  return failures ? 1 : 0;
}
