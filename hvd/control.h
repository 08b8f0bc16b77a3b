/* hvd/control.h: the control messages of the background loop (requests to the
   coordinator, response lists, shutdown notices) on hvd_g.ctrl: sends that never block,
   and a poll that receives one message if one is there. Background loop only. */
#ifndef HVD_CONTROL_H
#define HVD_CONTROL_H

#include "hvd/hvd_internal.h"
#include "hvd/negotiation.h"

#include <mpi.h>
#include <stddef.h>

typedef struct {
  MPI_Request req;
  char *buf;                         /* the copy MPI sends from                        */
} hvd_control_send_t;

typedef struct {
  hvd_control_send_t *sends;         /* started, not yet known complete               */
  int nsends, cap_sends;
  hvd_buf_t in;                      /* the last message hvd_control_poll received     */
} hvd_control_t;

/* Sends len bytes (copied) to dest without blocking; 0 on failure (msg filled). */
int hvd_control_send(hvd_control_t *c, int dest, const void *data, size_t len, char *msg,
                     size_t msglen);
/* Sends a header of type and status from this rank, then text (NULL: none). */
int hvd_control_send_msg(hvd_control_t *c, int dest, int type, int status, const char *text,
                         char *msg, size_t msglen);
/* Completes finished sends; with all set, waits for every one until deadline_us (then
   gives the rest up to MPI: a peer that never receives). */
void hvd_control_progress(hvd_control_t *c, int all, double deadline_us);
/* Receives one control message if one is there: 1 with *src (the message in c->in, at
   least a header long), 0 none, -1 error (msg filled). */
int hvd_control_poll(hvd_control_t *c, int *src, char *msg, size_t msglen);
/* Frees the state; call hvd_control_progress(c, 1, ...) first. */
void hvd_control_free(hvd_control_t *c);

#endif /* HVD_CONTROL_H */
