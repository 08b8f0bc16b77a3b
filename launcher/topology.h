/* launcher/topology.h: the local machine as hwloc sees it, and where each local rank
   should run (internal to launcher/). */
#ifndef HVDRUN_TOPOLOGY_H
#define HVDRUN_TOPOLOGY_H

#include <stddef.h>

#define HVDRUN_TOPO_MAX_GPUS 16

typedef struct {
  int packages, numa_nodes, cores, pus, gpus;
  char gpu_names[HVDRUN_TOPO_MAX_GPUS][96];  /* "cuda0 (NVIDIA 10de:2335 at 0000:19:00.0)" */
} hvdrun_topo_summary_t;

typedef struct hvdrun_topo hvdrun_topo_t;

/* Discovers the machine, GPUs included (PCI devices of class 3D controller, or display
   controllers of NVIDIA or AMD). Returns 0, or -1 with a message in err. */
int hvdrun_topo_load(hvdrun_topo_t **out, char *err, size_t err_len);
void hvdrun_topo_free(hvdrun_topo_t *t);
void hvdrun_topo_summary(const hvdrun_topo_t *t, hvdrun_topo_summary_t *s);

/* Where local rank local_rank of local_size should run.
   Without GPUs: the cores are split evenly, consecutive blocks in core order
   (rank r gets cores [r*C/n, (r+1)*C/n)); with more ranks than cores, rank r shares
   core r mod C. With GPUs: rank r drives GPU r mod G and gets an even share of the
   cores near that GPU (its closest non-I/O ancestor: package or NUMA node), shared
   with the other local ranks whose GPUs hang below the same ancestor.
   pus receives the PU list of the set ("0-3,8-11"), cores the core list, *gpu the
   GPU index or -1. */
int hvdrun_topo_rank_place(const hvdrun_topo_t *t, int local_rank, int local_size,
                           char *pus, size_t pus_len, char *cores, size_t cores_len,
                           int *gpu, char *err, size_t err_len);

#endif /* HVDRUN_TOPOLOGY_H */
