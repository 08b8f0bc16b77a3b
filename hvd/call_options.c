/* hvd/call_options.c: the per-call options of the _ex form running on this thread
   (process set, prescale and postscale factors).

   An _ex form (hvd/api_ex.c) validates its options here, makes them this thread's
   current options, and calls the plain form, which validates the rest and submits: the
   plain forms stay the one place where a call is checked and recorded. They read the
   current options where a set changes their meaning (the size for roots and splits, and
   the key and the set of the request: hvd_call_options_apply, under hvd_g.mu). */
#include "hvd/call_options.h"
#include "hvd/hvd_internal.h"

#include <math.h>
#include <stdio.h>

static _Thread_local struct {
  int active;
  int32_t set;
  int size;
  double prescale, postscale;
} cur;

/* 0 in hvd_options_t means 1 (a zero-initialised struct is today's behaviour). */
static double factor(double f) { return f == 0.0 ? 1.0 : f; }

hvd_status_t hvd_call_options_enter(const hvd_options_t *o, const char *what) {
  cur.active = 0;
  if (o == NULL) return HVD_OK;
  if (!atomic_load(&hvd_g_initialized))
    return hvd_set_error(HVD_ERR_NOT_INITIALIZED,
                         "%s called before hvd_init() or after hvd_shutdown()", what);
  if (!isfinite(o->prescale_factor) || !isfinite(o->postscale_factor))
    return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: prescale_factor %g and "
                         "postscale_factor %g must be finite (0 means 1)", what,
                         o->prescale_factor, o->postscale_factor);
  int size = 0;
  hvd_status_t s = hvd_process_set_check(o->process_set, &size, what);
  if (s != HVD_OK) return s;
  cur.set = o->process_set;
  cur.size = size;
  cur.prescale = factor(o->prescale_factor);
  cur.postscale = factor(o->postscale_factor);
  cur.active = 1;
  return HVD_OK;
}

hvd_status_t hvd_call_options_leave(hvd_status_t s) {
  cur.active = 0;
  return s;
}

/* The factors scale floating-point data only (as Horovod's). */
hvd_status_t hvd_call_options_check_dtype(hvd_dtype_t dtype, const char *what) {
  if (!cur.active || (cur.prescale == 1.0 && cur.postscale == 1.0)) return HVD_OK;
  if (dtype == HVD_FLOAT32 || dtype == HVD_FLOAT64 || dtype == HVD_FLOAT16 ||
      dtype == HVD_BFLOAT16)
    return HVD_OK;
  return hvd_set_error(HVD_ERR_INVALID_ARGUMENT, "%s: prescale/postscale factors (%g, %g) "
                       "need a floating-point dtype, not %s", what, cur.prescale,
                       cur.postscale, hvd_dtype_name(dtype));
}

int hvd_call_size(void) { return cur.active ? cur.size : hvd_g.size; }

void hvd_call_options_apply(struct hvd_request *r, const char *name) {
  r->set = cur.active ? cur.set : 0;
  r->set_size = cur.active ? cur.size : hvd_g.size;
  r->prescale = cur.active ? cur.prescale : 1.0;
  r->postscale = cur.active ? cur.postscale : 1.0;
  char own[HVD_KEY_MAX];
  if (name == NULL) {
    uint64_t n = r->set ? hvd_process_set_next_auto(r->set, r->kind)
                        : hvd_g.auto_seq[r->kind]++;
    snprintf(own, sizeof(own), "%c%s.%llu", HVD_AUTO_KEY_MARK, hvd_kind_name(r->kind),
             (unsigned long long)n);
    name = own;
  }
  if (r->set == 0) snprintf(r->key, sizeof(r->key), "%s", name);
  else snprintf(r->key, sizeof(r->key), "%c%d%c%.*s", HVD_SET_KEY_MARK, (int)r->set,
                HVD_SET_KEY_SEP, HVD_NAME_MAX, name);
}

