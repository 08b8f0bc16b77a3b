/* hvd/state.c: the runtime's one shared state. In a file of its own so that every
   other file of hvd/ may use it without depending on init.c (which starts the
   background thread: it would close a call cycle through every file). */
#include "hvd/hvd_internal.h"

hvd_state_t hvd_g = {
  .rank = -1, .size = -1, .local_rank = -1, .local_size = -1,
  .cross_rank = -1, .cross_size = -1,
  .mu = PTHREAD_MUTEX_INITIALIZER,
  .done_cv = PTHREAD_COND_INITIALIZER,
  .watchdog_mu = PTHREAD_MUTEX_INITIALIZER,
};
atomic_int hvd_g_initialized;

/* Topology, read from the state (set by hvd_init). */
int hvd_initialized(void) { return atomic_load(&hvd_g_initialized); }
int hvd_rank(void) { return hvd_initialized() ? hvd_g.rank : -1; }
int hvd_size(void) { return hvd_initialized() ? hvd_g.size : -1; }
int hvd_local_rank(void) { return hvd_initialized() ? hvd_g.local_rank : -1; }
int hvd_local_size(void) { return hvd_initialized() ? hvd_g.local_size : -1; }
int hvd_cross_rank(void) { return hvd_initialized() ? hvd_g.cross_rank : -1; }
int hvd_cross_size(void) { return hvd_initialized() ? hvd_g.cross_size : -1; }
