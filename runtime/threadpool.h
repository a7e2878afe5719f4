/* threadpool.h — the context's persistent kernel thread pool and mst_parallel_for.
 *
 * A region splits [0, n) into at most n_threads contiguous chunks by a fixed rule (the same n,
 * min_chunk and thread count always give the same ranges), and runs each chunk exactly once on
 * the calling thread or one of the n_threads - 1 workers. The main trade-off: chunks are static,
 * so results are bit-reproducible whatever the scheduling, but a region is as slow as its
 * slowest chunk; to soften that, a thread that finishes its own chunk takes any chunk whose home
 * thread has not started it yet (a worker the data loader kept off its core, one slow to wake).
 * Workers block on a condition variable between regions — they never spin while idle, since the
 * loader's threads share the cores. Once oneDNN has loaded libgomp, regions run on its OpenMP
 * team instead, the same chunks by the same rule (runtime/omp_team.h), and the workers sleep.
 *
 *     static void scale(void *arg, int64_t begin, int64_t end, int worker) {
 *         float *x = arg;
 *         for (int64_t i = begin; i < end; i++) x[i] *= 2;
 *     }
 *     mst_parallel_for(ctx, n, 4096, scale, x);   // inline when n < 2 * 4096 or 1 thread
 *
 * `worker` is the chunk's index in [0, chunks): each chunk runs on one thread, so kernels index
 * per-worker scratch and per-worker partial sums by it, and reducing the partials in index order
 * is deterministic. A call from inside a region (a kernel's chunk that calls a parallel GEMM)
 * runs inline as a single chunk, worker 0; such nested functions must not use scratch of their
 * own. The function must not touch the context (no allocation, no errors): size buffers with
 * mst_parallel_chunks_ctx and get them from mst_ctx_workspace before the call.
 */
#ifndef MST_RUNTIME_THREADPOOL_H
#define MST_RUNTIME_THREADPOOL_H

#include <signal.h>
#include <stdint.h>

typedef struct mst_ctx mst_ctx;
typedef struct mst_threadpool mst_threadpool;

typedef void (*mst_parallel_fn)(void *arg, int64_t begin, int64_t end, int worker);

/* n_threads - 1 workers (the caller is the n-th), started by the first region that does not run
 * on the OpenMP team (runtime/omp_team.h), so a pool whose regions all run on the team never starts
 * them. NULL when out of memory; a pool whose workers could not all be started still runs every
 * region correctly, with fewer threads. */
mst_threadpool *mst_threadpool_new(int n_threads);
void mst_threadpool_free(mst_threadpool *pool);
int mst_threadpool_size(const mst_threadpool *pool);            /* n_threads it was made for */
/* Run fn over [0, n) in mst_parallel_chunks(n_threads, n, min_chunk) chunks; NULL pool: inline. */
void mst_threadpool_run(mst_threadpool *pool, int64_t n, int64_t min_chunk, mst_parallel_fn fn, void *arg);

/* Block, on the calling thread, the process-directed signals a program handles (interrupt,
 * termination, timers, children), the old mask into *old: threads started before it is restored
 * inherit the block, so those signals keep reaching the threads that expect them, while faults
 * and SIGPROF (a per-thread sampler) still reach the thread they concern. The pool's workers and
 * the OpenMP team it borrows (runtime/omp_team.c), the data loader's workers and the
 * communicator's progress thread are started this way. */
void mst_threadpool_block_signals(sigset_t *old);

/* The context's pool (sized by mst_ctx_set_threads); inline while ctx->serial is set. */
void mst_parallel_for(mst_ctx *ctx, int64_t n, int64_t min_chunk, mst_parallel_fn fn, void *arg);

/* How many chunks a region of n over n_threads makes: every chunk gets at least min_chunk items
 * (min_chunk < 1 counts as 1), at most n_threads chunks, and 1 (inline) when n < 2 * min_chunk. */
int mst_parallel_chunks(int n_threads, int64_t n, int64_t min_chunk);
/* Chunk i of `chunks` over [0, n): sizes differ by at most one, larger chunks first. */
void mst_parallel_range(int64_t n, int chunks, int i, int64_t *begin, int64_t *end);
/* What mst_parallel_for(ctx, n, min_chunk, ...) will use, for sizing per-worker buffers: 1 when
 * the call would run inline (one thread, a serial context, or nested inside a region). */
int mst_parallel_chunks_ctx(const mst_ctx *ctx, int64_t n, int64_t min_chunk);

#endif
