/* hvd/init.c: hvd_init / hvd_shutdown and the topology.

   MPI: hvd_init initialises MPI unless the program already did (then it uses MPI as it
   is and leaves MPI_Finalize to the program). The design needs MPI_THREAD_SERIALIZED:
   MPI is called by the thread that runs hvd_init/hvd_shutdown and, between the two, only
   by the background thread. A program that calls MPI itself while hvd runs must
   initialise MPI with MPI_THREAD_MULTIPLE.

   Topology: local ranks are the ranks of this host (MPI_Comm_split_type with
   MPI_COMM_TYPE_SHARED); the cross communicator joins the ranks with the same local
   rank, so cross rank = index of this host and cross size = number of hosts (when
   every host runs the same number of ranks). */
#include "hvd/hvd_internal.h"
#include "hvd/background.h"
#include "hvd/cache_rounds.h"
#include "hvd/env.h"
#include "hvd/joined_sets.h"
#include "hvd/liveness.h"
#include "hvd/ps_internal.h"
#include "hvd/rounds.h"
#include "hvd/timeline.h"
#include "hvd/watchdog.h"
#include "util/huge_pages.h"

#include <limits.h>
#include <sched.h>
#include <unistd.h>

#include <stdlib.h>
#include <string.h>

/* Serialises hvd_init/hvd_shutdown against each other. */
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

static hvd_status_t mpi_fail(int err, const char *call) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(err, s, &n) != MPI_SUCCESS) snprintf(s, sizeof(s), "error %d", err);
  return hvd_set_error(HVD_ERR_BACKEND, "hvd_init: %s failed: %s", call, s);
}

static void free_comm(MPI_Comm *c) {
  if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  *c = MPI_COMM_NULL;
}

/* Releases what init created (also on a failed init). MPI itself stays. mpi_too = 0
   after a failure: the communicators are left to the process's end, since freeing one
   with messages to or from a lost peer in flight may wait for that peer. */
/* What a failed run leaves to the process's end (MPI may still use it): kept here, so
   that it stays reachable (no leak is reported at exit) and nothing frees it early.
   volatile: nothing reads it, and the compiler would drop the stores otherwise. */
static struct {
  coll_transport_t *transports[3];
  void *round_buffers[4];
} volatile left_to_exit;

static void release(int mpi_too) {
  hvd_ps_comm_free(mpi_too);
  if (!mpi_too) {
    left_to_exit.transports[0] = hvd_g.world;
    left_to_exit.transports[1] = hvd_g.local;
    left_to_exit.transports[2] = hvd_g.cross;
  }
  if (hvd_g.round_inflight) {
    left_to_exit.round_buffers[0] = hvd_g.round_send;
    left_to_exit.round_buffers[1] = hvd_g.round_recv;
    left_to_exit.round_buffers[2] = hvd_g.round_peer;
    left_to_exit.round_buffers[3] = hvd_g.round_reqs;
  }
  if (mpi_too) {
    if (hvd_g.world) coll_transport_destroy(hvd_g.world);
    if (hvd_g.local) coll_transport_destroy(hvd_g.local);
    if (hvd_g.cross) coll_transport_destroy(hvd_g.cross);
    free_comm(&hvd_g.ctrl);
    free_comm(&hvd_g.round_comm);
    free_comm(&hvd_g.local_comm);
    free_comm(&hvd_g.cross_comm);
  }
  hvd_g.world = hvd_g.local = hvd_g.cross = NULL;
  hvd_g.ctrl = hvd_g.local_comm = hvd_g.cross_comm = hvd_g.round_comm = MPI_COMM_NULL;
  /* A round left in flight keeps its buffers: MPI may still write them. */
  if (!hvd_g.round_inflight) {
    free(hvd_g.round_send);
    free(hvd_g.round_recv);
    free(hvd_g.round_peer);
    free(hvd_g.round_reqs);
  }
  hvd_g.round_send = hvd_g.round_recv = hvd_g.round_peer = NULL;
  hvd_g.round_reqs = NULL;
  hvd_g.round_words = 0;
  hvd_g.round_inflight = 0;
  free(hvd_g.hosts);
  hvd_g.hosts = NULL;
  util_huge_free(hvd_g.fusion_buf, hvd_g.fusion_cap);
  hvd_g.fusion_buf = NULL;
  hvd_g.fusion_cap = 0;
  hvd_timeline_close(hvd_g.timeline);
  hvd_g.timeline = NULL;
}

