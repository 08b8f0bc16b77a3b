/* hvd/joined_sets.c: the process sets this rank has joined (hvd_join_ex, set 0: the
   world) and whose join the coordinator has not answered yet. In each of them this rank
   takes part in the others' collectives with zeros (hvd/execute.c's stand-ins); in the
   other sets it goes on as usual, as Horovod keeps a joined flag per process set. A rank
   joins a set from one thread at a time, so the list holds each set once and is short:
   one entry per thread blocked in a join. */
#include "hvd/joined_sets.h"

#include <stdlib.h>

static int32_t *sets;
static int nsets, cap_sets;

int hvd_joined_sets_add(int32_t set) {
  if (hvd_joined_sets_has(set)) return 1;
  if (nsets == cap_sets) {
    int nc = cap_sets ? 2 * cap_sets : 4;
    int32_t *p = realloc(sets, (size_t)nc * sizeof(*p));
    if (p == NULL) return 0;
    sets = p;
    cap_sets = nc;
  }
  sets[nsets++] = set;
  return 1;
}

void hvd_joined_sets_remove(int32_t set) {
  for (int i = 0; i < nsets; i++)
    if (sets[i] == set) {
      sets[i] = sets[--nsets];
      return;
    }
}

int hvd_joined_sets_has(int32_t set) {
  for (int i = 0; i < nsets; i++)
    if (sets[i] == set) return 1;
  return 0;
}

int hvd_joined_sets_any(void) { return nsets > 0; }

void hvd_joined_sets_free(void) {
  free(sets);
  sets = NULL;
  nsets = cap_sets = 0;
}
