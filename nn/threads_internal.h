/* nn/threads_internal.h: nn's own worker pool, used by the CPU kernels to split work
   (usually the batch) across nn_threads() threads. Internal to nn. */
#ifndef NN_THREADS_INTERNAL_H
#define NN_THREADS_INTERNAL_H

#define NN_MAX_THREADS 64

/* Runs fn(ctx, task, worker) for task in [0, tasks), spread over up to nn_threads()
   threads (the caller is worker 0; worker < nn_threads()). Returns when all are done.
   Runs serially when there is one thread, one task, or when called from inside a
   parallel region (no nesting). Tasks must not depend on their order. */
typedef void (*nn_task_fn)(void *ctx, int task, int worker);
void nn_parallel_for(int tasks, nn_task_fn fn, void *ctx);

/* Number of workers nn_parallel_for would use for this many tasks. */
int nn_parallel_workers(int tasks);

/* Brackets a region whose workers call BLAS each from its own thread: OpenBLAS is set
   to one thread inside it (concurrent multi-threaded OpenBLAS calls would serialise and
   oversubscribe the cores), and back to nn_threads() at the end. */
void nn_blas_single_begin(void);
void nn_blas_single_end(void);

#endif
