/* scripts/gpu_check/stub/mpi/mpi_stub.c: the single-process MPI of mpi.h, ONLY FOR THE
   GPU CHECK (see there). Sends to oneself are copied into a queue at once (so they
   complete immediately); receives match the oldest queued message of the same
   communicator and tag. */
#include "mpi.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct msg {
  MPI_Comm comm;
  int tag;
  size_t bytes;
  struct msg *next;
  char data[];
} msg_t;

struct mpi_stub_request {
  int is_recv, done, cancelled;
  void *buf;
  size_t cap;
  MPI_Comm comm;
  int tag;
  size_t got;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static msg_t *head, *tail;
static int initialized, finalized, next_comm = 2;

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  (void)argc;
  (void)argv;
  initialized = 1;
  if (provided) *provided = required;
  return MPI_SUCCESS;
}
int MPI_Initialized(int *flag) { *flag = initialized; return MPI_SUCCESS; }
int MPI_Finalized(int *flag) { *flag = finalized; return MPI_SUCCESS; }
int MPI_Finalize(void) { finalized = 1; return MPI_SUCCESS; }
int MPI_Query_thread(int *provided) { *provided = MPI_THREAD_MULTIPLE; return MPI_SUCCESS; }
int MPI_Comm_rank(MPI_Comm comm, int *rank) { (void)comm; *rank = 0; return MPI_SUCCESS; }
int MPI_Comm_size(MPI_Comm comm, int *size) { (void)comm; *size = 1; return MPI_SUCCESS; }
static int new_comm(MPI_Comm *out) {
  pthread_mutex_lock(&mu);
  *out = next_comm++;
  pthread_mutex_unlock(&mu);
  return MPI_SUCCESS;
}
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *out) { (void)comm; return new_comm(out); }
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out) {
  (void)comm;
  (void)key;
  if (color == MPI_UNDEFINED) { *out = MPI_COMM_NULL; return MPI_SUCCESS; }
  return new_comm(out);
}
int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm *out) {
  (void)comm; (void)type; (void)key; (void)info;
  return new_comm(out);
}
int MPI_Comm_free(MPI_Comm *comm) { *comm = MPI_COMM_NULL; return MPI_SUCCESS; }
int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler h) { (void)comm; (void)h; return MPI_SUCCESS; }
int MPI_Error_string(int err, char *s, int *len) {
  *len = snprintf(s, MPI_MAX_ERROR_STRING, "stub MPI error %d", err);
  return MPI_SUCCESS;
}
int MPI_Error_class(int err, int *cls) { *cls = err; return MPI_SUCCESS; }
int MPI_Type_contiguous(int count, MPI_Datatype old, MPI_Datatype *out) {
  *out = (MPI_Datatype)count * old;
  return MPI_SUCCESS;
}
int MPI_Type_commit(MPI_Datatype *t) { (void)t; return MPI_SUCCESS; }
int MPI_Type_free(MPI_Datatype *t) { *t = MPI_DATATYPE_NULL; return MPI_SUCCESS; }
int MPI_Allreduce(const void *send, void *recv, int count, MPI_Datatype t, MPI_Op op,
                  MPI_Comm comm) {
  (void)op;
  (void)comm;
  if (send != recv) memmove(recv, send, (size_t)count * (size_t)t);
  return MPI_SUCCESS;
}

/* One process: the collectives are copies, complete at once (a NULL request tests
   done, as MPI_REQUEST_NULL does). */
int MPI_Iallreduce(const void *send, void *recv, int count, MPI_Datatype t, MPI_Op op,
                   MPI_Comm comm, MPI_Request *req) {
  *req = MPI_REQUEST_NULL;
  return MPI_Allreduce(send, recv, count, t, op, comm);
}
int MPI_Allgather(const void *send, int scount, MPI_Datatype st, void *recv, int rcount,
                  MPI_Datatype rt, MPI_Comm comm) {
  (void)rcount;
  (void)rt;
  (void)comm;
  if (send != recv) memmove(recv, send, (size_t)scount * (size_t)st);
  return MPI_SUCCESS;
}
int MPI_Ibarrier(MPI_Comm comm, MPI_Request *req) {
  (void)comm;
  *req = MPI_REQUEST_NULL;
  return MPI_SUCCESS;
}
int MPI_Get_processor_name(char *name, int *len) {
  if (gethostname(name, MPI_MAX_PROCESSOR_NAME) != 0) snprintf(name, MPI_MAX_PROCESSOR_NAME, "localhost");
  name[MPI_MAX_PROCESSOR_NAME - 1] = '\0';
  *len = (int)strlen(name);
  return MPI_SUCCESS;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
              MPI_Request *req) {
  if (dest != 0) return MPI_ERR_OTHER;
  size_t bytes = (size_t)count * (size_t)t;
  msg_t *m = malloc(sizeof *m + (bytes ? bytes : 1));
  struct mpi_stub_request *r = calloc(1, sizeof *r);
  if (!m || !r) { free(m); free(r); return MPI_ERR_OTHER; }
  m->comm = comm;
  m->tag = tag;
  m->bytes = bytes;
  m->next = NULL;
  memcpy(m->data, buf, bytes);
  pthread_mutex_lock(&mu);
  if (tail) tail->next = m; else head = m;
  tail = m;
  pthread_mutex_unlock(&mu);
  r->done = 1;
  *req = r;
  return MPI_SUCCESS;
}

