/* onednn_lib.c — loading oneDNN, the context's engine/stream/primitive cache, and the one kernel
 * every op of the provider runs: find (or build) the shape's primitive, point its memories at the
 * call's tensors, execute on the context's stream, wait.
 *
 * Loading (once per process): OMP_WAIT_POLICY=passive and a bounded GOMP_SPINCOUNT are set unless
 * the environment already says otherwise, then libdnnl.so.2 (and with it libgomp) is dlopen'd, so
 * oneDNN's OpenMP team spins for a while after a region, then sleeps. Then the kernel pool adopts
 * that team for its own regions (runtime/omp_team.h), so one set of threads serves both and never
 * spins against another on the same cores. The team is sized to the context's thread budget
 * before each primitive's execution (omp_set_num_threads on the calling thread, which runs the
 * kernels).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/sampler.h"
#include "runtime/backend/onednn_impl.h"
#include "runtime/cpu_features.h"
#include "runtime/layout.h"
#include "runtime/omp_team.h"

onednn_api onednn;

/* Below this much work a primitive runs single-threaded.
 * - On the shared team (runtime/omp_team.h, the default) its threads are usually still spinning
 *   from the last region, so a second thread pays from ~1 MFLOP (~10 us on one core): the mlp at
 *   batch 16 (products of 1-6.4 MFLOP), 10 alternated rounds of bench_compare: graph 1.45x with
 *   1 MFLOP against 8 (faster in 9 of 10), 1.26x with 2 MFLOP; eager 1.15x; the cnn unchanged (its
 *   primitives are all above 8 MFLOP).
 * - bf16 primitives keep 8 MFLOP on the team too: the mlp's bf16 linears at batch 16 (O2) took
 *   87-100 us a step on two threads against 56-59 on one (profiles, alternated).
 * - With the pool's own workers (MSTUNE_POOL_TEAM=own) the team sleeps between primitives and a
 *   wake costs 15-40 us: 8 MFLOP, as the builtin kernels' k_par_min_chunk_flops (two chunks' worth). */
static const double k_team_min_flops_shared = 1.0e6;
static const double k_team_min_flops_own = 8.0e6;

/* How long oneDNN's OpenMP threads spin before they sleep, in libgomp's spins (about 100 a
 * microsecond by its own estimate): passive alone (no spin) makes the caller sleep at the end of
 * every primitive and its worker sleep between primitives, and on a VM each of those sleeps
 * costs a wake of tens of microseconds.
 * - The team runs the kernel pool's regions too (runtime/omp_team.h, the default): ~30 us, so a
 *   thread is still awake for the next region, a batch norm's or a convolution's, across most of
 *   the serial ops between them. cnn batch 64, 2 threads, bench_compare, 10 alternated rounds
 *   against the pool's own workers with 1000 spins: graph 1.09x (faster in 8 rounds of 10), O2
 *   bf16 1.13x (9 of 10), eager 1.12x with 10000 spins. 3000 against 10000, 10 rounds: the cnn
 *   level (0.999-1.015x), the mlp at batch 16 1.06x slower; but with 10000 about 1 graph-mode mlp
 *   run in 6 (19 of 118) ran its whole run 2-3x slower (0.40-0.60 ms a step, its memory-bound
 *   kernels twice as slow: not understood), with 3000 none of 46 (a few later), with 1000 none
 *   of 26 (but 1.3x slower). docs/benchmarks.md has the counts.
 * - The pool's own workers (MSTUNE_POOL_TEAM=own): a short spin covers the end of a primitive and
 *   the next one straight after it without keeping the pool's workers off the core. graph mode:
 *   15.6 ms a step passive, 14.7-15.0 with 300, 1000 or 3000 spins, 16.9 with 100000. */
static const char k_gomp_spincount_team[] = "3000";
static const char k_gomp_spincount_own[] = "1000";

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;
static char why[256] = "not loaded yet";
static char version_str[192];

/* The widest ISA oneDNN may use: what cpu_features reports (after MSTUNE_CPU_MASK). */
static dnnl_cpu_isa_t max_isa(void) {
    if (mst_cpu_has(MST_CPU_AMX_BF16)) return dnnl_cpu_isa_all;
    if (mst_cpu_has(MST_CPU_AVX512_BF16) && mst_cpu_has(MST_CPU_AVX512_VNNI)) return dnnl_cpu_isa_avx512_core_bf16;
    if (mst_cpu_has(MST_CPU_AVX512_VNNI)) return dnnl_cpu_isa_avx512_core_vnni;
    if (mst_cpu_has(MST_CPU_AVX512BW) && mst_cpu_has(MST_CPU_AVX512VL) && mst_cpu_has(MST_CPU_AVX512DQ))
        return dnnl_cpu_isa_avx512_core;
    if (mst_cpu_has(MST_CPU_AVX2)) return dnnl_cpu_isa_avx2;
    return dnnl_cpu_isa_sse41;
}