static hvd_status_t transport(MPI_Comm comm, coll_transport_t **out, const char *what) {
  coll_status_t cs = coll_transport_mpi_create(&comm, out);
  if (cs != COLL_OK)
    return hvd_set_error(HVD_ERR_BACKEND, "hvd_init: creating the %s transport failed: %s",
                         what, coll_status_string(cs));
  /* Liveness: a collective that moves nothing for the peer timeout gives up; one
     blocked while a peer reports a failure hears of it (hvd/liveness.c). */
  (*out)->peer_timeout_s = hvd_g.cfg.peer_timeout_s;
  (*out)->interrupt = hvd_liveness_interrupt;
  return HVD_OK;
}

/* The first collective of hvd_init: an allreduce (MAX) of n ints that waits at most
   HVD_START_TIMEOUT for every rank to reach it, instead of forever for a rank that
   never started or is stuck before hvd_init. MPI_ERR_PENDING: the time ran out. */
static int wait_for_every_rank(int *in, int *out, int n) {
  MPI_Request req;
  int err = MPI_Iallreduce(in, out, n, MPI_INT, MPI_MAX, hvd_g.ctrl, &req);
  if (err != MPI_SUCCESS) return err;
  double limit = hvd_g.cfg.start_timeout_s, deadline = util_now_s() + limit;
  for (unsigned spins = 0;; spins++) {
    int done = 0;
    if ((err = MPI_Test(&req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) return err;
    if (done) return MPI_SUCCESS;
    if (spins % 64 == 0) {
      if (limit > 0 && util_now_s() > deadline) return MPI_ERR_PENDING;
      sched_yield();
    }
  }
}

/* Horovod's SynchronizeParameters: rank 0's tuning is the one every rank uses, so that
   all ranks batch, fuse, cache and time out alike (a rank fusing by its own threshold
   would enter collectives of other lengths than its peers). A rank whose environment
   said otherwise says so, once, naming the value in force. */
static int sync_parameters(void) {
  hvd_config_t *c = &hvd_g.cfg;
  struct { const char *name; double mine; } p[] = {
    {"HVD_FUSION_THRESHOLD", (double)c->fusion_threshold},
    {"HVD_CYCLE_TIME", c->cycle_time_ms},
    {"HVD_CACHE_CAPACITY", (double)c->cache_capacity},
    {"HVD_HIERARCHICAL_ALLREDUCE", (double)c->hierarchical},
    {"HVD_STALL_CHECK_TIME_SECONDS", c->stall_check_s},
    {"HVD_STALL_SHUTDOWN_TIME_SECONDS", c->stall_shutdown_s},
    {"HVD_PEER_TIMEOUT_SECONDS", c->peer_timeout_s},
  };
  enum { N = sizeof(p) / sizeof(p[0]) };
  double v[N];
  for (int i = 0; i < N; i++) v[i] = p[i].mine;
  /* A broadcast from rank 0 as a MAX over ints (the calls the single-process MPI stub
     of scripts/gpu_check has too): rank 0 gives its bit patterns, the others INT_MIN. */
  int in[N * 2], out[N * 2];
  _Static_assert(sizeof(double) == 2 * sizeof(int), "a double is two ints");
  if (hvd_g.rank == 0) memcpy(in, v, sizeof(v));
  else for (int i = 0; i < 2 * N; i++) in[i] = INT_MIN;
  int err = wait_for_every_rank(in, out, 2 * N);
  if (err != MPI_SUCCESS) return err;
  memcpy(v, out, sizeof(v));
  c->fusion_threshold = (size_t)v[0];
  c->cycle_time_ms = v[1];
  c->cache_capacity = (size_t)v[2];
  c->hierarchical = (int)v[3];
  c->stall_check_s = v[4];
  c->stall_shutdown_s = v[5];
  c->peer_timeout_s = v[6];
  char line[1024];
  size_t len = 0;
  for (int i = 0; i < N && len < sizeof(line); i++)
    if (v[i] != p[i].mine)
      len += (size_t)snprintf(line + len, sizeof(line) - len, "%s%s=%.17g (this rank's "
                              "environment: %.17g)", len ? ", " : "", p[i].name, v[i],
                              p[i].mine);
  if (len > 0)
    hvd_log(HVD_LOG_WARNING, "rank 0's tuning is in force on every rank: %s", line);
  return MPI_SUCCESS;
}

/* The response cache's rounds (hvd/cache_rounds.c, over hvd/rounds.c): a communicator
   of their own, so the one nonblocking allreduce always in flight never meets the
   control messages or the other collectives, and buffers of hvd_cache_rounds_words. Cache off (or a
   single rank, whose rounds need no MPI): no communicator. */
static hvd_status_t response_cache_rounds(void) {
  size_t cap = hvd_g.cfg.cache_capacity;
  if (cap == 0) return HVD_OK;
  size_t words = (size_t)hvd_cache_rounds_words(cap);
  hvd_g.round_send = calloc(words, sizeof(uint64_t));
  hvd_g.round_recv = calloc(words, sizeof(uint64_t));
  if (!hvd_g.round_send || !hvd_g.round_recv)
    return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_init: out of memory for the response "
                         "cache's bit vectors (HVD_CACHE_CAPACITY=%zu)", cap);
  hvd_g.round_words = (int)words;
  hvd_g.rounds_started = 0;
  /* A receive and a send per peer (or one request: hvd/rounds.c). */
  size_t peers = hvd_round_peer_words();
  hvd_g.round_reqs = malloc((2 * peers + 1) * sizeof(MPI_Request));
  hvd_g.round_peer = calloc(peers * words + 1, sizeof(uint64_t));
  if (!hvd_g.round_reqs || !hvd_g.round_peer)
    return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_init: out of memory for the response "
                         "cache's rounds");
  for (size_t i = 0; i < 2 * peers + 1; i++) hvd_g.round_reqs[i] = MPI_REQUEST_NULL;
  if (hvd_g.size == 1) return HVD_OK;
  if (!HVD_HAVE_ROUND_MPI) {   /* an MPI without MPI_BAND on uint64: cache off */
    hvd_log(HVD_LOG_WARNING, "HVD_CACHE_CAPACITY=%zu ignored: this MPI lacks MPI_BAND or "
            "MPI_UINT64_T", cap);
    hvd_g.cfg.cache_capacity = 0;
    hvd_g.round_words = 0;
    return HVD_OK;
  }
  int err;
  if ((err = MPI_Comm_dup(hvd_g.ctrl, &hvd_g.round_comm)) != MPI_SUCCESS)
    return mpi_fail(err, "MPI_Comm_dup (response cache)");
  if ((err = MPI_Comm_set_errhandler(hvd_g.round_comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
    return mpi_fail(err, "MPI_Comm_set_errhandler (response cache)");
  return HVD_OK;
}

static hvd_status_t topology(void) {
  int err;
  if ((err = MPI_Comm_dup(MPI_COMM_WORLD, &hvd_g.ctrl)) != MPI_SUCCESS)
    return mpi_fail(err, "MPI_Comm_dup");
  /* Errors come back as codes, so the runtime can report them instead of aborting. */
  if ((err = MPI_Comm_set_errhandler(hvd_g.ctrl, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
    return mpi_fail(err, "MPI_Comm_set_errhandler");
  if ((err = MPI_Comm_rank(hvd_g.ctrl, &hvd_g.rank)) != MPI_SUCCESS ||
      (err = MPI_Comm_size(hvd_g.ctrl, &hvd_g.size)) != MPI_SUCCESS)
    return mpi_fail(err, "MPI_Comm_rank/size");
  if ((err = sync_parameters()) == MPI_ERR_PENDING) {
    atomic_store(&hvd_g.failed, 1);   /* MPI waits for the missing ranks: no finalize */
    return hvd_set_error(HVD_ERR_TIMEOUT,
                         "hvd_init: rank %d waited HVD_START_TIMEOUT=%g s for the other %d "
                         "rank(s) to reach hvd_init; some never did (a rank that failed to "
                         "start, or is stuck before hvd_init; raise HVD_START_TIMEOUT if "
                         "they are only slow)", hvd_g.rank, hvd_g.cfg.start_timeout_s,
                         hvd_g.size - 1);
  }
  if (err != MPI_SUCCESS) return mpi_fail(err, "MPI_Iallreduce (parameters)");
  /* Every rank's host name, so a lost rank can be named with its host. */
  char name[MPI_MAX_PROCESSOR_NAME];
  int namelen = 0;
  if ((err = MPI_Get_processor_name(name, &namelen)) != MPI_SUCCESS)
    return mpi_fail(err, "MPI_Get_processor_name");
  char mine[HVD_HOST_MAX] = {0};
  snprintf(mine, sizeof(mine), "%.*s", namelen, name);
  hvd_g.hosts = calloc((size_t)hvd_g.size, HVD_HOST_MAX);
  if (!hvd_g.hosts)
    return hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_init: out of memory for the host names");
  if ((err = MPI_Allgather(mine, HVD_HOST_MAX, MPI_CHAR, hvd_g.hosts, HVD_HOST_MAX, MPI_CHAR,
                           hvd_g.ctrl)) != MPI_SUCCESS)
    return mpi_fail(err, "MPI_Allgather (host names)");
  /* Test knob: HVD_TEST_LOCAL_SIZE=L cuts one machine into hosts of L consecutive ranks,
     so the multi-host paths (hierarchical allreduce) run in single-machine tests. */
  const char *fake = getenv("HVD_TEST_LOCAL_SIZE");
  int fake_local = fake ? atoi(fake) : 0;
  if (fake_local > 0) {
    if ((err = MPI_Comm_split(hvd_g.ctrl, hvd_g.rank / fake_local, hvd_g.rank,
                              &hvd_g.local_comm)) != MPI_SUCCESS)
      return mpi_fail(err, "MPI_Comm_split (HVD_TEST_LOCAL_SIZE)");
  } else if ((err = MPI_Comm_split_type(hvd_g.ctrl, MPI_COMM_TYPE_SHARED, hvd_g.rank,
                                        MPI_INFO_NULL, &hvd_g.local_comm)) != MPI_SUCCESS) {
    return mpi_fail(err, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  }
  if ((err = MPI_Comm_rank(hvd_g.local_comm, &hvd_g.local_rank)) != MPI_SUCCESS ||
      (err = MPI_Comm_size(hvd_g.local_comm, &hvd_g.local_size)) != MPI_SUCCESS)
    return mpi_fail(err, "MPI_Comm_rank/size (local)");
  if ((err = MPI_Comm_split(hvd_g.ctrl, hvd_g.local_rank, hvd_g.rank, &hvd_g.cross_comm)) !=
      MPI_SUCCESS)
    return mpi_fail(err, "MPI_Comm_split (cross)");
  if ((err = MPI_Comm_rank(hvd_g.cross_comm, &hvd_g.cross_rank)) != MPI_SUCCESS ||
      (err = MPI_Comm_size(hvd_g.cross_comm, &hvd_g.cross_size)) != MPI_SUCCESS)
    return mpi_fail(err, "MPI_Comm_rank/size (cross)");

  /* Hierarchical allreduce needs the same number of ranks on every host and more than
     one host; otherwise the flat ring is the same thing or cannot run. */
  int minmax[2] = {-hvd_g.local_size, hvd_g.local_size}, agreed[2];
  if ((err = MPI_Allreduce(minmax, agreed, 2, MPI_INT, MPI_MAX, hvd_g.ctrl)) != MPI_SUCCESS)
    return mpi_fail(err, "MPI_Allreduce (local sizes)");
  int uniform = -agreed[0] == agreed[1];
  /* Test knob: HVD_TEST_HIERARCHICAL_ONE_HOST=1 keeps hierarchical mode on with a single
     host (cross size 1), so that single-machine tests and the single-GPU check run the
     two-level paths too (for device memory: the NCCL local communicator, the staging
     through host memory and the cross-host step). */
  const char *one_host = getenv("HVD_TEST_HIERARCHICAL_ONE_HOST");
  int force_one_host = one_host != NULL && atoi(one_host) > 0;
  hvd_g.hierarchical = hvd_g.cfg.hierarchical && uniform &&
                       (hvd_g.cross_size > 1 || force_one_host);
  if (hvd_g.cfg.hierarchical && !hvd_g.hierarchical && hvd_g.rank == 0)
    hvd_log(HVD_LOG_INFO, "HVD_HIERARCHICAL_ALLREDUCE=1 ignored: %s",
            !uniform ? "hosts run different numbers of ranks" : "all ranks are on one host");

  if (hvd_g.rank == 0)
    hvd_log(HVD_LOG_INFO, "%d ranks on %d hosts (local size %d); hierarchical allreduce %s; "
            "fusion threshold %zu bytes; cycle time %g ms; stall check %g s, shutdown %g s",
            hvd_g.size, hvd_g.cross_size, hvd_g.local_size, hvd_g.hierarchical ? "on" : "off",
            hvd_g.cfg.fusion_threshold, hvd_g.cfg.cycle_time_ms, hvd_g.cfg.stall_check_s,
            hvd_g.cfg.stall_shutdown_s);
  hvd_status_t s = response_cache_rounds();
  if (s == HVD_OK) s = hvd_ps_comm_init(hvd_g.ctrl);   /* parameter servers' traffic */
  if (s == HVD_OK) s = transport(hvd_g.ctrl, &hvd_g.world, "world");
  if (s == HVD_OK && hvd_g.hierarchical) {
    s = transport(hvd_g.local_comm, &hvd_g.local, "local");
    if (s == HVD_OK) s = transport(hvd_g.cross_comm, &hvd_g.cross, "cross");
  }
  return s;
}

/* Where the background thread runs. By default it inherits the rank's binding, which
   the launcher sets (hvdrun: one core or core set per rank, mpirun's --bind-to), so it
   shares the rank's cores and memory node and never lands on another rank's core.
   HVD_THREAD_AFFINITY (Horovod's HOROVOD_THREAD_AFFINITY) pins the background thread of
   local rank i to the i-th core of its comma-separated list instead. */
static hvd_status_t background_thread_placement(pthread_attr_t *attr) {
  const char *list = hvd_g.cfg.thread_affinity;
  if (!list[0]) return HVD_OK;
  const char *p = list;
  for (int i = 0; i < hvd_g.local_rank && p; i++) {
    p = strchr(p, ',');
    if (p) p++;
  }
  if (!p)
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "hvd_init: HVD_THREAD_AFFINITY=\"%s\" has no entry for local rank "
                         "%d (give one core id per local rank, %d in all)",
                         list, hvd_g.local_rank, hvd_g.local_size);
  long core = strtol(p, NULL, 10);
  long ncores = sysconf(_SC_NPROCESSORS_CONF);
  if (core >= CPU_SETSIZE || (ncores > 0 && core >= ncores))
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT,
                         "hvd_init: HVD_THREAD_AFFINITY=\"%s\": core %ld of local rank %d "
                         "does not exist (this machine has %ld)",
                         list, core, hvd_g.local_rank, ncores);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET((int)core, &set);
  int e = pthread_attr_setaffinity_np(attr, sizeof(set), &set);
  if (e != 0)
    return hvd_set_error(HVD_ERR_BACKEND,
                         "hvd_init: pinning the background thread to core %ld failed: %s",
                         core, strerror(e));
  hvd_log(HVD_LOG_INFO, "background thread pinned to core %ld (HVD_THREAD_AFFINITY)", core);
  return HVD_OK;
}

hvd_status_t hvd_init(void) {
  pthread_mutex_lock(&init_mu);
  if (atomic_load(&hvd_g_initialized)) {
    pthread_mutex_unlock(&init_mu);
    return HVD_OK;
  }
  char err[HVD_ERROR_MAX];
  hvd_status_t s = hvd_config_load(&hvd_g.cfg, err, sizeof(err));
  if (s != HVD_OK) {
    pthread_mutex_unlock(&init_mu);
    return hvd_set_error(s, "hvd_init: %s", err);
  }

  int inited = 0, finalized = 0, provided = 0, rc;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (finalized) {
    pthread_mutex_unlock(&init_mu);
    return hvd_set_error(HVD_ERR_BACKEND, "hvd_init: MPI was already finalized (by an "
                         "earlier hvd_shutdown or the program); it cannot start again");
  }
  if (!inited) {
    if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided)) != MPI_SUCCESS) {
      pthread_mutex_unlock(&init_mu);
      return mpi_fail(rc, "MPI_Init_thread");
    }
    hvd_g.owns_mpi = 1;
  } else {
    MPI_Query_thread(&provided);
    hvd_g.owns_mpi = 0;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    pthread_mutex_unlock(&init_mu);
    return hvd_set_error(HVD_ERR_BACKEND,
                         "hvd_init: the MPI library provides thread level %d, hvd needs "
                         "MPI_THREAD_SERIALIZED (%d): its background thread calls MPI%s",
                         provided, MPI_THREAD_SERIALIZED,
                         inited ? "; initialise MPI with MPI_Init_thread(..., "
                                  "MPI_THREAD_MULTIPLE, ...)" : "");
  }

  hvd_g.start_us = util_now_us();
  hvd_g.ctrl = hvd_g.local_comm = hvd_g.cross_comm = hvd_g.round_comm = MPI_COMM_NULL;
  hvd_g.round_words = 0;
  hvd_g.round_inflight = 0;
  atomic_store(&hvd_g.stat_cached, 0);
  atomic_store(&hvd_g.stat_negotiated, 0);
  hvd_g.cancel = 0;
  hvd_joined_sets_free();
  atomic_store(&hvd_g.failed, 0);
  atomic_store(&hvd_g.peer_lost, 0);
  atomic_store(&hvd_g.bg_alive_us, (long long)util_now_us());
  s = topology();
  /* srun without PMIx, or a program typed into an allocation's shell: SLURM says this
     is one task of many while MPI says one rank. Refused, instead of running alone. */
  if (s == HVD_OK && (s = hvd_launch_env_check(hvd_g.size, err, sizeof(err))) != HVD_OK)
    hvd_set_error(s, "hvd_init: %s", err);
  if (s == HVD_OK && hvd_g.cfg.fusion_threshold > 0) {
    hvd_g.fusion_buf = util_huge_alloc(hvd_g.cfg.fusion_threshold);
    if (!hvd_g.fusion_buf)
      s = hvd_set_error(HVD_ERR_NO_MEMORY, "hvd_init: cannot allocate the %zu-byte fusion "
                        "buffer (lower HVD_FUSION_THRESHOLD)", hvd_g.cfg.fusion_threshold);
    hvd_g.fusion_cap = hvd_g.cfg.fusion_threshold;
  }
  if (s == HVD_OK && hvd_g.rank == 0 && hvd_g.cfg.timeline[0]) {
    s = hvd_timeline_open(&hvd_g.timeline, hvd_g.cfg.timeline, err, sizeof(err));
    if (s != HVD_OK) hvd_set_error(s, "hvd_init: %s", err);
  }
  if (s == HVD_OK) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hvd_g.work_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&hvd_g.mu);
    hvd_g.queue_head = hvd_g.queue_tail = NULL;
    memset(hvd_g.auto_seq, 0, sizeof(hvd_g.auto_seq));
    hvd_g.shutdown_requested = 0;
    hvd_g.stopped = 0;
    hvd_g.stop_msg[0] = '\0';
    hvd_g.ninflight = 0;
    atomic_store(&hvd_g.queued, 0);
    pthread_mutex_unlock(&hvd_g.mu);
    pthread_attr_t attr;
    int e = pthread_attr_init(&attr);
    if (e == 0) {
      s = background_thread_placement(&attr);
      if (s == HVD_OK) {
        e = pthread_create(&hvd_g.thread, &attr, hvd_background_main, NULL);
        if (e != 0)
          s = hvd_set_error(HVD_ERR_BACKEND, "hvd_init: pthread_create failed: %s",
                            strerror(e));
      }
      pthread_attr_destroy(&attr);
    } else {
      s = hvd_set_error(HVD_ERR_BACKEND, "hvd_init: pthread_attr_init failed: %s",
                        strerror(e));
    }
    if (s != HVD_OK) pthread_cond_destroy(&hvd_g.work_cv);
    if (s == HVD_OK && (s = hvd_watchdog_start()) != HVD_OK) {
      /* The background thread is running: stop it as hvd_shutdown would. */
      pthread_mutex_lock(&hvd_g.mu);
      hvd_g.shutdown_requested = 1;
      pthread_cond_signal(&hvd_g.work_cv);
      pthread_mutex_unlock(&hvd_g.mu);
      pthread_join(hvd_g.thread, NULL);
      pthread_cond_destroy(&hvd_g.work_cv);
    }
  }
  if (s != HVD_OK) {
    release(!atomic_load(&hvd_g.failed));
    hvd_g.rank = hvd_g.size = hvd_g.local_rank = hvd_g.local_size = -1;
    hvd_g.cross_rank = hvd_g.cross_size = -1;
    pthread_mutex_unlock(&init_mu);
    return s;
  }
  atomic_store(&hvd_g_initialized, 1);
  pthread_mutex_unlock(&init_mu);
  return HVD_OK;
}

