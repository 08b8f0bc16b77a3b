/* collectives/tuning.c: process-wide knobs of the algorithms. Plain globals: they are
   set once at start-up (or by tests between collectives), never during one. */
#include "collectives/coll_internal.h"

/* 256 KiB chunks: large enough that per-message overhead is small against the copy,
   small enough that two in flight plus the one being reduced stay in L2. */
static size_t chunk_bytes = 256u << 10;
/* Below 64 KiB the ring's 2(N-1) latency-bound steps cost more than recursive
   doubling's log2(N) full-buffer exchanges. */
static size_t small_message_bytes = 64u << 10;

/* On one host a chunk costs a rendezvous (the MPI library's single-copy handshake) and
   buys no overlap: the receiving core does the copy and then the reduction. The pipeline
   still pays off once the buffer outgrows the caches, where its small staging slots stay
   in L2 while a whole segment would go to memory and back. Measured at np=2 on an AMD
   EPYC (Zen 3, 32 MiB L3; 20-30 rounds alternating in one process, medians): one chunk
   per segment gave 6-9% more busbw than 256 KiB chunks at 1 and 2 MiB, 0-7% more at
   4 MiB, and 11% less at 8 MiB. */
static size_t one_chunk_bytes = 4u << 20;

void coll_set_chunk_bytes(size_t bytes) { chunk_bytes = bytes ? bytes : 1; }
size_t coll_chunk_bytes(void) { return chunk_bytes; }
void coll_set_small_message_bytes(size_t bytes) { small_message_bytes = bytes; }
size_t coll_small_message_bytes(void) { return small_message_bytes; }
void coll_set_one_chunk_bytes(size_t bytes) { one_chunk_bytes = bytes; }
size_t coll_one_chunk_bytes(void) { return one_chunk_bytes; }