static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_all: return "all (amx)";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2: return "avx2";
    default: return "sse41";
    }
}

static bool resolve(void *h, const char *name, void *fp) {
    void *sym = dlsym(h, name);
    if (!sym) {
        snprintf(why, sizeof(why), "libdnnl.so.2 has no %s", name);
        return false;
    }
    memcpy(fp, &sym, sizeof(sym));
    return true;
}

/* oneDNN's first primitive in a process pays its global setup (the JIT's dispatch tables, the CPU
 * probe, the primitive cache; ~1.2 ms on the development VM against 0.2-0.5 ms for the next
 * shape). That is process setup, like the dlopen: done here on an 8x8 product, it stays out of the
 * first training step, which the advisor times (subnormal_weights' 9 ms loop spent 4.2 ms outside
 * its steady steps before, 2.8 after: docs/benchmarks.md, "oneDNN's global setup at load"). A
 * failure is harmless: the first real primitive pays it instead. */
static void warm_up(const onednn_api *api) {
    dnnl_engine_t eng = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t mem[3] = {NULL, NULL, NULL};
    float data[3][64] = {{0}};
    dnnl_memory_desc_t md;
    dnnl_matmul_desc_t desc;
    const dnnl_dims_t dims = {8, 8};
    if (api->engine_create(&eng, dnnl_cpu, 0) != dnnl_success ||
        api->stream_create(&stream, eng, dnnl_stream_default_flags) != dnnl_success ||
        api->md_init_by_tag(&md, 2, dims, dnnl_f32, dnnl_ab) != dnnl_success ||
        api->matmul_desc_init(&desc, &md, &md, NULL, &md) != dnnl_success ||
        api->pd_create(&pd, &desc, NULL, eng, NULL) != dnnl_success || api->primitive_create(&prim, pd) != dnnl_success)
        goto done;
    for (int i = 0; i < 3; i++)
        if (api->memory_create(&mem[i], &md, eng, data[i]) != dnnl_success) goto done;
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
    const bool hold_prof = mst_sampler_hold();     /* as every execution (onednn_run below) */
    if (api->primitive_execute(prim, stream, 3, args) == dnnl_success) api->stream_wait(stream);
    if (hold_prof) mst_sampler_release();
done:
    for (int i = 0; i < 3; i++)
        if (mem[i]) api->memory_destroy(mem[i]);
    if (prim) api->primitive_destroy(prim);
    if (pd) api->pd_destroy(pd);
    if (stream) api->stream_destroy(stream);
    if (eng) api->engine_destroy(eng);
}

