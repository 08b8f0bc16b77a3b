/* hvd/joined_sets.h: the process sets in which this rank's hvd_join (hvd_join_ex) went to
   the coordinator and is not answered yet (hvd/joined_sets.c). */
#ifndef HVD_JOINED_SETS_H
#define HVD_JOINED_SETS_H

#include <stdint.h>

/* Background loop only (no lock). add: 0 when out of memory. */
int hvd_joined_sets_add(int32_t set);
void hvd_joined_sets_remove(int32_t set);
int hvd_joined_sets_has(int32_t set);
int hvd_joined_sets_any(void);
void hvd_joined_sets_free(void);   /* hvd_init and hvd_shutdown: none joined */

#endif /* HVD_JOINED_SETS_H */
