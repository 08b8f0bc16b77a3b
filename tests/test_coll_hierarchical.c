/* tests/test_coll_hierarchical.c: coll_hierarchical_allreduce against the flat ring.

   Run by tests/test_coll_hierarchical.sh under mpirun (-np 4 and -np 6). On one real
   host the world is cut into fake hosts of HVD_TEST_LOCAL_SIZE consecutive ranks
   (default 2: rank / 2); when the ranks really are on several hosts (network
   namespaces), the hosts come from MPI's shared-memory split. Each case compares the
   hierarchical result with coll_ring_allreduce on the world and with the exactly known
   answer, bit for bit: the inputs are small integers, so every sum is exact; and that
   each rank's cross-host share is its range of coll_hierarchical_split.
   Started alone (size 1, as tests/run.sh does with every test binary) it checks the
   one-rank paths and the argument errors. */
#include "collectives/coll.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int world_rank, world_size;

#define CHECK_RANK() world_rank
#include "tests/check.h"
#include "tests/mpi_same_host.h"

static void mpi_check(int rc, const char *what)
{
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "rank %d: %s failed: %s\n", world_rank, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Input of rank r at element i: a small integer (-5..5), so sums over a few ranks are
   exact in every dtype, including float16. */
static int input_value(int r, size_t i) { return (int)((r * 7 + i * 3 + (i >> 5)) % 11) - 5; }

static void fill(void *buf, size_t count, coll_dtype_t dtype, int r)
{
  for (size_t i = 0; i < count; i++) {
    int v = input_value(r, i);
    switch (dtype) {
    case COLL_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case COLL_FLOAT64: ((double *)buf)[i] = v; break;
    case COLL_FLOAT16: ((uint16_t *)buf)[i] = coll_float_to_half((float)v); break;
    case COLL_INT32: ((int32_t *)buf)[i] = v; break;
    case COLL_INT64: ((int64_t *)buf)[i] = v; break;
    default: break;
    }
  }
}

/* The exact answer for element i, over every world rank. */
static int expected_value(size_t i, coll_op_t op)
{
  int acc = input_value(0, i);
  for (int r = 1; r < world_size; r++) {
    int v = input_value(r, i);
    if (op == COLL_SUM) acc += v;
    else if (op == COLL_MAX) acc = v > acc ? v : acc;
    else if (op == COLL_MIN) acc = v < acc ? v : acc;
  }
  return acc;
}


static void run_case(coll_transport_t *world, coll_transport_t *local,
                     coll_transport_t *cross, size_t count, coll_dtype_t dtype,
                     coll_op_t op, int in_place)
{
  size_t es = coll_dtype_size(dtype), bytes = count * es + 1;
  unsigned char *send = malloc(bytes), *hier = malloc(bytes), *flat = malloc(bytes);
  if (!send || !hier || !flat) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
  fill(send, count, dtype, world_rank);
  memset(hier, 0x5a, bytes);
  memset(flat, 0x3c, bytes);

  coll_status_t s;
  if (in_place) {
    memcpy(hier, send, count * es);
    s = coll_hierarchical_allreduce(local, cross, hier, hier, count, dtype, op);
  } else {
    s = coll_hierarchical_allreduce(local, cross, send, hier, count, dtype, op);
  }
  CHECK(s == COLL_OK, "hierarchical %s count %zu op %d in_place %d: %s (%s)",
        coll_dtype_name(dtype), count, (int)op, in_place, coll_status_string(s), local->error);
  s = coll_ring_allreduce(world, send, flat, count, dtype, op);
  CHECK(s == COLL_OK, "flat ring: %s (%s)", coll_status_string(s), world->error);

  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < count; i++) {
    if (coll_element_get(hier, i, dtype) != (double)expected_value(i, op)) { if (!wrong) first = i; wrong++; }
  }
  CHECK(wrong == 0, "%s count %zu op %d in_place %d: %zu wrong elements, first at %zu: "
        "got %g expected %d", coll_dtype_name(dtype), count, (int)op, in_place, wrong,
        first, coll_element_get(hier, first, dtype), expected_value(first, op));
  CHECK(memcmp(hier, flat, count * es) == 0,
        "%s count %zu op %d: hierarchical differs from the flat ring bit-wise",
        coll_dtype_name(dtype), count, (int)op);
  CHECK(hier[count * es] == 0x5a, "%s count %zu: wrote past the end of recvbuf",
        coll_dtype_name(dtype), count);
  unsigned char *again = malloc(bytes);
  if (!again) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
  fill(again, count, dtype, world_rank);
  CHECK(memcmp(send, again, count * es) == 0, "%s count %zu: sendbuf was modified",
        coll_dtype_name(dtype), count);
  free(again); free(send); free(hier); free(flat);
}

