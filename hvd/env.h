/* hvd/env.h: the configuration from the environment (hvd/env.c). */
#ifndef HVD_ENV_H
#define HVD_ENV_H

#include "hvd/hvd_internal.h"

/* Reads HVD_* (or HOROVOD_*) variables; a malformed value is an error. */
hvd_status_t hvd_config_load(hvd_config_t *c, char *err, size_t errlen);

#endif /* HVD_ENV_H */
