/* hvd/process_sets.c: hvd_process_set_add and hvd_process_set_remove, collective over
   the world: the ranks first agree on the arguments (an allgather of every rank's list),
   then each records the set in its registry (hvd/process_set_registry.c). Every rank
   adds in the same order, so every rank gives the n-th set the same id. */
#include "hvd/hvd_internal.h"

#include <stdlib.h>
#include <string.h>

/* Every rank's list (allgathered), compared with this rank's: HVD_ERR_MISMATCH on every
   rank alike when they differ. list[0] is the count. */
static hvd_status_t agree(const char *what, const int64_t *list, size_t n) {
  char name[64];
  snprintf(name, sizeof(name), "hvd.process_set.%llu",
           (unsigned long long)hvd_process_set_next_call());
  void *all = NULL;
  size_t total = 0;
  hvd_status_t s = hvd_allgather(name, list, n, HVD_INT64, &all, &total);
  if (s != HVD_OK) return s;
  const int64_t *v = all;
  size_t off = 0;
  for (int r = 0; r < hvd_g.size && s == HVD_OK; r++) {
    size_t len = off < total ? (size_t)v[off] + 1 : 0;
    if (off + len > total || len != n || memcmp(v + off, list, n * sizeof(*list)) != 0)
      s = hvd_set_error(HVD_ERR_MISMATCH, "%s: the ranks passed different arguments (rank "
                        "%d's differ from rank %d's); every rank must pass the same",
                        what, r, hvd_g.rank);
    off += len;
  }
  free(all);
  return s;
}

static hvd_status_t check_ranks(const int *ranks, int n) {
  const char *what = "hvd_process_set_add";
  if (ranks == NULL || n < 1 || n > hvd_g.size)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: %d ranks%s (expected 1 to %d)",
                         what, n, ranks ? "" : " in a NULL list", hvd_g.size);
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= hvd_g.size)
      return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: ranks[%d] = %d is not a rank "
                           "(size is %d)", what, i, ranks[i], hvd_g.size);
    if (i > 0 && ranks[i] <= ranks[i - 1])
      return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: ranks[%d] = %d after %d: the "
                           "ranks must be sorted and distinct", what, i, ranks[i],
                           ranks[i - 1]);
  }
  return HVD_OK;
}

hvd_status_t hvd_process_set_add(const int *ranks, int n, hvd_process_set_t *set) {
  if (!atomic_load(&hvd_g_initialized))
    return hvd_set_error(HVD_ERR_NOT_INITIALIZED, "hvd_process_set_add called before "
                         "hvd_init() or after hvd_shutdown()");
  if (set == NULL)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_process_set_add: set is NULL");
  *set = -1;
  /* A bad list on one rank still takes part in the agreement (as an empty list), so
     the others fail there instead of waiting for it. */
  hvd_status_t bad = check_ranks(ranks, n);
  char bad_msg[HVD_ERROR_MAX];
  snprintf(bad_msg, sizeof(bad_msg), "%s", hvd_last_error());
  int m = bad == HVD_OK ? n : 0;
  int64_t *list = malloc(((size_t)m + 2) * sizeof(*list));
  if (!list) return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_process_set_add: out of memory");
  list[0] = m + 1;
  list[1] = 1;   /* what: add */
  for (int i = 0; i < m; i++) list[i + 2] = ranks[i];
  hvd_status_t s = agree("hvd_process_set_add", list, (size_t)m + 2);
  free(list);
  if (bad != HVD_OK) return hvd_set_error(bad, "%s", bad_msg);
  return s == HVD_OK ? hvd_process_set_register(ranks, n, set) : s;
}

hvd_status_t hvd_process_set_remove(hvd_process_set_t set) {
  if (!atomic_load(&hvd_g_initialized))
    return hvd_set_error(HVD_ERR_NOT_INITIALIZED, "hvd_process_set_remove called before "
                         "hvd_init() or after hvd_shutdown()");
  int64_t list[3] = {2, 2, set};   /* count, what: remove, the set */
  hvd_status_t s = agree("hvd_process_set_remove", list, 3);
  if (s != HVD_OK) return s;
  if (!hvd_process_set_unregister(set))
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "hvd_process_set_remove: process set %d "
                         "is unknown (0, the world, cannot be removed)", (int)set);
  return HVD_OK;
}
