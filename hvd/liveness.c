/* hvd/liveness.c: how the ranks learn that one of them is gone, and which.

   Three signals, all seen on the background thread:
   - Heartbeats (HEARTBEAT_TAG, empty messages) ride with the negotiation cycle: workers
     send one to rank 0 and rank 0 one to every worker each heartbeat period (a fifth of
     HVD_PEER_TIMEOUT_SECONDS, at most 1 s), at most one outstanding per peer; any
     control message counts as well. A rank busy computing keeps its background thread
     and so keeps answering. A peer silent for the timeout is suspected. Time this thread
     spent away (inside a long collective, when the peers cannot answer either) is not
     held against them: the clocks restart after such a gap, once per sign of life. A
     thread starved of the CPU (nice 19 on a loaded machine) sees such a gap at every
     turn; forgiving a peer again with no sign of life since would forgive a lost peer
     for ever (the job hangs).
   - The transports' peer timeout: a collective that moves no bytes for the timeout.
   - Failure notices (NOTICE_TAG): CENSUS (a rank suspects a loss) and STOP (a rank ended
     its runtime on an error). The transports' interrupt hook looks for them, so a rank
     blocked inside a collective hears of a failure within about 100 ms.

   A suspicion leads to a census: the rank sends CENSUS (with its reason) to every rank
   and listens CENSUS_WINDOW_S for the others'; a rank that hears a CENSUS joins it. The
   ranks that did not answer are the lost ones, so every survivor names the same ranks
   and hosts, whichever of them noticed first (in a ring, the neighbour a rank waited
   for may itself be waiting). */
#include "hvd/liveness.h"
#include "hvd/hvd_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define NOTICE_TAG 2
#define HEARTBEAT_TAG 3
#define CENSUS_WINDOW_S 2.0
#define CENSUS_MARGIN_S 0.1    /* close a census heard of this much before its sender */
#define GAP_US 500e3           /* away this long: restart the peers' clocks (or
                                  half the peer timeout, when shorter)              */
#define TICK_EVERY_US 10e3     /* heartbeats and notices are looked at this often  */

enum { NOTICE_CENSUS = 1, NOTICE_STOP = 2 };
/* census_ms: CENSUS only: how long the census the sender takes part in has been open
   (the earliest start it knows of), so that every rank closes it at the same time. */
typedef struct { int32_t type, status, origin, census_ms; } notice_header_t;
/* Sent once each per run, then the runtime is over; static so that MPI may still read
   them after the requests were freed. */
static char census_notice[sizeof(notice_header_t) + HVD_ERROR_MAX];
static char stop_notice[sizeof(notice_header_t) + HVD_ERROR_MAX];

static struct {
  double *heard_us;            /* per rank: when it last gave a sign of life         */
  double *sent_us;             /* per rank: when the last heartbeat to it went       */
  MPI_Request *beat;           /* per rank: the outstanding heartbeat, or NULL        */
  unsigned char *forgivable;   /* per rank: a sign of life since its clock last
                                  restarted after a gap                               */
  double last_tick_us;
} L;

hvd_status_t hvd_liveness_init(void) {
  int n = hvd_g.size;
  L.heard_us = calloc((size_t)n, sizeof(double));
  L.sent_us = calloc((size_t)n, sizeof(double));
  L.beat = malloc((size_t)n * sizeof(MPI_Request));
  L.forgivable = malloc((size_t)n);
  if (!L.heard_us || !L.sent_us || !L.beat || !L.forgivable) {
    hvd_liveness_free();
    return HVD_ERR_NO_MEMORY;
  }
  double now = util_now_us();
  for (int r = 0; r < n; r++) {
    L.heard_us[r] = now;
    L.beat[r] = MPI_REQUEST_NULL;
    L.forgivable[r] = 1;
  }
  L.last_tick_us = now;
  return HVD_OK;
}

