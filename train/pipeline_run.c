/* train/pipeline_run.c: the train program's glue to its pipeline (train/pipeline_run.h). */
#include "train/pipeline_run.h"
#include "hvd/hvd.h"

#include <stdlib.h>
#include <string.h>

int train_pipeline_run_check(const train_opts_t *o, int gpu, int ps, char *err,
                             size_t errlen) {
  if (o->pipeline_stages <= 1) return 0;
  if (gpu || o->batches_per_allreduce > 1)
    snprintf(err, errlen, "--pipeline-stages %d: a pipeline runs on the CPU (--device cpu) "
             "without --batches-per-allreduce (got --device %s, --batches-per-allreduce %d)",
             o->pipeline_stages, o->device, o->batches_per_allreduce);
  else if (ps)
    snprintf(err, errlen, "--pipeline-stages %d with --variable-update %s: a pipeline's "
             "stages average their gradients with the ring; use --variable-update horovod",
             o->pipeline_stages, o->variable_update);
  else if (o->micro_batches > o->batch)
    snprintf(err, errlen, "--micro-batches %d is more than --batch-size %d (samples per "
             "replica)", o->micro_batches, o->batch);
  else
    return 0;
  return -1;
}

int train_pipeline_run_create(train_pipeline_t **out, const train_opts_t *o, nn_model_t *m,
                              int rank, int replicas, FILE *plan_out, char *err,
                              size_t errlen) {
  train_pipeline_opts_t po = {.stages = o->pipeline_stages, .micro_batches = o->micro_batches,
                              .schedule = strcmp(o->pipeline_schedule, "gpipe") == 0
                                              ? TRAIN_PIPE_GPIPE : TRAIN_PIPE_1F1B};
  int micro = (o->batch + o->micro_batches - 1) / o->micro_batches;
  if (train_pipeline_create(out, m, &po, micro, err, errlen) != 0) return -1;
  if (rank == 0 && !o->quiet) {
    char plan[4096];
    train_pipeline_describe(*out, plan, sizeof plan);
    fprintf(plan_out, "pipeline: %d stages x %d replicas, %d micro-batches of %d, %s\n%s",
            po.stages, replicas, o->micro_batches, micro, o->pipeline_schedule, plan);
    fflush(plan_out);
  }
  return 0;
}

int train_pipeline_run_step(train_pipeline_t *p, int rank, const float *x, const int32_t *y,
                            int n, int total, float lr, double sums[3], char *err,
                            size_t errlen) {
  double loss_sum = 0;
  long long correct = 0;
  if (train_pipeline_step(p, x, y, n, lr, &loss_sum, &correct, err, errlen) != 0) return -1;
  if (rank == 0) {
    sums[0] += loss_sum;
    sums[1] += (double)correct;
    sums[2] += total;
  }
  return 0;
}

int train_pipeline_run_gather(train_pipeline_t *p, int epoch_end, char *err, size_t errlen) {
  if (epoch_end && train_pipeline_average_stats(p, err, errlen) != 0) return -1;
  return train_pipeline_gather(p, err, errlen);
}

enum { GANTT_COLUMNS = 72 };

/* The last step of replica 0 as a Gantt chart, one line per stage, from every rank's
   trace (ev: per rank, 2 M events of 4 doubles: kind, micro-batch, start, end; kind 0
   past the end). A computation fills its columns with F or B, its first column with
   the micro-batch's last digit (two columns at least, so that a short one still shows
   its kind, pushing the next one right); '.' is idle. */
