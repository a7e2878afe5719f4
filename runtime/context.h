/* context.h — the runtime context: one per training process (and per thread that runs ops).
 *
 * It owns everything stateful: the caching allocator, the seeded generator, the thread budget and
 * its kernel thread pool, the autorelease pools, the autograd tape, the kernel workspace and the
 * last error. There are no other globals in runtime/ (the profiler's enable flag lives in
 * profiler/).
 *
 *     mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 42, .n_threads = 2});
 *     ...
 *     if (!y) fprintf(stderr, "error: %s\n", mst_ctx_error(ctx));
 *     mst_ctx_free(ctx);
 */
#ifndef MST_RUNTIME_CONTEXT_H
#define MST_RUNTIME_CONTEXT_H

#include <stdarg.h>
#include <stdbool.h>

#include "runtime/alloc.h"
#include "runtime/op.h"
#include "runtime/rng.h"
#include "runtime/threadpool.h"

typedef struct {
    uint64_t seed;      /* every random draw derives from it */
    int n_threads;      /* kernels' share of the thread budget; 0 = all cores */
    bool flush_denormals;   /* FTZ/DAZ on every computing thread (runtime/fpu.h); default off */
} mst_ctx_config;

struct mst_ctx {
    mst_allocator *alloc;
    const struct mst_backend *backend;  /* the device its tensors live on and its kernels run on (runtime/device.h) */
    uint64_t seed;
    mst_rng rng;                    /* parameter init, dropout seeds */
    int n_threads;
    bool serial;                    /* kernels run on the calling thread alone (mst_ctx_threads() == 1):
                                       a graph plan whose step measured faster that way (runtime/graph/exec.c) */
    bool flush_denormals;           /* runtime/fpu.h: set on the creating thread, inherited by the pool */
    int loader_threads;             /* threads of this process beside the kernels' that compete for the cores
                                       (the training loader's workers, set by the trainer): part of the
                                       step-thread verdicts' keys (runtime/graph/step_threads.h), since
                                       which budget is faster depends on them */
    int step_threads_pin;           /* mst_step_threads_pin (runtime/graph/step_threads.h): 0 (auto) lets
                                       each step's first runs decide its thread budget; all or one
                                       pins it (runtime.step_threads) */
    mst_threadpool *threadpool;     /* n_threads - 1 workers; NULL with one thread */

    mst_status status;              /* first error since the last clear */
    char err[768];

    /* autorelease pools: a stack of marks into one array of owned tensors */
    mst_tensor **pool;
    size_t pool_len, pool_cap;
    size_t *pool_marks, *tape_marks;
    int pool_depth, pool_marks_cap;

    /* autograd tape: op calls in execution order, holding references to their tensors */
    mst_op_call *tape;
    size_t tape_len, tape_cap;
    bool grad_enabled;

    bool force_ref;                 /* run reference kernels instead of fast ones */
    /* CPU providers (runtime/backend/): which may run (mst_kernels_mode: auto, onednn, builtin;
     * MSTUNE_KERNELS sets the default) and oneDNN's engine,
     * stream and primitive cache */
    int kernels;
    struct mst_onednn *onednn;
    mst_mem_cat out_cat;            /* category of op outputs: activations, gradients in backward */

    void *workspace;                /* grow-only kernel scratch */
    size_t workspace_size;

    mst_tensor *free_tensors;       /* recycled headers, linked through ->grad */
    mst_storage *free_storages;     /* recycled storage records, linked through ->data */

    uint32_t prof_op_names[MST_OP_COUNT];

    /* graph mode (runtime/graph/): while a tracer is set, the dispatcher records every call into
     * it and runs no kernel; outputs are shape-only tensors */
    struct mst_tracer *tracer;
    /* the arena every graph plan of this context runs in: plans run one at a time and copy their
     * outputs out, so one grow-only block sized for the largest plan serves them all. It is
     * reserved memory (alloc.h): the plans account their live values by category as they run */
    void *graph_arena;
    size_t graph_arena_bytes;

    /* mixed precision (runtime/amp/): the level (0..3 = O0..O3) and half type autocast uses, whether
     * autocast applies now (forward passes; never in backward or the optimizer), and the cache of
     * parameters cast to half once per forward/backward */
    int amp_level;
    mst_dtype amp_dtype;
    bool autocast;
    struct mst_amp_cache *amp_cache;

    /* data parallelism (runtime/comm/dp.h): the communicator and gradient buckets; NULL in one process */
    struct mst_dp *dp;
};

mst_ctx   *mst_ctx_new(const mst_ctx_config *cfg);      /* NULL cfg: seed 0, all cores */
void       mst_ctx_free(mst_ctx *ctx);

mst_status  mst_ctx_status(const mst_ctx *ctx);
const char *mst_ctx_error(const mst_ctx *ctx);
void        mst_ctx_clear_error(mst_ctx *ctx);
/* Record an error (the first one since the last clear wins) and return s. */
mst_status  mst_ctx_fail(mst_ctx *ctx, mst_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
mst_status  mst_ctx_vfail(mst_ctx *ctx, mst_status s, const char *fmt, va_list ap);

/* Resizes the kernel pool (0 = all cores); OpenBLAS runs single-threaded on whichever thread
 * calls it: the kernels split their GEMMs over the pool themselves. */
void mst_ctx_set_threads(mst_ctx *ctx, int n);
/* The threads a kernel may use now: n_threads, or 1 while ctx->serial is set. Kernel verdicts,
 * oneDNN primitives and parallel regions all follow it, so a serial step is a step of a
 * one-thread context (its own verdicts and primitives) without tearing down the pool. */
static inline int mst_ctx_threads(const mst_ctx *ctx) { return ctx->serial ? 1 : ctx->n_threads; }
void mst_ctx_set_force_ref(mst_ctx *ctx, bool on);
/* Scratch memory for one kernel at a time; NULL (and an error) when it cannot grow. */
void *mst_ctx_workspace(mst_ctx *ctx, size_t bytes);
/* A fresh 64-bit seed for a random op, derived from the context seed and a counter. */
uint64_t mst_ctx_next_seed(mst_ctx *ctx);

static inline const mst_alloc_stats *mst_ctx_mem(const mst_ctx *ctx) { return mst_allocator_stats(ctx->alloc); }

#endif
