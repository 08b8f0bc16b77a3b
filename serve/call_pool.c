/* serve/call_pool.c: the threads that run gRPC calls (see call_pool.h). */
#include "serve/call_pool.h"
#include "serve/sync.h"

#include <pthread.h>
#include <stdlib.h>

struct serve_pool {
  pthread_mutex_t mu;
  pthread_cond_t work;          /* a task was queued, or the pool is being freed        */
  pthread_cond_t gone;          /* a thread exited                                      */
  serve_pool_task_t *head, *tail;
  int threads, idle, queued, keep_idle, stopping;
  int returning;                /* threads whose task called serve_pool_task_ending     */
};

/* Whether this thread's current task called serve_pool_task_ending. */
static _Thread_local int ending;

static void *pool_main(void *arg) {
  serve_pool_t *p = arg;
  serve_lock(&p->mu);
  for (;;) {
    while (!p->head && !p->stopping)
      serve_check_pthread(pthread_cond_wait(&p->work, &p->mu), "pthread_cond_wait");
    if (!p->head) { /* stopping */
      p->idle--;
      break;
    }
    serve_pool_task_t *t = p->head;
    p->head = t->next;
    if (!p->head) p->tail = NULL;
    p->queued--;
    p->idle--;
    serve_unlock(&p->mu);
    ending = 0;
    t->fn(t);
    serve_lock(&p->mu);
    if (ending) p->returning--;
    /* Enough wait already, unless a task was queued for this thread. */
    if (p->idle >= p->keep_idle && p->queued <= p->idle) break;
    p->idle++;
  }
  p->threads--;
  serve_check_pthread(pthread_cond_broadcast(&p->gone), "pthread_cond_broadcast");
  serve_unlock(&p->mu);
  return NULL;
}

serve_pool_t *serve_pool_new(int keep_idle) {
  serve_pool_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->keep_idle = keep_idle;
  if (pthread_mutex_init(&p->mu, NULL) != 0) return free(p), NULL;
  if (pthread_cond_init(&p->work, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    return free(p), NULL;
  }
  if (pthread_cond_init(&p->gone, NULL) != 0) {
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    return free(p), NULL;
  }
  return p;
}

int serve_pool_run(serve_pool_t *p, serve_pool_task_t *task) {
  task->next = NULL;
  serve_lock(&p->mu);
  int rc = 0;
  /* Every idle or returning thread has a task coming: one more thread. */
  if (p->idle + p->returning <= p->queued) {
    pthread_attr_t attr;
    pthread_t t;
    rc = pthread_attr_init(&attr);
    if (rc == 0) {
      rc = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      if (rc == 0) rc = pthread_create(&t, &attr, pool_main, p);
      pthread_attr_destroy(&attr);
    }
    if (rc == 0) p->threads++, p->idle++;
  }
  if (rc == 0) {
    if (p->tail) p->tail->next = task;
    else p->head = task;
    p->tail = task;
    p->queued++;
    serve_check_pthread(pthread_cond_signal(&p->work), "pthread_cond_signal");
  }
  serve_unlock(&p->mu);
  return rc;
}

void serve_pool_task_ending(serve_pool_t *p) {
  serve_lock(&p->mu);
  p->returning++;
  ending = 1;
  serve_unlock(&p->mu);
}

void serve_pool_free(serve_pool_t *p) {
  if (!p) return;
  serve_lock(&p->mu);
  p->stopping = 1;
  serve_check_pthread(pthread_cond_broadcast(&p->work), "pthread_cond_broadcast");
  while (p->threads > 0) serve_check_pthread(pthread_cond_wait(&p->gone, &p->mu), "pthread_cond_wait");
  serve_unlock(&p->mu);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->gone);
  pthread_mutex_destroy(&p->mu);
  free(p);
}
