/* hvd/shard.c: how a two-level allreduce of device memory cuts a buffer among the L
   local ranks of a host (Horovod's NCCLHierarchicalAllreduce). Plain C, so the layout is
   tested on the CPU (tests/test_hvd_shard.c); device.c issues the NCCL calls from it.

   count = 11, L = 4: per_rank = 2, remainder = 3 (owned by local rank L-1 = 3)

       element     0 1 | 2 3 | 4 5 | 6 7 | 8 9 10
       shard of    l0  | l1  | l2  | l3  | l3 (remainder)
       NCCL        reduce-scatter (2 each)  | reduce to l3, later broadcast from l3
       cross-host  l0: [0,2) l1: [2,4) l2: [4,6) l3: [6,11)   (one contiguous range each)

   The remainder goes to the last local rank because its shard ends where the remainder
   begins, so it allreduces one contiguous range across hosts and no padding is needed.
   Every rank of a cross group has the same local rank, hence the same range length. */
#include "hvd/hvd_internal.h"

int hvd_shard_plan(size_t count, int local_size, int local_rank, hvd_shard_plan_t *p) {
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