/* With mu held: removes and returns the oldest message for (comm, tag), or NULL. */
static msg_t *take(MPI_Comm comm, int tag, int remove) {
  msg_t *prev = NULL;
  for (msg_t *m = head; m; prev = m, m = m->next)
    if (m->comm == comm && m->tag == tag) {
      if (remove) {
        if (prev) prev->next = m->next; else head = m->next;
        if (tail == m) tail = prev;
      }
      return m;
    }
  return NULL;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
              MPI_Request *req) {
  if (src != 0 && src != MPI_ANY_SOURCE) return MPI_ERR_OTHER;
  struct mpi_stub_request *r = calloc(1, sizeof *r);
  if (!r) return MPI_ERR_OTHER;
  r->is_recv = 1;
  r->buf = buf;
  r->cap = (size_t)count * (size_t)t;
  r->comm = comm;
  r->tag = tag;
  *req = r;
  return MPI_SUCCESS;
}

static void fill(MPI_Status *st, int tag, size_t bytes, int cancelled) {
  if (!st) return;
  st->MPI_SOURCE = 0;
  st->MPI_TAG = tag;
  st->MPI_ERROR = MPI_SUCCESS;
  st->stub_bytes = bytes;
  st->cancelled = cancelled;
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *st) {
  struct mpi_stub_request *r = *req;
  if (!r) { *flag = 1; return MPI_SUCCESS; }
  if (r->is_recv && !r->done && !r->cancelled) {
    pthread_mutex_lock(&mu);
    msg_t *m = take(r->comm, r->tag, 1);
    pthread_mutex_unlock(&mu);
    if (m) {
      size_t n = m->bytes < r->cap ? m->bytes : r->cap;
      memcpy(r->buf, m->data, n);
      r->got = n;
      r->done = 1;
      free(m);
    }
  }
  *flag = r->done || r->cancelled;
  if (*flag) {
    fill(st, r->tag, r->got, r->cancelled);
    free(r);
    *req = MPI_REQUEST_NULL;
  }
  return MPI_SUCCESS;
}

int MPI_Wait(MPI_Request *req, MPI_Status *st) {
  int flag = 0;
  while (MPI_Test(req, &flag, st) == MPI_SUCCESS && !flag) sched_yield();
  return MPI_SUCCESS;
}

int MPI_Recv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
             MPI_Status *st) {
  MPI_Request r;
  int err = MPI_Irecv(buf, count, t, src, tag, comm, &r);
  return err != MPI_SUCCESS ? err : MPI_Wait(&r, st);
}

int MPI_Iprobe(int src, int tag, MPI_Comm comm, int *flag, MPI_Status *st) {
  (void)src;
  pthread_mutex_lock(&mu);
  msg_t *m = take(comm, tag, 0);
  *flag = m != NULL;
  if (m) fill(st, tag, m->bytes, 0);
  pthread_mutex_unlock(&mu);
  return MPI_SUCCESS;
}

int MPI_Cancel(MPI_Request *req) {
  if (*req && !(*req)->done) (*req)->cancelled = 1;
  return MPI_SUCCESS;
}

int MPI_Request_free(MPI_Request *req) {
  free(*req);
  *req = MPI_REQUEST_NULL;
  return MPI_SUCCESS;
}

int MPI_Get_count(const MPI_Status *st, MPI_Datatype t, int *count) {
  *count = (int)(st->stub_bytes / (size_t)t);
  return MPI_SUCCESS;
}
