/* hvd/api_ex.c: the _ex forms of the collectives: the plain form with this call's
   options (hvd/call_options.c) in force. */
#include "hvd/call_options.h"
#include "hvd/hvd_internal.h"

hvd_status_t hvd_allreduce_async_ex(const char *name, const void *sendbuf, void *recvbuf,
                                    size_t count, hvd_dtype_t dtype, hvd_op_t op,
                                    const hvd_options_t *opts, hvd_request_t *req) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_allreduce");
  if (s == HVD_OK) s = hvd_call_options_check_dtype(dtype, "hvd_allreduce");
  if (s == HVD_OK) s = hvd_allreduce_async(name, sendbuf, recvbuf, count, dtype, op, req);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_allreduce_ex(const char *name, const void *sendbuf, void *recvbuf,
                              size_t count, hvd_dtype_t dtype, hvd_op_t op,
                              const hvd_options_t *opts) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_allreduce");
  if (s == HVD_OK) s = hvd_call_options_check_dtype(dtype, "hvd_allreduce");
  if (s == HVD_OK) s = hvd_allreduce(name, sendbuf, recvbuf, count, dtype, op);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_broadcast_async_ex(const char *name, void *buf, size_t count,
                                    hvd_dtype_t dtype, int root, const hvd_options_t *opts,
                                    hvd_request_t *req) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_broadcast");
  if (s == HVD_OK) s = hvd_broadcast_async(name, buf, count, dtype, root, req);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_broadcast_ex(const char *name, void *buf, size_t count, hvd_dtype_t dtype,
                              int root, const hvd_options_t *opts) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_broadcast");
  if (s == HVD_OK) s = hvd_broadcast(name, buf, count, dtype, root);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_allgather_ex(const char *name, const void *sendbuf, size_t count,
                              hvd_dtype_t dtype, void **recvbuf, size_t *recvcount,
                              const hvd_options_t *opts) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_allgather");
  if (s == HVD_OK) s = hvd_allgather(name, sendbuf, count, dtype, recvbuf, recvcount);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_alltoall_async_ex(const char *name, const void *sendbuf, size_t count,
                                   const size_t *splits, hvd_dtype_t dtype, void **recvbuf,
                                   size_t *recvcount, size_t *recv_splits,
                                   const hvd_options_t *opts, hvd_request_t *req) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_alltoall");
  if (s == HVD_OK)
    s = hvd_alltoall_async(name, sendbuf, count, splits, dtype, recvbuf, recvcount,
                           recv_splits, req);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_alltoall_ex(const char *name, const void *sendbuf, size_t count,
                             const size_t *splits, hvd_dtype_t dtype, void **recvbuf,
                             size_t *recvcount, size_t *recv_splits,
                             const hvd_options_t *opts) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_alltoall");
  if (s == HVD_OK)
    s = hvd_alltoall(name, sendbuf, count, splits, dtype, recvbuf, recvcount, recv_splits);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_reducescatter_async_ex(const char *name, const void *sendbuf, size_t count,
                                        hvd_dtype_t dtype, hvd_op_t op, void *recvbuf,
                                        size_t *recvcount, const hvd_options_t *opts,
                                        hvd_request_t *req) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_reducescatter");
  if (s == HVD_OK) s = hvd_call_options_check_dtype(dtype, "hvd_reducescatter");
  if (s == HVD_OK)
    s = hvd_reducescatter_async(name, sendbuf, count, dtype, op, recvbuf, recvcount, req);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_reducescatter_ex(const char *name, const void *sendbuf, size_t count,
                                  hvd_dtype_t dtype, hvd_op_t op, void *recvbuf,
                                  size_t *recvcount, const hvd_options_t *opts) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_reducescatter");
  if (s == HVD_OK) s = hvd_call_options_check_dtype(dtype, "hvd_reducescatter");
  if (s == HVD_OK) s = hvd_reducescatter(name, sendbuf, count, dtype, op, recvbuf, recvcount);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_grouped_allreduce_async_ex(size_t n, const char *const *names,
                                            const void *const *sendbufs,
                                            void *const *recvbufs, const size_t *counts,
                                            hvd_dtype_t dtype, hvd_op_t op,
                                            const hvd_options_t *opts, hvd_request_t *req) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_grouped_allreduce");
  if (s == HVD_OK) s = hvd_call_options_check_dtype(dtype, "hvd_grouped_allreduce");
  if (s == HVD_OK)
    s = hvd_grouped_allreduce_async(n, names, sendbufs, recvbufs, counts, dtype, op, req);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_grouped_allreduce_ex(size_t n, const char *const *names,
                                      const void *const *sendbufs, void *const *recvbufs,
                                      const size_t *counts, hvd_dtype_t dtype, hvd_op_t op,
                                      const hvd_options_t *opts) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_grouped_allreduce");
  if (s == HVD_OK) s = hvd_call_options_check_dtype(dtype, "hvd_grouped_allreduce");
  if (s == HVD_OK)
    s = hvd_grouped_allreduce(n, names, sendbufs, recvbufs, counts, dtype, op);
  return hvd_call_options_leave(s);
}

hvd_status_t hvd_barrier_ex(const hvd_options_t *opts) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_barrier");
  if (s == HVD_OK) s = hvd_barrier();
  return hvd_call_options_leave(s);
}

/* Join within the set (Horovod's join(process_set)): the set's names go on with this
   rank's zeros until every rank of the set has joined; other sets are not affected. */
hvd_status_t hvd_join_ex(int *last_rank, const hvd_options_t *opts) {
  hvd_status_t s = hvd_call_options_enter(opts, "hvd_join");
  if (s == HVD_OK) s = hvd_join(last_rank);
  return hvd_call_options_leave(s);
}
