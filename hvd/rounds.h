/* hvd/rounds.h: the response cache rounds over MPI (hvd/rounds.c). */
#ifndef HVD_ROUNDS_H
#define HVD_ROUNDS_H

#include "hvd/hvd_internal.h"

#include <mpi.h>

/* The response cache's rounds are allreduces of uint64 bit vectors with MPI_BAND; the
   single-process MPI stub of scripts/gpu_check has neither (one rank needs no MPI for
   them: its rounds are local). */
#if defined(MPI_BAND) && defined(MPI_UINT64_T)
#define HVD_HAVE_ROUND_MPI 1
#else
#define HVD_HAVE_ROUND_MPI 0
#endif

/* One response cache round (docs at the top of hvd/rounds.c), background thread
   (hvd_shutdown after it ended). hvd_round_start sends hvd_g.round_send; hvd_round_test
   sets *done and then hvd_g.round_recv holds every rank's words ANDed. 0 on an MPI
   error (err filled). hvd_round_peer_words: how many peers' word vectors a round
   receives (the size of hvd_g.round_peer, in vectors). */
int hvd_round_start(char *err, size_t len);
int hvd_round_test(int *done, char *err, size_t len);
/* Between rounds: whether a peer has started the next round (its words wait here):
   1 yes, 0 no, -1 cannot tell (collective rounds: MPI_Iallreduce), -2 an MPI error. */
int hvd_round_peer_started(char *err, size_t len);
size_t hvd_round_peer_words(void);
/* The peers of hvd/cache_rounds.c over MPI: the functions above on hvd_g's round
   buffers. */
struct hvd_round_peers;
void hvd_round_peers_mpi(struct hvd_round_peers *p);

#endif /* HVD_ROUNDS_H */