#define FINALIZE_WAIT_S 5.0

/* After a failure: whether every rank reached hvd_shutdown within FINALIZE_WAIT_S (a
   barrier that gives up). */
static int every_rank_here(void) {
  MPI_Request req;
  if (hvd_g.ctrl == MPI_COMM_NULL || MPI_Ibarrier(hvd_g.ctrl, &req) != MPI_SUCCESS) return 0;
  double deadline = util_now_s() + FINALIZE_WAIT_S;
  for (;;) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
    if (done) return 1;
    if (util_now_s() > deadline) return 0;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

/* After a failure that every rank survived: the background threads may have stopped
   after different rounds (one can have started the next round before it heard of the
   failure). Every rank takes part in rounds until all have started as many, and waits
   for them, so no nonblocking collective is left on the communicator that is about to
   be freed. 0 when that did not finish within FINALIZE_WAIT_S. */
static int drain_rounds(void) {
#if HVD_HAVE_ROUND_MPI
  if (hvd_g.round_comm == MPI_COMM_NULL) return 1;
  double deadline = util_now_s() + FINALIZE_WAIT_S;
  uint64_t mine = hvd_g.rounds_started, most = 0;
  MPI_Request req;
  if (MPI_Iallreduce(&mine, &most, 1, MPI_UINT64_T, MPI_MAX, hvd_g.ctrl, &req) !=
      MPI_SUCCESS)
    return 0;
  for (;;) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
    if (done) break;
    if (util_now_s() > deadline) return 0;
    sched_yield();
  }
  char err[HVD_ERROR_MAX];
  for (;;) {
    if (hvd_g.round_inflight) {
      int done = 0;
      if (!hvd_round_test(&done, err, sizeof(err))) return 0;
      if (!done) {
        if (util_now_s() > deadline) return 0;
        sched_yield();
        continue;
      }
    }
    if (hvd_g.rounds_started >= most) return 1;
    /* A round that asks for nothing: no hits (0 bits under AND), no flags. */
    for (int i = 0; i < hvd_g.round_words; i++) hvd_g.round_send[i] = 0;
    if (!hvd_round_start(err, sizeof(err))) return 0;
  }
#else
  return 1;
#endif
}

