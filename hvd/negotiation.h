/* hvd/negotiation.h: the wire format of the control messages and rank 0's
   coordinator, which also decides the fusion plan (hvd/negotiation.c). */
#ifndef HVD_NEGOTIATION_H
#define HVD_NEGOTIATION_H

#include "hvd/hvd_internal.h"

typedef struct { char *p; size_t len, cap; } hvd_buf_t;
int hvd_buf_put(hvd_buf_t *b, const void *data, size_t n);
void hvd_buf_free(hvd_buf_t *b);

enum { HVD_MSG_REQUESTS = 1, HVD_MSG_RESPONSES, HVD_MSG_SHUTDOWN_REQ, HVD_MSG_SHUTDOWN,
       HVD_MSG_SHUTDOWN_ACK };
typedef struct { int32_t type, n, origin, status; } hvd_msg_header_t;

int hvd_encode_request(hvd_buf_t *b, const struct hvd_request *r);
typedef struct hvd_coordinator hvd_coordinator_t;
hvd_coordinator_t *hvd_coordinator_create(int size);
void hvd_coordinator_free(hvd_coordinator_t *c);
/* Adds the n requests of one REQUESTS payload from rank; returns 0 on a malformed
   payload. */
int hvd_coordinator_add(hvd_coordinator_t *c, int rank, const char *payload, size_t len,
                        int n, double now_us);
/* Whether responses should go out now (HVD_CYCLE_TIME batching). */
int hvd_coordinator_should_emit(hvd_coordinator_t *c, double now_us);
/* Moves every ready name into one RESPONSES message (header included) in *msg;
   returns the number of responses. */
int hvd_coordinator_emit(hvd_coordinator_t *c, hvd_buf_t *msg);
/* Stall inspector: warns on stderr; returns 1 (and fills msg) when the stall-shutdown
   time has passed. */
int hvd_coordinator_check_stalls(hvd_coordinator_t *c, double now_us, char *msg,
                                 size_t len);
/* Parses a RESPONSES payload into resp[0..n) (pointing into payload). */
int hvd_decode_responses(const char *payload, size_t len, int n, int size,
                         hvd_response_t *resp);
/* The fusion plan (Horovod's FuseResponses) of n items in list order: order[] is the
   execution order (indices into items), fuse[k] = 1 when order[k] runs in the same
   collective as order[k-1]. fuse needs 2n bytes (the second half is scratch). */
typedef struct {
  hvd_kind_t kind;
  hvd_dtype_t dtype;
  hvd_op_t op;
  int on_device;
  int64_t count;
  hvd_status_t status;
  int32_t set;                 /* only the same process set and factors fuse */
  double prescale, postscale;
} hvd_plan_item_t;
void hvd_plan(const hvd_plan_item_t *items, int n, size_t threshold, int *order,
              unsigned char *fuse);
/* Appends the wire record of r (as the coordinator emits it) with fuse_with_prev. */
int hvd_encode_response(hvd_buf_t *b, const hvd_response_t *r, int fuse_with_prev);
/* rank 0, for the timeline: first-seen and ready times of the responses of the last
   emit, two per response in their order. */
const double *hvd_coordinator_emitted_times(const hvd_coordinator_t *c);

/* Count i of an allgather response. */
int64_t hvd_response_count(const hvd_response_t *r, int i);

#endif /* HVD_NEGOTIATION_H */