static void load(void) {
    bool gomp_before = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD) != NULL;
    /* the user's settings win, each on its own */
    setenv("OMP_WAIT_POLICY", "passive", 0);
    setenv("GOMP_SPINCOUNT", mst_omp_team_wanted() ? k_gomp_spincount_team : k_gomp_spincount_own, 0);
    void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, sizeof(why), "cannot load libdnnl.so.2 (Debian libdnnl2.6; scripts/setup.sh): %s", dlerror());
        return;
    }
    static const struct { const char *name; size_t off; } syms[] = {
        {"dnnl_engine_create", offsetof(onednn_api, engine_create)},
        {"dnnl_engine_destroy", offsetof(onednn_api, engine_destroy)},
        {"dnnl_stream_create", offsetof(onednn_api, stream_create)},
        {"dnnl_stream_wait", offsetof(onednn_api, stream_wait)},
        {"dnnl_stream_destroy", offsetof(onednn_api, stream_destroy)},
        {"dnnl_memory_desc_init_by_strides", offsetof(onednn_api, md_init_by_strides)},
        {"dnnl_memory_desc_init_by_tag", offsetof(onednn_api, md_init_by_tag)},
        {"dnnl_memory_create", offsetof(onednn_api, memory_create)},
        {"dnnl_memory_set_data_handle", offsetof(onednn_api, memory_set_data_handle)},
        {"dnnl_memory_destroy", offsetof(onednn_api, memory_destroy)},
        {"dnnl_matmul_desc_init", offsetof(onednn_api, matmul_desc_init)},
        {"dnnl_convolution_forward_desc_init", offsetof(onednn_api, conv_fwd_desc_init)},
        {"dnnl_convolution_backward_data_desc_init", offsetof(onednn_api, conv_bwd_data_desc_init)},
        {"dnnl_convolution_backward_weights_desc_init", offsetof(onednn_api, conv_bwd_weights_desc_init)},
        {"dnnl_primitive_desc_create", offsetof(onednn_api, pd_create)},
        {"dnnl_primitive_desc_destroy", offsetof(onednn_api, pd_destroy)},
        {"dnnl_primitive_desc_query", offsetof(onednn_api, pd_query)},
        {"dnnl_primitive_desc_query_md", offsetof(onednn_api, pd_query_md)},
        {"dnnl_memory_desc_equal", offsetof(onednn_api, md_equal)},
        {"dnnl_memory_desc_get_size", offsetof(onednn_api, md_get_size)},
        {"dnnl_reorder_primitive_desc_create", offsetof(onednn_api, reorder_pd_create)},
        {"dnnl_primitive_create", offsetof(onednn_api, primitive_create)},
        {"dnnl_primitive_execute", offsetof(onednn_api, primitive_execute)},
        {"dnnl_primitive_destroy", offsetof(onednn_api, primitive_destroy)},
        {"dnnl_set_max_cpu_isa", offsetof(onednn_api, set_max_cpu_isa)},
        {"dnnl_version", offsetof(onednn_api, version)},
    };
    onednn_api api;
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
        if (!resolve(h, syms[i].name, (char *)&api + syms[i].off)) return;
    void *omp = dlsym(h, "omp_set_num_threads");   /* from libgomp, libdnnl's dependency */
    memcpy(&api.omp_set_num_threads, &omp, sizeof(omp));
    dnnl_cpu_isa_t isa = max_isa();
    api.set_max_cpu_isa(isa);                      /* fails only after a primitive exists: none yet */
    const dnnl_version_t *v = api.version();
    snprintf(version_str, sizeof(version_str), "%d.%d.%d (max isa %s%s)", v->major, v->minor, v->patch, isa_name(isa),
             gomp_before ? "; libgomp was loaded before, its wait policy is the environment's" : "");
    onednn = api;
    loaded = true;
    why[0] = '\0';
    mst_omp_team_attach();     /* the kernel pool's regions run on oneDNN's team from now on */
    warm_up(&onednn);
}

bool mst_onednn_available(void) {
    pthread_once(&load_once, load);
    return loaded;
}

const char *mst_onednn_unavailable_reason(void) { return mst_onednn_available() ? "" : why; }

const char *mst_onednn_version(void) {
    static char buf[384];
    if (mst_onednn_available()) return version_str;
    snprintf(buf, sizeof(buf), "unavailable: %s", why);
    return buf;
}

/* ---- the context's state ---- */

static mst_onednn *state(mst_ctx *ctx) {
    if (ctx->onednn) return ctx->onednn;
    if (!mst_onednn_available()) return NULL;
    mst_onednn *st = calloc(1, sizeof(*st));
    if (!st) return NULL;
    if (onednn.engine_create(&st->engine, dnnl_cpu, 0) != dnnl_success ||
        onednn.stream_create(&st->stream, st->engine, dnnl_stream_default_flags) != dnnl_success) {
        if (st->engine) onednn.engine_destroy(st->engine);
        free(st);
        return NULL;
    }
    ctx->onednn = st;
    return st;
}

void onednn_prim_clear(onednn_prim *p) {
    for (int k = 0; k < p->n_args; k++) {
        onednn.memory_destroy(p->args[k].memory);
        onednn_stage *sg = &p->stage[k];
        if (sg->reorder) onednn.primitive_destroy(sg->reorder);
        if (sg->user) onednn.memory_destroy(sg->user);
        free(sg->inner_data);
    }
    if (p->prim) onednn.primitive_destroy(p->prim);
    if (p->pd) onednn.pd_destroy(p->pd);
    memset(p, 0, sizeof(*p));
}

static void prim_free(onednn_prim *p) {
    onednn_prim_clear(p);
    free(p);
}

