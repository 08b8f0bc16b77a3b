/* train/pipeline.c: the pipeline's step (train/pipeline.h says what it does).

   Schedules, for stage s of S with M micro-batches (F k: forward of micro-batch k,
   B k: its backward; both in ascending k):
     GPipe: F 0 .. F M-1, then B 0 .. B M-1: every micro-batch stashed at once.
     1F1B (PipeDream-flush): W = min(S - 1 - s, M) forwards to fill the pipe, then F and
       B alternate (F W+i, B i), then the last W backwards: at most W + 1 micro-batches
       stashed, so the activation memory of a stage is bounded by S, not M.
   S = 2, M = 4, time running to the right (idle: the bubble, (S-1)/(M+S-1) of it):
     GPipe  stage 0: F0 F1 F2 F3 .. .. .. B0 B1 B2 B3
            stage 1: .. F0 F1 F2 F3 B0 B1 B2 B3 ..
     1F1B   stage 0: F0 F1 .. B0 F2 B1 F3 B2 .. B3
            stage 1: .. F0 B0 F1 B1 F2 B2 F3 B3 ..
   Every receive of the step is posted at its start (one buffer per micro-batch), and
   sends are non-blocking: a transfer overlaps whatever the stage computes meanwhile.

   Gradient weights: nn's loss is the mean over a micro-batch, so micro-batch k weighs
   w_k = n_k / n (n: the replica's samples) to make the sum the mean over the replica's
   batch; the sum so far is rescaled when the weight changes (unequal micro-batches)
   and multiplied by the last weight at the end, without a second gradient buffer. */
#include "train/pipeline_internal.h"
#include "train/pipeline_plan.h"
#include "hvd/hvd.h"
#include "util/clock.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int train_pipeline_mpi_init(char *err, size_t errlen) {
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    snprintf(err, errlen, "MPI_Init_thread failed");
    return -1;
  }
  if (inited) MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    snprintf(err, errlen, "the pipeline needs MPI_THREAD_MULTIPLE (point-to-point beside hvd's "
             "background thread); this MPI gives level %d", provided);
    return -1;
  }
  return 0;
}

