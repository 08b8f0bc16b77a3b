/* test_coll_hierarchical_split: the layout of the two-level allreduce
   (coll_hierarchical_split, collectives/hierarchical.c), which the host path
   (coll_hierarchical_allreduce) and the device path (hvd/device.c) share, on the CPU.
   Besides the fields for known cases, it runs the whole schedule device.c issues (reduce-scatter, reduce of the remainder to the last
   local rank, cross-host allreduce of one contiguous range per rank, allgather, broadcast
   of the remainder) on plain arrays with NCCL's semantics, for 1..3 hosts, 1..9 local
   ranks, every count up to 3L+2 and a larger one, in place and out of place, SUM and
   AVERAGE (divided by the world size once), and checks every element of every rank. */
#include "collectives/coll.h"
#include "tests/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void expect_plan(size_t count, int L, int l, size_t per, size_t off, size_t rem,
                        size_t rem_off, size_t cross) {
  coll_hierarchical_split_t p;
  CHECK(coll_hierarchical_split(count, L, l, &p), "plan(%zu, %d, %d) refused", count, L, l);
  CHECK(p.per_rank == per && p.offset == off && p.remainder == rem &&
            p.remainder_offset == rem_off && p.remainder_root == L - 1 &&
            p.cross_count == cross,
        "plan(%zu, %d, %d) = per %zu off %zu rem %zu rem_off %zu root %d cross %zu, want "
        "%zu %zu %zu %zu %d %zu", count, L, l, p.per_rank, p.offset, p.remainder,
        p.remainder_offset, p.remainder_root, p.cross_count, per, off, rem, rem_off, L - 1,
        cross);
}

/* One simulated job: H hosts of L ranks, count elements; in_place: sendbuf == recvbuf. */
static void simulate(int H, int L, size_t count, int in_place, int average) {
  int N = H * L;
  double **send = calloc((size_t)N, sizeof *send), **recv = calloc((size_t)N, sizeof *recv);
  double *want = calloc(count + 1, sizeof *want);
  for (int r = 0; r < N; r++) {
    send[r] = malloc((count + 1) * sizeof(double));
    for (size_t i = 0; i < count; i++) {
      send[r][i] = (double)((r + 1) * 1000 + (int)(i % 997));
      want[i] += send[r][i];
    }
    if (in_place) {
      recv[r] = send[r];
    } else {
      recv[r] = malloc((count + 1) * sizeof(double));
      for (size_t i = 0; i < count; i++) recv[r][i] = NAN;   /* never-written shows */
    }
  }
  if (average)
    for (size_t i = 0; i < count; i++) want[i] /= N;
  double *tmp = malloc((count + 1) * sizeof(double));
  for (int h = 0; h < H; h++) {
    double **s = send + h * L, **d = recv + h * L;
    coll_hierarchical_split_t p0;
    coll_hierarchical_split(count, L, 0, &p0);
    /* reduce-scatter: every rank's [l*per, (l+1)*per) gets the host's sum */
    for (int l = 0; l < L; l++) {
      coll_hierarchical_split_t p;
      coll_hierarchical_split(count, L, l, &p);
      CHECK(p.offset == (size_t)l * p0.per_rank, "shard offset of local rank %d", l);
      for (size_t i = 0; i < p.per_rank; i++) {
        tmp[p.offset + i] = 0;
        for (int k = 0; k < L; k++) tmp[p.offset + i] += s[k][p.offset + i];
      }
    }
    /* reduce of the remainder to the root (computed before anything is written: NCCL's
       in-place reduce-scatter reads all inputs first as far as the result goes) */
    for (size_t i = p0.remainder_offset; i < count; i++) {
      tmp[i] = 0;
      for (int k = 0; k < L; k++) tmp[i] += s[k][i];
    }
    for (int l = 0; l < L; l++) {
      coll_hierarchical_split_t p;
      coll_hierarchical_split(count, L, l, &p);
      memcpy(d[l] + p.offset, tmp + p.offset, p.per_rank * sizeof(double));
      if (l == p.remainder_root)
        memcpy(d[l] + p.remainder_offset, tmp + p.remainder_offset,
               p.remainder * sizeof(double));
    }
  }
  /* cross-host allreduce among the ranks of local rank l, over [offset, offset+cross) */
  for (int l = 0; l < L; l++) {
    coll_hierarchical_split_t p;
    coll_hierarchical_split(count, L, l, &p);
    for (size_t i = 0; i < p.cross_count; i++) {
      double sum = 0;
      for (int h = 0; h < H; h++) sum += recv[h * L + l][p.offset + i];
      if (average) sum /= N;
      for (int h = 0; h < H; h++) recv[h * L + l][p.offset + i] = sum;
    }
  }
  /* allgather of the shards, broadcast of the remainder from the root */
  for (int h = 0; h < H; h++) {
    double **d = recv + h * L;
    for (int l = 0; l < L; l++) {
      coll_hierarchical_split_t p;
      coll_hierarchical_split(count, L, l, &p);
      for (int k = 0; k < L; k++)
        if (k != l) memcpy(d[k] + p.offset, d[l] + p.offset, p.per_rank * sizeof(double));
      if (l == p.remainder_root)
        for (int k = 0; k < L; k++)
          if (k != l)
            memcpy(d[k] + p.remainder_offset, d[l] + p.remainder_offset,
                   p.remainder * sizeof(double));
    }
  }
  int bad = 0;
  for (int r = 0; r < N && !bad; r++)
    for (size_t i = 0; i < count && !bad; i++)
      if (!(recv[r][i] == want[i])) {
        CHECK(0, "H=%d L=%d count=%zu %s %s: rank %d element %zu is %g, want %g", H, L,
              count, in_place ? "in place" : "out of place", average ? "average" : "sum",
              r, i, recv[r][i], want[i]);
        bad = 1;
      }
  for (int r = 0; r < N; r++) {
    if (!in_place) free(recv[r]);
    free(send[r]);
  }
  free(send);
  free(recv);
  free(want);
  free(tmp);
}

