/* hvd/ps_placement.c: which server keeps which part of each variable.

   A variable larger than split_bytes is cut into min(servers, ceil(bytes / split_bytes))
   nearly equal parts (the first ones one element longer), as TF's fixed-size
   partitioner; each part is a shard. Shards are placed in registration order:
   - GREEDY (TF's GreedyLoadBalancingStrategy, the default): on the server with the
     fewest bytes so far (the lowest rank on a tie), never two parts of one variable on
     the same server;
   - ROUND_ROBIN (TF's replica_device_setter): on the next server in turn.
   Every rank computes the same placement from the same (agreed) registration. */
#include "hvd/ps_internal.h"

#include <stdlib.h>

static size_t parts_of(size_t count, size_t split_bytes, int nservers) {
  size_t bytes = count * sizeof(float);
  if (count == 0) return 0;
  if (split_bytes == 0 || bytes <= split_bytes) return 1;
  size_t parts = (bytes + split_bytes - 1) / split_bytes;
  return parts < (size_t)nservers ? parts : (size_t)nservers;
}

int hvd_ps_place(struct hvd_ps *ps, int nservers) {
  size_t total = 0;
  for (size_t v = 0; v < ps->nvars; v++)
    total += parts_of(ps->counts[v], ps->cfg.split_bytes, nservers);
  ps->shards = calloc(total ? total : 1, sizeof(*ps->shards));
  ps->var_shard0 = calloc(ps->nvars ? ps->nvars : 1, sizeof(size_t));
  ps->var_nshards = calloc(ps->nvars ? ps->nvars : 1, sizeof(size_t));
  uint64_t *load = calloc((size_t)nservers, sizeof(uint64_t));
  unsigned char *used = calloc((size_t)nservers, 1);
  if (!ps->shards || !ps->var_shard0 || !ps->var_nshards || !load || !used) {
    free(load);
    free(used);
    return 0;
  }
  size_t k = 0;
  int next = 0;
  for (size_t v = 0; v < ps->nvars; v++) {
    size_t parts = parts_of(ps->counts[v], ps->cfg.split_bytes, nservers);
    ps->var_shard0[v] = k;
    ps->var_nshards[v] = parts;
    for (int s = 0; s < nservers; s++) used[s] = 0;
    size_t offset = 0;
    for (size_t p = 0; p < parts; p++, k++) {
      size_t count = ps->counts[v] / parts + (p < ps->counts[v] % parts);
      int server = 0;
      if (ps->cfg.placement == HVD_PS_ROUND_ROBIN) {
        server = next;
        next = (next + 1) % nservers;
      } else {
        server = -1;
        for (int s = 0; s < nservers; s++)
          if (!used[s] && (server < 0 || load[s] < load[server])) server = s;
      }
      used[server] = 1;
      load[server] += count * sizeof(float);
      ps->shards[k] = (ps_shard_t){v, offset, count, ps->starts[v] + offset, server};
      offset += count;
    }
  }
  ps->nshards = k;
  free(load);
  free(used);
  return 1;
}

/* Local aggregation: each shard kept on another host gets one of this host's workers as
   its aggregator, the one with the fewest bytes so far (the lowest rank on a tie), so
   the host's pushes and answers spread over its workers. Every worker of the host
   computes the same from the same placement. */
int hvd_ps_place_aggregators(struct hvd_ps *ps, int on) {
  size_t n = ps->nshards ? ps->nshards : 1;
  ps->agg_rank = malloc(n * sizeof(int));
  ps->locals = calloc((size_t)hvd_g.size, sizeof(int));
  if (!ps->agg_rank || !ps->locals) return 0;
  for (size_t k = 0; k < ps->nshards; k++) ps->agg_rank[k] = -1;
  int me = ps->host[hvd_g.rank];
  ps->nlocal = 0;
  for (int r = ps->first_worker; r < hvd_g.size; r++)
    if (ps->host[r] == me) ps->locals[ps->nlocal++] = r;
  if (!on || !ps->is_worker || ps->nlocal < 2) return 1;
  uint64_t *load = calloc((size_t)ps->nlocal, sizeof(uint64_t));
  if (!load) return 0;
  for (size_t k = 0; k < ps->nshards; k++) {
    if (ps->host[ps->shards[k].server] == me) continue;
    int best = 0;
    for (int i = 1; i < ps->nlocal; i++)
      if (load[i] < load[best]) best = i;
    load[best] += ps->shards[k].count * sizeof(float);
    ps->agg_rank[k] = ps->locals[best];
  }
  free(load);
  return 1;
}