void train_pipeline_mpi_finalize(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

static int fail(char *err, size_t errlen, const char *fmt, const char *detail) {
  snprintf(err, errlen, fmt, detail);
  return -1;
}

/* Cuts: the given ones (checked) or rank 0's balanced plan, the same on every rank. */
static int plan(train_pipeline_t *p, const train_pipeline_opts_t *o, char *err, size_t errlen) {
  int L = nn_model_num_layers(p->m);
  int32_t cuts[MAX_STAGES];
  /* layer_s[L]: seconds per byte of a stash: 0, a micro-batch in flight keeps its own
     activation set (nn_model_range_use switches sets without copying). */
  double *layer_s = calloc((size_t)L + 1, sizeof(double));
  if (!layer_s) return fail(err, errlen, "%s", "out of memory");
  int rc = train_pipeline_time_layers(p->m, p->micro_n, layer_s, err, errlen);
  int last_stashes = p->schedule == TRAIN_PIPE_GPIPE;
  if (rc == 0 && o->cuts) {
    for (int s = 0; s < p->S - 1 && rc == 0; s++) {
      cuts[s] = o->cuts[s];
      if (!nn_model_range_cut_ok(p->m, cuts[s]) || (s > 0 && cuts[s] <= cuts[s - 1])) {
        snprintf(err, errlen, "cut %d before layer %d: cuts must ascend and fall where no "
                 "connection crosses (%s has %d layers)", s, cuts[s], nn_model_name(p->m), L);
        rc = -1;
      }
    }
  } else if (rc == 0) {
    int c[MAX_STAGES];
    rc = train_pipeline_balance(p->m, layer_s, p->S, p->micro_n, layer_s[L], last_stashes, c,
                                err, errlen);
    for (int s = 0; rc == 0 && s < p->S - 1; s++) cuts[s] = c[s];
  }
  /* Rank 0's plan (and times) for everyone: timings differ from rank to rank. */
  int32_t ok = rc == 0;
  hvd_status_t hs = hvd_allreduce("pipe.plan.ok", &ok, &ok, 1, HVD_INT32, HVD_MIN);
  if (hs == HVD_OK && ok) hs = hvd_broadcast("pipe.plan.cuts", cuts, (size_t)p->S, HVD_INT32, 0);
  if (hs == HVD_OK && ok)
    hs = hvd_broadcast("pipe.plan.times", layer_s, (size_t)L + 1, HVD_FLOAT64, 0);
  if (hs != HVD_OK) snprintf(err, errlen, "agreeing on the pipeline plan: %s", hvd_last_error());
  if (hs == HVD_OK && !ok && rc == 0) snprintf(err, errlen, "another rank could not plan the pipeline");
  p->bounds[0] = 0;
  for (int s = 0; s < p->S - 1; s++) p->bounds[s + 1] = cuts[s];
  p->bounds[p->S] = L;
  for (int s = 0; s < p->S && hs == HVD_OK && ok; s++) {
    int stashes = s < p->S - 1 || last_stashes;
    p->stage_s[s] = train_pipeline_stage_time(p->m, layer_s, p->bounds[s], p->bounds[s + 1],
                                              p->micro_n, layer_s[L], stashes);
    p->stage_copy_s[s] = p->stage_s[s] - train_pipeline_stage_time(p->m, layer_s, p->bounds[s],
                                                                   p->bounds[s + 1], p->micro_n,
                                                                   0, 0);
  }
  free(layer_s);
  return hs == HVD_OK && ok ? 0 : -1;
}

static int add_sets(train_pipeline_t *p, char *err, size_t errlen) {
  int ranks[4096];
  if (p->R > 4096) return fail(err, errlen, "%s", "more than 4096 replicas");
  for (int s = 0; s < p->S; s++) {
    for (int r = 0; r < p->R; r++) ranks[r] = r * p->S + s;
    if (hvd_process_set_add(ranks, p->R, &p->sets[s]) != HVD_OK)
      return fail(err, errlen, "adding the stage's process set: %s", hvd_last_error());
  }
  return 0;
}

static float **float_arrays(int n, size_t floats) {
  float **a = calloc((size_t)n, sizeof(*a));
  for (int i = 0; a && i < n; i++)
    if (!(a[i] = malloc((floats ? floats : 1) * sizeof(float)))) return NULL;
  return a;
}

static int alloc_buffers(train_pipeline_t *p) {
  int M = p->M, first = p->bounds[p->stage], last = p->bounds[p->stage + 1];
  size_t mn = (size_t)p->micro_n;
  p->in_floats = first > 0 ? nn_model_layer_out_size(p->m, first - 1) : 0;
  p->out_floats = nn_model_layer_out_size(p->m, last - 1);
  p->wants_dx = first > 0 && nn_model_range_input_grad(p->m, first) != NULL;
  p->next_sends_dx = p->stage < p->S - 1 && nn_model_range_input_grad(p->m, last) != NULL;
  p->stash_bytes = nn_model_range_stash_bytes(p->m, first, last, p->micro_n);
  p->act_in = float_arrays(M, mn * p->in_floats);
  p->grad_out = float_arrays(M, mn * p->in_floats);
  p->act_out = float_arrays(M, mn * p->out_floats);
  p->grad_in = float_arrays(M, mn * p->out_floats);
  p->recv_act = calloc((size_t)M * 4, sizeof(MPI_Request));
  p->trace = calloc((size_t)M * 2, sizeof(*p->trace));
  p->stash = calloc((size_t)M, sizeof(*p->stash));
  p->batch = calloc(1 + (size_t)M * mn, sizeof(int32_t));
  p->pool = calloc((size_t)M, sizeof(*p->pool));
  if (!p->act_in || !p->grad_out || !p->act_out || !p->grad_in || !p->recv_act || !p->trace ||
      !p->stash || !p->pool || !p->batch || p->stash_bytes == 0)
    return 0;
  p->recv_grad = p->recv_act + M;
  p->send_act = p->recv_act + 2 * M;
  p->send_grad = p->recv_act + 3 * M;
  for (int i = 0; i < 4 * M; i++) p->recv_act[i] = MPI_REQUEST_NULL;
  for (int s = 0; s < MAX_STAGES; s++) p->batch_req[s] = MPI_REQUEST_NULL;
  return 1;
}

int train_pipeline_create(train_pipeline_t **out, nn_model_t *m,
                          const train_pipeline_opts_t *o, int micro_n, char *err,
                          size_t errlen) {
  *out = NULL;
  int size = hvd_size(), L = nn_model_num_layers(m);
  if (o->stages < 1 || o->stages > MAX_STAGES || o->stages > L || size % o->stages != 0) {
    snprintf(err, errlen, "--pipeline-stages %d: expected 1 to %d stages dividing the %d "
             "ranks (and at most the model's %d layers)", o->stages, MAX_STAGES, size, L);
    return -1;
  }
  if (o->micro_batches < 1 || micro_n < 1) {
    snprintf(err, errlen, "--micro-batches %d: expected at least 1 (of at least one sample)",
             o->micro_batches);
    return -1;
  }
  train_pipeline_t *p = calloc(1, sizeof(*p));
  if (!p) return fail(err, errlen, "%s", "out of memory");
  p->m = m;
  p->S = o->stages;
  p->M = o->micro_batches;
  p->schedule = o->schedule;
  p->rank = hvd_rank();
  p->size = size;
  p->stage = p->rank % p->S;
  p->replica = p->rank / p->S;
  p->R = size / p->S;
  p->micro_n = micro_n;
  p->comm = MPI_COMM_NULL;
  p->failed_step = -1;
  /* Test knobs: HVD_TRAIN_TEST_PIPE_FAIL_STEP=N fails step N (from 0) on every rank,
     stage 0 after its first forward (a send posted), the others before their first
     wait; HVD_TRAIN_TEST_PIPE_GATHER_NOMEM=R: rank R's gather finds no memory. */
  const char *knob = getenv("HVD_TRAIN_TEST_PIPE_FAIL_STEP");
  p->fail_step = knob ? atoll(knob) : -1;
  knob = getenv("HVD_TRAIN_TEST_PIPE_GATHER_NOMEM");
  p->gather_nomem = knob && atoi(knob) == p->rank;
  /* A lost peer is hvd's to find (hvd_check_health); this only ends a wait on a live
     but stuck stage, long after the peer timeout would have named a lost one. */
  const char *t = getenv("HVD_PEER_TIMEOUT_SECONDS");
  p->stuck_s = 6.0 * (t && atof(t) > 0 ? atof(t) : 10.0) + 30.0;
  int rc = plan(p, o, err, errlen);
  if (rc == 0) rc = add_sets(p, err, errlen);
  if (rc == 0 && MPI_Comm_dup(MPI_COMM_WORLD, &p->comm) != MPI_SUCCESS)
    rc = fail(err, errlen, "%s", "MPI_Comm_dup failed");
  if (rc == 0 && !alloc_buffers(p)) rc = fail(err, errlen, "%s", "out of memory for the stage's buffers");
  if (rc != 0) {
    train_pipeline_free(p);
    return -1;
  }
  nn_model_range_params(m, p->bounds[p->stage], p->bounds[p->stage + 1], &p->pbegin, &p->pend);
  *out = p;
  return 0;
}

static void free_arrays(float **a, int n) {
  for (int i = 0; a && i < n; i++) free(a[i]);
  free(a);
}

void train_pipeline_free(train_pipeline_t *p) {
  if (!p) return;
  free_arrays(p->act_in, p->M);
  free_arrays(p->act_out, p->M);
  free_arrays(p->grad_in, p->M);
  free_arrays(p->grad_out, p->M);
  for (int i = 0; p->pool && i < p->npool; i++) nn_range_acts_free(p->pool[i]);
  for (int i = 0; p->stash && i < p->M; i++) nn_range_acts_free(p->stash[i]);
  free(p->pool);
  free(p->stash);
  free(p->recv_act);
  free(p->batch);
  free(p->trace);
  if (p->comm != MPI_COMM_NULL) MPI_Comm_free(&p->comm);
  free(p);
}

int train_pipeline_stage(const train_pipeline_t *p) { return p->stage; }
int train_pipeline_replicas(const train_pipeline_t *p) { return p->R; }

void train_pipeline_stage_layers(const train_pipeline_t *p, int s, int *first, int *last) {
  *first = p->bounds[s];
  *last = p->bounds[s + 1];
}

void train_pipeline_describe(const train_pipeline_t *p, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int s = 0; s < p->S && off < len; s++) {
    size_t b, e, params = 0;
    nn_model_range_params(p->m, p->bounds[s], p->bounds[s + 1], &b, &e);
    for (int i = 0; i < nn_model_num_slices(p->m); i++) {
      const nn_slice_t *sl = nn_model_slice(p->m, i);
      if (sl->kind == NN_SLICE_PARAM && sl->offset >= b && sl->offset < e) params += sl->numel;
    }
    off += (size_t)snprintf(buf + off, len - off,
                            "stage %d: layers %d-%d (%s .. %s), %zu parameters, %.3f ms "
                            "per micro-batch (%.3f of it copying activations)\n", s,
                            p->bounds[s], p->bounds[s + 1] - 1,
                            nn_model_layer_name(p->m, p->bounds[s]),
                            nn_model_layer_name(p->m, p->bounds[s + 1] - 1), params,
                            p->stage_s[s] * 1e3, p->stage_copy_s[s] * 1e3);
  }
}

