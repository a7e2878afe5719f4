/* context.c — context lifetime, errors, thread budget (the kernel pool) and workspace. */
#define _GNU_SOURCE     /* dladdr */
#include "runtime/context.h"
#include "runtime/comm/dp.h"

#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profiler/events.h"
#include "runtime/amp/autocast.h"
#include "runtime/fpu.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/backend/onednn.h"
#include "runtime/device.h"

mst_ctx *mst_ctx_new(const mst_ctx_config *cfg) {
    mst_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx) return NULL;
    ctx->alloc = mst_allocator_new();
    if (!ctx->alloc) { free(ctx); return NULL; }
    ctx->backend = &mst_backend_cpu;
    ctx->seed = cfg ? cfg->seed : 0;
    ctx->rng = mst_rng_make(mst_hash64(ctx->seed), 0);
    ctx->grad_enabled = true;
    ctx->out_cat = MST_MEM_ACT;
    const char *kernels = getenv("MSTUNE_KERNELS");
    if (kernels && *kernels) {
        int m = mst_kernels_mode_parse(kernels);
        if (m < 0) fprintf(stderr, "mstune: MSTUNE_KERNELS=%s is not one of auto, onednn, builtin; using auto\n", kernels);
        ctx->kernels = m < 0 ? MST_KERNELS_AUTO : m;
    }
    for (int op = 0; op < MST_OP_COUNT; op++) ctx->prof_op_names[op] = mst_prof_intern(mst_op_name((mst_op)op));
    ctx->flush_denormals = cfg && cfg->flush_denormals;
    mst_fpu_apply(ctx);             /* before the pool starts: its workers take this thread's mode */
    mst_ctx_set_threads(ctx, cfg ? cfg->n_threads : 0);
    if (ctx->status != MST_OK) {    /* no memory for the thread pool */
        mst_allocator_free(ctx->alloc);
        free(ctx);
        return NULL;
    }
    mst_pool_push(ctx);             /* the root pool, drained by mst_ctx_free */
    return ctx;
}

void mst_ctx_free(mst_ctx *ctx) {
    if (!ctx) return;
    while (ctx->pool_depth > 0) mst_pool_pop(ctx);
    mst_amp_cache_free(ctx);        /* cached half parameters and the half kernel's scratch */
    mst_dp_free(ctx->dp);           /* bucket buffers (the communicator belongs to the caller) */
    MST_ASSERT(ctx->tape_len == 0);
    mst_threadpool_free(ctx->threadpool);
    mst_onednn_ctx_free(ctx);
    ctx->backend->free(ctx, ctx->workspace);
    ctx->backend->free(ctx, ctx->graph_arena);
    for (mst_tensor *t = ctx->free_tensors, *next; t; t = next) { next = t->grad; free(t); }
    for (mst_storage *s = ctx->free_storages, *next; s; s = next) { next = s->data; free(s); }
    free(ctx->pool);
    free(ctx->pool_marks);
    free(ctx->tape_marks);
    free(ctx->tape);
    mst_allocator_free(ctx->alloc);
    free(ctx);
}

mst_status mst_ctx_status(const mst_ctx *ctx) { return ctx->status; }
const char *mst_ctx_error(const mst_ctx *ctx) { return ctx->status == MST_OK ? "" : ctx->err; }

void mst_ctx_clear_error(mst_ctx *ctx) {
    ctx->status = MST_OK;
    ctx->err[0] = '\0';
}

mst_status mst_ctx_vfail(mst_ctx *ctx, mst_status s, const char *fmt, va_list ap) {
    if (ctx->status == MST_OK) {
        ctx->status = s;
        vsnprintf(ctx->err, sizeof(ctx->err), fmt, ap);
    }
    return s;
}

mst_status mst_ctx_fail(mst_ctx *ctx, mst_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mst_ctx_vfail(ctx, s, fmt, ap);
    va_end(ap);
    return s;
}

/* One pool owns the cores: ours. OpenBLAS runs each call on the calling thread, so the kernels'
 * GEMMs (split over our workers) never wake a second, spinning pool. Setting its thread count is
 * not enough: Debian's pthread OpenBLAS starts its pool when it loads, before main, one thread per
 * extra core, and each spins in sched_yield for its THREAD_TIMEOUT (~0.1 s) before it sleeps.
 * perf on `mstune train fashion_mlp` (300 steps): that thread took 12% of the process's samples,
 * all in the first 0.115 s, the whole training loop of a small job (an advisor trial of 10-50
 * ms), on one of two cores beside the loader's workers. Its `blas_thread_shutdown_` (exported,
 * the fork handler's) joins the pool; with one thread OpenBLAS never starts it again. Looked up
 * at run time: the serial and OpenMP builds have no such pool (and no symbol). It runs once, as a
 * constructor (after the shared libraries', so after OpenBLAS started its pool): a job reading
 * its dataset before it makes a context had the spin through its first ~0.1 s all the same. */
__attribute__((constructor)) static void openblas_pool_stop(void) {
    openblas_set_num_threads(1);
    /* In the library that defines openblas_set_num_threads: inside a Python extension (loaded
     * RTLD_LOCAL) OpenBLAS is not in the global scope that RTLD_DEFAULT searches. */
    void (*set_threads)(int) = openblas_set_num_threads, *lib = NULL, *sym = NULL;
    void *addr;
    memcpy(&addr, &set_threads, sizeof(addr));
    Dl_info info;
    if (dladdr(addr, &info) && info.dli_fname) lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (lib) sym = dlsym(lib, "blas_thread_shutdown_");
    if (!sym) sym = dlsym(RTLD_DEFAULT, "blas_thread_shutdown_");
    int (*shutdown)(void);
    memcpy(&shutdown, &sym, sizeof(shutdown));
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
}

void mst_ctx_set_threads(mst_ctx *ctx, int n) {
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (int)cores : 1;
    }
    if (n == ctx->n_threads && (n == 1) == (ctx->threadpool == NULL)) return;
    mst_threadpool_free(ctx->threadpool);
    ctx->threadpool = NULL;
    ctx->n_threads = n;
    if (n > 1 && !(ctx->threadpool = mst_threadpool_new(n))) {
        ctx->n_threads = 1;
        mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: a thread pool for %d threads", n);
    }
}

void mst_ctx_set_force_ref(mst_ctx *ctx, bool on) { ctx->force_ref = on; }

void *mst_ctx_workspace(mst_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->workspace_size) return ctx->workspace;
    ctx->backend->free(ctx, ctx->workspace);
    ctx->workspace = ctx->backend->alloc(ctx, bytes, MST_MEM_WORKSPACE);
    if (!ctx->workspace) {
        ctx->workspace_size = 0;
        mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: kernel workspace of %zu bytes", bytes);
        return NULL;
    }
    ctx->workspace_size = bytes;
    return ctx->workspace;
}

uint64_t mst_ctx_next_seed(mst_ctx *ctx) { return mst_rng_u64(&ctx->rng); }
