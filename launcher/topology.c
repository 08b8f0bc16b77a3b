/* launcher/topology.c: hwloc discovery of cores, NUMA nodes and GPUs, and the core set
   of each local rank. */
#include "launcher/topology.h"

#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hvdrun_topo {
  hwloc_topology_t topo;
  int ngpus;
  hwloc_obj_t gpus[HVDRUN_TOPO_MAX_GPUS];   /* PCI devices */
};

/* A GPU: a PCI "3D controller" (class 0x0302, how datacenter GPUs present), or a
   display controller (0x03xx) of NVIDIA (0x10de) or AMD (0x1002). A virtual machine's
   plain VGA adapter is not counted. */
static int is_gpu(hwloc_obj_t pci)
{
  unsigned cls = pci->attr->pcidev.class_id;
  unsigned vendor = pci->attr->pcidev.vendor_id;
  return cls == 0x0302 || ((cls >> 8) == 0x03 && (vendor == 0x10de || vendor == 0x1002));
}

int hvdrun_topo_load(hvdrun_topo_t **out, char *err, size_t err_len)
{
  *out = NULL;
  hvdrun_topo_t *t = calloc(1, sizeof *t);
  if (t == NULL) {
    snprintf(err, err_len, "out of memory for the topology");
    return -1;
  }
  if (hwloc_topology_init(&t->topo) != 0) {
    snprintf(err, err_len, "hwloc_topology_init failed");
    free(t);
    return -1;
  }
  /* PCI devices are filtered out by default; keep the important ones (GPUs, NICs). */
  if (hwloc_topology_set_io_types_filter(t->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 ||
      hwloc_topology_load(t->topo) != 0) {
    snprintf(err, err_len, "hwloc could not discover this machine's topology");
    hwloc_topology_destroy(t->topo);
    free(t);
    return -1;
  }
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(t->topo, NULL); pci;
       pci = hwloc_get_next_pcidev(t->topo, pci)) {
    if (is_gpu(pci) && t->ngpus < HVDRUN_TOPO_MAX_GPUS) t->gpus[t->ngpus++] = pci;
  }
  *out = t;
  return 0;
}

void hvdrun_topo_free(hvdrun_topo_t *t)
{
  if (t == NULL) return;
  hwloc_topology_destroy(t->topo);
  free(t);
}

static int count(const hvdrun_topo_t *t, hwloc_obj_type_t type)
{
  int n = hwloc_get_nbobjs_by_type(t->topo, type);
  return n < 0 ? 0 : n;
}

void hvdrun_topo_summary(const hvdrun_topo_t *t, hvdrun_topo_summary_t *s)
{
  memset(s, 0, sizeof *s);
  s->packages = count(t, HWLOC_OBJ_PACKAGE);
  s->numa_nodes = count(t, HWLOC_OBJ_NUMANODE);
  s->cores = count(t, HWLOC_OBJ_CORE);
  s->pus = count(t, HWLOC_OBJ_PU);
  s->gpus = t->ngpus;
  for (int g = 0; g < t->ngpus; g++) {
    hwloc_obj_t pci = t->gpus[g];
    /* The OS device below the PCI device carries the usable name (cuda0, card0, ...). */
    const char *osname = NULL;
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
      if (c->type == HWLOC_OBJ_OS_DEVICE && c->name && !osname) osname = c->name;
    snprintf(s->gpu_names[g], sizeof s->gpu_names[g], "%s (%04x:%04x at %04x:%02x:%02x.%01x)",
             osname ? osname : "gpu", pci->attr->pcidev.vendor_id,
             pci->attr->pcidev.device_id, pci->attr->pcidev.domain, pci->attr->pcidev.bus,
             pci->attr->pcidev.dev, pci->attr->pcidev.func);
  }
}

/* The cpuset the cores of a GPU hang below (the whole machine when hwloc cannot tell). */
static hwloc_const_cpuset_t gpu_locality(const hvdrun_topo_t *t, int g)
{
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->topo, t->gpus[g]);
  if (anc == NULL || anc->cpuset == NULL || hwloc_bitmap_iszero(anc->cpuset))
    return hwloc_topology_get_topology_cpuset(t->topo);
  return anc->cpuset;
}

int hvdrun_topo_rank_place(const hvdrun_topo_t *t, int local_rank, int local_size,
                           char *pus, size_t pus_len, char *cores, size_t cores_len,
                           int *gpu, char *err, size_t err_len)
{
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size) {
    snprintf(err, err_len, "local rank %d of %d: expected 0 <= local rank < local size",
             local_rank, local_size);
    return -1;
  }
  /* The ranks sharing this rank's pool of cores, and this rank's place among them. */
  hwloc_const_cpuset_t pool = hwloc_topology_get_topology_cpuset(t->topo);
  int share_index = local_rank, share_count = local_size;
  *gpu = -1;
  if (t->ngpus > 0) {
    *gpu = local_rank % t->ngpus;
    pool = gpu_locality(t, *gpu);
    share_index = share_count = 0;
    for (int r = 0; r < local_size; r++) {
      if (hwloc_bitmap_isequal(gpu_locality(t, r % t->ngpus), pool)) {
        if (r == local_rank) share_index = share_count;
        share_count++;
      }
    }
  }
  int ncores = hwloc_get_nbobjs_inside_cpuset_by_type(t->topo, pool, HWLOC_OBJ_CORE);
  if (ncores <= 0) {
    snprintf(err, err_len, "hwloc found no cores in this rank's pool");
    return -1;
  }
  int first, last;   /* core indices within the pool, inclusive */
  if (share_count <= ncores) {
    first = (int)((long)share_index * ncores / share_count);
    last = (int)((long)(share_index + 1) * ncores / share_count) - 1;
  } else {
    first = last = share_index % ncores;
  }
  hwloc_bitmap_t set = hwloc_bitmap_alloc(), coreset = hwloc_bitmap_alloc();
  if (set == NULL || coreset == NULL) {
    hwloc_bitmap_free(set);
    hwloc_bitmap_free(coreset);
    snprintf(err, err_len, "out of memory for a cpuset");
    return -1;
  }
  for (int c = first; c <= last; c++) {
    hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(t->topo, pool, HWLOC_OBJ_CORE,
                                                           (unsigned)c);
    if (core == NULL) continue;
    hwloc_bitmap_or(set, set, core->cpuset);
    hwloc_bitmap_set(coreset, core->logical_index);
  }
  hwloc_bitmap_list_snprintf(pus, pus_len, set);
  hwloc_bitmap_list_snprintf(cores, cores_len, coreset);
  hwloc_bitmap_free(set);
  hwloc_bitmap_free(coreset);
  return 0;
}