static void print_gantt(FILE *out, const double *ev, int S, int M) {
  size_t per = (size_t)8 * M;
  double end = 0;
  for (int s = 0; s < S; s++)
    for (int i = 0; i < 2 * M && ev[s * per + 4 * i] != 0; i++)
      if (ev[s * per + 4 * i + 3] > end) end = ev[s * per + 4 * i + 3];
  if (!(end > 0)) return;
  fprintf(out, "pipeline: the last step of replica 0, %.1f ms (F: forward, B: backward, "
          "the digit: its micro-batch, '.': idle)\n", end * 1e3);
  for (int s = 0; s < S; s++) {
    char line[GANTT_COLUMNS + 1];
    memset(line, '.', GANTT_COLUMNS);
    line[GANTT_COLUMNS] = '\0';
    for (int i = 0, next = 0; i < 2 * M && ev[s * per + 4 * i] != 0; i++) {
      const double *e = ev + s * per + 4 * i;
      int a = (int)(e[2] / end * GANTT_COLUMNS), b = (int)(e[3] / end * GANTT_COLUMNS);
      if (a < next) a = next;     /* after the previous computation's letters */
      if (a > GANTT_COLUMNS - 2) a = GANTT_COLUMNS - 2;
      if (b < a + 2) b = a + 2;   /* the digit and at least one letter: F or B */
      for (int c = a; c < b && c < GANTT_COLUMNS; c++) line[c] = (char)e[0];
      line[a] = (char)('0' + (int)e[1] % 10);
      next = b;
    }
    fprintf(out, "  stage %d |%s|\n", s, line);
  }
}

/* This rank's trace packed for the allgather (see print_gantt); NULL: out of memory. */
static double *pack_trace(const train_pipeline_t *p, int M) {
  double *v = calloc((size_t)8 * M, sizeof(double));
  const train_pipeline_event_t *e;
  int n = train_pipeline_trace(p, &e);
  for (int i = 0; v && i < n && i < 2 * M; i++) {
    v[4 * i] = e[i].kind;
    v[4 * i + 1] = e[i].micro;
    v[4 * i + 2] = e[i].start_s;
    v[4 * i + 3] = e[i].end_s;
  }
  return v;
}

int train_pipeline_run_report(const train_pipeline_t *p, const train_opts_t *o,
                              nn_model_t *m, int rank, FILE *out, char *err, size_t errlen) {
  train_pipeline_stats_t st;
  train_pipeline_stats(p, &st);
  double mine[4] = {st.wall_s, st.busy_s, (double)st.peak_stash_bytes, st.copy_s};
  double *all = NULL;
  size_t got = 0;
  if (hvd_allgather("pipe.report", mine, 4, HVD_FLOAT64, (void **)&all, &got) != HVD_OK) {
    snprintf(err, errlen, "allgather of the pipeline's times: %s", hvd_last_error());
    return -1;
  }
  int S = o->pipeline_stages, M = o->micro_batches;
  double *trace = pack_trace(p, M), *traces = NULL;
  if (!trace) {
    free(all);
    snprintf(err, errlen, "out of memory for the pipeline's trace");
    return -1;
  }
  hvd_status_t hs = hvd_allgather("pipe.trace", trace, (size_t)8 * M, HVD_FLOAT64,
                                  (void **)&traces, &got);
  free(trace);
  if (hs != HVD_OK) {
    free(all);
    snprintf(err, errlen, "allgather of the pipeline's trace: %s", hvd_last_error());
    return -1;
  }
  if (rank == 0 && !o->quiet) {
    print_gantt(out, traces, S, M);
    for (int s = 0; s < S; s++) {  /* replica 0's ranks are stages 0..S-1 */
      const double *a = all + 4 * s;
      fprintf(out, "pipeline stage %d: idle %.1f%% of the steps (bubble theory %.1f%%), "
              "copying activations %.1f%%, peak activation stash %.2f MiB\n", s,
              a[0] > 0 ? 100.0 * (1.0 - a[1] / a[0]) : 0.0, 100.0 * (S - 1) / (M + S - 1),
              a[0] > 0 ? 100.0 * a[3] / a[0] : 0.0, a[2] / 1048576.0);
    }
    fprintf(out, "unsplit model: activations of a %d-sample batch %.2f MiB\n", o->batch,
            nn_model_range_stash_bytes(m, 0, nn_model_num_layers(m), o->batch) / 1048576.0);
  }
  free(all);
  free(traces);
  return 0;
}
