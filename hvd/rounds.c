/* hvd/rounds.c: the peers of the response cache's protocol over MPI (hvd/cache_rounds.c;
   hvd_round_peers_mpi): one round, every rank's hvd_g.round_send words combined with
   AND into hvd_g.round_recv, without blocking. hvd_shutdown's drain (hvd/init.c) uses
   the same functions after the loop ended.

   Up to ROUND_P2P_MAX ranks, a round is a send of the words to every peer and a receive
   from every peer, reduced here: on one host that costs about a microsecond, where
   OpenMPI's nonblocking allreduce (progressed only by MPI_Test) took about ten and made
   a cached allreduce slower than a negotiated one. Above it, the (size - 1)^2 messages
   of a round would cost more than the allreduce's log steps: MPI_Iallreduce. Rounds
   follow each other on their own communicator with one tag, and MPI keeps the messages
   between two ranks in order, so round k's words never meet round k + 1's.

   Point-to-point rounds start on demand (hvd/cache_rounds.c): a rank starts one when it
   has something new to say, and a rank that sees a peer's words waiting
   (hvd_round_peer_started) joins that round at once. A collective round cannot be seen
   before one takes part in it, so above ROUND_P2P_MAX rounds follow each other while
   anything waits (and at least every millisecond). */
#include "hvd/rounds.h"
#include "hvd/hvd_internal.h"
#include "hvd/cache_rounds.h"

#include <string.h>

#define ROUND_P2P_MAX 16
#define ROUND_TAG 1

#if HVD_HAVE_ROUND_MPI
static int p2p(void) { return hvd_g.size <= ROUND_P2P_MAX; }

static void mpi_text(int e, const char *what, char *err, size_t len) {
  char t[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(e, t, &n) != MPI_SUCCESS) snprintf(t, sizeof(t), "error %d", e);
  snprintf(err, len, "rank %d: %s of the response cache round failed: %s", hvd_g.rank, what,
           t);
}
#endif

size_t hvd_round_peer_words(void) {
#if HVD_HAVE_ROUND_MPI
  return p2p() ? (size_t)(hvd_g.size - 1) : 0;
#else
  return 0;
#endif
}

int hvd_round_start(char *err, size_t len) {
  int words = hvd_g.round_words;
  if (hvd_g.size == 1) {
    memcpy(hvd_g.round_recv, hvd_g.round_send, (size_t)words * sizeof(uint64_t));
  } else {
#if HVD_HAVE_ROUND_MPI
    if (p2p()) {
      int k = 0;
      for (int r = 0; r < hvd_g.size; r++) {
        if (r == hvd_g.rank) continue;
        uint64_t *in = hvd_g.round_peer + (size_t)k * (size_t)words;
        int e = MPI_Irecv(in, words, MPI_UINT64_T, r, ROUND_TAG, hvd_g.round_comm,
                          &hvd_g.round_reqs[2 * k]);
        if (e == MPI_SUCCESS)
          e = MPI_Isend(hvd_g.round_send, words, MPI_UINT64_T, r, ROUND_TAG,
                        hvd_g.round_comm, &hvd_g.round_reqs[2 * k + 1]);
        if (e != MPI_SUCCESS) {
          mpi_text(e, "a send or receive", err, len);
          return 0;
        }
        k++;
      }
    } else {
      int e = MPI_Iallreduce(hvd_g.round_send, hvd_g.round_recv, words, MPI_UINT64_T,
                             MPI_BAND, hvd_g.round_comm, &hvd_g.round_reqs[0]);
      if (e != MPI_SUCCESS) {
        mpi_text(e, "MPI_Iallreduce", err, len);
        return 0;
      }
    }
#else
    snprintf(err, len, "rank %d: response cache rounds need MPI_BAND on MPI_UINT64_T",
             hvd_g.rank);
    return 0;
#endif
  }
  hvd_g.rounds_started++;
  hvd_g.round_inflight = 1;
  return 1;
}

int hvd_round_peer_started(char *err, size_t len) {
  if (hvd_g.size == 1) return 0;
#if HVD_HAVE_ROUND_MPI
  if (!p2p()) return -1;
  /* Only called between rounds: any round message waiting is a peer's next round. */
  int flag = 0;
  int e = MPI_Iprobe(MPI_ANY_SOURCE, ROUND_TAG, hvd_g.round_comm, &flag, MPI_STATUS_IGNORE);
  if (e != MPI_SUCCESS) {
    mpi_text(e, "MPI_Iprobe", err, len);
    return -2;
  }
  return flag != 0;
#else
  (void)err;
  (void)len;
  return -1;
#endif
}

int hvd_round_test(int *done, char *err, size_t len) {
  *done = 1;
  if (!hvd_g.round_inflight) return 1;
#if HVD_HAVE_ROUND_MPI
  if (hvd_g.size > 1) {
    int n = p2p() ? 2 * (hvd_g.size - 1) : 1;
    int e = MPI_Testall(n, hvd_g.round_reqs, done, MPI_STATUSES_IGNORE);
    if (e != MPI_SUCCESS) {
      mpi_text(e, "MPI_Testall", err, len);
      return 0;
    }
    if (!*done) return 1;
    if (p2p()) {
      int words = hvd_g.round_words;
      memcpy(hvd_g.round_recv, hvd_g.round_send, (size_t)words * sizeof(uint64_t));
      for (int k = 0; k < hvd_g.size - 1; k++) {
        const uint64_t *in = hvd_g.round_peer + (size_t)k * (size_t)words;
        for (int i = 0; i < words; i++) hvd_g.round_recv[i] &= in[i];
      }
    }
  }
#else
  (void)err;
  (void)len;
#endif
  hvd_g.round_inflight = 0;
  return 1;
}

static int peers_start(hvd_round_peers_t *p, char *err, size_t len) {
  (void)p;
  return hvd_round_start(err, len);
}

static int peers_test(hvd_round_peers_t *p, int *done, char *err, size_t len) {
  (void)p;
  return hvd_round_test(done, err, len);
}

static int peers_started(hvd_round_peers_t *p, char *err, size_t len) {
  (void)p;
  return hvd_round_peer_started(err, len);
}

void hvd_round_peers_mpi(hvd_round_peers_t *p) {
  p->send = hvd_g.round_send;
  p->recv = hvd_g.round_recv;
  p->words = hvd_g.round_words;
  p->start = peers_start;
  p->test = peers_test;
  p->peer_started = peers_started;
  p->ctx = NULL;
}
