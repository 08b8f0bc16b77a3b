#!/usr/bin/env bash
# scripts/mutation_check.sh: do the tests catch small, realistic bugs?
#
# Each mutation below is one sed expression applied to one source file (it must change
# exactly that file, else the mutation is reported as stale), with the tests that must
# catch it. The script copies the working tree with its build directory to a scratch
# folder (so the first build there is incremental; the sanitizer and fuzz builds stay behind), then for each mutation: applies it,
# rebuilds, runs the named tests through tests/run.sh, and puts the file back. A mutation
# is CAUGHT when at least one named test fails, NOT CAUGHT when they all pass; a
# mutation that does not apply or does not build fails the check as well (a list that
# rots must not look green).
#
# Usage: scripts/mutation_check.sh [--list | --stale] [NAME...]   (no NAME: all of them;
#   names run in the order given)
#   --stale: builds and runs nothing; says which expressions no longer change their
#   file (a list that rots), and exits 0 only if none.
# Environment: BUILD (the build directory to start from, default build; `make` first),
#   JOBS (make -j, default 2). Prints a table; exits 0 only if every mutation was caught.
# Not part of CI's time budget: the whole list takes about 4 minutes on 2 cores;
# tests/test_mutation_check.sh runs a few of its cases in make test.
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
JOBS=${JOBS:-2}

