/* serve/call_pool.h: threads that run gRPC calls, kept between calls.
   A call blocks while its batch runs, so the calls that arrive together each need a
   thread for the batcher to see them together; starting a thread per call cost more
   than the call itself (a fresh stack's page faults, its unmapping's TLB shootdowns).
   A task runs on an idle thread, else on a new one: never queued behind another, so the
   threads grow with the calls in flight (the caller bounds those); up to keep_idle of
   them wait for the next task when theirs is done, the others end.
   Errors: serve_pool_run returns 0, or an errno value when no thread could be started
   (then nothing runs). */
#ifndef SERVE_CALL_POOL_H
#define SERVE_CALL_POOL_H

typedef struct serve_pool_task serve_pool_task_t;
struct serve_pool_task {        /* the caller's storage, untouched until fn returns     */
  void (*fn)(serve_pool_task_t *task);
  serve_pool_task_t *next;      /* the pool's                                          */
};

typedef struct serve_pool serve_pool_t;

/* NULL when out of memory or pthread objects cannot be made. */
serve_pool_t *serve_pool_new(int keep_idle);
int serve_pool_run(serve_pool_t *p, serve_pool_task_t *task);
/* Called by a task's fn on its pool thread, just before it releases the caller's bound
   on calls in flight (its last use of the caller's state): the thread counts as
   returning, so a task queued from then on waits for it instead of starting one more
   thread (else, while finished threads wait for a core, the caller's bound lets new
   calls in and each starts a thread: up to twice the bound). */
void serve_pool_task_ending(serve_pool_t *p);
/* Waits for every task to end and every thread to exit, and frees p (NULL: nothing). */
void serve_pool_free(serve_pool_t *p);

#endif /* SERVE_CALL_POOL_H */
