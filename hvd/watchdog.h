/* hvd/watchdog.h: the stall inspector of a blocked background thread
   (hvd/watchdog.c). */
#ifndef HVD_WATCHDOG_H
#define HVD_WATCHDOG_H

#include "hvd/hvd_internal.h"

hvd_status_t hvd_watchdog_start(void);
void hvd_watchdog_stop(void);
/* The warning of a background thread inside one collective for away_s, naming this
   rank's oldest request (what, age_s): "long collective" when the transports moved
   `moved` bytes in the last interval_s, else a stall ("waiting for its peers"). */
void hvd_stall_warning_text(char *buf, size_t len, double away_s, unsigned long long moved,
                            double interval_s, const char *what, double age_s);

#endif /* HVD_WATCHDOG_H */