# NAME|FILE|SED EXPRESSION|TESTS (space-separated names for tests/run.sh, each matched
# exactly). No | inside a sed expression.
MUTATIONS=$(cat <<'EOF'
ckpt-write-in-place|train/checkpoint.c|s#snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());#snprintf(tmp, sizeof tmp, "%s", path);#|test_train_checkpoint
ckpt-crc-unchecked|train/checkpoint.c|s#if ((c \& 0xffffffffu) != get_le(b + size - 4, 4)) why#if (0) why#|test_train_checkpoint
idx-dims-unchecked|train/data.c|s#hdr\[3\] != want_dims) {#hdr[3] == 0) {#|test_train_data
safetensors-msg-no-file|nn/model_io.c|s#path, s->name, got, m->name, exp);#"(file)", s->name, got, m->name, exp);#|test_nn_model_safetensors
param-slices-unaligned|nn/model.c|s#s->offset = (m->param_len + NN_PARAM_ALIGN - 1) / NN_PARAM_ALIGN \* NN_PARAM_ALIGN;#s->offset = m->param_len;#|test_nn_models
sgd-momentum-order|nn/optim.c|s#      p\[i\] -= lr \* buf\[i\];#      p[i] -= lr * d;#|test_nn_optim test_nn_model_step
sgd-nesterov-sign|nn/optim.c|s#p\[i\] -= lr \* (d + mom \* buf\[i\]);#p[i] -= lr * (d - mom * buf[i]);#|test_nn_optim
sgd-no-weight-decay|nn/optim.c|s#for (size_t i = 0; i < n; i++) p\[i\] -= lr \* (g\[i\] + wd \* p\[i\]);#for (size_t i = 0; i < n; i++) p[i] -= lr * g[i];#|test_nn_optim
adam-no-bias-correction|nn/optim.c|s#const float step_size = (float)((double)lr / bc1);#const float step_size = lr;#|test_nn_optim
adamw-coupled|nn/optim.c|s#const float decay = decoupled ? 1.0f - lr \* wd : 1.0f;#const float decay = 1.0f;#|test_nn_optim
relu-backward-on-zero|nn/activation.c|s#dx\[i\] += y\[i\] > 0.0f ? dy\[i\] : 0.0f;#dx[i] += y[i] >= 0.0f ? dy[i] : 0.0f;#|test_nn_layers_torch test_nn_gradcheck test_nn_model_step
bn-running-var-biased|nn/batchnorm2d.c|s#mom \* var \* m / (m - 1));#mom * var);#|test_nn_layers_torch test_nn_model_step
grad-first-writer-last|nn/model.c|s#l->dx_first\[k\] = store \&\& !\*w;#l->dx_first[k] = store;#|test_nn_backward_store test_nn_model_step
dropout-backward-unscaled|nn/dropout.c|s#dx\[i\] += mask\[i\] ? dy\[i\] \* scale : 0.0f;#dx[i] += mask[i] ? dy[i] : 0.0f;#|test_nn_gradcheck test_nn_layers_torch
lr-step-off-by-one|nn/lr_schedule.c|s#floor(epoch / (double)s->step_epochs)#floor((epoch + 1) / (double)s->step_epochs)#|test_nn_optim
lr-warmup-wrong-end|nn/lr_schedule.c|s#(base - s->warmup_start_lr) \* (epoch / warm)#(base - s->warmup_start_lr) * (epoch / (warm + 1))#|test_nn_optim
hosts-slots-not-summed|launcher/hosts.c|s#      h->v\[i\].slots += slots;#      h->v[i].slots = slots;#|test_hvdrun_args
hvd-thread-device-late|hvd/background.c|s#^  hvd_device_thread_start();#  /* hvd_device_thread_start(); */#|test_hvd_device_thread
softmax-grad-label-sign|nn/softmax_cross_entropy.c|s#      d\[labels\[i\]\] -= inv_n;#      d[labels[i]] += inv_n;#|test_nn_layers_torch test_nn_gradcheck
linear-bias-grad-dropped|nn/linear.c|s#db\[o\] += dr\[o\];#db[o] = dr[o];#|test_nn_layers_torch test_nn_gradcheck test_nn_model_step
idx-trailing-data-accepted|train/data.c|s#^  if (got > 0) {#  if (got > (1L << 30)) {#|test_train_data
gzip-end-not-required|train/data.c|s#^    if (avail == 0) {#    if (avail == 0 \&\& 0) {#;/inflate made no progress/,/return -1;/s#return -1;#return 0;#|test_train_data
ckpt-train-seconds-unchecked|train/resume.c|s#  if (!(isfinite(st\[ST_TRAIN_SECONDS\]) \&\& st\[ST_TRAIN_SECONDS\] >= 0))#  if (0)#|test_train_ckpt_fields.sh
hvd-dtype-mismatch-unchecked|hvd/negotiation.c|s#    if (a->dtype != b->dtype) {#    if (0) {#|test_hvd_errors
hvd-count-mismatch-unchecked|hvd/negotiation.c|s#        a->count != b->count) {#        0) {#|test_hvd_errors
hvd-empty-name-accepted|hvd/api.c|s#^    if (n == 0)$#    if (0)#|test_hvd_errors
hosts-slots-zero-accepted|launcher/hosts.c|s#  if (v < 1) return -1;#  if (v < 0) return -1;#|test_hvdrun_args test_hvdrun_errors
EOF
)
# Mutations contributed with the tests they guard (collectives, runtime, timeline,
# launcher) are appended here.
MUTATIONS+=$'\n'$(cat <<'EOF'
ring-segment-off-by-one|collectives/ring_allreduce.c|s/((size_t)g < count % (size_t)N ? 1 : 0)/((size_t)g <= count % (size_t)N ? 1 : 0)/|test_coll_mpi.sh test_hvd_allreduce
average-divides-by-size-1|hvd/host_backend.c|s/send, recv, count, dt, v->size);/send, recv, count, dt, v->size - 1);/|test_hvd_fusion
timeline-allreduce-fused-only|hvd/host_backend.c|s/      timeline(&resp\[i\], reqs\[i\]->key, "ALLREDUCE", t1, t2, bytes);/      if (n > 1) timeline(\&resp[i], reqs[i]->key, "ALLREDUCE", t1, t2, bytes);/|test_hvd_timeline
check-build-gpu-always-present|launcher/check_build.c|s/have ? 'X' : ' '/have ? 'X' : 'X'/|test_hvdrun_check_build.sh
cross-comm-wrong-color|hvd/init.c|s/MPI_Comm_split(hvd_g.ctrl, hvd_g.local_rank, hvd_g.rank, &hvd_g.cross_comm)/MPI_Comm_split(hvd_g.ctrl, hvd_g.rank, hvd_g.rank, \&hvd_g.cross_comm)/|test_netns_hvd.sh
cnn-bench-gpu-silent-cpu|bench/cnn_bench.c|s/if (o->gpu && !nn_cuda_available()) {/if (o->gpu \&\& !nn_cuda_available() \&\& (o->gpu = 0)) {/|test_device_flags.sh
mp-tolerance-loosened|tests/mixed_precision_tolerances.h|s#     {MP_M(0.2), MP_M(0.22), MP_M(5e-3)},     /\* gradients / loss scale \*/#     {MP_M(0.9), MP_M(0.22), MP_M(5e-3)},     /* gradients / loss scale */#|test_nn_precision_emulation
step-uneven-unscaled|train/step.c|s#weight = (double)t->size \* n / total;#weight = 1.0;#|test_train_step
step-empty-grads-kept|train/step.c|s#    s = nn_model_zero_grads(t->model);#    s = NN_OK;#|test_train_step
flags-typo-budget-shrunk|util/flags.c|s#len <= 5 ? 1 : len <= 9 ? 2 : 3;#len <= 5 ? 0 : len <= 9 ? 1 : 2;#|test_util_flags test_train_errors.sh
flags-no-equals-split|util/flags.c|s#const char \*eq = arg\[1\] == '-' ? strchr(arg, '=') : NULL;#const char *eq = NULL;#|test_util_flags test_hvdrun_args.sh
flags-dash-underscore-differ|util/flags.c|s#static int fold(int c) { return c == '_' ? '-' : c; }#static int fold(int c) { return c; }#|test_util_flags test_device_flags.sh
flags-range-max-unchecked|util/flags.c|s#(x >= f->min \&\& x <= f->max)#(x >= f->min)#|test_util_flags test_train_errors.sh
plan-rank0-threshold-ignored|hvd/init.c|s#c->fusion_threshold = (size_t)v\[0\];#(void)v[0];#|test_hvd_plan
plan-device-mismatch-unchecked|hvd/negotiation.c|s#if ((a->device < 0) != (b->device < 0)) {#if (0) {#|test_hvd_plan
join-stand-in-not-zeros|hvd/execute.c|s#char \*buf = calloc(1, 2 \* bytes + 1);#char *buf = calloc(1, 2 * bytes + 1); if (buf) memset(buf, 1, bytes);#|test_hvd_join
cache-signature-ignores-count|hvd/response_cache.c|s#a->on_device == b->on_device \&\& a->count == b->count \&\&#a->on_device == b->on_device \&\&#|test_hvd_cache
hvd-long-name-accepted|hvd/api.c|s#^    if (n > HVD_NAME_MAX)$#    if (0)#|test_hvd_plan test_hvd_errors
reducescatter-average-undivided|hvd/host_backend.c|s#if (cs == COLL_OK \&\& r->op == HVD_AVERAGE \&\& mine > 0)#if (0)#|test_hvd_alltoall_reducescatter
reducescatter-remainder-at-end|hvd/host_backend.c|s#+ ((size_t)j < r->count % (size_t)N);#+ ((size_t)j >= (size_t)N - r->count % (size_t)N);#|test_hvd_alltoall_reducescatter
transport-abandon-waits|collectives/status.c|s#  if (t->ops->abandon) t->ops->abandon(t, req);#  if (0) t->ops->abandon(t, req);#|test_coll_transport_table
transport-scratch-unused|collectives/status.c|s#slot >= COLL_SCRATCH_SLOTS) return NULL;#slot >= 0) return NULL;#|test_coll_transport_table
hier-host-own-split|collectives/hierarchical.c|s#counts\[r\] = split.cross_count;#counts[r] = count / (size_t)L + ((size_t)r < count % (size_t)L);#;s#size_t offset = split.offset, mine = split.cross_count;#size_t offset = 0, mine = counts[l]; for (int r = 0; r < l; r++) offset += counts[r];#|test_coll_hierarchical.sh
hier-split-remainder-first|collectives/hierarchical.c|s#p->remainder_root = local_size - 1;#p->remainder_root = 0;#|test_coll_hierarchical_split
plugin-abi-unchecked|util/plugin.c|s#head.abi == spec->abi \&\& ##|test_util_plugin
plugin-accept-ignored|util/plugin.c|s#spec->accept(t))#1)#|test_util_plugin
grad-buckets-on-ready-noop|hvd/grad_buckets.c|s#  hvd_grad_buckets_ready((hvd_grad_buckets_t \*)b, ready_from);#  (void)b; (void)ready_from;#|test_grad_buckets
monitor-min-delta-sign-acc|train/callbacks.c|s#m->higher_is_better ? value - m->min_delta > m->best#m->higher_is_better ? value + m->min_delta > m->best#|test_train_callbacks
ckpt-have-best-without-epoch|train/resume.c|s#  if (st\[ST_HAVE_BEST\] == 1 \&\& st\[ST_ES_BEST_EPOCH\] < 0)#  if (0)#|test_train_ckpt_fields.sh
accum-windows-rounded-down|train/main.c|s#t->windows = (t->steps + t->accum - 1) / t->accum;#t->windows = t->steps / t->accum;#|test_train_accumulation.sh
ckpt-newer-format-accepted|train/checkpoint.c|s#  if (n < 1 .. n > TRAIN_CKPT_FORMAT) {#  if (n < 1) {#|test_train_ckpt_format.sh
ckpt-format-unread|train/resume.c|s#  if (train_ckpt_format(\&c, path, \&format, err, errlen) != 0) goto fail;#  format = TRAIN_CKPT_FORMAT;#|test_train_ckpt_format.sh
train-ranks-agree-unchecked|train/main.c|s#  check_ranks_agree(\&t->o, \&sizes, t->size);#  (void)sizes;#|test_train_flags_agree.sh
train-agree-values-uncompared|train/agree.c|s#      if (vl0 != vlr .. memcmp(v0, vr, vl0) != 0) {#      if (0) {#|test_train_agree
pc-no-rpath|Makefile|s#^PC_RPATH = .*#PC_RPATH =#|test_install.sh
alltoall-counts-own-splits|hvd/host_backend.c|s#      total += recv\[j\];#      total += r->splits[j];#|test_hvd_alltoall_reducescatter
cache-evicts-most-recent|hvd/response_cache.c|s#    s = c->lru;#    s = c->mru;#|test_hvd_response_cache
alltoall-splits-sum-wraps|hvd/api.c|s#    if (own\[j\] > count) {#    if (0) {#;s#    if (total > count) {#    if (0) {#|test_hvd_alltoall_reducescatter
alltoall-split-unbounded|hvd/api.c|s#    if (own\[j\] > count) {#    if (0) {#|test_hvd_alltoall_reducescatter
liveness-gap-clocks-kept|hvd/liveness.c|s#        L.heard_us\[r\] = now_us;#        ;#|test_hvd_liveness_gap
liveness-gap-fixed-half-second|hvd/liveness.c|s#double gap_us = timeout_us / 2 < GAP_US ? timeout_us / 2 : GAP_US;#double gap_us = GAP_US;#|test_hvd_liveness_gap
watchdog-grace-inverted|hvd/watchdog.c|s#age >= shut + (blocked ? 0 : COORDINATOR_GRACE_S)#age >= shut + (blocked ? COORDINATOR_GRACE_S : 0)#|test_hvd_stall
stall-warning-ignores-bytes|hvd/watchdog.c|s#  if (moved > 0) {#  if (0) {#|test_hvd_stall
transport-bytes-not-counted|collectives/transport_mpi.c|s#        __atomic_add_fetch(\&t->bytes_done, (unsigned long long)q->part\[i\], __ATOMIC_RELAXED);#        ;#|test_hvd_stall
grouped-first-member-only|hvd/host_backend.c|s#size_t parts = r->nmembers ? r->nmembers : 1;#size_t parts = 1;#|test_hvd_alltoall_reducescatter
hvdrun-signal-no-sigkill|launcher/supervise.c|s#^  kill(-pid, SIGKILL);#  kill(-pid, SIGTERM);#|test_hvdrun_signals.sh
hvdrun-guard-never-acts|launcher/children.c|s#  if (r == 1) _exit(0);#  _exit(0);#|test_hvdrun_signals.sh
hvdrun-orphans-not-reaped|launcher/children.c|s#waitpid(-pid, &st, 0)#waitpid(pid, \&st, 0)#|test_hvdrun_signals.sh
hvdrun-discovery-signals-uncaught|launcher/elastic.c|s#^  hvdrun_signals_catch(&saved);#  hvdrun_signals_catch(\&saved); hvdrun_signals_restore(\&saved);#|test_hvdrun_signals.sh
elastic-max-np-off-by-one|launcher/elastic.c|s#np > o->max_np) np = o->max_np;#np > o->max_np + 1) np = o->max_np;#|test_hvdrun_elastic_hosts.sh
elastic-all-hosts-passed|launcher/elastic.c|s#^  hvdrun_hosts_keep_slots(&o->hosts, np);##|test_hvdrun_elastic_hosts.sh
hosts-leading-dash-accepted|launcher/hosts.c|s#255 .. s\[0\] == '-') return 0;#255) return 0;#|test_hvdrun_errors.sh
slurm-leading-dash-accepted|launcher/slurm.c|s# .. names.v\[i\]\[0\] == '-')#)#|test_slurm_nodelist.sh
slurm-short-task-list-accepted|launcher/slurm.c|s#return \*n == max ? 0 : -2;#return *n <= max ? 0 : -2;#|test_slurm_nodelist.sh
hvdrun-version-signal-ignored|launcher/command.c|s#    if ((sig = hvdrun_signal_take()) != 0) break;#    (void)0;#|test_hvdrun_signals.sh
hvdrun-version-no-timeout|launcher/command.c|s#    if (left <= 0) {#    if (0) {#|test_hvdrun_signals.sh
serve-no-per-client-limit|serve/http.c|s#MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_connections_per_client,#MHD_OPTION_PER_IP_CONNECTION_LIMIT, 0u,#|test_serve_slow_clients.sh
serve-no-request-timeout|serve/http.c|s#now - k->since <= s->cfg.request_timeout_s) continue;#now - k->since <= 1e9) continue;#|test_serve_slow_clients.sh
serve-refused-body-cut-short|serve/http.c|s#^    r->dropped += size;#    r->dropped += size; if (r->dropped > 4 * s->cfg.max_body) return MHD_NO;#|test_serve_body_framing.sh
serve-413-before-body-read|serve/http.c|s#^    return refuse_upload(s, r, 413, "request body of %.24s bytes#    return reply_error(s, c, r, 413, "request body of %.24s bytes#|test_serve_body_framing.sh
serve-two-content-length-ok|serve/http.c|s#if (f.content_length > 1)#if (f.content_length > 2)#|test_serve_body_framing.sh
serve-bad-length-sent-twice|serve/http.c|s#if (bad \&\& reading \&\& answer_bad_length(s, reading, (unsigned)bad) == 0) return;#if (bad < 0) return;#|test_serve_body_framing.sh
serve-exact-limit-chunk-refused|serve/http.c|s#if (size > s->cfg.max_body - r->len)#if (size >= s->cfg.max_body - r->len)#|test_serve_body_framing.sh
serve-exact-limit-cl-refused|serve/http.c|s#if (cl \&\& strtoull(cl, NULL, 10) > s->cfg.max_body) {#if (cl \&\& strtoull(cl, NULL, 10) >= s->cfg.max_body) {#|test_serve_body_framing.sh
serve-batch-short-of-max|serve/batcher.c|s#while (last->next \&\& sum + last->next->n <= bt->cfg.max_batch) {#while (last->next \&\& sum + last->next->n < bt->cfg.max_batch) {#|test_serve_batch_full.sh
serve-old-version-kept-loaded|serve/versions.c|s#int idle = old \&\& --old->refs == 0;#int idle = 0;#|test_serve_versions.sh
serve-deleted-version-kept|serve/versions.c|s#if (num == current) return 0;#if (num <= current) return 0;#|test_serve_versions.sh
source-limit-off-by-one|scripts/longest_functions.sh|s#\$1 > l \&\& #$1 > l + 1 \&\& #|test_source_limits.sh
grad-plan-ignores-backend-views|nn/model.c|s#while (j != NN_MODEL_INPUT \&\& view\[j\])#while (j != NN_MODEL_INPUT \&\& m->layers[j].is_view)#|test_nn_backward_store
grad-plan-flatten-writes-none|nn/model.c|s#if (l->kind == NN_LAYER_FLATTEN) return l->in\[0\] != NN_MODEL_INPUT;#if (l->kind == NN_LAYER_FLATTEN) return 0;#|test_nn_backward_store
gpu-check-oom-any-memory|scripts/gpu_check/lib.sh|s#^gc_is_oom() { grep -qsiE .*#gc_is_oom() { grep -qsi memory "$1"; }#|test_gpu_check_plan.sh
gpu-check-no-term-trap|scripts/gpu_check.sh|s#^trap 'on_signal TERM 15' TERM#: no trap#|test_gpu_check_plan.sh
gpu-check-torch-first|scripts/gpu_check.sh|s#^TIMING_ORDER="bench torch"#TIMING_ORDER="torch bench"#|test_gpu_check_plan.sh
gpu-check-build-45s|scripts/gpu_check.sh|s#^T_BUILD=\${GPU_CHECK_BUILD_S:-90}#T_BUILD=${GPU_CHECK_BUILD_S:-45}#|test_gpu_check_plan.sh
gpu-check-probe-timeout-ends|scripts/gpu_check.sh|s#^  log "the GPU probe did not finish in .*#&; finish 1#|test_gpu_check_plan.sh
gpu-check-first-row-find|scripts/gpu_check.sh|s#local find_env=(env -u NN_CUDNN_FIND)#local find_env=(env NN_CUDNN_FIND=1)#|test_gpu_check_plan.sh
gpu-check-refusals-dropped|scripts/gpu_check/lib.sh|s#\.\*cuDNN refused#.*cuDNN declined#|test_gpu_check_plan.sh
gpu-check-bare-layout-dropped|scripts/gpu_check.sh|s#"\$STEPS" "\$prec" "\$fmt"$#"$STEPS" "$prec"#|test_gpu_check_plan.sh
gpu-check-nccl-debug-unset|scripts/gpu_check.sh|s#^export NCCL_DEBUG=\${NCCL_DEBUG:-WARN}#export NCCL_DEBUG=${NCCL_DEBUG:-}#|test_gpu_check_plan.sh
gpu-check-init-times-dropped|scripts/gpu_check.sh|s#if \[ -n "\$STEP_INIT" \]; then INIT_TIMES=#if false; then INIT_TIMES=#|test_gpu_check_plan.sh
gpu-check-row-budget-unchecked|scripts/gpu_check.sh|s#opts=(-s -n "\$T_BENCH" -c#opts=(-s -n 1 -c#|test_gpu_check_plan.sh
gpu-check-shared-static-libs|Makefile|s#^  CUDA_SO_LDLIBS   ?= \$(subst .*#  CUDA_SO_LDLIBS ?= -L$(CUDA_LIBDIR) -lcudnn -lcublas -lcublasLt -lnccl -lcudart \\#|test_gpu_check_plan.sh
deps-file-cycle-allowed|scripts/check_deps.sh|s#^    if (nm < 2) {$#    if (nm < 2) { continue#|test_dependency_cycles.sh
cache-rounds-invalid-not-evicted|hvd/cache_rounds.c|s#if (bad >> b \& 1) hvd_cache_evict(#if (0) hvd_cache_evict(#|test_hvd_cache_rounds
cache-rounds-lists-word-not-neutral|hvd/cache_rounds.c|s#w\[0\] = cr->cfg.rank == 0 ? cr->lists_seen : ~(uint64_t)0;#w[0] = cr->cfg.rank == 0 ? cr->lists_seen : 0;#|test_hvd_cache_rounds
cache-rounds-own-words|hvd/cache_rounds.c|s#const uint64_t \*w = cr->peers->recv;#const uint64_t *w = cr->peers->send;#|test_hvd_cache_rounds
hvdrun-ignored-signals-caught|launcher/children.c|s#    g_ignored\[i\] = saved->old\[i\].sa_handler == SIG_IGN;#    g_ignored[i] = 0;#|test_hvdrun_ignored_signals.sh
serve-timeouts-metric-overwritten|serve/http.c|s/s->timeouts += (uint64_t)cut;/s->timeouts = (uint64_t)cut;/|test_serve_slow_clients.sh
serve-per-client-limit-is-global|serve/http.c|s/(unsigned)cfg->max_connections_per_client/(unsigned)cfg->max_connections/|test_serve_slow_clients.sh
serve-loaded-gauge-never-falls|serve/versions.c|s/^  m->loaded--;$//|test_serve_versions.sh
reap-leaves-group-alive|launcher/children.c|s/^  kill(-pid, SIGKILL);   /  (void)0;   /|test_hvdrun_signals.sh
keep-slots-extra-empty-host|launcher/hosts.c|s/while (n < h->n \&\& kept < slots)/while (n < h->n \&\& kept <= slots)/|test_hvdrun_elastic_hosts.sh
detect-version-waits-forever|launcher/command.c|s/^  hvdrun_child_reap(pid);$/  waitpid(pid, NULL, 0);/|test_hvdrun_signals.sh
alltoall-whole-buffer-split-refused|hvd/api.c|s/if (own\[j\] > count) {/if (own[j] >= count) {/|test_hvd_alltoall_reducescatter
inproc-abandon-missing|collectives/transport_inproc.c|s/^    .abandon = inproc_abandon,$//|test_coll_transport_table
scratch-never-grows|collectives/status.c|s/if (t->scratch_bytes\[slot\] < bytes) {/if (t->scratch_bytes[slot] == 0) {/|test_coll_mpi
plugin-table-size-unchecked|util/plugin.c|s/ \&\& head.size == spec->size//|test_util_plugin
ckpt-format-trailing-junk-ok|train/checkpoint.c|s/strspn(f + pl, "0123456789") == strlen(f + pl) \&\& //|test_train_ckpt_format.sh
resume-format1-state-refused|train/resume.c|s/(format == 1 ? ST_COUNT_V1 : ST_COUNT)/(ST_COUNT)/|test_train_ckpt_format.sh
resume-auto-earliest-step-first|train/resume.c|s/return a->steps > b->steps ? -1 : 1;/return a->steps < b->steps ? -1 : 1;/|test_train_resume_mid.sh
serve-keepalive-clock-off|serve/http.c|s#request_clock(s, c, 1); /\* the connection waits#request_clock(s, c, 0); /* the connection waits#|test_serve_slow_clients.sh
agree-fp16-allreduce-not-compared|train/agree.c|/"--fp16-allreduce"/d|test_train_agree
resume-truncates-log-csv|train/outputs.c|s/train_csv_open(csv, p, o->resume != NULL)/train_csv_open(csv, p, o->resume == NULL)/|test_train_tensorboard.sh
child-exited-consumes-status|launcher/children.c|s#WNOHANG . WNOWAIT)#WNOHANG)#|test_hvdrun_signals.sh
stall-bytes-base-not-reset-on-turn|hvd/watchdog.c|s/^      base_bytes = transport_bytes();$//|test_hvd_stall
alloc-failure-size-named-by-wrong-rank|hvd/host_backend.c|s/if (failed == hvd_g.rank)/if (failed != hvd_g.rank)/|test_hvd_errors
liveness-gap-full-timeout|hvd/liveness.c|s/timeout_us \/ 2 < GAP_US ? timeout_us \/ 2 : GAP_US/timeout_us \/ 2 < GAP_US ? timeout_us : GAP_US/|test_hvd_liveness_gap
flight-completes-unfinished|hvd/device_flight.c|s/    if (q == 0) {/    if (q >= 0) {/|test_hvd_device_flight
flight-not-deferred|hvd/device_flight.c|s/  for (int i = 0; i < n; i++) reqs\[i\]->deferred = 1;/  (void)0;/|test_hvd_device_flight
flight-hold-kept|hvd/device_flight.c|s/    if (!g.reqs\[i\]->phantom) hvd_request_release(g.reqs\[i\]);/    (void)0;/|test_hvd_device_flight
flight-failure-completes-ok|hvd/device_flight.c|s/hvd_request_complete(g.reqs\[i\], s, text)/hvd_request_complete(g.reqs[i], HVD_OK, text)/|test_hvd_device_flight
flight-stall-unchecked|hvd/device_flight.c|s/      if (s == HVD_OK) return HVD_OK;/      return HVD_OK;/|test_hvd_device_flight
grpc-drain-skipped|serve/main.c|s#  if (grpc) left += serve_grpc_drain(grpc, #  if (0) left += serve_grpc_drain(grpc, #|test_serve_grpc_sigterm.sh
grpc-timeout-ignored|serve/grpc_server.c|s#if (t >= 0) k->deadline = k->t0 + t;#(void)t;#|test_serve_grpc_errors.sh
grpc-max-message-unchecked|serve/grpc_server.c|s#if (declared > c->s->cfg.max_message_bytes) {#if (declared > 1000 * c->s->cfg.max_message_bytes) {#|test_serve_grpc_errors.sh
grpc-request-timeout-off|serve/grpc_server.c|s#else if (k->state == READING \&\& now - k->t0 > c->s->cfg.request_timeout_s)#else if (0)#|test_serve_grpc_errors.sh
grpc-idle-connection-kept|serve/grpc_server.c|s#if (!working \&\& now - (c->open ? c->last_io : c->last_call) > s->cfg.idle_timeout_s) {#if (0) {#|test_serve_grpc_errors.sh
grpc-shape-height-unchecked|serve/grpc_calls.c|s#(nd == 4 \&\& d\[1\] == sp->h \&\&#(nd == 4 \&\&#|test_serve_grpc_errors.sh
grpc-normalise-rounded-otherwise|serve/grpc_calls.c|s#(float)(x \* 255.0) \* scale - shift#(float)(x * 255.0 * scale - shift)#|test_serve_grpc.sh
grpc-version-normalisation-dropped|serve/versions.c|/memcpy(spec.std, v->info.std, sizeof spec.std);/d|test_serve_accuracy.sh
grpc-inflight-budget-off|serve/grpc_server.c|s#int room = s->held + (cap - k->cap) <= s->cfg.max_inflight_bytes;#int room = 1;#|test_serve_grpc_errors.sh
version-label-unloaded-accepted|serve/main.c|s#serve_models_acquire(models, labels->version\[i\]);#serve_models_acquire(models, 0);#|test_serve_grpc.sh
image-pixel-scale-off|serve/image_input.c|s#spec->w, spec->h) / 255.0;#spec->w, spec->h) / 256.0;#|test_serve_grpc_images.sh
py-postscale-ignored|python/hvd/_core.py|s#            A.scale_(out, postscale_factor)#            pass#|test_python.sh
py-reducescatter-uneven-rows|python/hvd/_core.py|s#mine = q + (1 if me < e else 0)#mine = q + (1 if me <= e else 0)#|test_python.sh
py-alltoall-splits-in-elements|python/hvd/_core.py|s#return out, \[s // row if row else 0 for s in recv_splits\]#return out, list(recv_splits)#|test_python.sh
py-error-not-raised|python/hvd/_core.py|s#            if self._status != _lib.OK:#            if False:#|test_python.sh
py-opt-reduce-every-pass|python/hvd/torch/optimizer.py|s#if self._allreduce_delay\[p\] == 0:#if self._allreduce_delay[p] <= 1:#|test_python.sh
py-opt-predivide-not-undone|python/hvd/torch/optimizer.py|s#            postscale = self.gradient_predivide_factor#            postscale = 1.0#|test_python.sh
py-opt-sum-not-average|python/hvd/torch/optimizer.py|s#name=name, op=self.op,#name=name, op=0,#|test_python_mnist.sh test_python.sh
py-fp16-not-compressed|python/hvd/torch/compression.py|s#return tensor.type(torch.float16), tensor.dtype#return tensor, None#|test_python.sh
py-opt-state-not-loaded|python/hvd/torch/functions.py|s#        optimizer.load_state_dict(state)#        pass#|test_python.sh
py-uninstall-keeps-package|Makefile|s#  rm -rf '\$(DESTDIR)'"\$\$site/hvd"; fi#  true; fi#|test_install.sh
py-allreduce-grad-not-reduced|python/hvd/torch/__init__.py|s#        grad = synchronize(_api_torch.allreduce_async(grad_output, None, None, op, pre, post,#        grad = grad_output; len((grad_output, None, None, op, pre, post,#|test_python.sh
pset-average-divides-by-world|hvd/host_backend.c|s/send, recv, count, dt, v->size);/send, recv, count, dt, hvd_g.size);/|test_hvd_process_sets
pset-outsider-runs-response|hvd/execute.c|s/if (reqs\[i\] == NULL \&\& !joined \&\& resp\[i\].set != 0) continue;/(void)0;/|test_hvd_process_sets
pset-allgather-world-counts|hvd/host_backend.c|s/hvd_response_count(resp, v.ranks ? v.ranks\[i\] : i)/hvd_response_count(resp, i)/|test_hvd_process_sets
pset-fuse-across-sets|hvd/negotiation.c|s/b->count > 0 \&\& b->set == a->set \&\&/b->count > 0 \&\&/|test_hvd_process_sets
pset-outsider-not-refused|hvd/process_set_registry.c|s/  if (!in)$/  if (0)/|test_hvd_process_sets
pset-postscale-dropped|hvd/host_backend.c|s/    if (cs == COLL_OK) scale(reqs\[0\]->recvbuf, reqs\[0\]->count, dtype, post);//|test_hvd_process_sets
range-stash-skips-input|nn/model_range.c|s/  else add_region(r, m->layers\[first - 1\].out,/  else add_region(r, NULL,/|test_nn_model_range
range-backward-ignores-dy|nn/model_range.c|s/s = b->copy(top->dout, dy ? dy : m->dlogits,/s = b->copy(top->dout, m->dlogits,/|test_nn_model_range
range-cut-across-residual|nn/model_range.c|s/      if (in < k - 1) return 0;/      if (in < -1) return 0;/|test_nn_model_range
pipe-weights-unscaled|train/pipeline_step.c|s/(float)st->weight) != NN_OK)/1.0f) != NN_OK)/|test_train_pipeline
pipe-no-stage-allreduce|train/pipeline_step.c|s/  if (p->R > 1 \&\& p->pend > b) {/  if (0) {/|test_train_pipeline
pipe-no-use-set|train/pipeline_step.c|s/  if (nn_model_range_use(p->m, first, last, p->stash\[k\]) != NN_OK)/  if (0)/|test_train_pipeline
train-pipe-no-gather|train/main.c|s/^  pipeline_gather(t, 1);$/  (void)0;/|test_train_pipeline.sh
onnx-bn-momentum-not-inverted|nn/onnx_import.c|s#im->m->layers\[idx\].momentum = 1.0f - mom;#im->m->layers[idx].momentum = mom;#|test_onnx_models
onnx-matmul-weight-untransposed|nn/onnx_import.c|s#load_slice(im, n, first, wt, !trans_b)#load_slice(im, n, first, wt, 0)#|test_onnx_models
onnx-input-rank-unchecked|nn/onnx_import.c|s#  if (sh->n_dim != 4)#  if (sh->n_dim > 4)#|test_onnx_models
gconv-dilation-ignored|nn/graph_kernels.c|s#- s->pad_h + ki \* s->dil_h;#- s->pad_h + ki;#|test_nn_graph_kernels test_onnx_models
leaky-relu-grad-unscaled|nn/graph_kernels.c|s#x\[i\] > 0.0f ? g : alpha \* g;#g;#|test_nn_graph_kernels test_onnx_models
concat-grad-halves-swapped|nn/graph_kernels.c|s#db\[i \* b_size + k\] += d\[a_size + k\];#db[i * b_size + k] += d[k];#|test_nn_graph_kernels test_onnx_models
mul-channel-grad-halved|nn/graph_kernels.c|s#      db\[p\] += (float)sum;#      db[p] += 0.5f * (float)sum;#|test_nn_graph_kernels
gconv-width-stride-as-height|nn/graph_kernels.c|s#int iw = ow \* s->stride_w#int iw = ow * s->stride_h#|test_nn_graph_kernels
onnx-export-gemm-untransposed|nn/onnx_export.c|s#attr_int(n, "transB", 1);#attr_int(n, "transB", 0);#|test_onnx_train_serve.sh
serve-onnx-weights-from-safetensors|serve/versions.c|s#  if (!onnx \&\& nn_model_load_safetensors(model, path) != NN_OK) {#  if (nn_model_load_safetensors(model, path) != NN_OK) {#|test_onnx_train_serve.sh
resnet18-stride-in-layer1|nn/models.c|s/planes, planes, k == 0 \&\& s > 0 ? 2 : 1);/planes, planes, k == 0 ? 2 : 1);/|test_nn_torchvision
torchvision-shape-unchecked|python/hvd_models.py|s/        if tuple(v.shape) != tuple(r.shape):/        if False:/|test_nn_torchvision
frozen-bn-trains|nn/model_walk.c|s/training \&\& !l->frozen);/training);/|test_nn_freeze
backward-walks-frozen|nn/model_walk.c|s/i >= m->train_layer; i--/i >= 0; i--/|test_nn_freeze
optim-steps-frozen|nn/model_cpu.c|s/m->params + m->train_from, m->grads + m->train_from, lr/m->params, m->grads, lr/|test_nn_freeze
unfrozen-state-not-zero|nn/model_freeze.c|s/(g - old_from)\] : 0.0f;/(g - old_from)] : 1.0f;/|test_nn_freeze
frozen-gradients-allreduced|train/replica.c|s/const size_t from = nn_model_trainable_from(m), np/const size_t from = 0, np/|test_train_freeze.sh
resume-forgets-frozen-set|train/resume.c|s/  if (file_from != own_from) {/  if (0) {/|test_train_freeze.sh
freeze-flag-ignored|train/flags.c|s/  p->items\[p->count++\] = values\[0\];/  p->items[p->count] = values[0];/|test_train_freeze.sh
never-unfreezes|train/main.c|s/  if (nn_model_trainable_from(model) == 0) return;/  return;/|test_train_freeze.sh
init-skip-loads-head|train/transfer.c|s/    if (skipped(s->name, skip)) continue;/    if (0) continue;/|test_train_freeze.sh
init-weights-ignored|train/main.c|s/  if (t->init \&\& !t->resumed) {/  if (0) {/|test_train_transfer.sh
grpc-call-threads-unbounded|serve/grpc_server.c|s#^\#define MAX_WORKERS MAX_STREAMS#\#define MAX_WORKERS 1000000#|test_serve_grpc_threads.sh
tfrecord-length-crc-unchecked|data/tfrecord.c|s#if (data_crc32c_masked(h, 8) != le32(h + 8)) {#if (0) {#|test_data_images
tfrecord-data-crc-unchecked|data/tfrecord.c|s#if (data_crc32c_masked(\*buf, (size_t)rec.length) != le32(\*buf + rec.length)) {#if (0) {#|test_data_images
image-size-unchecked-before-alloc|data/decode.c|s#^  if (check_size(w, h, err, errlen) != 0) return -1;#  (void)check_size;#|test_data_images
skipped-images-not-counted|data/pipeline.c|s#^        p->skipped++;#        ;#|test_data_images
augment-seeded-by-thread|data/pipeline.c|s#data_rng_init(\&rng, o->seed, ((uint64_t)epoch << 40) ^ idx);#data_rng_init(\&rng, o->seed, (uint64_t)pthread_self());#|test_data_images
rank-slice-from-zero|data/pipeline.c|s#^    b = (uint64_t)rank \* batch;#    b = 0;#|test_data_images
tfrecord-label-not-1-based|data/source.c|s#\*label = (int32_t)(lab - 1);#*label = (int32_t)lab;#|test_data_images
crop-ratio-not-log-uniform|data/transform.c|s#double ar = exp(lr0 + (lr1 - lr0) \* data_rng_uniform(rng));#double ar = ratio_min + (ratio_max - ratio_min) * data_rng_uniform(rng); (void)lr1;#|test_data_torch.sh
resample-without-antialias|data/transform.c|s#fscale = scale < 1.0 ? 1.0 : scale;#fscale = 1.0;#|test_data_torch.sh
grey-jpeg-from-y-plane|data/decode.c|s#int via_rgb = channels == 1 \&\& cs != TJCS_GRAY \&\& !cmyk;#int via_rgb = 0;#|test_data_torch.sh
region-size-unchecked-before-alloc|data/decode.c|s#if (check_size((int)ci.image_width, (int)ci.image_height, err, errlen) == 0) {#if (1) {#|test_data_images
ps-ssp-never-waits|hvd/ps_engine.c|s/    k->want\[w\] = S < 0 /    k->want[w] = S > -9 /|test_hvd_ps
ps-sync-applies-first-push|hvd/ps_engine.c|s/if (k->arrived == ps->nworkers) {/if (k->arrived >= 1) {/|test_hvd_ps
ps-push-not-averaged|hvd/ps_engine.c|s#float scale = 1.0f / (float)ps->nworkers;#float scale = 1.0f;#|test_hvd_ps
ps-greedy-ignores-load|hvd/ps_placement.c|s/load\[s\] < load\[server\]/load[s] > load[server]/|test_hvd_ps
ps-registration-count-unchecked|hvd/ps_api.c|s/if (x.count != y.count)/if (0 \&\& x.count != y.count)/|test_hvd_ps
ps-request-not-failed-on-loss|hvd/ps_engine.c|s/^  hvd_inflight_insert(r);/  hvd_g.ninflight++;/|test_hvd_ps_faults
train-ps-new-values-dropped|train/ps_update.c|s/^  memcpy(nn_model_params(p->model), p->fresh, p->np \* sizeof(float));/  (void)0;/|test_train_ps.sh
train-ps-optim-state-not-resumed|train/ps_update.c|s/      memcpy(st + c \* count, full + c \* p->np + at, count \* sizeof(float));/      (void)at;/|test_train_ps.sh
train-ps-push-before-servers-ready|train/ps_update.c|s/  s = hvd_allreduce("ps.shards.ready", &ready, &all_ready, 1, HVD_INT32, HVD_MIN);/  s = HVD_OK;/|test_train_ps.sh
cnn-bench-ps-server-prints-steps|bench/cnn_bench.c|s/  t->step_rank = o->num_ps;/  t->step_rank = 0;/|test_cnn_bench_ps.sh
py-opt-none-grad-not-zeroed|python/hvd/torch/optimizer.py|s#^            p.grad = p.data.new_zeros(p.size())#            pass#|test_python.sh
py-dropped-handle-freed|python/hvd/_core.py|s#    _in_flight\[id(handle.req)\] = (handle.req, handle._keep)#    pass#|test_python.sh
py-inplace-prescale-on-tensor|python/hvd/_core.py|s#src = A.clone(x) if prescale_factor != 1.0 else x#src = A.clone(x) if prescale_factor != 1.0 and not inplace else x#|test_python.sh
py-grouped-prescale-on-tensor|python/hvd/_core.py|s#srcs = \[A.clone(x) for x in xs\]#srcs = xs if inplace else [A.clone(x) for x in xs]#|test_python.sh
range-cut-ignores-graph-inputs|nn/model_range.c|s/      if (t == 1 \&\& !nn_layer_kind_has_two_inputs(m->layers\[j\].kind)) continue;/      if (t == 1 \&\& m->layers[j].kind != NN_LAYER_ADD) continue;/|test_nn_model_range
pipe-gather-ignores-freeze|train/pipeline_step.c|s/  size_t arrays = state \&\& per \&\& nstate % per == 0 ? nstate \/ per : 0;/  size_t arrays = state \&\& nstate % plen == 0 ? nstate \/ plen : 0;/|test_train_pipeline_freeze.sh
range-forward-trains-frozen|nn/model_range.c|s/    s = b->layer\[l->kind\].forward(m, i, n, training \&\& !l->frozen);/    s = b->layer[l->kind].forward(m, i, n, training);/|test_nn_model_range
range-backward-below-trainable|nn/model_range.c|s/ i >= first \&\& i >= m->train_layer; i--) {/ i >= first; i--) {/|test_nn_model_range
py-pset-root-not-translated|python/hvd/process_sets.py|s#            return self.ranks.index(root_rank)#            return root_rank#|test_python.sh
py-pset-reducescatter-world-split|python/hvd/_core.py|s#    n, me = ps.size, max(ps.index, 0)#    n, me = lib.hvd_size(), lib.hvd_rank()#|test_python.sh
py-pset-unadded-accepted|python/hvd/process_sets.py|s#    if ps_id is None or _registered.get(ps_id) is not process_set:#    if False:#|test_python.sh
py-pset-alltoall-world-splits|python/hvd/_core.py|s#    n = ps.size#    n = lib.hvd_size()#|test_python.sh
py-allgather-object-order|python/hvd/_core.py|s#        out.append(pickle.loads(gathered\[start:start + n\].tobytes()))#        out.insert(0, pickle.loads(gathered[start:start + n].tobytes()))#|test_python.sh
py-torch-nice-not-zero|python/hvd/torch/__init__.py|s#        os.environ\["HVD_BACKGROUND_NICE"\] = "0"#        pass#|test_python.sh
py-torch-nice-overrides-user|python/hvd/torch/__init__.py|s#    ours = "HVD_BACKGROUND_NICE" not in os.environ#    ours = True#|test_python.sh
py-grouped-reducescatter-order|python/hvd/_api.py|s#^        return out$#        return out[::-1]#|test_python.sh
py-optimizer-outside-set-allreduces|python/hvd/torch/optimizer.py|s/        return self.process_set is None or self.process_set.included() is not False/        return True/|test_python.sh
py-torch-nice-left-in-environment|python/hvd/torch/__init__.py|s/            del os.environ\["HVD_BACKGROUND_NICE"\]/            pass/|test_python.sh
onnx-steps-add-grad-accumulates|nn/model_cpu.c|s#nn_layer_in_grad(m, l->in\[1\]), !l->dx_first\[1\]);#nn_layer_in_grad(m, l->in[1]), 1);#|test_onnx_models
pipe-gather-no-bn-stats|train/pipeline_step.c|s/^  return gather_stats(p, err, errlen);/  return 0;/|test_train_pipeline test_train_pipeline.sh
range-stash-no-bn-stats|nn/model_range.c|s/    add_region(r, l->save_invstd, (size_t)l->c \* 4);/    (void)0;/|test_train_pipeline
pipe-allreduce-frozen-grads|train/pipeline_step.c|s/  size_t from = nn_model_trainable_from(p->m), b = p->pbegin > from ? p->pbegin : from;/  size_t b = p->pbegin;/|test_train_pipeline_freeze.sh
pipe-wait-ignores-liveness|train/pipeline.c|s/    if (hvd_check_health() != HVD_OK) {/    if (0) {/|test_train_pipeline
pset-names-not-cached|hvd/cache_rounds.c|s/^    hvd_cache_sig_t g = sig_of_response(r);/    if (r->set) continue;\n    hvd_cache_sig_t g = sig_of_response(r);/|test_hvd_process_sets
pipe-gantt-no-forward|train/pipeline_step.c|s/  train_pipeline_note(p, 'F', k, t0);/  (void)0;/|test_train_pipeline.sh
train-images-resume-from-epoch-start|train/main.c|s#train_images_begin(t->images, TRAIN_IMAGES_TRAIN, epoch, first, t->data_rank,#train_images_begin(t->images, TRAIN_IMAGES_TRAIN, epoch, 0, t->data_rank,#|test_train_images.sh
train-images-augment-by-thread|data/pipeline.c|s#data_rng_init(\&rng, o->seed, ((uint64_t)epoch << 40) ^ idx);#data_rng_init(\&rng, o->seed, (uint64_t)pthread_self());#|test_train_images.sh
train-images-skips-uncounted|train/data_images.c|s#^  im->skipped += data_pipeline_skipped(im->pass);#  ;#|test_train_images.sh
agree-image-size-not-compared|train/agree.c|/"--image-size"/d|test_train_agree
agree-channels-not-compared|train/agree.c|/"--channels"/d|test_train_agree
agree-skip-bad-images-not-compared|train/agree.c|/"--skip-bad-images"/d|test_train_agree
resample-flip-ignored|data/transform.c|s#out_map_t m = {.C = C, .out_w = out_w, .flip = flip,#out_map_t m = {.C = C, .out_w = out_w, .flip = 0,#|test_data_images
ps-small-shards-not-fused|hvd/ps_engine.c|s/  if (n < 2) return;/  if (n < 1u << 30) return;/|test_hvd_ps
cnn-bench-async-total-until-all|bench/cnn_bench.c|s/  const int async = t->step.ps \&\& strcmp/  const int async = 0 \&\& t->step.ps \&\& strcmp/|test_cnn_bench_ps.sh
serve-rest-port-shared|serve/http.c|s#      MHD_OPTION_END);#      MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);#|test_serve_grpc_errors.sh
grpc-calls-queued-on-one-thread|serve/call_pool.c|s#if (p->idle + p->returning <= p->queued) {#if (p->threads == 0) {#|test_serve_grpc_sigterm.sh
hvdrun-all-hosts-for-fewer-ranks|launcher/command.c|s#p->hosts = hvdrun_hosts_format_first(\&o->hosts, p->np);#p->hosts = hvdrun_hosts_format(\&o->hosts);#|test_hvdrun_args.sh
agree-histogram-freq-left-out|train/agree.c|s#^  line(\&out, "--histogram-freq", "%d", o->histogram_freq);#  /* --histogram-freq left out */#|test_train_agree
nn-blas-misdetected-core-kept|nn/threads.c|s/  execv("\/proc\/self\/exe", argv);/  (void)argv;/|test_blas_core.sh
nn-blas-user-coretype-overridden|nn/threads.c|s/(forced \&\& \*forced)) return NN_OK;/0) return NN_OK;/|test_blas_core.sh
nn-blas-reexec-under-loader|nn/threads.c|s/getauxval(AT_BASE) == 0/getauxval(AT_BASE) == 12345/|test_blas_core.sh
plot-strategies-drops-a-strategy|scripts/plot_strategies.py|s#    strategies = known + sorted#    strategies = known[:-1] + sorted#|test_plots.sh
plot-strategies-height-not-ips|scripts/plot_strategies.py|s#bar = ax.bar(x, row\["ips"\] or 0,#bar = ax.bar(x, row["link"] or 0,#|test_plots.sh
plot-pipeline-drops-last-stage|scripts/plot_pipeline_timeline.py|s#for s, boxes in enumerate(run\["boxes"\]):#for s, boxes in enumerate(run["boxes"][:-1]):#|test_plots.sh
plot-pipeline-short-box-forward|scripts/plot_pipeline_timeline.py|s#("B" if micro in seen_f else "F")#"F"#|test_plots.sh
plot-pipeline-box-one-column|scripts/plot_pipeline_timeline.py|s#ax.barh(y, width \* per_column, 0.8#ax.barh(y, per_column, 0.8#|test_plots.sh
onnx-clip-grad-past-max|nn/graph_kernels.c|s#default: dx\[i\] += (x\[i\] > lo \&\& x\[i\] < hi) ? g : 0.0f; break;#default: dx[i] += x[i] > lo ? g : 0.0f; break;#|test_onnx_models
gconv-weight-grad-taps-transposed|nn/graph_kernels.c|s#if (dw) dw\[woff + ki \* s->kw + kj\] += (float)gw;#if (dw) dw[woff + kj * s->kw + ki] += (float)gw;#|test_onnx_models
join-set-stand-in-on-world|hvd/execute.c|s#  p->set = r->set;   /\* the collective runs on the set's ranks \*/#  p->set = 0;#|test_hvd_join_sets
join-counts-for-every-set|hvd/negotiation.c|s#  const join_state_t \*js = join_find(c, e->req\[e->ref\].set);#  const join_state_t *js = c->njoins ? \&c->joins[0] : NULL;#|test_hvd_join_sets
join-set-waits-for-world|hvd/negotiation.c|s#w->set != 0 ? w->set_size : c->size, joined, 0, -1#c->size, joined, 0, -1#|test_hvd_join_sets
join-set-no-stand-in|hvd/execute.c|s#int joined = reqs\[i\] == NULL \&\& hvd_joined_sets_has(resp\[i\].set);#int joined = reqs[i] == NULL \&\& hvd_joined_sets_has(0);#|test_hvd_join_sets
join-last-rank-set-index|hvd/negotiation.c|s#  js->last_joined = rank;#  js->last_joined = js->njoined - 1;#|test_hvd_join_sets
join-set-broadcast-allowed|hvd/negotiation.c|s#    int unsupported = a->kind != HVD_KIND_ALLREDUCE \&\&#    int unsupported = a->set == 0 \&\& a->kind != HVD_KIND_ALLREDUCE \&\&#|test_hvd_join_sets
join-ex-outside-set-accepted|hvd/api_ex.c|s#  hvd_status_t s = hvd_call_options_enter(opts, "hvd_join");#  hvd_status_t s = HVD_OK; (void)opts;#|test_hvd_join_sets
join-set-never-left|hvd/execute.c|s#^      hvd_joined_sets_remove(resp\[i\].set);#      ;#|test_hvd_join_sets
shutdown-ack-wait-fixed|hvd/background.c|s#  if (now_us < start_us + DRAIN_LIMIT_US) return 1;#  return now_us < start_us + DRAIN_LIMIT_US;#|test_hvd_shutdown_slow
shutdown-waits-for-the-dead|hvd/background.c|s#  double limit_us = start_us + DRAIN_LIMIT_US + timeout_us;#  double limit_us = 1e300;#;s#hvd_liveness_silent_us(r, now_us) > timeout_us) return 0;#hvd_liveness_silent_us(r, now_us) > 1e300) return 0;#|test_hvd_shutdown_slow
py-collective-not-bound|python/hvd/_api.py|s#"broadcast_async_", "alltoall", "alltoall_async",#"broadcast_async_", "alltoall_async",#|test_python.sh
py-cuda-built-bare-name|python/hvd/_lib.py|s#^library_path = _loaded_path(library_path, lib.hvd_init)#pass#|test_python.sh
pipe-step-failure-leaves-requests|train/pipeline_step.c|s/^    train_pipeline_drop_requests(p);$/    (void)0;/|test_train_pipeline_faults
pipe-step-after-failure-runs|train/pipeline_step.c|s/^  if (p->failed_step >= 0) {$/  if (0) {/|test_train_pipeline_faults
pipe-gather-nomem-alone|train/pipeline_step.c|s/hvd_allreduce("pipe.gather.nomem", \&mine, \&first, 1, HVD_INT32, HVD_MIN)/(first = mine, HVD_OK)/|test_train_pipeline_faults
pipe-pool-set-not-taken|train/pipeline_step.c|s/  if (!p->stash\[k\] \&\& p->npool > 0) p->stash\[k\] = p->pool\[--p->npool\];/  if (!p->stash[k] \&\& p->npool > 0) p->stash[k] = p->pool[p->npool - 1];/|test_train_pipeline
pipe-plan-ignores-copies|train/pipeline_plan.c|s/^  if (stashes \&\& copy_s_per_byte > 0)$/  if (0)/|test_train_pipeline_plan
train-pipe-later-stages-decode|train/main.c|s/train_pipeline_stage(t->pipe) == 0);/1);/|test_train_pipeline.sh
pipe-labels-not-shared|train/pipeline_step.c|s/^  st->y = p->batch + 1;$/  (void)0;/|test_train_pipeline.sh
train-norm-per-host|train/main.c|s#^  bcast("setup.norm", ms, 6, HVD_FLOAT32);#  ;#|test_train_images.sh
resample-rgb-load-stride|data/transform.c|s#\*(const v4f \*)(p + 3 \* j)#*(const v4f *)(p + 4 * j)#|test_data_torch.sh
pipeline-restart-keeps-step|data/pipeline.c|s#^  p->held = p->first_step;#  ;#|test_data_images
stream-repeats-epoch|data/stream.c|s#data_pipeline_restart(s->p, ++s->epoch, 0, err, errlen)#data_pipeline_restart(s->p, s->epoch, 0, err, errlen)#|test_data_images
compare-ratio-awk-redirect|scripts/compare_real_data.sh|s#(s > 0 ? i / s : 0) }#s > 0 ? i / s : 0 }#|test_compare_real_data.sh
ps-local-agg-never|hvd/ps_api.c|s/  int agg = ps->cfg.mode == HVD_PS_SYNC \&\&/  int agg = 0 \&\&/|test_hvd_ps
ps-agg-sum-drops-host|hvd/ps_engine.c|s/out\[i\] = data\[i\] + add\[i\];/out[i] = add[i];/|test_hvd_ps
ps-fuse-uncapped|hvd/ps_engine.c|s/#define PS_FUSE_MAX (4 \* 1024 \* 1024)/#define PS_FUSE_MAX ((size_t)1 << 40)/|test_hvd_ps
ps-train-agg-flag-ignored|train/ps_run.c|s/train_ps_local_aggregation(o->ps_local_aggregation)/HVD_PS_AGG_OFF/|test_train_ps.sh
ps-finish-without-barrier|hvd/ps_api.c|s/^  if (s == HVD_OK) s = hvd_barrier();$/  (void)0;/|test_hvd_ps
range-set-cap-unchecked|nn/model_range.c|s/  int cap = m->acts_cur ? acts_cap(m->acts_cur) : m->cfg.batch;/  int cap = m->cfg.batch;/|test_nn_model_range
walk-forward-in-range-set|nn/model_walk.c|s/^  if (m->acts_cur)$/  if (0)/|test_nn_model_range
range-set-input-not-switched|nn/model_range.c|s/  if ((void \*)m->input == old) m->input = new;/  (void)0;/|test_nn_model_range
pipe-step-keeps-range-set|train/pipeline_step.c|s/  if (nn_model_range_use(p->m, p->bounds\[p->stage\], p->bounds\[p->stage + 1\], NULL) != NN_OK \&\&/  if (0 \&\&/|test_train_pipeline_faults
pipe-release-drops-set|train/pipeline_step.c|s/^    p->pool\[p->npool++\] = p->stash\[k\];$/    (void)0;/|test_train_pipeline
pipe-1f1b-warms-all|train/pipeline_step.c|s/  int warm = p->S - 1 - p->stage < M ? p->S - 1 - p->stage : M;/  int warm = M;/|test_train_pipeline
liveness-gap-forgiven-forever|hvd/liveness.c|s#      if (L.forgivable\[r\]) {#      if (1) {#|test_hvd_liveness_gap
EOF
)

list_only=0; stale_only=0
want=()
for a in "$@"; do
  case $a in
    --list) list_only=1 ;;
    --stale) stale_only=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) want+=("$a") ;;
  esac
done

# The mutations named, in the order given (else the whole list, in its order).
selected=()
while IFS= read -r line; do
  [ -n "$line" ] && [ ${#want[@]} -eq 0 ] && selected+=("$line")
done <<< "$MUTATIONS"
for w in "${want[@]}"; do
  while IFS= read -r line; do
    [ "${line%%|*}" = "$w" ] && { selected+=("$line"); break; }
  done <<< "$MUTATIONS"
done
if [ ${#want[@]} -gt 0 ] && [ ${#selected[@]} -ne ${#want[@]} ]; then
  echo "mutation_check: unknown mutation name among: ${want[*]} (--list shows them)" >&2
  exit 2
fi
if [ $stale_only -eq 1 ]; then   # no build: does each expression still change its file?
  stale=0
  for line in "${selected[@]}"; do
    IFS='|' read -r n f e _ <<< "$line"
    # An expression sed refuses (a '|' inside it splits the line) prints nothing: stale too.
    if [ ! -f "$f" ] || ! sed -e "$e" "$f" >/dev/null 2>&1 || sed -e "$e" "$f" | cmp -s - "$f"; then
      printf '%-31s %-30s STALE (the sed expression no longer matches %s, or is not valid)\n' "$n" "$f" "$f"
      stale=$((stale + 1))
    fi
  done
  echo "mutation check: ${#selected[@]} mutations: $stale stale"
  [ $stale -eq 0 ]; exit
fi
if [ $list_only -eq 1 ]; then
  for line in "${selected[@]}"; do IFS='|' read -r n f _ t <<< "$line"; printf '%-31s %-30s %s\n' "$n" "$f" "$t"; done
  exit 0
fi
[ -d "$BUILD" ] || { echo "mutation_check: no $BUILD directory: run make first" >&2; exit 2; }

scratch=$(mktemp -d /tmp/hvd_mutation.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# The tree as it is, build directory included, times kept (tar), so only what a mutation
# touches is rebuilt. .git stays behind: nothing here commits.
tar --exclude=./.git --exclude='./build-*' -cf - . | tar -xf - -C "$scratch" || { echo "copy failed" >&2; exit 2; }
cd "$scratch" || exit 2
if ! make -j"$JOBS" BUILD="$BUILD" > "$scratch/base-build.log" 2>&1; then
  echo "mutation_check: the unmutated tree does not build (see the log below)" >&2
  tail -20 "$scratch/base-build.log" >&2
  exit 2
fi

# What a mutation rebuilds: only the programs of its tests when they are all C tests (its
# library and a link or two, not the hundred-odd programs of make all, twice: mutated,
# then restored); everything when a script is among them (it may run any program).
# Make's times keep this right: a program built from the mutated file is rebuilt once
# the file is put back and a later mutation needs it.
targets_of() {
  local t out=()
  for t in $1; do
    if [ -f "tests/$t.c" ]; then out+=("$BUILD/tests/$t"); else echo all; return; fi
  done
  echo "${out[@]}"
}

caught=0; missed=0; broken=0
for line in "${selected[@]}"; do
  IFS='|' read -r name file expr tests <<< "$line"
  cp -p "$file" "$scratch/orig"
  sed -i -e "$expr" "$file"
  if cmp -s "$file" "$scratch/orig"; then
    result="STALE (the sed expression no longer matches $file)"; broken=$((broken + 1))
  elif ! make -j"$JOBS" BUILD="$BUILD" $(targets_of "$tests") > "$scratch/$name.build.log" 2>&1; then
    result="DOES NOT BUILD (fix the expression)"; broken=$((broken + 1))
  else
    failing=()
    for t in $tests; do
      # run.sh matches by substring: pass the exact name and count only its line
      out=$(HVD_TEST_TIME_LIMIT=${HVD_TEST_TIME_LIMIT:-120} tests/run.sh "$BUILD" "$t" 2>&1)
      if printf '%s\n' "$out" | grep -qE "^FAIL +$t(\.sh)?( |:|$)"; then failing+=("$t"); fi
    done
    if [ ${#failing[@]} -gt 0 ]; then
      result="caught by ${failing[*]}"; caught=$((caught + 1))
    else
      result="NOT CAUGHT by $tests"; missed=$((missed + 1))
    fi
  fi
  # Put the file back (cp gives it a new time, so make rebuilds what the mutation built).
  cp "$scratch/orig" "$file"
  printf '%-31s %-30s %s\n' "$name" "$file" "$result"
done
echo
echo "mutation check: ${#selected[@]} mutations: $caught caught, $missed not caught, $broken stale or not building"
[ $missed -eq 0 ] && [ $broken -eq 0 ]
