/* train/replica.c: one data-parallel replica's set-up (train/replica.h). */
#include <string.h>

#include "nn/nn_cuda.h"
#include "train/replica.h"
#include "train/step.h"
#include "util/clock.h"

static int nn_failed(train_replica_t *r, train_replica_stage_t stage, nn_status_t s) {
  r->stage = stage;
  r->nn_status = s;
  return -1;
}

static int hvd_failed(train_replica_t *r, train_replica_stage_t stage, const char *what,
                      hvd_status_t s) {
  r->stage = stage;
  r->failed = what;
  r->hvd_status = s;
  return -1;
}

int train_replica_create(train_replica_t *r, const train_replica_opts_t *o) {
  r->model = NULL;
  r->buckets = NULL;
  r->stage = TRAIN_REPLICA_OK;
  r->failed = NULL;
  r->nn_status = NN_OK;
  r->hvd_status = HVD_OK;
  r->err[0] = '\0';
  nn_status_t s = nn_model_create_from(&r->model, o->model, &o->cfg);
  if (s != NN_OK) return nn_failed(r, TRAIN_REPLICA_CREATE, s);
  if (o->optimizer && (s = nn_model_optim_create(r->model, &o->optim)) != NN_OK)
    return nn_failed(r, TRAIN_REPLICA_OPTIMIZER, s);
  return 0;
}

/* A broadcast from rank 0; nothing to send is no collective. */
static int bcast(train_replica_t *r, const char *name, void *buf, size_t count, hvd_dtype_t t) {
  if (count == 0) return 0;
  hvd_status_t h = hvd_broadcast(name, buf, count, t, 0);
  return h == HVD_OK ? 0 : hvd_failed(r, TRAIN_REPLICA_BROADCAST, name, h);
}

int train_model_counters(const nn_model_t *m) {
  int n = 0;
  for (int i = 0; i < nn_model_num_slices(m); i++)
    if (nn_model_slice(m, i)->kind == NN_SLICE_COUNTER) n++;
  return n;
}

int train_replica_start(train_replica_t *r, const train_replica_opts_t *o) {
  nn_model_t *m = r->model;
  const size_t np = nn_model_param_len(m), nb = nn_model_num_buffers(m);
  if (o->broadcast) {
    r->broadcast_start = util_now_s();
    if (bcast(r, "init.params", nn_model_params(m), np, HVD_FLOAT32) != 0) return -1;
    r->broadcast_end = util_now_s();
    if (bcast(r, "init.buffers", nn_model_buffers(m), nb, HVD_FLOAT32) != 0 ||
        bcast(r, "init.counters", nn_model_counters(m), (size_t)train_model_counters(m),
              HVD_INT64) != 0)
      return -1;
  }
  if (o->own_buffers) memcpy(nn_model_buffers(m), o->own_buffers, nb * sizeof(float));
  /* Everything above went through the host arrays; moving to the device takes them, the
     optimizer included, along. The precision is part of how the model is laid out on the
     device: set it first. */
  if (o->gpu) {
    nn_status_t s = nn_model_set_precision(m, &o->precision);
    if (s != NN_OK) return nn_failed(r, TRAIN_REPLICA_PRECISION, s);
    if (o->tf32 >= 0 && (s = nn_cuda_set_tf32(o->tf32)) != NN_OK)
      return nn_failed(r, TRAIN_REPLICA_PRECISION, s);
    s = nn_model_to_device(m, NN_DEVICE_CUDA);
    if (s != NN_OK) return nn_failed(r, TRAIN_REPLICA_DEVICE, s);
    /* A bucket's allreduce waits for the kernels queued on nn's stream so far (backward's
       gradients of that bucket) instead of for the whole device. */
    hvd_cuda_set_stream(nn_cuda_stream());
  }
  if (!o->buckets) return 0;
  return train_replica_buckets(r, o);
}

int train_replica_buckets(train_replica_t *r, const train_replica_opts_t *o) {
  nn_model_t *m = r->model;
  hvd_grad_buckets_free(r->buckets);
  r->buckets = NULL;
  /* Frozen layers (train --freeze) lie below `from`: their gradients are not sent. */
  const size_t from = nn_model_trainable_from(m), np = nn_model_param_len(m);
  hvd_status_t h = hvd_grad_buckets_create(&r->buckets, nn_model_grads_home(m) + from,
                                           np - from, o->bucket_bytes, o->first_bucket_bytes,
                                           o->compression, o->op);
  if (h != HVD_OK) return hvd_failed(r, TRAIN_REPLICA_BUCKETS, "gradient buckets", h);
  if (train_buckets_at_params(r->buckets, m, r->err, sizeof r->err) != 0) {
    r->stage = TRAIN_REPLICA_BUCKET_BOUNDS;
    return -1;
  }
  hvd_grad_buckets_set_overlap(r->buckets, o->overlap);
  return 0;
}

void train_replica_free(train_replica_t *r) {
  hvd_grad_buckets_free(r->buckets);
  nn_model_free(r->model);
  r->buckets = NULL;
  r->model = NULL;
}
