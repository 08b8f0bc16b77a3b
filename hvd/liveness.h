/* hvd/liveness.h: heartbeats, failure notices and the census (hvd/liveness.c). */
#ifndef HVD_LIVENESS_H
#define HVD_LIVENESS_H

#include "hvd/hvd_internal.h"

/* Background thread; docs at the top of hvd/liveness.c. */
hvd_status_t hvd_liveness_init(void);
void hvd_liveness_free(void);
void hvd_liveness_heard(int src);          /* a control message came from src          */
/* Receives and sends heartbeats (at most every 10 ms); 1 (reason filled) when a partner
   has been silent for HVD_PEER_TIMEOUT_SECONDS. */
int hvd_liveness_tick(double now_us, char *reason, size_t len);
/* The transports' interrupt hook: 1 when the runtime failed or a notice waits. */
int hvd_liveness_interrupt(void *arg);
/* Asks every rank whether it is alive: HVD_ERR_PEER_LOST with msg naming the ranks
   that did not answer (and their hosts), or HVD_ERR_TIMEOUT when all did. */
hvd_status_t hvd_liveness_census(const char *reason, char *msg, size_t len);
/* A pending notice: 0 none; 1 with the status and message this rank must stop with (a
   CENSUS is joined first). */
int hvd_liveness_take_notice(hvd_status_t *s, char *msg, size_t len);
void hvd_liveness_send_stop(hvd_status_t s, const char *msg);
/* 1 when this process itself was stopped longer than the peer timeout: the others have
   given it up, so it neither answers censuses nor sends notices. */
int hvd_liveness_given_up(void);
/* How long rank (a partner) has given no sign of life (0 before init). */
double hvd_liveness_silent_us(int rank, double now_us);
const char *hvd_host_of(int rank);

#endif /* HVD_LIVENESS_H */
