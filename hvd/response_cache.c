/* hvd/response_cache.c: the response cache's slots, key index and LRU order.

   Slots are numbered 0..capacity-1; a new entry takes the lowest free slot, so that the
   occupied slots stay dense at the bottom, and when none is free it replaces the least
   recently used one. Everything here is deterministic: the same calls in the same order
   give the same slots on every rank (the rounds in hvd/background.c rely on it). */
#include "hvd/response_cache.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  char *key;                  /* 0-terminated; NULL: the slot is free               */
  size_t key_len;
  hvd_cache_sig_t sig;
  void *wire;
  size_t wire_len;
  int prev, next;             /* LRU list: prev is more recently used; -1 ends     */
  int hnext;                  /* chain of the key index                            */
} slot_t;

struct hvd_response_cache {
  size_t capacity;
  slot_t *slots;
  int *bucket;                /* key index: first slot of each chain, or -1        */
  size_t nbuckets;            /* a power of two                                    */
  int mru, lru;               /* ends of the LRU list                              */
  size_t used;
  int high;                   /* one past the highest slot ever occupied           */
};

static size_t key_hash(const char *key, size_t len) {
  uint64_t h = 1469598103934665603ull;   /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
  return (size_t)h;
}

hvd_response_cache_t *hvd_cache_create(size_t capacity) {
  if (capacity == 0 || capacity > (size_t)INT32_MAX / 4) return NULL;
  hvd_response_cache_t *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->capacity = capacity;
  c->nbuckets = 16;
  while (c->nbuckets < 2 * capacity) c->nbuckets *= 2;
  c->slots = calloc(capacity, sizeof(*c->slots));
  c->bucket = malloc(c->nbuckets * sizeof(*c->bucket));
  if (!c->slots || !c->bucket) {
    hvd_cache_free(c);
    return NULL;
  }
  for (size_t b = 0; b < c->nbuckets; b++) c->bucket[b] = -1;
  c->mru = c->lru = -1;
  return c;
}

void hvd_cache_free(hvd_response_cache_t *c) {
  if (!c) return;
  if (c->slots)
    for (size_t i = 0; i < c->capacity; i++) {
      free(c->slots[i].key);
      free(c->slots[i].wire);
    }
  free(c->slots);
  free(c->bucket);
  free(c);
}

int hvd_cache_sig_equal(const hvd_cache_sig_t *a, const hvd_cache_sig_t *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op &&
         a->root == b->root && a->on_device == b->on_device && a->count == b->count &&
         a->set == b->set;
}

int hvd_cache_lookup(const hvd_response_cache_t *c, const char *key, size_t key_len,
                     hvd_cache_sig_t *sig) {
  for (int s = c->bucket[key_hash(key, key_len) & (c->nbuckets - 1)]; s >= 0;
       s = c->slots[s].hnext) {
    const slot_t *e = &c->slots[s];
    if (e->key_len == key_len && memcmp(e->key, key, key_len) == 0) {
      if (sig) *sig = e->sig;
      return s;
    }
  }
  return -1;
}

static void lru_unlink(hvd_response_cache_t *c, int s) {
  slot_t *e = &c->slots[s];
  if (e->prev >= 0) c->slots[e->prev].next = e->next;
  else c->mru = e->next;
  if (e->next >= 0) c->slots[e->next].prev = e->prev;
  else c->lru = e->prev;
  e->prev = e->next = -1;
}

static void lru_push_front(hvd_response_cache_t *c, int s) {
  slot_t *e = &c->slots[s];
  e->prev = -1;
  e->next = c->mru;
  if (c->mru >= 0) c->slots[c->mru].prev = s;
  c->mru = s;
  if (c->lru < 0) c->lru = s;
}

void hvd_cache_touch(hvd_response_cache_t *c, int slot) {
  if (slot < 0 || (size_t)slot >= c->capacity || !c->slots[slot].key) return;
  lru_unlink(c, slot);
  lru_push_front(c, slot);
}

void hvd_cache_evict(hvd_response_cache_t *c, int slot) {
  if (slot < 0 || (size_t)slot >= c->capacity || !c->slots[slot].key) return;
  slot_t *e = &c->slots[slot];
  int *pp = &c->bucket[key_hash(e->key, e->key_len) & (c->nbuckets - 1)];
  while (*pp != slot) pp = &c->slots[*pp].hnext;
  *pp = e->hnext;
  lru_unlink(c, slot);
  free(e->key);
  free(e->wire);
  memset(e, 0, sizeof(*e));
  c->used--;
}

int hvd_cache_put(hvd_response_cache_t *c, const char *key, size_t key_len,
                  const hvd_cache_sig_t *sig, const void *wire, size_t len) {
  void *copy = malloc(len ? len : 1);
  if (!copy) return 0;
  memcpy(copy, wire, len);
  int s = hvd_cache_lookup(c, key, key_len, NULL);
  if (s >= 0) {   /* the same name answered again (perhaps with a new signature) */
    slot_t *e = &c->slots[s];
    free(e->wire);
    e->wire = copy;
    e->wire_len = len;
    e->sig = *sig;
    hvd_cache_touch(c, s);
    return 1;
  }
  char *k = malloc(key_len + 1);
  if (!k) {
    free(copy);
    return 0;
  }
  memcpy(k, key, key_len);
  k[key_len] = '\0';
  if (c->used == c->capacity) {
    s = c->lru;
    hvd_cache_evict(c, s);
  } else {
    for (s = 0; c->slots[s].key; s++) continue;
  }
  slot_t *e = &c->slots[s];
  e->key = k;
  e->key_len = key_len;
  e->sig = *sig;
  e->wire = copy;
  e->wire_len = len;
  size_t b = key_hash(k, key_len) & (c->nbuckets - 1);
  e->hnext = c->bucket[b];
  c->bucket[b] = s;
  e->prev = e->next = -1;
  lru_push_front(c, s);
  c->used++;
  if (s + 1 > c->high) c->high = s + 1;
  return 1;
}

int hvd_cache_slots_high(const hvd_response_cache_t *c) { return c->high; }

int hvd_cache_slot_set(const hvd_response_cache_t *c, int slot) {
  if (slot < 0 || (size_t)slot >= c->capacity || !c->slots[slot].key) return -1;
  return c->slots[slot].sig.set;
}

const void *hvd_cache_wire(const hvd_response_cache_t *c, int slot, size_t *len) {
  if (slot < 0 || (size_t)slot >= c->capacity || !c->slots[slot].key) return NULL;
  *len = c->slots[slot].wire_len;
  return c->slots[slot].wire;
}