/* The cross transport behind a wrapper that counts the bytes this rank sends over it,
   so that the test sees how much each rank allreduced across hosts. */
typedef struct {
  coll_transport_t *inner;
  size_t sent;
} counting_t;

static coll_status_t counted(coll_transport_t *t, coll_status_t s)
{
  if (s != COLL_OK) snprintf(t->error, sizeof t->error, "%s", ((counting_t *)t->impl)->inner->error);
  return s;
}
static coll_status_t count_isend(coll_transport_t *t, int peer, const void *buf, size_t bytes,
                                 int tag, coll_request_t *req)
{
  counting_t *c = t->impl;
  c->sent += bytes;
  return counted(t, c->inner->ops->isend(c->inner, peer, buf, bytes, tag, req));
}
static coll_status_t count_irecv(coll_transport_t *t, int peer, void *buf, size_t bytes,
                                 int tag, coll_request_t *req)
{
  coll_transport_t *in = ((counting_t *)t->impl)->inner;
  return counted(t, in->ops->irecv(in, peer, buf, bytes, tag, req));
}
static coll_status_t count_wait(coll_transport_t *t, coll_request_t *req)
{
  coll_transport_t *in = ((counting_t *)t->impl)->inner;
  return counted(t, in->ops->wait(in, req));
}
static void count_abandon(coll_transport_t *t, coll_request_t *req)
{
  coll_transport_t *in = ((counting_t *)t->impl)->inner;
  in->ops->abandon(in, req);
}
static void count_destroy(coll_transport_t *t) { free(t); }
static const coll_transport_ops_t counting_ops = {
  .isend = count_isend, .irecv = count_irecv, .wait = count_wait,
  .abandon = count_abandon, .destroy = count_destroy,
};

/* Each rank allreduces across hosts exactly its range of coll_hierarchical_split (the
   layout the device path uses too): the bytes it sends over the cross transport equal
   those of a plain allreduce of cross_count elements there. */
static void check_split_layout(coll_transport_t *local, coll_transport_t *cross)
{
  if (local->size == 1 || cross->size == 1) return;   /* no split on these paths */
  counting_t c = {cross, 0};
  coll_transport_t *wrapped = calloc(1, sizeof *wrapped);
  if (!wrapped) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
  wrapped->rank = cross->rank;
  wrapped->size = cross->size;
  wrapped->one_host = cross->one_host;
  wrapped->ops = &counting_ops;
  wrapped->impl = &c;
  wrapped->lost_peer = -1;
  const size_t counts[] = {7, 11, 1000};
  float buf[1000];
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    size_t count = counts[k];
    fill(buf, count, COLL_FLOAT32, world_rank);
    c.sent = 0;
    coll_status_t s = coll_hierarchical_allreduce(local, wrapped, buf, buf, count,
                                                  COLL_FLOAT32, COLL_SUM);
    CHECK(s == COLL_OK, "count %zu over the counting cross transport: %s (%s)", count,
          coll_status_string(s), local->error);
    size_t got = c.sent;
    coll_hierarchical_split_t split;
    CHECK(coll_hierarchical_split(count, local->size, local->rank, &split), "split refused");
    c.sent = 0;
    if (split.cross_count > 0)
      s = coll_allreduce(wrapped, buf, buf, split.cross_count, COLL_FLOAT32, COLL_SUM);
    CHECK(s == COLL_OK, "reference cross allreduce: %s (%s)", coll_status_string(s),
          wrapped->error);
    CHECK(got == c.sent, "count %zu, local rank %d of %d: sent %zu bytes across hosts, an "
          "allreduce of its split range (%zu elements at %zu) sends %zu", count, local->rank,
          local->size, got, split.cross_count, split.offset, c.sent);
  }
  coll_transport_destroy(wrapped);
}

static void check_argument_errors(coll_transport_t *local, coll_transport_t *cross)
{
  float x[4] = {0};
  coll_status_t s = coll_hierarchical_allreduce(local, cross, NULL, x, 4, COLL_FLOAT32, COLL_SUM);
  CHECK(s == COLL_ERR_ARG, "NULL sendbuf: got %s", coll_status_string(s));
  CHECK(strstr(local->error, "NULL buffer") != NULL, "NULL sendbuf message: '%s'", local->error);
  s = coll_hierarchical_allreduce(local, cross, x, x, 4, (coll_dtype_t)99, COLL_SUM);
  CHECK(s == COLL_ERR_ARG, "bad dtype: got %s", coll_status_string(s));
  CHECK(strstr(local->error, "dtype") != NULL, "bad dtype message: '%s'", local->error);
  s = coll_hierarchical_allreduce(local, cross, x, x, 4, COLL_FLOAT32, (coll_op_t)42);
  CHECK(s == COLL_ERR_ARG, "bad op: got %s", coll_status_string(s));
  s = coll_hierarchical_allreduce(local, NULL, x, x, 4, COLL_FLOAT32, COLL_SUM);
  CHECK(s == COLL_ERR_ARG, "NULL cross transport: got %s", coll_status_string(s));
  s = coll_hierarchical_allreduce(local, cross, NULL, NULL, 0, COLL_FLOAT32, COLL_SUM);
  CHECK(s == COLL_OK, "count 0 with NULL buffers: got %s", coll_status_string(s));
}

