/* serve/sync.c: the checked pthread calls of serve's threads (see sync.h). */
#include "serve/sync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void serve_check_pthread(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "serve: %s failed: %s\n", what, strerror(rc));
    abort();
  }
}

void serve_lock(pthread_mutex_t *mu) { serve_check_pthread(pthread_mutex_lock(mu), "pthread_mutex_lock"); }

void serve_unlock(pthread_mutex_t *mu) {
  serve_check_pthread(pthread_mutex_unlock(mu), "pthread_mutex_unlock");
}
