/* hvd/background.c: the background thread, the only thread that talks to peers.

   One loop iteration:
     1. take the requests user threads queued; send them to the coordinator (rank 0
        adds its own directly);
     2. receive control messages: requests (rank 0), response lists (workers),
        shutdown notices;
     3. rank 0: when names are ready everywhere, send the ordered response list and run
        it; the stall inspector;
     4. nothing to do: wait. While this rank has requests in flight a peer's message is
        expected soon, so spin briefly (yielding the core), then sleep in short growing
        steps; with nothing in flight, sleep on the condition variable user threads
        signal on submit (a few ms at most, to see peers' shutdown notices).

   Shutdown (hvd_shutdown on any rank, the coordinator's stall timeout, an error every
   rank saw at the same response): the coordinator sends SHUTDOWN to every worker,
   fails everything pending, and waits (DRAIN_LIMIT_US at most) for every worker's
   SHUTDOWN_ACK, so no control message is left unreceived before the communicators are
   freed. A worker that wants to stop asks the coordinator (SHUTDOWN_REQ) and keeps
   executing response lists until SHUTDOWN arrives, so no peer is left waiting inside a
   collective for it.

   Failure (a lost peer, an error only this rank saw, the watchdog's stall shutdown):
   no waiting for anybody. A lost peer leads to a census that names the lost ranks
   (hvd/liveness.c); the rank tells the others with a STOP notice, which also ends the
   collective they may be blocked in, and stops. hvd_shutdown then finalizes MPI only
   if every rank reaches it (hvd/init.c). */
#include "hvd/hvd_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CTRL_TAG 1
#define SPIN_US 200.0                /* busy-poll this long after the last progress   */
#define SLEEP_MIN_US 20.0            /* then sleep, doubling up to SLEEP_MAX_US       */
#define SLEEP_MAX_US 250.0
#define IDLE_SLEEP_US 5000.0         /* nothing in flight                             */
#define DRAIN_LIMIT_US 3e6           /* wait at most this for peers at shutdown       */
#define STOP_WAIT_LIMIT_US 30e6      /* a worker waits this for the coordinator       */
#define STALL_CHECK_EVERY_US 100e3
#define LIVENESS_EVERY_US 10e3       /* failure notices and heartbeats, this often    */

typedef struct {
  MPI_Request req;
  char *buf;
} pending_send_t;

typedef struct {
  pending_send_t *sends;
  int nsends, cap_sends;
  hvd_buf_t in;                      /* last received message                         */
  hvd_coordinator_t *coord;          /* rank 0                                        */
  hvd_response_t *resp;
  int cap_resp;
  int stop_requested;                /* worker sent SHUTDOWN_REQ                      */
  int failed;                        /* worker: fatal error, waits for SHUTDOWN       */
  double stop_deadline_us;
  double last_progress_us, last_stall_check_us, sleep_us;
  double last_liveness_us;
} bg_t;

static void mpi_error_text(int err, char *buf, size_t len) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(err, s, &n) != MPI_SUCCESS) snprintf(s, sizeof(s), "error %d", err);
  snprintf(buf, len, "%s", s);
}

/* Sends len bytes (copied) to dest without blocking; 0 on failure (msg filled). */
static int send_bytes(bg_t *bg, int dest, const void *data, size_t len, char *msg,
                      size_t msglen) {
  if (bg->nsends == bg->cap_sends) {
    int nc = bg->cap_sends ? bg->cap_sends * 2 : 16;
    pending_send_t *p = realloc(bg->sends, (size_t)nc * sizeof(*p));
    if (!p) { snprintf(msg, msglen, "rank %d: out of memory", hvd_g.rank); return 0; }
    bg->sends = p;
    bg->cap_sends = nc;
  }
  char *copy = malloc(len ? len : 1);
  if (!copy) { snprintf(msg, msglen, "rank %d: out of memory", hvd_g.rank); return 0; }
  memcpy(copy, data, len);
  pending_send_t *ps = &bg->sends[bg->nsends];
  int err = MPI_Isend(copy, (int)len, MPI_BYTE, dest, CTRL_TAG, hvd_g.ctrl, &ps->req);
  if (err != MPI_SUCCESS) {
    char e[MPI_MAX_ERROR_STRING];
    mpi_error_text(err, e, sizeof(e));
    snprintf(msg, msglen, "rank %d: MPI_Isend of %zu control bytes to rank %d failed: %s",
             hvd_g.rank, len, dest, e);
    free(copy);
    return 0;
  }
  ps->buf = copy;
  bg->nsends++;
  return 1;
}