hvd_status_t hvd_shutdown(void) {
  pthread_mutex_lock(&init_mu);
  if (!atomic_load(&hvd_g_initialized)) {
    pthread_mutex_unlock(&init_mu);
    return hvd_set_error(HVD_ERR_NOT_INITIALIZED,
                         "hvd_shutdown called before hvd_init() or after hvd_shutdown()");
  }
  pthread_mutex_lock(&hvd_g.mu);
  hvd_g.shutdown_requested = 1;
  pthread_cond_signal(&hvd_g.work_cv);
  pthread_mutex_unlock(&hvd_g.mu);
  pthread_join(hvd_g.thread, NULL);   /* it released the device state as it ended */
  hvd_watchdog_stop();
  hvd_process_sets_free();
  hvd_joined_sets_free();
  /* From here on calls return HVD_ERR_NOT_INITIALIZED. */
  atomic_store(&hvd_g_initialized, 0);
  pthread_cond_destroy(&hvd_g.work_cv);
  /* After a failure MPI_Finalize would wait without end for a rank that is gone (it
     synchronises with every rank), so it runs only if every rank reaches this point
     within FINALIZE_WAIT_S; otherwise the process ends without it and the launcher
     ends the job (mpirun reports the ranks that exited without MPI_Finalize). */
  int finalize = hvd_g.owns_mpi;
  /* A round still in flight after a clean stop (the drain in the background thread ran
     out of time) is handled as after a failure. */
  if (hvd_g.round_inflight) atomic_store(&hvd_g.failed, 1);
  int failed = atomic_load(&hvd_g.failed);
  if (failed && (atomic_load(&hvd_g.peer_lost) || !every_rank_here() || !drain_rounds())) {
    if (!atomic_load(&hvd_g.peer_lost))
      hvd_log(HVD_LOG_WARNING, "hvd_shutdown: after the failure not every rank reached "
              "hvd_shutdown within %g s; MPI is left unfinalized so that this process "
              "can end (the launcher ends the job)", FINALIZE_WAIT_S);
    finalize = 0;
    failed = 2;
  }
  release(failed != 2);
  hvd_status_t s = HVD_OK;
  if (finalize) {
    int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) s = hvd_set_error(HVD_ERR_BACKEND, "hvd_shutdown: MPI_Finalize failed");
  }
  hvd_g.owns_mpi = 0;
  hvd_g.rank = hvd_g.size = hvd_g.local_rank = hvd_g.local_size = -1;
  hvd_g.cross_rank = hvd_g.cross_size = -1;
  pthread_mutex_unlock(&init_mu);
  return s;
}
