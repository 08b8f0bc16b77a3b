/* collectives/hierarchical.c: two-level allreduce for ranks spread over several hosts.

   With H hosts of L ranks each, a flat ring moves 2(N-1)/N of the buffer over every
   link, and with N = H*L ranks in one ring, L of the N ring hops cross a host boundary
   on every host, all sharing that host's one network link. The hierarchical schedule
   sends only 1/L of the buffer per rank over the network:

     host A: a0 a1      host B: b0 b1        (L = 2, H = 2, buffer cut in L segments)

     1. intra-host reduce-scatter (shared memory, fast):
          a0 holds sum_A(seg0)   a1 holds sum_A(seg1)
          b0 holds sum_B(seg0)   b1 holds sum_B(seg1)
     2. cross-host allreduce of the segment, among ranks with the same local rank
        (a0<->b0 for seg0, a1<->b1 for seg1; the L transfers run at the same time):
          a0, b0 hold sum(seg0)  a1, b1 hold sum(seg1)
     3. intra-host allgather: every rank gets seg0 and seg1 of the full sum.

   The segments are coll_hierarchical_split's, the layout the device path (hvd/device.c)
   issues as NCCL calls too:

   count = 11, L = 4: per_rank = 2, remainder = 3 (owned by local rank L-1 = 3)

       element     0 1 | 2 3 | 4 5 | 6 7 | 8 9 10
       shard of    l0  | l1  | l2  | l3  | l3 (remainder)
       NCCL        reduce-scatter (2 each)  | reduce to l3, later broadcast from l3
       host ring   reduce-scatter of the counts 2, 2, 2, 5
       cross-host  l0: [0,2) l1: [2,4) l2: [4,6) l3: [6,11)   (one contiguous range each)

   The remainder goes to the last local rank because its shard ends where the remainder
   begins: one contiguous range per rank, no padding, and NCCL's equal-count
   reduce-scatter covers the shards. Every rank of a cross group has the same local
   rank, hence the same range length.

   For integer-valued inputs every partial sum is exact, so the result equals the flat
   ring's bit for bit; for general floats only the order of additions differs. */
#include "collectives/coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static coll_status_t fail_arg(coll_transport_t *t, const char *msg)
{
  snprintf(t->error, sizeof t->error, "coll_hierarchical_allreduce: %s", msg);
  return COLL_ERR_ARG;
}

/* Copies a failing transport's message to the other one, so that the caller, which
   reads local->error, sees what went wrong on whichever level failed. */
static coll_status_t from_cross(coll_transport_t *local, coll_transport_t *cross,
                                coll_status_t s)
{
  if (s != COLL_OK)
    snprintf(local->error, sizeof local->error, "cross-host allreduce: %.220s", cross->error);
  return s;
}

int coll_hierarchical_split(size_t count, int local_size, int local_rank,
                            coll_hierarchical_split_t *p)
{
  if (p == NULL || local_size <= 0 || local_rank < 0 || local_rank >= local_size) return 0;
  size_t L = (size_t)local_size;
  p->per_rank = count / L;
  p->offset = (size_t)local_rank * p->per_rank;
  p->remainder_offset = L * p->per_rank;
  p->remainder = count - p->remainder_offset;
  p->remainder_root = local_size - 1;
  p->cross_count = p->per_rank + (local_rank == p->remainder_root ? p->remainder : 0);
  return 1;
}

coll_status_t coll_hierarchical_allreduce(coll_transport_t *local, coll_transport_t *cross,
                                          const void *sendbuf, void *recvbuf, size_t count,
                                          coll_dtype_t dtype, coll_op_t op)
{
  if (local == NULL || cross == NULL) {
    if (local != NULL) return fail_arg(local, "cross transport is NULL");
    if (cross != NULL) return fail_arg(cross, "local transport is NULL");
    return COLL_ERR_ARG;
  }
  size_t esize = coll_dtype_size(dtype);
  if (esize == 0) return fail_arg(local, "invalid dtype");
  if (op != COLL_SUM && op != COLL_MIN && op != COLL_MAX && op != COLL_PRODUCT)
    return fail_arg(local, "invalid op");
  if (count > 0 && (sendbuf == NULL || recvbuf == NULL))
    return fail_arg(local, "NULL buffer with count > 0");
  if (count == 0) return COLL_OK;

  /* One rank per host: the whole job is the cross level. One host: a plain ring. */
  if (local->size == 1)
    return from_cross(local, cross, coll_allreduce(cross, sendbuf, recvbuf, count, dtype, op));
  if (cross->size == 1)
    return coll_allreduce(local, sendbuf, recvbuf, count, dtype, op);

  int L = local->size, l = local->rank;
  size_t *counts = malloc((size_t)L * sizeof *counts);
  if (counts == NULL) {
    snprintf(local->error, sizeof local->error,
             "coll_hierarchical_allreduce: out of memory for %d counts", L);
    return COLL_ERR_NO_MEMORY;
  }
  coll_hierarchical_split_t split;
  for (int r = 0; r < L; r++) {
    (void)coll_hierarchical_split(count, L, r, &split);   /* 0 <= r < L: valid */
    counts[r] = split.cross_count;
  }
  (void)coll_hierarchical_split(count, L, l, &split);
  size_t offset = split.offset, mine = split.cross_count;

  /* Out of place, this rank's segment of recvbuf is free until the allgather fills the
     rest, so it can hold the segment in between. In place, the reduce-scatter still
     reads all of sendbuf (= recvbuf) when it writes, so the segment needs its own buffer. */
  unsigned char *segment = NULL, *scratch = NULL;
  if (sendbuf == recvbuf) {
    scratch = malloc(mine > 0 ? mine * esize : 1);
    if (scratch == NULL) {
      free(counts);
      snprintf(local->error, sizeof local->error,
               "coll_hierarchical_allreduce: out of memory for a %zu-byte segment",
               mine * esize);
      return COLL_ERR_NO_MEMORY;
    }
    segment = scratch;
  } else {
    segment = (unsigned char *)recvbuf + offset * esize;
  }

  coll_status_t s = coll_reduce_scatter(local, sendbuf, segment, counts, dtype, op);
  /* Every rank of a cross group has the same local rank, hence the same segment length:
     a zero-length segment (count < L) is skipped by all of them together. */
  if (s == COLL_OK && mine > 0)
    s = from_cross(local, cross, coll_allreduce(cross, segment, segment, mine, dtype, op));
  if (s == COLL_OK)
    s = coll_allgatherv(local, segment, recvbuf, counts, dtype);

  free(scratch);
  free(counts);
  return s;
}