void mst_onednn_ctx_free(mst_ctx *ctx) {
    mst_onednn *st = ctx->onednn;
    if (!st) return;
    for (int l = 0; l < MST_ONEDNN_LAYOUT_COUNT; l++) {
        for (size_t i = 0; i < st->prims[l].cap; i++)
            if (st->prims[l].hashes[i] && st->prims[l].vals[i]) prim_free(st->prims[l].vals[i]);
        mst_shape_map_free(&st->prims[l]);
    }
    onednn.stream_destroy(st->stream);
    onednn.engine_destroy(st->engine);
    free(st);
    ctx->onednn = NULL;
}

bool onednn_make_primitive(mst_onednn *st, const_dnnl_op_desc_t desc, const_dnnl_primitive_desc_t hint, onednn_prim *p) {
    if (onednn.pd_create(&p->pd, desc, NULL, st->engine, hint) != dnnl_success) {
        p->pd = NULL;
        return false;
    }
    const char *impl = NULL;
    if (onednn.pd_query(p->pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(p->impl, sizeof(p->impl), "%s", impl);
    if (onednn.primitive_create(&p->prim, p->pd) != dnnl_success) {
        p->prim = NULL;
        return false;
    }
    return true;
}

bool onednn_add_arg(mst_onednn *st, onednn_prim *p, int arg, const dnnl_memory_desc_t *md, int from) {
    if (p->n_args >= ONEDNN_MAX_ARGS) return false;
    dnnl_memory_t m;
    if (onednn.memory_create(&m, md, st->engine, DNNL_MEMORY_NONE) != dnnl_success) return false;
    p->args[p->n_args] = (dnnl_exec_arg_t){.arg = arg, .memory = m};
    p->from[p->n_args++] = from;
    return true;
}

bool onednn_add_staged_arg(mst_onednn *st, onednn_prim *p, int arg, const dnnl_memory_desc_t *plain,
                           const dnnl_memory_desc_t *chosen, int from) {
    if (!chosen || onednn.md_equal(plain, chosen)) return onednn_add_arg(st, p, arg, plain, from);
    if (p->n_args >= ONEDNN_MAX_ARGS) return false;
    onednn_stage *sg = &p->stage[p->n_args];
    size_t bytes = onednn.md_get_size(chosen);
    dnnl_memory_t inner = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    bool input = from < ONEDNN_FROM_OUT0;
    sg->inner_data = bytes ? aligned_alloc(64, (bytes + 63) & ~(size_t)63) : NULL;
    bool ok = sg->inner_data && onednn.memory_create(&inner, chosen, st->engine, sg->inner_data) == dnnl_success &&
              onednn.memory_create(&sg->user, plain, st->engine, DNNL_MEMORY_NONE) == dnnl_success &&
              onednn.reorder_pd_create(&rpd, input ? plain : chosen, st->engine, input ? chosen : plain, st->engine, NULL) ==
                  dnnl_success &&
              onednn.primitive_create(&sg->reorder, rpd) == dnnl_success;
    if (rpd) onednn.pd_destroy(rpd);
    dnnl_memory_desc_t b16;
    sg->inner_nchw16c = ok && plain->ndims == 4 &&
                        onednn.md_init_by_tag(&b16, 4, plain->dims, plain->data_type, dnnl_aBcd16b) == dnnl_success &&
                        onednn.md_equal(&b16, chosen);
    if (!ok) {
        if (inner) onednn.memory_destroy(inner);
        if (sg->user) onednn.memory_destroy(sg->user);
        free(sg->inner_data);
        memset(sg, 0, sizeof(*sg));
        return false;
    }
    p->args[p->n_args] = (dnnl_exec_arg_t){.arg = arg, .memory = inner};
    p->from[p->n_args++] = from;
    return true;
}

/* Runs arg k's reorder (its stage must have one), the tensor's memory already pointed at. */
static bool run_stage(mst_onednn *st, onednn_prim *p, int k) {
    onednn_stage *sg = &p->stage[k];
    bool input = p->from[k] < ONEDNN_FROM_OUT0;
    dnnl_exec_arg_t a[2] = {{.arg = DNNL_ARG_FROM, .memory = input ? sg->user : p->args[k].memory},
                            {.arg = DNNL_ARG_TO, .memory = input ? p->args[k].memory : sg->user}};
    return onednn.primitive_execute(sg->reorder, st->stream, 2, a) == dnnl_success;
}

/* The calling thread's OpenMP team for c: oneDNN fixes a primitive's thread count when it is
 * created (from omp_get_max_threads) and splits reductions by it, so the team is set before
 * creation from the call alone and kept in the primitive (part of its cache key) for every
 * execution — the same shape on the same budget always gets the same split, hence the same bits. A small primitive runs on the calling thread alone (the thresholds
 * above: what a second thread costs to start). */
static int team_for(const mst_ctx *ctx, const mst_op_call *c) {
    bool f32 = c->n_in > 0 && c->in[0]->dtype == MST_DTYPE_F32;
    double min_flops = mst_omp_team_ready() && f32 ? k_team_min_flops_shared : k_team_min_flops_own;
    return (double)mst_op_flops(c) < min_flops ? 1 : mst_ctx_threads(ctx);
}

/* set every time: the setting belongs to the thread, which other contexts may share */
static void set_team(int team) {
    if (onednn.omp_set_num_threads) onednn.omp_set_num_threads(team);
}

static onednn_build_fn builder(mst_op op, mst_onednn_layout layout) {
    switch (op) {
    case MST_OP_MATMUL: return layout == MST_ONEDNN_PLAIN ? onednn_build_matmul : NULL;
    case MST_OP_LINEAR: return layout == MST_ONEDNN_PLAIN ? onednn_build_linear : NULL;
    case MST_OP_CONV2D: return onednn_build_conv2d;
    case MST_OP_CONV2D_GRAD_INPUT: return onednn_build_conv2d_grad_input;
    case MST_OP_CONV2D_GRAD_WEIGHT: return onednn_build_conv2d_grad_weight;
    default: return NULL;
    }
}

static bool served_dtype(mst_dtype dt) { return dt == MST_DTYPE_F32 || dt == MST_DTYPE_BF16; }

/* The shape's primitive (built on first use; p->ok false when oneDNN cannot do it), or NULL. */
static onednn_prim *prim_for(mst_ctx *ctx, const mst_op_call *c, mst_dtype dt, mst_onednn_layout layout) {
    onednn_build_fn build = (unsigned)layout < MST_ONEDNN_LAYOUT_COUNT ? builder(c->op, layout) : NULL;
    if (!build || !served_dtype(dt)) return NULL;
    mst_onednn *st = state(ctx);
    if (!st) return NULL;
    mst_shape_key key;
    mst_shape_key_of(&key, c, dt);
    const int team = team_for(ctx, c);
    key.threads = team;                 /* the team is fixed at creation: a serial step has its own */
    void **slot = mst_shape_map_slot(&st->prims[layout], &key);
    if (!slot) return NULL;
    if (!*slot) {
        onednn_prim *p = calloc(1, sizeof(*p));
        if (!p) return NULL;
        set_team(team);
        p->ok = build(st, c, dt == MST_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32, layout, p);
        if (!p->ok) {   /* keep only the verdict */
            char impl[sizeof(p->impl)];
            memcpy(impl, p->impl, sizeof(impl));
            onednn_prim_clear(p);
            memcpy(p->impl, impl, sizeof(impl));
        }
        p->team = team;
        *slot = p;
    }
    return *slot;
}

bool mst_onednn_supports(mst_ctx *ctx, const mst_op_call *c, mst_dtype dtype, mst_onednn_layout layout) {
    onednn_prim *p = prim_for(ctx, c, dtype, layout);
    return p && p->ok;
}

const char *mst_onednn_impl(mst_ctx *ctx, const mst_op_call *c, mst_dtype dtype, mst_onednn_layout layout) {
    onednn_prim *p = prim_for(ctx, c, dtype, layout);
    return p && p->ok ? p->impl : NULL;
}

static mst_kernel_fn kernel_of(mst_onednn_layout layout);

static mst_status onednn_run(mst_ctx *ctx, const mst_op_call *c, mst_onednn_layout layout) {
    const mst_op_desc *d = mst_op_table[c->op];
    mst_dtype dt = c->in[d->dtype_arg]->dtype;
    onednn_prim *p = prim_for(ctx, c, dt, layout);
    if (!p || !p->ok)
        return mst_op_fail(ctx, c, MST_ERR_UNSUPPORTED, "oneDNN has no %s kernel for this shape%s%s", mst_dtype_name(dt),
                           mst_onednn_available() ? "" : ": ", mst_onednn_unavailable_reason());
    mst_onednn *st = ctx->onednn;
    /* an nChw16c tensor (graph mode's blocked chains) is the primitive's own argument where the
     * primitive chose that layout; anywhere else the call runs on plain copies */
    bool direct[ONEDNN_MAX_ARGS] = {0};
    for (int k = 0; k < p->n_args; k++) {
        const mst_tensor *t = p->from[k] >= ONEDNN_FROM_OUT0 ? c->out[p->from[k] - ONEDNN_FROM_OUT0] : c->in[p->from[k]];
        if (!mst_tensor_blocked(t)) continue;
        if (!p->stage[k].reorder || !p->stage[k].inner_nchw16c) return mst_layout_run_plain(ctx, c, kernel_of(layout));
        direct[k] = true;
    }
    for (int k = 0; k < p->n_args; k++) {
        const mst_tensor *t = p->from[k] >= ONEDNN_FROM_OUT0 ? c->out[p->from[k] - ONEDNN_FROM_OUT0] : c->in[p->from[k]];
        if (direct[k]) onednn.memory_set_data_handle(p->args[k].memory, mst_tensor_data(t));
        else if (p->stage[k].reorder) {
            onednn.memory_set_data_handle(p->args[k].memory, p->stage[k].inner_data);
            onednn.memory_set_data_handle(p->stage[k].user, mst_tensor_data(t));
        } else onednn.memory_set_data_handle(p->args[k].memory, mst_tensor_data(t));
    }
    set_team(p->team);
    /* The stack sampler (profiler/sampler.c) takes no stack while oneDNN runs (its JIT code has no
     * unwind information; its C++ may be inside malloc): a tick that comes meanwhile is taken at
     * the release, here, inside this kernel. The hold is a thread-local flag the handler reads, no
     * system call (the signal mask it replaced cost ~2 us a call on the project's VM, more than
     * some of the mlp's primitives). The crash that mask had hidden was the signal frame on the
     * interrupted stack, not the unwinding: the handler has a stack of its own now. Only threads
     * the sampler added get its signal, and OpenMP threads oneDNN creates are never added. */
    const bool hold_prof = mst_sampler_hold();     /* counted into the sampler's cost */
    /* staged arguments: inputs reordered into the primitive's layout first, outputs back after
     * (the stream is in order, so one wait covers all) */
    bool ok = true;
    for (int k = 0; ok && k < p->n_args; k++)
        if (p->stage[k].reorder && !direct[k] && p->from[k] < ONEDNN_FROM_OUT0) ok = run_stage(st, p, k);
    ok = ok && onednn.primitive_execute(p->prim, st->stream, p->n_args, p->args) == dnnl_success;
    for (int k = 0; ok && k < p->n_args; k++)
        if (p->stage[k].reorder && !direct[k] && p->from[k] >= ONEDNN_FROM_OUT0) ok = run_stage(st, p, k);
    ok = ok && onednn.stream_wait(st->stream) == dnnl_success;
    if (hold_prof) mst_sampler_release();
    if (!ok) return mst_op_fail(ctx, c, MST_ERR_UNSUPPORTED, "oneDNN failed to execute %s", p->impl);
    return MST_OK;
}

static mst_status onednn_run_plain(mst_ctx *ctx, const mst_op_call *c) { return onednn_run(ctx, c, MST_ONEDNN_PLAIN); }
static mst_status onednn_run_blocked(mst_ctx *ctx, const mst_op_call *c) { return onednn_run(ctx, c, MST_ONEDNN_BLOCKED); }
static mst_status onednn_run_winograd(mst_ctx *ctx, const mst_op_call *c) { return onednn_run(ctx, c, MST_ONEDNN_WINOGRAD); }

static mst_kernel_fn kernel_of(mst_onednn_layout layout) {
    return layout == MST_ONEDNN_WINOGRAD ? onednn_run_winograd : layout == MST_ONEDNN_BLOCKED ? onednn_run_blocked : onednn_run_plain;
}

mst_kernel_fn mst_onednn_kernel(mst_op op, mst_dtype dtype, mst_onednn_layout layout) {
    if ((unsigned)layout >= MST_ONEDNN_LAYOUT_COUNT || !builder(op, layout) || !served_dtype(dtype) || !mst_onednn_available())
        return NULL;
    /* oneDNN 2.6's Winograd convolutions are f32 only */
    if (layout == MST_ONEDNN_WINOGRAD) return dtype == MST_DTYPE_F32 ? onednn_run_winograd : NULL;
    return layout == MST_ONEDNN_BLOCKED ? onednn_run_blocked : onednn_run_plain;
}