int main(void) {
  /* the example of collectives/hierarchical.c's comment */
  expect_plan(11, 4, 0, 2, 0, 3, 8, 2);
  expect_plan(11, 4, 1, 2, 2, 3, 8, 2);
  expect_plan(11, 4, 3, 2, 6, 3, 8, 5);
  /* fewer elements than local ranks: only the root has anything to send across hosts */
  expect_plan(3, 4, 0, 0, 0, 3, 0, 0);
  expect_plan(3, 4, 3, 0, 0, 3, 0, 3);
  expect_plan(0, 4, 3, 0, 0, 0, 0, 0);
  /* divisible, and one local rank (the whole buffer is the shard) */
  expect_plan(12, 4, 2, 3, 6, 0, 12, 3);
  expect_plan(7, 1, 0, 7, 0, 0, 7, 7);
  /* invalid arguments */
  coll_hierarchical_split_t p;
  CHECK(!coll_hierarchical_split(5, 0, 0, &p), "local_size 0 accepted");
  CHECK(!coll_hierarchical_split(5, 2, 2, &p), "local_rank 2 of 2 accepted");
  CHECK(!coll_hierarchical_split(5, 2, -1, &p), "local_rank -1 accepted");
  CHECK(!coll_hierarchical_split(5, 2, 0, NULL), "NULL plan accepted");

  /* cross ranges: disjoint, contiguous, covering [0, count) */
  for (int L = 1; L <= 9; L++)
    for (size_t count = 0; count <= 40; count++) {
      size_t next = 0;
      for (int l = 0; l < L; l++) {
        coll_hierarchical_split(count, L, l, &p);
        if (p.cross_count == 0) continue;
        CHECK(p.offset == next, "L=%d count=%zu: local rank %d starts at %zu, want %zu", L,
              count, l, p.offset, next);
        next = p.offset + p.cross_count;
      }
      CHECK(next == count, "L=%d count=%zu: cross ranges end at %zu", L, count, next);
    }

  for (int H = 1; H <= 3; H++)
    for (int L = 1; L <= 9; L++) {
      for (size_t count = 0; count <= (size_t)(3 * L + 2); count++)
        for (int in_place = 0; in_place < 2; in_place++)
          for (int avg = 0; avg < 2; avg++) simulate(H, L, count, in_place, avg);
      simulate(H, L, 100003, 0, 1);
      simulate(H, L, 100003, 1, 0);
    }
  if (failures) return 1;
  printf("coll_hierarchical_split: layouts and simulated schedules correct\n");
  return 0;
}