int main(void)
{
  int provided = 0;
  mpi_check(MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);

  /* Real hosts first; if every rank shares one host, cut it into fake hosts. */
  MPI_Comm shm;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm),
            "MPI_Comm_split_type");
  int shm_size = 0;
  MPI_Comm_size(shm, &shm_size);
  int host_id, local_rank;
  const char *real = "real";
  if (shm_size == world_size && world_size > 1) {
    const char *env = getenv("HVD_TEST_LOCAL_SIZE");
    int per_host = env ? atoi(env) : 2;
    if (per_host < 1 || world_size % per_host != 0) {
      if (world_rank == 0)
        fprintf(stderr, "HVD_TEST_LOCAL_SIZE=%d must divide the world size %d\n", per_host,
                world_size);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    host_id = world_rank / per_host;
    local_rank = world_rank % per_host;
    real = "fake";
  } else {
    MPI_Comm_rank(shm, &local_rank);
    /* Host id: the world rank of the host's local rank 0, agreed within the host. */
    host_id = world_rank;
    mpi_check(MPI_Bcast(&host_id, 1, MPI_INT, 0, shm), "MPI_Bcast");
  }
  MPI_Comm_free(&shm);
  MPI_Comm local_comm, cross_comm;
  mpi_check(MPI_Comm_split(MPI_COMM_WORLD, host_id, world_rank, &local_comm), "split local");
  mpi_check(MPI_Comm_split(MPI_COMM_WORLD, local_rank, world_rank, &cross_comm), "split cross");

  coll_transport_t *world = NULL, *local = NULL, *cross = NULL;
  MPI_Comm wcomm = MPI_COMM_WORLD;
  coll_status_t s = coll_transport_mpi_create(&wcomm, &world);
  if (s == COLL_OK) s = coll_transport_mpi_create(&local_comm, &local);
  if (s == COLL_OK) s = coll_transport_mpi_create(&cross_comm, &cross);
  if (s != COLL_OK) {
    fprintf(stderr, "rank %d: coll_transport_mpi_create: %s\n", world_rank, coll_status_string(s));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (world_rank == 0)
    printf("world %d = %d %s hosts x %d local ranks\n", world_size, cross->size, real,
           local->size);

  check_argument_errors(local, cross);
  check_split_layout(local, cross);
  /* one_host against the host names (netns hosts each have their own). */
  const int world_one = mpi_same_host(MPI_COMM_WORLD), local_one = mpi_same_host(local_comm),
            cross_one = mpi_same_host(cross_comm);
  CHECK(world->one_host == world_one, "world: one_host %d, host names %d", world->one_host,
        world_one);
  CHECK(local->one_host == local_one, "local: one_host %d, host names %d", local->one_host,
        local_one);
  CHECK(cross->one_host == cross_one, "cross: one_host %d, host names %d", cross->one_host,
        cross_one);

  /* Lengths: 0, 1, fewer than the local size, not divisible by it, and large enough
     with a small pipeline chunk to reach the multi-chunk paths of every level. */
  size_t counts[] = {0, 1, 2, 3, 7, 1000, 65537};
  coll_dtype_t dtypes[] = {COLL_FLOAT32, COLL_FLOAT64, COLL_FLOAT16, COLL_INT32, COLL_INT64};
  coll_op_t ops[] = {COLL_SUM, COLL_MAX, COLL_MIN};
  coll_set_chunk_bytes(4096);
  /* Pass 0 pipelines every ring; pass 1 (the default) sends a segment whole on one host
     (every level here on fake hosts; the local level on netns hosts). */
  const size_t one_chunk = coll_one_chunk_bytes();
  for (int pass = 0; pass < 2; pass++) {
    coll_set_one_chunk_bytes(pass ? one_chunk : 0);
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
          for (int in_place = 0; in_place < 2; in_place++)
            run_case(world, local, cross, counts[c], dtypes[d], ops[o], in_place);
  }

  coll_transport_destroy(cross);
  coll_transport_destroy(local);
  coll_transport_destroy(world);
  MPI_Comm_free(&local_comm);
  MPI_Comm_free(&cross_comm);

  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) printf("%s: %d failures over all ranks\n", total ? "FAIL" : "PASS", total);
  MPI_Finalize();
  return total ? 1 : 0;
}
