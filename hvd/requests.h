/* hvd/requests.h: the requests in flight (hvd/requests.c). */
#ifndef HVD_REQUESTS_H
#define HVD_REQUESTS_H

#include "hvd/hvd_internal.h"

/* A request's memory (its arrays and results with it), then the in-flight
   table and completion (call those with hvd_g.mu held). */
struct hvd_request *hvd_request_new(hvd_kind_t kind);
void hvd_request_free(struct hvd_request *r);
struct hvd_request *hvd_inflight_find(const char *key);
void hvd_inflight_insert(struct hvd_request *r);   /* counts it in hvd_g.ninflight */
void hvd_inflight_remove(struct hvd_request *r);
void hvd_request_complete(struct hvd_request *r, hvd_status_t s, const char *msg);
/* Frees what a request produced but did not hand over (its results). */
void hvd_request_free_results(struct hvd_request *r);
/* Fails every queued and in-flight request with s/msg and marks the runtime stopped; a
   request the executor holds gets its failure when the executor lets it go. */
void hvd_fail_all(hvd_status_t s, const char *msg);
/* Completes the held requests that hvd_fail_all left to the executor (a last resort
   when it does not come back); returns how many were still held. */
int hvd_fail_held(void);
/* The executor lets go of a request it held: a recorded failure completes it, an
   abandoned one is freed. */
void hvd_request_release(struct hvd_request *r);

#endif /* HVD_REQUESTS_H */