int train_pipeline_wait_peer(train_pipeline_t *p, MPI_Request *r, int peer, const char *what,
                             char *err, size_t errlen) {
  double start = util_now_s(), checked = start;
  for (unsigned spins = 0;; spins++) {
    int done = 0;
    if (MPI_Test(r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      snprintf(err, errlen, "MPI_Test (%s, rank %d) failed", what, peer);
      return -1;
    }
    if (done) return 0;
    if (spins % 16 == 0) sched_yield();
    double now = util_now_s();
    if (now - checked < 0.01) continue;
    checked = now;
    /* A lost rank, named as collectives name it (hvd's heartbeats and census). */
    if (hvd_check_health() != HVD_OK) {
      snprintf(err, errlen, "pipeline stage %d waiting for %s from stage %d (rank %d): %s",
               p->stage, what, peer % p->S, peer, hvd_last_error());
      return -1;
    }
    if (now - start > p->stuck_s) {
      snprintf(err, errlen, "pipeline stage %d: no %s from stage %d (rank %d) for %.0f s, "
               "though the runtime hears from every rank: a stage stuck or far slower "
               "than the others", p->stage, what, peer % p->S, peer, now - start);
      return -1;
    }
  }
}

/* A failed step's requests: cancelled (a receive not matched yet, a send if this MPI
   can), else completed, within DROP_WAIT_S in all; one still active then (a peer gone
   mid-transfer) is freed, and MPI finishes it into buffers that live until
   train_pipeline_free. */
#define DROP_WAIT_S 2.0

void train_pipeline_drop_requests(train_pipeline_t *p) {
  double deadline = util_now_s() + DROP_WAIT_S;
  for (int i = 0; i < 4 * p->M + MAX_STAGES; i++) {
    MPI_Request *r = i < 4 * p->M ? &p->recv_act[i] : &p->batch_req[i - 4 * p->M];
    if (*r == MPI_REQUEST_NULL) continue;
    int done = 0, ok = MPI_Cancel(r) == MPI_SUCCESS;
    while (ok && !done && util_now_s() < deadline) {
      ok = MPI_Test(r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS;
      if (!done) sched_yield();
    }
    /* Nothing more to do on a failure here: the step reports its own error. */
    if (*r != MPI_REQUEST_NULL && MPI_Request_free(r) != MPI_SUCCESS) *r = MPI_REQUEST_NULL;
  }
  for (int k = 0; k < p->M; k++)
    if (p->stash[k]) {
      p->pool[p->npool++] = p->stash[k];
      p->stash[k] = NULL;
    }
  p->inflight = 0;
}

void train_pipeline_note(train_pipeline_t *p, char kind, int k, double t0) {
  if (p->ntrace >= 2 * p->M) return;
  p->trace[p->ntrace++] = (train_pipeline_event_t){kind, k, t0 - p->step_start_s,
                                                   util_now_s() - p->step_start_s};
}

int train_pipeline_trace(const train_pipeline_t *p, const train_pipeline_event_t **events) {
  *events = p->trace;
  return p->ntrace;
}

void train_pipeline_stats(const train_pipeline_t *p, train_pipeline_stats_t *s) {
  *s = p->stats;
  s->peak_stash_bytes = (size_t)p->peak_inflight * p->stash_bytes;
}
