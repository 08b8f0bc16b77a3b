/* hvd/health.c: hvd_check_health, the runtime's verdict on its peers for a caller that
   waits on something of its own (the pipeline's point-to-point messages), so that it
   learns of a lost rank as collectives do: from the heartbeats and the census
   (hvd/liveness.c), the same rank and host named on every survivor, rather than from a
   timeout of its own that cannot tell a lost peer from a slow one, or from one that
   waits on a lost peer itself. */
#include "hvd/hvd_internal.h"

hvd_status_t hvd_check_health(void) {
  pthread_mutex_lock(&hvd_g.mu);
  hvd_status_t s = HVD_OK;
  if (!atomic_load(&hvd_g_initialized))
    s = hvd_set_error(HVD_ERR_NOT_INITIALIZED,
                      "hvd_check_health called before hvd_init() or after hvd_shutdown()");
  else if (hvd_g.stopped)
    s = hvd_set_error(hvd_g.stop_status, "%s", hvd_g.stop_msg);
  pthread_mutex_unlock(&hvd_g.mu);
  return s;
}
