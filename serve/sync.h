/* serve/sync.h: the checked pthread calls of serve's threads. A mutex or condition
   variable of ours fails only on a programming error (one destroyed, or unlocked by a
   thread that does not hold it); serve then aborts with what failed rather than go on
   with shared state in an unknown condition. */
#ifndef SERVE_SYNC_H
#define SERVE_SYNC_H

#include <pthread.h>

/* rc: a pthread call's result; what: the call, for the message. Returns when rc is 0. */
void serve_check_pthread(int rc, const char *what);
void serve_lock(pthread_mutex_t *mu);
void serve_unlock(pthread_mutex_t *mu);

#endif