static int send_msg(bg_t *bg, int dest, int type, int status, const char *text,
                    char *msg, size_t msglen) {
  hvd_buf_t b = {0};
  hvd_msg_header_t h = {type, 0, hvd_g.rank, status};
  int ok = hvd_buf_put(&b, &h, sizeof(h)) && (!text || hvd_buf_put(&b, text, strlen(text)));
  ok = ok && send_bytes(bg, dest, b.p, b.len, msg, msglen);
  hvd_buf_free(&b);
  return ok;
}

/* Completes finished sends; with all set, waits for every one until deadline. */
static void progress_sends(bg_t *bg, int all, double deadline_us) {
  for (;;) {
    int j = 0;
    for (int i = 0; i < bg->nsends; i++) {
      int done = 0;
      if (MPI_Test(&bg->sends[i].req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 1;
      if (done) free(bg->sends[i].buf);
      else bg->sends[j++] = bg->sends[i];
    }
    bg->nsends = j;
    if (!all || bg->nsends == 0) return;
    if (util_now_us() > deadline_us) {
      /* A peer that never receives: let MPI finish or drop them; the buffers must stay
         valid while MPI may still read them, so they are not freed. */
      for (int i = 0; i < bg->nsends; i++) MPI_Request_free(&bg->sends[i].req);
      bg->nsends = 0;
      return;
    }
    sched_yield();
  }
}

/* Receives one control message if one is there: 1 with *src, 0 none, -1 error. */
static int poll_message(bg_t *bg, int *src, char *msg, size_t msglen) {
  int flag = 0;
  MPI_Status st;
  int err = MPI_Iprobe(MPI_ANY_SOURCE, CTRL_TAG, hvd_g.ctrl, &flag, &st);
  if (err == MPI_SUCCESS && !flag) return 0;
  int count = 0;
  if (err == MPI_SUCCESS) err = MPI_Get_count(&st, MPI_BYTE, &count);
  if (err == MPI_SUCCESS && (size_t)count > bg->in.cap) {
    char *p = realloc(bg->in.p, (size_t)count);
    if (!p) {
      snprintf(msg, msglen, "rank %d: out of memory receiving %d control bytes",
               hvd_g.rank, count);
      return -1;
    }
    bg->in.p = p;
    bg->in.cap = (size_t)count;
  }
  if (err == MPI_SUCCESS)
    err = MPI_Recv(bg->in.p, count, MPI_BYTE, st.MPI_SOURCE, CTRL_TAG, hvd_g.ctrl,
                   MPI_STATUS_IGNORE);
  if (err != MPI_SUCCESS) {
    char e[MPI_MAX_ERROR_STRING];
    mpi_error_text(err, e, sizeof(e));
    snprintf(msg, msglen, "rank %d: receiving a control message failed: %s", hvd_g.rank, e);
    return -1;
  }
  bg->in.len = (size_t)count;
  *src = st.MPI_SOURCE;
  hvd_liveness_heard(*src);
  if (bg->in.len < sizeof(hvd_msg_header_t)) {
    snprintf(msg, msglen, "rank %d: control message of %d bytes from rank %d is too short",
             hvd_g.rank, count, *src);
    return -1;
  }
  return 1;
}

static void local_stop(hvd_status_t s, const char *text) {
  pthread_mutex_lock(&hvd_g.mu);
  hvd_fail_all(s, text);
  hvd_g_cancel_set();
  pthread_mutex_unlock(&hvd_g.mu);
}

/* Ends this rank's runtime on a failure its peers may not know of: every request fails
   with s and text; with tell_peers, the others get a STOP notice (a lost peer or a
   stall reaches them as such; any other error of this rank as a shutdown); hvd_shutdown
   will not wait for ranks that are gone. */
static void stop_on_failure(hvd_status_t s, const char *text, int tell_peers) {
  hvd_log(HVD_LOG_ERROR, "%s", text);
  atomic_store(&hvd_g.failed, 1);
  if (tell_peers) {
    char full[HVD_ERROR_MAX];
    snprintf(full, sizeof(full), "the hvd runtime was shut down: %s", text);
    int keep = s == HVD_ERR_PEER_LOST || s == HVD_ERR_TIMEOUT;
    hvd_liveness_send_stop(keep ? s : HVD_ERR_SHUTDOWN, keep ? text : full);
  }
  local_stop(s, text);
}

/* A failure, after which this rank stops at once (returns 1 for the loop to end): a
   peer's notice (the reason a collective was interrupted), the watchdog's stall
   shutdown, a lost peer (the census names who), or an error of this rank's. */
static int fail(hvd_status_t s, const char *text) {
  char msg[HVD_ERROR_MAX];
  hvd_status_t ns;
  if (hvd_liveness_take_notice(&ns, msg, sizeof(msg))) {
    if (ns == HVD_ERR_PEER_LOST) atomic_store(&hvd_g.peer_lost, 1);
    stop_on_failure(ns, msg, ns == HVD_ERR_PEER_LOST || ns == HVD_ERR_TIMEOUT);
  } else if (atomic_load(&hvd_g.failed)) {
    pthread_mutex_lock(&hvd_g.mu);
    snprintf(msg, sizeof(msg), "%s", hvd_g.stop_msg);
    pthread_mutex_unlock(&hvd_g.mu);
    hvd_liveness_send_stop(HVD_ERR_TIMEOUT, msg);
  } else if (s == HVD_ERR_PEER_LOST) {
    ns = hvd_liveness_census(text, msg, sizeof(msg));
    /* A rank known gone never reaches hvd_shutdown: it need not wait for it. */
    if (ns == HVD_ERR_PEER_LOST) atomic_store(&hvd_g.peer_lost, 1);
    stop_on_failure(ns, msg, 1);
  } else {
    stop_on_failure(s, text, 1);
  }
  return 1;
}

/* Rank 0: stops every rank. s is what pending requests report. */
static void global_shutdown(bg_t *bg, hvd_status_t s, const char *text) {
  char full[HVD_ERROR_MAX], err[HVD_ERROR_MAX];
  /* A stall: the rank that stalls may never reach MPI_Finalize. */
  if (s != HVD_ERR_SHUTDOWN) atomic_store(&hvd_g.failed, 1);
  snprintf(full, sizeof(full), "the hvd runtime was shut down: %s", text);
  for (int r = 1; r < hvd_g.size; r++)
    if (!send_msg(bg, r, HVD_MSG_SHUTDOWN, s, full, err, sizeof(err)))
      hvd_log(HVD_LOG_ERROR, "%s", err);
  local_stop(s, full);
  double deadline = util_now_us() + DRAIN_LIMIT_US;
  int acks = 0, src;
  while (acks < hvd_g.size - 1 && util_now_us() < deadline) {
    int got = poll_message(bg, &src, err, sizeof(err));
    if (got < 0) break;
    if (got == 1) {
      hvd_msg_header_t h;
      memcpy(&h, bg->in.p, sizeof(h));
      if (h.type == HVD_MSG_SHUTDOWN_ACK) acks++;
      continue;   /* anything else is moot now */
    }
    progress_sends(bg, 0, 0);
    sched_yield();
  }
  if (acks < hvd_g.size - 1) {
    hvd_log(HVD_LOG_WARNING, "shutdown: only %d of %d ranks acknowledged", acks,
            hvd_g.size - 1);
    atomic_store(&hvd_g.failed, 1);
  }
  progress_sends(bg, 1, deadline);
}

/* A fatal error on this rank. Returns 1 when the loop must end now. */
static int fatal_error(bg_t *bg, hvd_status_t s, const char *text, int agreed) {
  if (!agreed) return fail(s, text);
  hvd_log(HVD_LOG_ERROR, "%s", text);
  if (hvd_g.rank == 0) {
    global_shutdown(bg, s, text);
    return 1;
  }
  bg->failed = 1;
  bg->stop_deadline_us = util_now_us() + DRAIN_LIMIT_US;
  return 0;
}

/* Runs a RESPONSES message (header included). Returns 1 when the loop must end. */
static int run_responses(bg_t *bg, const char *data, size_t len, const double *times) {
  hvd_msg_header_t h;
  memcpy(&h, data, sizeof(h));
  char err[HVD_ERROR_MAX];
  if (h.n > bg->cap_resp) {
    hvd_response_t *p = realloc(bg->resp, (size_t)h.n * sizeof(*p));
    if (!p) return fatal_error(bg, HVD_ERR_NO_MEMORY, "out of memory for responses", 0);
    bg->resp = p;
    bg->cap_resp = h.n;
  }
  if (!hvd_decode_responses(data + sizeof(h), len - sizeof(h), h.n, hvd_g.size, bg->resp)) {
    snprintf(err, sizeof(err), "rank %d received a malformed response list", hvd_g.rank);
    return fatal_error(bg, HVD_ERR_BACKEND, err, 0);
  }
  if (times)
    for (int i = 0; i < h.n; i++) {
      bg->resp[i].first_seen_us = times[2 * i];
      bg->resp[i].ready_us = times[2 * i + 1];
    }
  int agreed = 0;
  hvd_status_t s = hvd_execute(bg->resp, h.n, err, sizeof(err), &agreed);
  if (s != HVD_OK) return fatal_error(bg, s, err, agreed);
  return 0;
}

/* Takes what user threads queued; rank 0 adds it, workers send it. 1 if anything. */
static int take_submissions(bg_t *bg, int *shutdown_requested, int *end) {
  pthread_mutex_lock(&hvd_g.mu);
  struct hvd_request *head = hvd_g.queue_head;
  hvd_g.queue_head = hvd_g.queue_tail = NULL;
  atomic_store(&hvd_g.queued, 0);
  *shutdown_requested = hvd_g.shutdown_requested;
  pthread_mutex_unlock(&hvd_g.mu);
  /* The taken requests stay in flight until this thread completes them, so they are
     read here without the lock. Their memory kind is asked here, on the thread that
     selected the GPU (hvd_device_thread_start). */
  if (head == NULL) return 0;
  hvd_buf_t b = {0};
  int n = 0, ok = 1;
  hvd_msg_header_t h = {HVD_MSG_REQUESTS, 0, hvd_g.rank, 0};
  ok = hvd_buf_put(&b, &h, sizeof(h));
  for (struct hvd_request *r = head; r && ok; r = r->next_queue, n++) {
    r->device = r->kind == HVD_KIND_BARRIER || r->kind == HVD_KIND_JOIN
                    ? -1 : hvd_device_of_buffers(r->sendbuf, r->recvbuf);
    if (r->kind == HVD_KIND_JOIN) hvd_g.joined = 1;
    ok = hvd_encode_request(&b, r);
  }
  char err[HVD_ERROR_MAX];
  if (ok) {
    ((hvd_msg_header_t *)b.p)->n = n;
    if (hvd_g.rank == 0)
      ok = hvd_coordinator_add(bg->coord, 0, b.p + sizeof(h), b.len - sizeof(h), n,
                               util_now_us());
    else
      ok = send_bytes(bg, 0, b.p, b.len, err, sizeof(err));
  }
  hvd_buf_free(&b);
  if (!ok) {
    snprintf(err, sizeof(err), "rank %d could not hand %d request(s) to the coordinator",
             hvd_g.rank, n);
    *end = fatal_error(bg, HVD_ERR_NO_MEMORY, err, 0);
  }
  return 1;
}

/* Rank 0: one control message from src. Returns 1 when the loop must end. */
static int coordinator_message(bg_t *bg, int src) {
  hvd_msg_header_t h;
  memcpy(&h, bg->in.p, sizeof(h));
  char text[HVD_ERROR_MAX];
  switch (h.type) {
    case HVD_MSG_REQUESTS:
      if (!hvd_coordinator_add(bg->coord, src, bg->in.p + sizeof(h),
                               bg->in.len - sizeof(h), h.n, util_now_us())) {
        snprintf(text, sizeof(text), "malformed or duplicate requests from rank %d", src);
        return fatal_error(bg, HVD_ERR_BACKEND, text, 0);
      }
      return 0;
    case HVD_MSG_SHUTDOWN_REQ: {
      size_t tl = bg->in.len - sizeof(h);
      if (tl > sizeof(text) - 1) tl = sizeof(text) - 1;
      if (h.status == HVD_OK) {
        snprintf(text, sizeof(text), "hvd_shutdown was called on rank %d", src);
      } else {
        memcpy(text, bg->in.p + sizeof(h), tl);
        text[tl] = '\0';
      }
      global_shutdown(bg, HVD_ERR_SHUTDOWN, text);
      return 1;
    }
    default:
      return 0;   /* late ACKs */
  }
}

/* Worker: one control message from the coordinator. Returns 1 when the loop must end. */
static int worker_message(bg_t *bg) {
  hvd_msg_header_t h;
  memcpy(&h, bg->in.p, sizeof(h));
  if (h.type == HVD_MSG_RESPONSES) {
    if (bg->failed) return 0;   /* every rank stopped at the same response */
    return run_responses(bg, bg->in.p, bg->in.len, NULL);
  }
  if (h.type == HVD_MSG_SHUTDOWN) {
    char text[HVD_ERROR_MAX], err[HVD_ERROR_MAX];
    size_t tl = bg->in.len - sizeof(h);
    if (tl > sizeof(text) - 1) tl = sizeof(text) - 1;
    memcpy(text, bg->in.p + sizeof(h), tl);
    text[tl] = '\0';
    if (h.status != HVD_ERR_SHUTDOWN) atomic_store(&hvd_g.failed, 1);
    local_stop((hvd_status_t)h.status, text);
    if (!send_msg(bg, 0, HVD_MSG_SHUTDOWN_ACK, 0, NULL, err, sizeof(err)))
      hvd_log(HVD_LOG_ERROR, "%s", err);
    progress_sends(bg, 1, util_now_us() + DRAIN_LIMIT_US);
    return 1;
  }
  return 0;
}

static void idle_wait(bg_t *bg) {
  double now = util_now_us();
  pthread_mutex_lock(&hvd_g.mu);
  int busy = hvd_g.ninflight > 0 || bg->stop_requested || bg->failed || bg->nsends > 0;
  if (atomic_load(&hvd_g.queued) > 0 || hvd_g.shutdown_requested) {
    pthread_mutex_unlock(&hvd_g.mu);
    return;
  }
  double wait_us;
  /* Spin right after progress even with nothing in flight: a blocking caller submits
     its next collective within microseconds of the last one completing, and a
     condition-variable wake-up costs several. */
  if (now - bg->last_progress_us < SPIN_US) {
    pthread_mutex_unlock(&hvd_g.mu);
    sched_yield();
    return;
  }
  if (busy) {
    wait_us = bg->sleep_us;
    bg->sleep_us = bg->sleep_us * 2 < SLEEP_MAX_US ? bg->sleep_us * 2 : SLEEP_MAX_US;
  } else {
    wait_us = IDLE_SLEEP_US;
  }
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  long long ns = (long long)ts.tv_nsec + (long long)(wait_us * 1000.0);
  ts.tv_sec += (time_t)(ns / 1000000000LL);
  ts.tv_nsec = (long)(ns % 1000000000LL);
  hvd_g.bg_waiting = 1;
  pthread_cond_timedwait(&hvd_g.work_cv, &hvd_g.mu, &ts);
  hvd_g.bg_waiting = 0;
  pthread_mutex_unlock(&hvd_g.mu);
}

static void loop(bg_t *bg) {
  char err[HVD_ERROR_MAX];
  for (;;) {
    int progressed = 0, end = 0, sd = 0, src;
    double turn = util_now_us();
    atomic_store(&hvd_g.bg_alive_us, (long long)turn);
    if (atomic_load(&hvd_g.failed)) {   /* the watchdog's stall shutdown */
      fail(HVD_ERR_TIMEOUT, "");
      return;
    }
    if (turn - bg->last_liveness_us >= LIVENESS_EVERY_US) {
      bg->last_liveness_us = turn;
      hvd_status_t ns;
      if (hvd_liveness_take_notice(&ns, err, sizeof(err))) {
        if (ns == HVD_ERR_PEER_LOST) atomic_store(&hvd_g.peer_lost, 1);
        stop_on_failure(ns, err, ns == HVD_ERR_PEER_LOST || ns == HVD_ERR_TIMEOUT);
        return;
      }
      if (hvd_liveness_tick(turn, err, sizeof(err))) {
        fail(HVD_ERR_PEER_LOST, err);
        return;
      }
    }
    progressed |= take_submissions(bg, &sd, &end);
    if (end) return;
    if (sd && !bg->stop_requested) {
      if (hvd_g.rank == 0) {
        global_shutdown(bg, HVD_ERR_SHUTDOWN, "hvd_shutdown was called on rank 0");
        return;
      }
      if (!send_msg(bg, 0, HVD_MSG_SHUTDOWN_REQ, HVD_OK, NULL, err, sizeof(err))) {
        local_stop(HVD_ERR_SHUTDOWN, err);
        return;
      }
      bg->stop_requested = 1;
      bg->stop_deadline_us = util_now_us() + STOP_WAIT_LIMIT_US;
    }
    for (;;) {
      int got = poll_message(bg, &src, err, sizeof(err));
      if (got < 0) {
        if (fatal_error(bg, HVD_ERR_BACKEND, err, 0)) return;
        break;
      }
      if (got == 0) break;
      progressed = 1;
      if (hvd_g.rank == 0 ? coordinator_message(bg, src) : worker_message(bg)) return;
    }
    double now = util_now_us();
    if (hvd_g.rank == 0) {
      if (hvd_coordinator_should_emit(bg->coord, now)) {
        hvd_buf_t msg = {0};
        int n = hvd_coordinator_emit(bg->coord, &msg);
        int ok = n >= 0;
        for (int r = 1; r < hvd_g.size && ok; r++)
          ok = send_bytes(bg, r, msg.p, msg.len, err, sizeof(err));
        if (!ok) {
          hvd_buf_free(&msg);
          if (n < 0) snprintf(err, sizeof(err), "rank 0: out of memory for responses");
          global_shutdown(bg, HVD_ERR_SHUTDOWN, err);
          return;
        }
        end = run_responses(bg, msg.p, msg.len, hvd_coordinator_emitted_times(bg->coord));
        hvd_buf_free(&msg);
        if (end) return;
        progressed = 1;
      }
      if (now - bg->last_stall_check_us >= STALL_CHECK_EVERY_US) {
        bg->last_stall_check_us = now;
        char text[HVD_ERROR_MAX];
        if (hvd_coordinator_check_stalls(bg->coord, now, text, sizeof(text))) {
          global_shutdown(bg, HVD_ERR_TIMEOUT, text);
          return;
        }
      }
    } else if ((bg->stop_requested || bg->failed) && now > bg->stop_deadline_us) {
      local_stop(HVD_ERR_SHUTDOWN, "the hvd runtime was shut down: the coordinator (rank "
                 "0) did not answer the shutdown request");
      return;
    }
    if (bg->nsends > 0) progress_sends(bg, 0, 0);
    if (progressed) {
      bg->last_progress_us = util_now_us();
      bg->sleep_us = SLEEP_MIN_US;
    } else {
      idle_wait(bg);
    }
  }
}

void *hvd_background_main(void *arg) {
  (void)arg;
  bg_t bg;
  memset(&bg, 0, sizeof(bg));
  bg.sleep_us = SLEEP_MIN_US;
  bg.last_progress_us = bg.last_stall_check_us = util_now_us();
  hvd_device_thread_start();   /* before this thread makes any other CUDA call */
  if (hvd_g.rank == 0 && (bg.coord = hvd_coordinator_create(hvd_g.size)) == NULL) {
    local_stop(HVD_ERR_NO_MEMORY, "rank 0: out of memory creating the coordinator");
  } else if (hvd_liveness_init() != HVD_OK) {
    local_stop(HVD_ERR_NO_MEMORY, "out of memory for the liveness state");
  } else {
    loop(&bg);
  }
  /* Whatever is still pending (only possible on the error paths) fails. */
  local_stop(HVD_ERR_SHUTDOWN, "the hvd runtime was shut down");
  /* Device state goes here, on the thread that chose the device, while the host
     transports are still up. */
  hvd_device_shutdown();
  hvd_coordinator_free(bg.coord);
  hvd_liveness_free();
  /* After a failure a send to a lost peer never completes: no waiting for it. */
  progress_sends(&bg, 1, util_now_us() + (atomic_load(&hvd_g.failed) ? 0 : 1e6));
  free(bg.sends);
  free(bg.resp);
  hvd_buf_free(&bg.in);
  return NULL;
}
