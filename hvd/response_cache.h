/* hvd/response_cache.h: the response cache (Horovod's HOROVOD_CACHE_CAPACITY), internal.

   Every rank keeps an identical copy: entries are inserted, touched and evicted only
   while responses are executed, which every rank does in the same order, so a slot
   number means the same tensor everywhere and a bit vector of slots can be agreed with
   one small allreduce (hvd/background.c). Lookups (on submission) change nothing. */
#ifndef HVD_RESPONSE_CACHE_H
#define HVD_RESPONSE_CACHE_H

#include <stddef.h>
#include <stdint.h>

/* What must be the same for a cached response to answer a new request: a request that
   differs in any field must go to the coordinator, which reports the mismatch. */
typedef struct {
  int32_t kind, dtype, op, root;
  int32_t on_device;          /* host vs device memory, as the coordinator checks it */
  int64_t count;
  int32_t set;                /* process set (0: the world); the key names it too    */
} hvd_cache_sig_t;

typedef struct hvd_response_cache hvd_response_cache_t;

hvd_response_cache_t *hvd_cache_create(size_t capacity);
void hvd_cache_free(hvd_response_cache_t *c);
/* The slot holding key (its signature in *sig), or -1. */
int hvd_cache_lookup(const hvd_response_cache_t *c, const char *key, size_t key_len,
                     hvd_cache_sig_t *sig);
/* Stores the encoded response wire[0..len) of key (replacing key's entry, else taking
   the lowest free slot, else evicting the least recently used). 0: out of memory. */
int hvd_cache_put(hvd_response_cache_t *c, const char *key, size_t key_len,
                  const hvd_cache_sig_t *sig, const void *wire, size_t len);
void hvd_cache_touch(hvd_response_cache_t *c, int slot);   /* most recently used */
void hvd_cache_evict(hvd_response_cache_t *c, int slot);   /* no-op when empty   */
/* The stored response of an occupied slot (NULL when empty). */
const void *hvd_cache_wire(const hvd_response_cache_t *c, int slot, size_t *len);

/* One past the highest slot ever occupied (slots at or above it are free). */
int hvd_cache_slots_high(const hvd_response_cache_t *c);
/* The process set of an occupied slot's entry; -1 when the slot is free. */
int hvd_cache_slot_set(const hvd_response_cache_t *c, int slot);

int hvd_cache_sig_equal(const hvd_cache_sig_t *a, const hvd_cache_sig_t *b);

#endif /* HVD_RESPONSE_CACHE_H */
