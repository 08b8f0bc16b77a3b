/* scripts/gpu_check/stub/mpi/mpi.h: A SINGLE-PROCESS MPI STAND-IN, ONLY FOR THE GPU CHECK.
   The GPU machine has no OpenMPI; scripts/gpu_check.sh builds hvd against this so that
   hvd_init works at size 1 and hvd_allreduce of device memory goes through NCCL with one
   rank. It implements exactly the calls hvd and collectives use, for one process:
   rank 0 of size 1, messages to oneself queued and matched by communicator and tag.
   Built only with `make MPI=stub` (what scripts/gpu_check.sh runs). */
#ifndef GPU_CHECK_STUB_MPI_H
#define GPU_CHECK_STUB_MPI_H

#include <stddef.h>

typedef int MPI_Comm;
typedef long MPI_Datatype;     /* the element size in bytes */
typedef int MPI_Op;
typedef int MPI_Errhandler;
typedef int MPI_Info;
typedef struct mpi_stub_request *MPI_Request;
typedef struct {
  int MPI_SOURCE, MPI_TAG, MPI_ERROR;
  size_t stub_bytes;
  int cancelled;
} MPI_Status;

#define MPI_SUCCESS 0
#define MPI_ERR_OTHER 15
#define MPI_ERR_PENDING 18
#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_ERROR_STRING 256
#define MPI_COMM_NULL 0
#define MPI_COMM_WORLD 1
#define MPI_DATATYPE_NULL 0L
#define MPI_BYTE 1L
#define MPI_CHAR 1L
#define MPI_INT ((long)sizeof(int))
#define MPI_MAX 1
#define MPI_ERRORS_RETURN 1
#define MPI_INFO_NULL 0
#define MPI_COMM_TYPE_SHARED 1
#define MPI_UNDEFINED (-32766)
#define MPI_ANY_SOURCE (-1)
#define MPI_REQUEST_NULL ((MPI_Request)0)
#define MPI_STATUS_IGNORE ((MPI_Status *)0)
#define MPI_THREAD_SINGLE 0
#define MPI_THREAD_FUNNELED 1
#define MPI_THREAD_SERIALIZED 2
#define MPI_THREAD_MULTIPLE 3

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int MPI_Initialized(int *flag);
int MPI_Finalized(int *flag);
int MPI_Finalize(void);
int MPI_Query_thread(int *provided);
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *out);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out);
int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm *out);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler h);
int MPI_Error_string(int err, char *s, int *len);
int MPI_Error_class(int err, int *cls);
int MPI_Type_contiguous(int count, MPI_Datatype old, MPI_Datatype *out);
int MPI_Type_commit(MPI_Datatype *t);
int MPI_Type_free(MPI_Datatype *t);
int MPI_Allreduce(const void *send, void *recv, int count, MPI_Datatype t, MPI_Op op,
                  MPI_Comm comm);
int MPI_Iallreduce(const void *send, void *recv, int count, MPI_Datatype t, MPI_Op op,
                   MPI_Comm comm, MPI_Request *req);
int MPI_Allgather(const void *send, int scount, MPI_Datatype st, void *recv, int rcount,
                  MPI_Datatype rt, MPI_Comm comm);
int MPI_Ibarrier(MPI_Comm comm, MPI_Request *req);
int MPI_Get_processor_name(char *name, int *len);
int MPI_Isend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
              MPI_Request *req);
int MPI_Irecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
              MPI_Request *req);
int MPI_Recv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
             MPI_Status *st);
int MPI_Iprobe(int src, int tag, MPI_Comm comm, int *flag, MPI_Status *st);
int MPI_Test(MPI_Request *req, int *flag, MPI_Status *st);
int MPI_Wait(MPI_Request *req, MPI_Status *st);
int MPI_Cancel(MPI_Request *req);
int MPI_Request_free(MPI_Request *req);
int MPI_Get_count(const MPI_Status *st, MPI_Datatype t, int *count);

#endif
