/* hvd/control.c: control messages on hvd_g.ctrl (hvd/control.h). A send copies its bytes
   and completes later (hvd_control_progress), so the loop never waits for a peer to
   receive; a poll never waits for a message to come. Every receive tells the liveness
   checks that its sender is alive. */
#include "hvd/control.h"
#include "hvd/hvd_internal.h"
#include "hvd/liveness.h"
#include "hvd/negotiation.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define CONTROL_TAG 1

static void mpi_error_text(int err, char *buf, size_t len) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(err, s, &n) != MPI_SUCCESS) snprintf(s, sizeof(s), "error %d", err);
  snprintf(buf, len, "%s", s);
}

/* Sends len bytes (copied) to dest without blocking; 0 on failure (msg filled). */
int hvd_control_send(hvd_control_t *c, int dest, const void *data, size_t len, char *msg,
                     size_t msglen) {
  if (c->nsends == c->cap_sends) {
    int nc = c->cap_sends ? c->cap_sends * 2 : 16;
    hvd_control_send_t *p = realloc(c->sends, (size_t)nc * sizeof(*p));
    if (!p) { snprintf(msg, msglen, "rank %d: out of memory", hvd_g.rank); return 0; }
    c->sends = p;
    c->cap_sends = nc;
  }
  char *copy = malloc(len ? len : 1);
  if (!copy) { snprintf(msg, msglen, "rank %d: out of memory", hvd_g.rank); return 0; }
  memcpy(copy, data, len);
  hvd_control_send_t *ps = &c->sends[c->nsends];
  int err = MPI_Isend(copy, (int)len, MPI_BYTE, dest, CONTROL_TAG, hvd_g.ctrl, &ps->req);
  if (err != MPI_SUCCESS) {
    char e[MPI_MAX_ERROR_STRING];
    mpi_error_text(err, e, sizeof(e));
    snprintf(msg, msglen, "rank %d: MPI_Isend of %zu control bytes to rank %d failed: %s",
             hvd_g.rank, len, dest, e);
    free(copy);
    return 0;
  }
  ps->buf = copy;
  c->nsends++;
  return 1;
}

int hvd_control_send_msg(hvd_control_t *c, int dest, int type, int status, const char *text,
                         char *msg, size_t msglen) {
  hvd_buf_t b = {0};
  hvd_msg_header_t h = {type, 0, hvd_g.rank, status};
  int ok = hvd_buf_put(&b, &h, sizeof(h)) && (!text || hvd_buf_put(&b, text, strlen(text)));
  ok = ok && hvd_control_send(c, dest, b.p, b.len, msg, msglen);
  hvd_buf_free(&b);
  return ok;
}

/* Completes finished sends; with all set, waits for every one until deadline. */
void hvd_control_progress(hvd_control_t *c, int all, double deadline_us) {
  for (;;) {
    int j = 0;
    for (int i = 0; i < c->nsends; i++) {
      int done = 0;
      if (MPI_Test(&c->sends[i].req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 1;
      if (done) free(c->sends[i].buf);
      else c->sends[j++] = c->sends[i];
    }
    c->nsends = j;
    if (!all || c->nsends == 0) return;
    if (util_now_us() > deadline_us) {
      /* A peer that never receives: let MPI finish or drop them; the buffers must stay
         valid while MPI may still read them, so they are not freed. */
      for (int i = 0; i < c->nsends; i++) MPI_Request_free(&c->sends[i].req);
      c->nsends = 0;
      return;
    }
    sched_yield();
  }
}

/* Receives one control message if one is there: 1 with *src, 0 none, -1 error. */
int hvd_control_poll(hvd_control_t *c, int *src, char *msg, size_t msglen) {
  int flag = 0;
  MPI_Status st;
  int err = MPI_Iprobe(MPI_ANY_SOURCE, CONTROL_TAG, hvd_g.ctrl, &flag, &st);
  if (err == MPI_SUCCESS && !flag) return 0;
  int count = 0;
  if (err == MPI_SUCCESS) err = MPI_Get_count(&st, MPI_BYTE, &count);
  if (err == MPI_SUCCESS && (size_t)count > c->in.cap) {
    char *p = realloc(c->in.p, (size_t)count);
    if (!p) {
      snprintf(msg, msglen, "rank %d: out of memory receiving %d control bytes",
               hvd_g.rank, count);
      return -1;
    }
    c->in.p = p;
    c->in.cap = (size_t)count;
  }
  if (err == MPI_SUCCESS)
    err = MPI_Recv(c->in.p, count, MPI_BYTE, st.MPI_SOURCE, CONTROL_TAG, hvd_g.ctrl,
                   MPI_STATUS_IGNORE);
  if (err != MPI_SUCCESS) {
    char e[MPI_MAX_ERROR_STRING];
    mpi_error_text(err, e, sizeof(e));
    snprintf(msg, msglen, "rank %d: receiving a control message failed: %s", hvd_g.rank, e);
    return -1;
  }
  c->in.len = (size_t)count;
  *src = st.MPI_SOURCE;
  hvd_liveness_heard(*src);
  if (c->in.len < sizeof(hvd_msg_header_t)) {
    snprintf(msg, msglen, "rank %d: control message of %d bytes from rank %d is too short",
             hvd_g.rank, count, *src);
    return -1;
  }
  return 1;
}

void hvd_control_free(hvd_control_t *c) {
  free(c->sends);
  c->sends = NULL;
  c->nsends = c->cap_sends = 0;
  hvd_buf_free(&c->in);
}