void hvd_liveness_free(void) {
  if (L.beat)
    for (int r = 0; r < hvd_g.size; r++)
      if (L.beat[r] != MPI_REQUEST_NULL) MPI_Request_free(&L.beat[r]);
  free(L.heard_us);
  free(L.sent_us);
  free(L.beat);
  free(L.forgivable);
  memset(&L, 0, sizeof(L));
}

void hvd_liveness_heard(int src) {
  if (L.heard_us && src >= 0 && src < hvd_g.size) {
    L.heard_us[src] = util_now_us();
    L.forgivable[src] = 1;
  }
}

double hvd_liveness_silent_us(int rank, double now_us) {
  return L.heard_us && rank >= 0 && rank < hvd_g.size ? now_us - L.heard_us[rank] : 0;
}

const char *hvd_host_of(int rank) {
  return hvd_g.hosts && rank >= 0 && rank < hvd_g.size ? hvd_g.hosts[rank] : "?";
}

/* The peers this rank exchanges heartbeats with: rank 0 with every worker, a worker
   with rank 0. */
static int is_partner(int r) {
  return r != hvd_g.rank && (hvd_g.rank == 0 || r == 0);
}

int hvd_liveness_tick(double now_us, char *reason, size_t len) {
  double timeout_us = hvd_g.cfg.peer_timeout_s * 1e6;
  if (timeout_us <= 0 || !L.heard_us || hvd_g.size < 2) return 0;
  if (now_us - L.last_tick_us < TICK_EVERY_US) return 0;
  /* Half the timeout when that is shorter: a peer timeout below 2 * GAP_US would
     otherwise expire during an absence too short to count as one. */
  double gap_us = timeout_us / 2 < GAP_US ? timeout_us / 2 : GAP_US;
  if (now_us - L.last_tick_us > gap_us)
    for (int r = 0; r < hvd_g.size; r++)
      if (L.forgivable[r]) {
        L.heard_us[r] = now_us;
        L.forgivable[r] = 0;
      }
  L.last_tick_us = now_us;

  for (;;) {   /* drain the heartbeats that came */
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, HEARTBEAT_TAG, hvd_g.ctrl, &flag, &st) != MPI_SUCCESS ||
        !flag)
      break;
    if (MPI_Recv(NULL, 0, MPI_BYTE, st.MPI_SOURCE, HEARTBEAT_TAG, hvd_g.ctrl,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS)
      break;
    L.heard_us[st.MPI_SOURCE] = now_us;
    L.forgivable[st.MPI_SOURCE] = 1;
  }
  double every_us = timeout_us / 5 < 1e6 ? timeout_us / 5 : 1e6;
  for (int r = 0; r < hvd_g.size; r++) {
    if (!is_partner(r)) continue;
    if (L.beat[r] != MPI_REQUEST_NULL) {
      int done = 0;
      if (MPI_Test(&L.beat[r], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 1;
      if (!done) continue;   /* one outstanding per peer: a lost peer takes no more */
      L.beat[r] = MPI_REQUEST_NULL;
    }
    if (now_us - L.sent_us[r] >= every_us &&
        MPI_Isend(NULL, 0, MPI_BYTE, r, HEARTBEAT_TAG, hvd_g.ctrl, &L.beat[r]) == MPI_SUCCESS)
      L.sent_us[r] = now_us;
  }
  for (int r = 0; r < hvd_g.size; r++) {
    if (!is_partner(r) || now_us - L.heard_us[r] <= timeout_us) continue;
    snprintf(reason, len, "rank %d: no sign of life from rank %d (host %s) for %.1f s "
             "(HVD_PEER_TIMEOUT_SECONDS=%g)", hvd_g.rank, r, hvd_host_of(r),
             (now_us - L.heard_us[r]) * 1e-6, hvd_g.cfg.peer_timeout_s);
    return 1;
  }
  return 0;
}

/* Sends a notice (type, status, text) in buf to every other rank, best effort: a lost
   peer's send may never complete, so each request is freed at once. */
static void send_notice(char *buf, int type, hvd_status_t s, const char *text,
                        int census_ms) {
  notice_header_t h = {type, (int32_t)s, hvd_g.rank, census_ms};
  size_t tl = strlen(text);
  if (tl > HVD_ERROR_MAX - 1) tl = HVD_ERROR_MAX - 1;
  memcpy(buf, &h, sizeof(h));
  memcpy(buf + sizeof(h), text, tl);
  for (int r = 0; r < hvd_g.size; r++) {
    if (r == hvd_g.rank) continue;
    MPI_Request req;
    if (MPI_Isend(buf, (int)(sizeof(h) + tl), MPI_BYTE, r, NOTICE_TAG, hvd_g.ctrl, &req) ==
        MPI_SUCCESS)
      MPI_Request_free(&req);
  }
}

/* Receives one pending notice: 1 with its header and text (0-terminated), 0 none. */
static int receive_notice(notice_header_t *h, char *text, size_t len) {
  int flag = 0, count = 0;
  MPI_Status st;
  if (MPI_Iprobe(MPI_ANY_SOURCE, NOTICE_TAG, hvd_g.ctrl, &flag, &st) != MPI_SUCCESS || !flag)
    return 0;
  char buf[sizeof(notice_header_t) + HVD_ERROR_MAX];
  if (MPI_Get_count(&st, MPI_BYTE, &count) != MPI_SUCCESS || count < (int)sizeof(*h) ||
      count > (int)sizeof(buf))
    count = (int)sizeof(buf);   /* malformed: MPI_Recv reports the truncation */
  if (MPI_Recv(buf, count, MPI_BYTE, st.MPI_SOURCE, NOTICE_TAG, hvd_g.ctrl,
               MPI_STATUS_IGNORE) != MPI_SUCCESS || count < (int)sizeof(*h)) {
    memset(h, 0, sizeof(*h));
    h->origin = st.MPI_SOURCE;
    snprintf(text, len, "rank %d sent a malformed failure notice", st.MPI_SOURCE);
    return 1;
  }
  memcpy(h, buf, sizeof(*h));
  h->origin = st.MPI_SOURCE;
  size_t tl = (size_t)count - sizeof(*h);
  if (tl > len - 1) tl = len - 1;
  memcpy(text, buf + sizeof(*h), tl);
  text[tl] = '\0';
  return 1;
}

int hvd_liveness_interrupt(void *arg) {
  (void)arg;
  if (atomic_load(&hvd_g.failed)) return 1;   /* the watchdog ended the runtime */
  int flag = 0;
  MPI_Status st;
  return MPI_Iprobe(MPI_ANY_SOURCE, NOTICE_TAG, hvd_g.ctrl, &flag, &st) == MPI_SUCCESS && flag;
}

/* Seconds this process was stopped for longer than the peer timeout (0: it was not):
   the watchdog saw such a gap between two of its turns, or has not run for that long
   (the background thread can be the first to run after a SIGCONT). */
static double frozen_s(void);
int hvd_liveness_given_up(void) { return frozen_s() > 0; }

static double frozen_s(void) {
  double timeout_us = hvd_g.cfg.peer_timeout_s * 1e6;
  if (timeout_us <= 0) return 0;
  double gap = (double)atomic_load(&hvd_g.frozen_us);
  double since = util_now_us() - (double)atomic_load(&hvd_g.watchdog_us);
  if (since > timeout_us && since > gap) gap = since;
  return gap > timeout_us ? gap * 1e-6 : 0;
}

/* The census; heard_first: a rank whose CENSUS started it (already heard), or -1, and
   first_ms how long that census had been open. A rank that was itself stopped longer
   than the peer timeout takes no part: the others have given it up (and would take its
   answer, after a launcher continued it to end it, for a sign that nobody is lost). */
static hvd_status_t census(const char *reason, int heard_first, int first_ms, char *msg,
                           size_t len) {
  double frozen = frozen_s();
  if (frozen > 0) {
    snprintf(msg, len, "rank %d (host %s) was stopped for %.1f s, longer than "
             "HVD_PEER_TIMEOUT_SECONDS=%g: the other ranks have given it up. %s", hvd_g.rank,
             hvd_host_of(hvd_g.rank), frozen, hvd_g.cfg.peer_timeout_s, reason);
    return HVD_ERR_PEER_LOST;
  }
  int n = hvd_g.size, nheard = 1;
  unsigned char *heard = calloc((size_t)n, 1);
  if (!heard) {
    snprintf(msg, len, "%s (out of memory for the census)", reason);
    return HVD_ERR_PEER_LOST;
  }
  heard[hvd_g.rank] = 1;
  if (heard_first >= 0 && heard_first < n && !heard[heard_first]) {
    heard[heard_first] = 1;
    nheard++;
  }
  /* Every rank closes the census when the earliest of the censuses it hears of closes:
     the first rank to leave exits, and a launcher that ends the job continues a stopped
     rank (SIGCONT before SIGTERM), which must not find a census still open to answer
     (the lost rank would look alive). A notice carries how long its census has been
     open. */
  double now = util_now_s(), deadline = now + CENSUS_WINDOW_S;
  if (heard_first >= 0) deadline = now - first_ms * 1e-3 + CENSUS_WINDOW_S - CENSUS_MARGIN_S;
  send_notice(census_notice, NOTICE_CENSUS, HVD_OK, reason,
              (int)((now - (deadline - CENSUS_WINDOW_S)) * 1e3));
  char text[HVD_ERROR_MAX];
  while (nheard < n && util_now_s() < deadline) {
    notice_header_t h;
    if (receive_notice(&h, text, sizeof(text))) {
      /* Only a CENSUS answers: a STOP may come from a rank the others gave up. */
      if (h.type != NOTICE_CENSUS) continue;
      double theirs = util_now_s() - h.census_ms * 1e-3 + CENSUS_WINDOW_S - CENSUS_MARGIN_S;
      if (theirs < deadline) deadline = theirs;
      if (h.origin >= 0 && h.origin < n && !heard[h.origin]) {
        heard[h.origin] = 1;
        nheard++;
      }
      continue;
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  hvd_status_t s;
  if (nheard == n) {
    snprintf(msg, len, "%s; every rank answered the census, so none is lost: the ranks "
             "wait for each other (a collective some rank never entered?)", reason);
    s = HVD_ERR_TIMEOUT;
  } else {
    char list[HVD_ERROR_MAX / 2];
    size_t l = 0;
    for (int r = 0; r < n && l < sizeof(list) - 1; r++)
      if (!heard[r])
        l += (size_t)snprintf(list + l, sizeof(list) - l, "%srank %d (host %s)",
                              l ? ", " : "", r, hvd_host_of(r));
    snprintf(msg, len, "lost %d rank(s): %s. %s", n - nheard, list, reason);
    s = HVD_ERR_PEER_LOST;
  }
  free(heard);
  return s;
}

hvd_status_t hvd_liveness_census(const char *reason, char *msg, size_t len) {
  return census(reason, -1, 0, msg, len);
}

int hvd_liveness_take_notice(hvd_status_t *s, char *msg, size_t len) {
  notice_header_t h;
  char text[HVD_ERROR_MAX];
  if (!receive_notice(&h, text, sizeof(text))) return 0;
  if (h.type == NOTICE_CENSUS) {
    *s = census(text, h.origin, h.census_ms, msg, len);
  } else {
    *s = h.status > 0 ? (hvd_status_t)h.status : HVD_ERR_SHUTDOWN;
    snprintf(msg, len, "%s", text);
  }
  return 1;
}

void hvd_liveness_send_stop(hvd_status_t s, const char *msg) {
  send_notice(stop_notice, NOTICE_STOP, s, msg, 0);
}
