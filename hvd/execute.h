/* hvd/execute.h: runs a coordinator's response list (hvd/execute.c). */
#ifndef HVD_EXECUTE_H
#define HVD_EXECUTE_H

#include "hvd/hvd_internal.h"

/* Runs a response list (the coordinator's plan) in order. Returns HVD_OK, or
   a fatal status (with msg) after which the runtime must stop; fatal_agreed says every
   rank saw the same failure at the same response (so no peer is left inside a
   collective). */
hvd_status_t hvd_execute(const hvd_response_t *resp, int n, char *msg, size_t len,
                         int *fatal_agreed);

#endif /* HVD_EXECUTE_H */
