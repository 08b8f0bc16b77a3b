/* hvd/timeline.h: the Chrome-trace timeline file (hvd/timeline.c; rank 0 only,
   every call from the background loop except open and close). */
#ifndef HVD_TIMELINE_H
#define HVD_TIMELINE_H

#include "hvd/hvd_internal.h"

hvd_status_t hvd_timeline_open(hvd_timeline_t **out, const char *path, char *err,
                               size_t errlen);
void hvd_timeline_event(hvd_timeline_t *t, const char *key, const char *event,
                        double start_us, double end_us, size_t bytes);
void hvd_timeline_close(hvd_timeline_t *t);

#endif /* HVD_TIMELINE_H */
