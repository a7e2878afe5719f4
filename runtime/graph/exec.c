/* exec.c — running a planned graph (see exec.h).
 *
 * Every value has a tensor: persistent and constant values use the live tensor or snapshot
 * itself; the rest use headers owned here, whose storage is the arena (offset from the plan),
 * the bound input's storage, or their base's (views). Headers are never pooled or freed by
 * anyone else: their refcount is pinned.
 *
 * The arena is reserved memory (alloc.h): around each step the executor accounts the plan's
 * bytes becoming live and dying per category (plan.h's born/died), so the allocator's in_use and
 * peak per category follow the live values as in eager mode, for a few adds per node.
 *
 * Fused elementwise groups (fuse.c) run as one loop over blocks of k_block elements: operands
 * are read in place (or gathered when broadcast), each member's block function writes a block of
 * scratch, and group outputs are stored. Blocks are independent, so the thread split cannot
 * change the bits. Half-precision (f16/bf16) values take part as the half kernel would run each
 * member in eager mode (runtime/amp/half_kernels.c): operands are widened to f32 per block, the
 * f32 block function computes, and a member whose output is half has its block rounded to half
 * (and kept widened for the members after it), so the bits equal eager's op-by-op results.
 */
#include "runtime/graph/exec.h"

#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"
#include "runtime/amp/half.h"
#include "runtime/comm/dp.h"
#include "runtime/context.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/device.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/step_threads.h"
#include "util/hash.h"

enum { k_block = 512, k_fused_min_elems = 1 << 16, k_optim_min_elems = 1 << 15 };

typedef struct {
    mst_elem_f32_fn fn;
    int n_in;
    int slot[MST_MAX_OP_INPUTS];    /* >= 0: external operand; < 0: member -(slot + 1) */
    int out_index;                  /* position in the group's outputs, or -1 */
    mst_dtype out_dtype;            /* f32, or a half type its block is rounded to */
    bool exact;                     /* half, and its inputs all values of that type through a select
                                       (MST_OPF_HALF_EXACT): its block needs no rounding */
    mst_attrs attrs;
} fused_member;

typedef struct {
    int n_members, n_ext, n_out;
    fused_member *m;
    mst_tensor **ext;               /* external operands (headers) */
    mst_tensor **out;               /* group outputs */
    bool direct;                    /* members write outputs in place (no in-place inputs) */
    mst_op_call *calls;             /* per member, for FLOPs/bytes and shape inference */
    int slices;                     /* per-thread scratch slices (the pool's thread count) */
    float *scratch;                 /* slices x (n_members + n_ext + 1) x k_block floats, made at build time;
                                     * the last block of a slice holds half values in transit */
    const float **ptrs;             /* slices x (n_ext + n_members) block pointers */
} fused_prog;

typedef enum { STEP_VIEW, STEP_KERNEL, STEP_FUSED, STEP_OPTIM } step_kind;

typedef struct {
    step_kind kind;
    int op;
    uint32_t prof_name;
    uint32_t prof_sig;              /* STEP_KERNEL: the interned call signature the trace shows (0: none) */
    mst_kernel_fn kernel;
    bool choice;                    /* kernel is the provider choice's: run through binding */
    mst_kernel_binding binding;     /* the provider bound once (kernel_choice.h), not looked up every run */
    mst_op_call call;
    mst_attrs traced_attrs;
    mst_kernel_fn relu_kernel;      /* relu epilogue */
    mst_op_call relu_call;
    fused_prog fp;
    mst_op_call *calls;             /* fused optimizer members */
    mst_kernel_fn *kernels;
    int n_calls;
    mst_update_range_fn *ranges;    /* fused optimizer: per member's split kernel; NULL: members run whole */
    mst_update_scalars *scal;       /* per member, filled by update_begin each run */
    bool *active;                   /* per member: not skipped this run */
    int64_t optim_total;            /* elements over all members */
    bool optim_split;               /* the verdict: split the elements over the pool */
    int optim_trial;                /* runs observed for the verdict; k_optim_trial_runs: decided */
    double optim_ns[2];             /* best in-step time of each: serial, split (0: never measured) */
    int seed_slot;                  /* random ops: attr slot of the seed; -1 otherwise */
} exec_step;

struct mst_graph_exec {
    mst_ctx *ctx;
    const mst_graph *g;
    mst_tensor *hdr;                /* per value */
    mst_tensor **t;                 /* per value: the tensor kernels see */
    mst_storage arena;
    int64_t arena_bytes;
    int64_t *born, *died;           /* per step, then the end of the run: x MST_MEM_COUNT (plan.h) */
    int64_t live[MST_MEM_COUNT];    /* accounted by the run in progress */
    exec_step *steps;
    int n_steps, n_kernels;
    int64_t traced_batch, batch;
    mst_step_threads threads;       /* all the context's threads or the calling thread alone (step_threads.h) */
    uint64_t threads_key;           /* the plan's key in the machine's verdict file */
    bool threads_quiet;             /* the machine looked quiet when the trial began */
    bool optim_settled;             /* every fused optimizer's split trial is over (they run first) */
};

/* ---- headers ---- */

static void init_headers(mst_graph_exec *ex, const mst_graph_plan *p) {
    const mst_graph *g = ex->g;
    for (int v = 0; v < g->n_values; v++) {
        const mst_gvalue *x = &g->values[v];
        if (x->kind == MST_GV_PERSISTENT || x->kind == MST_GV_CONSTANT) {
            ex->t[v] = x->tensor;
            continue;
        }
        mst_tensor *h = &ex->hdr[v];
        h->dtype = x->dtype;
        h->layout = x->layout;
        mst_tensor_set_shape(h, x->ndim, x->shape);
        h->refcount = 1 << 30;
        h->ctx = ex->ctx;
        memcpy(h->name, x->name, sizeof(h->name));
        h->storage = &ex->arena;
        h->offset = p->offset[v] >= 0 ? (size_t)p->offset[v] : 0;
        ex->t[v] = h;
    }
}

/* Views take their base's storage; run after inputs are bound (value order is creation order). */
static void bind_views(mst_graph_exec *ex) {
    const mst_graph *g = ex->g;
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].kind != MST_GV_VIEW) continue;
        const mst_tensor *base = ex->t[g->values[v].view_of];
        ex->hdr[v].storage = base->storage;
        ex->hdr[v].offset = base->offset;
    }
}

static mst_kernel_fn pick_kernel(mst_ctx *ctx, const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    mst_dtype key = c->n_in > 0 ? c->in[d->dtype_arg]->dtype : c->out[0]->dtype;
    return mst_op_kernel(ctx, c->op, key);
}

static void make_call(mst_graph_exec *ex, const mst_gnode *n, mst_op_call *c) {
    memset(c, 0, sizeof(*c));
    c->op = n->op;
    c->attrs = n->attrs;
    c->n_in = n->n_in;
    c->n_out = n->n_out;
    for (int i = 0; i < n->n_in; i++) c->in[i] = ex->t[n->in[i]];
    for (int k = 0; k < n->n_out; k++) c->out[k] = ex->t[n->out[k]];
}

static int seed_slot(mst_op op) {
    const mst_op_desc *d = mst_op_table[op];
    if (!(d->flags & MST_OPF_RANDOM)) return -1;
    for (int k = 0; k < MST_MAX_ATTR_I && d->attr_i[k]; k++)
        if (strcmp(d->attr_i[k], "seed") == 0) return k;
    return -1;
}

/* ---- building steps ---- */

static mst_status build_fused(mst_graph_exec *ex, const mst_gnode *n, exec_step *s) {
    fused_prog *fp = &s->fp;
    fp->n_members = n->n_members;
    fp->n_ext = n->n_in;
    fp->n_out = n->n_out;
    fp->m = calloc((size_t)n->n_members, sizeof(*fp->m));
    fp->calls = calloc((size_t)n->n_members, sizeof(*fp->calls));
    fp->ext = calloc((size_t)n->n_in + 1, sizeof(*fp->ext));
    fp->out = calloc((size_t)n->n_out + 1, sizeof(*fp->out));
    /* each chunk of a parallel run uses its own slice: a run allocates nothing */
    fp->slices = ex->ctx->n_threads > 1 ? ex->ctx->n_threads : 1;
    fp->scratch = malloc((size_t)fp->slices * (size_t)(n->n_members + n->n_in + 1) * k_block * sizeof(float));
    fp->ptrs = malloc((size_t)fp->slices * (size_t)(n->n_members + n->n_in + 1) * sizeof(*fp->ptrs));
    if (!fp->m || !fp->calls || !fp->ext || !fp->out || !fp->scratch || !fp->ptrs)
        return mst_ctx_fail(ex->ctx, MST_ERR_OOM, "out of memory: fused group");
    for (int i = 0; i < n->n_in; i++) fp->ext[i] = ex->t[n->in[i]];
    for (int k = 0; k < n->n_out; k++) fp->out[k] = ex->t[n->out[k]];
    fp->direct = true;
    for (int k = 0; k < MST_MAX_OP_OUTPUTS; k++) fp->direct &= n->inplace[k] < 0;
    char name[128];
    size_t len = (size_t)snprintf(name, sizeof(name), "fused");
    for (int m = 0; m < n->n_members; m++) {
        const mst_gnode *mem = &n->members[m];
        fused_member *fm = &fp->m[m];
        fm->fn = mst_op_table[mem->op]->elem_f32;
        fm->n_in = mem->n_in;
        fm->attrs = mem->attrs;
        fm->out_index = -1;
        fm->out_dtype = ex->g->values[mem->out[0]].dtype;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] == mem->out[0]) fm->out_index = k;
        for (int i = 0; i < mem->n_in; i++) {
            int v = mem->in[i], slot = -1;
            for (int e = 0; e < n->n_in; e++)
                if (n->in[e] == v) slot = e;
            for (int q = 0; q < m; q++)
                if (n->members[q].out[0] == v) slot = -(q + 1);
            MST_ASSERT(slot != -1 || n->n_in > 0);
            fm->slot[i] = slot;
        }
        fm->exact = mst_dtype_is_half(fm->out_dtype) && (mst_op_table[mem->op]->flags & MST_OPF_HALF_EXACT);
        for (int i = 0; i < mem->n_in; i++)
            fm->exact &= (fm->slot[i] >= 0 ? fp->ext[fm->slot[i]]->dtype : fp->m[-fm->slot[i] - 1].out_dtype) == fm->out_dtype;
        make_call(ex, mem, &fp->calls[m]);
        if (len < sizeof(name)) len += (size_t)snprintf(name + len, sizeof(name) - len, "%s%s", m ? "+" : ":", mst_op_name(mem->op));
    }
    s->prof_name = mst_prof_intern(name);
    return MST_OK;
}

/* ---- fused optimizer: the elements of all parameters, split evenly over the pool ---- */

typedef struct {
    const exec_step *s;
    const mst_op_call *calls;       /* the members' calls (live, or scratch copies when measuring) */
    int chunks;
} optim_run;

/* Chunk c of the concatenated elements: each member's part of [lo, hi). */
static void optim_chunk(void *arg, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const optim_run *r = arg;
    const exec_step *s = r->s;
    for (int64_t c = begin; c < end; c++) {
        int64_t lo, hi, acc = 0;
        mst_parallel_range(s->optim_total, r->chunks, (int)c, &lo, &hi);
        for (int m = 0; m < s->n_calls && acc < hi; m++) {
            int64_t n = r->calls[m].in[0]->numel, a = lo > acc ? lo - acc : 0, b = hi - acc < n ? hi - acc : n;
            if (s->active[m] && a < b) s->ranges[m](&r->calls[m], &s->scal[m], a, b);
            acc += n;
        }
    }
}

static void optim_ranges(mst_ctx *ctx, const exec_step *s, const mst_op_call *calls, bool split) {
    int chunks = split ? mst_parallel_chunks_ctx(ctx, s->optim_total, k_optim_min_elems) : 1;
    if (chunks <= 1) {
        for (int m = 0; m < s->n_calls; m++)
            if (s->active[m]) s->ranges[m](&calls[m], &s->scal[m], 0, calls[m].in[0]->numel);
        return;
    }
    optim_run r = {s, calls, chunks};
    mst_parallel_for(ctx, chunks, 1, optim_chunk, &r);
}

/* The verdict is measured on the plan's own first MST_GRAPH_SETTLE_RUNS runs, in the step: they
 * alternate the serial loop and the split one, the first pair warms up, the best of each over the
 * other pairs decides, and the split must beat serial by k_optim_split_margin to be kept. Both give
 * the same bits (elementwise, no reduction), so the verdict changes the speed only. It was measured on
 * scratch copies at build time before: on hot scratch the split won, inside the mlp's step it ran
 * 1.4x slower than serial (bench_graph mlp:16: 0.30 against 0.22 ms; its workers' wake-ups and the
 * cold parameters are not in an isolated measurement), and the verdict flipped between runs.
 * The margin was 25% while a split paid a sleeping worker's wake; on the shared OpenMP team
 * (runtime/omp_team.h) the second thread is usually awake, and 25% turned the mlp's split down in
 * 1 of 6 runs (split 36.1 us against serial 47.1; the step 0.23 ms against 0.17-0.19), so 10%. */
enum { k_optim_trial_runs = MST_GRAPH_OPTIM_TRIAL_RUNS };   /* a warm-up pair, then the timed pairs */
static const double k_optim_split_margin = 0.10;

static mst_status build_optim_split(mst_graph_exec *ex, exec_step *s) {
    const mst_op_desc *d = mst_op_table[s->op];
    s->optim_total = 0;
    s->optim_trial = k_optim_trial_runs;        /* decided unless measured below */
    if (s->n_calls <= 0) return MST_OK;
    for (int m = 0; m < s->n_calls; m++) {
        mst_dtype dt = s->calls[m].in[0]->dtype;
        if (!d->update_begin || !d->update_range[dt] || ex->ctx->force_ref) return MST_OK;   /* members run whole */
        s->optim_total += s->calls[m].in[0]->numel;
    }
    s->ranges = calloc((size_t)s->n_calls, sizeof(*s->ranges));
    s->scal = calloc((size_t)s->n_calls, sizeof(*s->scal));
    s->active = calloc((size_t)s->n_calls, sizeof(*s->active));
    if (!s->ranges || !s->scal || !s->active) return mst_ctx_fail(ex->ctx, MST_ERR_OOM, "out of memory: fused optimizer");
    for (int m = 0; m < s->n_calls; m++) s->ranges[m] = d->update_range[s->calls[m].in[0]->dtype];
    if (mst_parallel_chunks_ctx(ex->ctx, s->optim_total, k_optim_min_elems) <= 1) return MST_OK;
    const char *force = getenv("MSTUNE_OPTIM_SPLIT");   /* on/off: skip the measurement (tests, benches) */
    if (force && (strcmp(force, "on") == 0 || strcmp(force, "off") == 0)) {
        s->optim_split = strcmp(force, "on") == 0;
        return MST_OK;
    }
    s->optim_trial = 0;
    s->optim_ns[0] = s->optim_ns[1] = 1e300;
    return MST_OK;
}

static mst_status build_optim(mst_graph_exec *ex, const mst_gnode *n, exec_step *s) {
    s->n_calls = n->n_members;
    s->calls = calloc((size_t)n->n_members, sizeof(*s->calls));
    s->kernels = calloc((size_t)n->n_members, sizeof(*s->kernels));
    if (!s->calls || !s->kernels) return mst_ctx_fail(ex->ctx, MST_ERR_OOM, "out of memory: fused optimizer");
    for (int m = 0; m < n->n_members; m++) {
        make_call(ex, &n->members[m], &s->calls[m]);
        s->kernels[m] = pick_kernel(ex->ctx, &s->calls[m]);
        if (!s->kernels[m]) return mst_op_fail(ex->ctx, &s->calls[m], MST_ERR_DTYPE, "graph: no cpu kernel for this dtype");
    }
    char name[64];
    snprintf(name, sizeof(name), "fused_%s", mst_op_name(n->op));
    s->prof_name = mst_prof_intern(name);
    return build_optim_split(ex, s);
}

static void sig_text(const void *arg, char *buf, size_t n) { mst_op_signature(arg, buf, n); }

static mst_status build_step(mst_graph_exec *ex, const mst_gnode *n, exec_step *s) {
    s->op = n->op;
    s->seed_slot = -1;
    switch (n->kind) {
    case MST_GN_FUSED_ELEM: s->kind = STEP_FUSED; return build_fused(ex, n, s);
    case MST_GN_FUSED_OPTIM: s->kind = STEP_OPTIM; return build_optim(ex, n, s);
    case MST_GN_OP: break;
    }
    make_call(ex, n, &s->call);
    s->traced_attrs = n->attrs;
    s->prof_name = ex->ctx->prof_op_names[n->op];
    if (mst_op_table[n->op]->flags & MST_OPF_VIEW) {
        s->kind = STEP_VIEW;
        return MST_OK;
    }
    s->kind = STEP_KERNEL;
    s->seed_slot = seed_slot(n->op);
    s->kernel = pick_kernel(ex->ctx, &s->call);
    if (!s->kernel) return mst_op_fail(ex->ctx, &s->call, MST_ERR_DTYPE, "graph: no cpu kernel for this dtype");
    s->choice = mst_kernel_is_choice(s->kernel);
    if (n->relu_epilogue) {
        s->relu_call = (mst_op_call){.op = MST_OP_RELU, .n_in = 1, .n_out = 1};
        s->relu_call.in[0] = ex->t[n->out[0]];
        s->relu_call.out[0] = ex->t[n->relu_value];
        int slot = mst_op_table[n->op]->relu_in_kernel_attr - 1;
        if (slot >= 0)                      /* the kernel applies it in its own output loop: one pass, not two */
            s->call.attrs.i[slot] = s->traced_attrs.i[slot] = 1;
        else
            s->relu_kernel = pick_kernel(ex->ctx, &s->relu_call);
        char name[64];
        snprintf(name, sizeof(name), "%s+relu", mst_op_name(n->op));
        s->prof_name = mst_prof_intern(name);
    }
    /* shapes (at the traced batch) and attributes, as eager kernel slices carry them */
    if (mst_prof_on(MST_PROF_LEVEL_OPS)) s->prof_sig = mst_prof_intern_sig(mst_op_signature_key(&s->call), sig_text, &s->call);
    return MST_OK;
}

/* The step's thread budget: pinned, on file for this machine, or measured by the first runs. */
static void init_step_threads(mst_graph_exec *ex, mst_step_threads_pin pin, const char *pin_by) {
    mst_ctx *ctx = ex->ctx;
    mst_step_threads_init(&ex->threads, ctx->n_threads, pin, pin_by);
    if (mst_step_threads_decided(&ex->threads)) {
        if (ex->threads.forced && !ex->threads.pinned_by_env && ctx->n_threads > 1 && mst_kernels_log_on()) {
            fprintf(stderr, "mstune graph: ");
            mst_step_threads_describe(&ex->threads, ctx->n_threads, stderr);
        }
        return;
    }
    const int32_t budget[4] = {ctx->n_threads, ctx->kernels, ctx->force_ref, ctx->loader_threads};
    const uint64_t h = mst_graph_hash(ex->g, mst_fnv1a(MST_FNV1A_OFFSET, budget, sizeof(budget)));
    ex->threads_key = h;
    bool one = false;
    if (mst_plan_verdict_use(h, &one, &ex->threads_quiet)) {
        mst_step_threads_set(&ex->threads, one);
        if (mst_kernels_log_on()) {
            fprintf(stderr, "mstune graph: ");
            mst_step_threads_describe(&ex->threads, ctx->n_threads, stderr);
        }
    }
}

mst_graph_exec *mst_graph_exec_new(mst_ctx *ctx, const mst_graph *g, const mst_graph_plan *p, int64_t traced_batch) {
    mst_graph_exec *ex = calloc(1, sizeof(*ex));
    if (!ex) { mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: graph executor"); return NULL; }
    ex->ctx = ctx;
    ex->g = g;
    ex->traced_batch = ex->batch = traced_batch;
    ex->hdr = calloc((size_t)g->n_values + 1, sizeof(*ex->hdr));
    ex->t = calloc((size_t)g->n_values + 1, sizeof(*ex->t));
    ex->steps = calloc((size_t)g->n_nodes + 1, sizeof(*ex->steps));
    if (!ex->hdr || !ex->t || !ex->steps) goto oom;
    ex->born = calloc(((size_t)g->n_nodes + 1) * MST_MEM_COUNT, sizeof(int64_t));
    ex->died = calloc(((size_t)g->n_nodes + 1) * MST_MEM_COUNT, sizeof(int64_t));
    if (!ex->born || !ex->died) goto oom;
    ex->arena_bytes = p->arena_bytes;
    ex->arena = (mst_storage){.nbytes = (size_t)p->arena_bytes, .refcount = 1 << 30, .cat = MST_MEM_RESERVED,
                              .device = ctx->backend->kind, .ctx = ctx};
    /* arena.data is the context's shared graph arena, attached at each run (attach_arena) */
    init_headers(ex, p);
    init_step_threads(ex, (mst_step_threads_pin)ctx->step_threads_pin, NULL);
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) continue;
        size_t row = (size_t)ex->n_steps * MST_MEM_COUNT, node = (size_t)i * MST_MEM_COUNT;
        memcpy(&ex->born[row], &p->born[node], MST_MEM_COUNT * sizeof(int64_t));
        memcpy(&ex->died[row], &p->died[node], MST_MEM_COUNT * sizeof(int64_t));
        exec_step *s = &ex->steps[ex->n_steps++];
        if (build_step(ex, &g->nodes[i], s) != MST_OK) {
            mst_graph_exec_free(ex);
            return NULL;
        }
        ex->n_kernels += s->kind != STEP_VIEW;
    }
    memcpy(&ex->died[(size_t)ex->n_steps * MST_MEM_COUNT], &p->died[(size_t)g->n_nodes * MST_MEM_COUNT],
           MST_MEM_COUNT * sizeof(int64_t));
    return ex;
oom:
    mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: graph executor (arena %lld bytes)", (long long)p->arena_bytes);
    mst_graph_exec_free(ex);
    return NULL;
}

void mst_graph_exec_free(mst_graph_exec *ex) {
    if (!ex) return;
    for (int i = 0; i < ex->n_steps; i++) {
        exec_step *s = &ex->steps[i];
        free(s->fp.m);
        free(s->fp.calls);
        free(s->fp.ext);
        free(s->fp.out);
        free(s->fp.scratch);
        free(s->fp.ptrs);
        free(s->calls);
        free(s->kernels);
        free(s->ranges);
        free(s->scal);
        free(s->active);
    }
    free(ex->steps);
    free(ex->born);
    free(ex->died);
    free(ex->hdr);
    free(ex->t);
    free(ex);
}

mst_tensor *mst_graph_exec_value(mst_graph_exec *ex, int v) { return ex->t[v]; }
int mst_graph_exec_kernels(const mst_graph_exec *ex) { return ex->n_kernels; }
int64_t mst_graph_exec_arena_bytes(const mst_graph_exec *ex) { return ex->arena_bytes; }

/* ---- fused elementwise loop ---- */

/* Gathers the elements of t (4-byte f32 or 2-byte half) at the group-shape (y) positions
 * [off, off + len), t broadcast to y, into dst. */
static void broadcast_gather(const mst_tensor *t, const mst_tensor *y, int64_t off, int64_t len, void *dst) {
    int nd = y->ndim, shift = y->ndim - t->ndim;
    int64_t stride[MST_MAX_DIMS], idx[MST_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int td = d - shift;
        stride[d] = td >= 0 && t->shape[td] != 1 ? t->strides[td] : 0;
    }
    int64_t rem = off, pos = 0;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rem % y->shape[d];
        rem /= y->shape[d];
        pos += idx[d] * stride[d];
    }
    const bool half = mst_dtype_is_half(t->dtype);
    const float *xf = mst_tensor_data(t);
    const uint16_t *xh = mst_tensor_data(t);
    for (int64_t j = 0; j < len; j++) {
        if (half) ((uint16_t *)dst)[j] = xh[pos];
        else ((float *)dst)[j] = xf[pos];
        for (int d = nd - 1; d >= 0; d--) {
            pos += stride[d];
            if (++idx[d] < y->shape[d]) break;
            pos -= stride[d] * y->shape[d];
            idx[d] = 0;
        }
    }
}

/* Operand `t` broadcast to the group's shape `y`, elements [off, off + len), as f32: in place
 * when t is f32 of y's size, else in buf (half operands widened; `half` is scratch for a
 * broadcast half operand's gathered values). */
static const float *operand_block(const mst_tensor *t, const mst_tensor *y, int64_t off, int64_t len, float *buf,
                                  uint16_t *half) {
    if (mst_dtype_is_half(t->dtype)) {
        const uint16_t *h = (const uint16_t *)mst_tensor_data(t);
        if (t->numel == y->numel) {
            mst_half_to_f32(t->dtype, h + off, buf, (size_t)len);
        } else if (t->numel == 1) {
            mst_half_to_f32(t->dtype, h, buf, 1);
            for (int64_t j = 1; j < len; j++) buf[j] = buf[0];
        } else {
            broadcast_gather(t, y, off, len, half);
            mst_half_to_f32(t->dtype, half, buf, (size_t)len);
        }
        return buf;
    }
    const float *x = (const float *)mst_tensor_data(t);
    if (t->numel == y->numel) return x + off;
    if (t->numel == 1) {
        for (int64_t j = 0; j < len; j++) buf[j] = x[0];
        return buf;
    }
    broadcast_gather(t, y, off, len, buf);
    return buf;
}

typedef struct {
    const fused_prog *fp;
    const mst_tensor *shape;    /* a tensor of the group's shape (its first member's output) */
    int64_t numel;
} fused_run;

static void fused_chunk(void *arg, int64_t begin, int64_t end, int worker) {
    const fused_run *r = arg;
    const fused_prog *fp = r->fp;
    MST_ASSERT(worker < fp->slices);
    float *scratch = fp->scratch + (size_t)worker * (size_t)(fp->n_members + fp->n_ext + 1) * k_block;
    uint16_t *half = (uint16_t *)(scratch + (size_t)(fp->n_members + fp->n_ext) * k_block);
    const float **ext = fp->ptrs + (size_t)worker * (size_t)(fp->n_members + fp->n_ext + 1);
    const float **val = ext + fp->n_ext;
    for (int64_t blk = begin; blk < end; blk++) {
        int64_t off = blk * k_block, len = r->numel - off < k_block ? r->numel - off : k_block;
        for (int e = 0; e < fp->n_ext; e++)
            ext[e] = operand_block(fp->ext[e], r->shape, off, len, scratch + (size_t)(fp->n_members + e) * k_block, half);
        for (int m = 0; m < fp->n_members; m++) {
            const fused_member *fm = &fp->m[m];
            const float *x[MST_MAX_OP_INPUTS];
            for (int i = 0; i < fm->n_in; i++) x[i] = fm->slot[i] >= 0 ? ext[fm->slot[i]] : val[-fm->slot[i] - 1];
            bool f32 = fm->out_dtype == MST_DTYPE_F32;
            float *y = f32 && fp->direct && fm->out_index >= 0 ? (float *)mst_tensor_data(fp->out[fm->out_index]) + off
                                                               : scratch + (size_t)m * k_block;
            fm->fn(y, x, len, &fm->attrs);
            if (!f32 && !fm->exact) {   /* rounded as eager's half kernel stores it; the later members read that */
                /* an output is rounded straight into its tensor: every operand of this block was
                 * read (widened into scratch) before any member ran, so an in-place output is safe */
                uint16_t *h = fm->out_index >= 0 ? (uint16_t *)mst_tensor_data(fp->out[fm->out_index]) + off : half;
                mst_half_from_f32(fm->out_dtype, y, h, (size_t)len);
                mst_half_to_f32(fm->out_dtype, h, y, (size_t)len);
            }
            val[m] = y;
        }
        for (int m = 0; m < fp->n_members; m++) {
            const fused_member *fm = &fp->m[m];
            if (fm->out_index < 0) continue;
            void *dst = mst_tensor_data(fp->out[fm->out_index]);
            if (fm->out_dtype != MST_DTYPE_F32) {   /* exact: val[m] holds half values */
                if (fm->exact) mst_half_from_f32(fm->out_dtype, val[m], (uint16_t *)dst + off, (size_t)len);
            } else if (!fp->direct) {
                memcpy((float *)dst + off, val[m], (size_t)len * sizeof(float));
            }
        }
    }
}

static void run_fused(mst_ctx *ctx, const fused_prog *fp) {
    fused_run r = {.fp = fp, .shape = fp->calls[0].out[0], .numel = fp->calls[0].out[0]->numel};
    int64_t blocks = (r.numel + k_block - 1) / k_block;
    mst_parallel_for(ctx, blocks, k_fused_min_elems / k_block, fused_chunk, &r);
}

/* ---- fused optimizer run ---- */

/* may_try: the split trial's turn (the plan's first runs, on all threads, before the thread trial:
 * mst_graph_exec_run) */
static mst_status run_optim(mst_ctx *ctx, exec_step *s, bool may_try) {
    if (!s->ranges) {           /* a dtype without a split kernel: one whole update after another */
        for (int m = 0; m < s->n_calls; m++) {
            mst_status st = s->kernels[m](ctx, &s->calls[m]);
            if (st != MST_OK) return st;
        }
        return MST_OK;
    }
    bool all_active = true;
    for (int m = 0; m < s->n_calls; m++)
        all_active &= s->active[m] = mst_op_table[s->op]->update_begin(&s->calls[m], &s->scal[m]);
    /* deciding (build_optim_split): a skipped update (loss-scale overflow) is not a fair sample */
    if (s->optim_trial < k_optim_trial_runs && all_active && may_try) {
        bool split = s->optim_trial & 1;
        uint64_t t0 = mst_prof_now_ns();
        optim_ranges(ctx, s, s->calls, split);
        double ns = (double)(mst_prof_now_ns() - t0);
        if (s->optim_trial >= 2 && ns < s->optim_ns[split]) s->optim_ns[split] = ns;
        if (++s->optim_trial == k_optim_trial_runs) {
            s->optim_split = s->optim_ns[1] < s->optim_ns[0] * (1 - k_optim_split_margin);
            if (mst_kernels_log_on())
                fprintf(stderr, "mstune graph: fused %s over %lld elements: split %.1f us, serial %.1f us -> %s\n",
                        mst_op_name(s->op), (long long)s->optim_total, s->optim_ns[1] / 1e3, s->optim_ns[0] / 1e3,
                        s->optim_split ? "split" : "serial");
        }
        return MST_OK;
    }
    optim_ranges(ctx, s, s->calls, s->optim_split);
    return MST_OK;
}

/* ---- dynamic batch: re-run shape inference for a new batch size ---- */

/* Reshape-like attributes (rank, d0, ...) whose dim 0 was the traced batch follow the batch when
 * input 0's dim 0 does (and, for broadcast pairs, the ranks align at dim 0). */
static void patch_attrs(const mst_graph_exec *ex, exec_step *s, int64_t traced_in0, int in0_ndim) {
    const mst_op_desc *d = mst_op_table[s->op];
    s->call.attrs = s->traced_attrs;
    if (!d->attr_i[0] || !d->attr_i[1] || strcmp(d->attr_i[0], "rank") || strcmp(d->attr_i[1], "d0")) return;
    bool aligned = (d->flags & MST_OPF_VIEW) || s->traced_attrs.i[0] == in0_ndim;
    if (aligned && traced_in0 == ex->traced_batch && s->call.in[0]->shape[0] != ex->traced_batch &&
        s->traced_attrs.i[0] >= 1 && s->traced_attrs.i[1] == ex->traced_batch)
        s->call.attrs.i[1] = s->call.in[0]->shape[0];
}

static mst_status infer_call(mst_graph_exec *ex, mst_op_call *c) {
    mst_meta meta[MST_MAX_OP_OUTPUTS];
    mst_status st = mst_op_table[c->op]->infer(ex->ctx, c, meta);
    if (st != MST_OK) return st;
    for (int k = 0; k < c->n_out; k++) mst_tensor_set_shape(c->out[k], meta[k].ndim, meta[k].shape);
    return MST_OK;
}

static int value_of_tensor(const mst_graph_exec *ex, const mst_tensor *t) {
    return t >= ex->hdr && t < ex->hdr + ex->g->n_values ? (int)(t - ex->hdr) : -1;
}

static mst_status reinfer(mst_graph_exec *ex) {
    for (int i = 0; i < ex->n_steps; i++) {
        exec_step *s = &ex->steps[i];
        mst_status st = MST_OK;
        if (s->kind == STEP_VIEW || s->kind == STEP_KERNEL) {
            int v = s->call.n_in ? value_of_tensor(ex, s->call.in[0]) : -1;
            const mst_gvalue *x = v >= 0 ? &ex->g->values[v] : NULL;
            patch_attrs(ex, s, x && x->ndim ? x->shape[0] : -1, x ? x->ndim : -1);
            if (s->call.n_out) st = infer_call(ex, &s->call);
            if (st == MST_OK && s->relu_call.out[0])    /* the epilogue's value follows its producer */
                mst_tensor_set_shape(s->relu_call.out[0], s->relu_call.in[0]->ndim, s->relu_call.in[0]->shape);
        } else if (s->kind == STEP_FUSED) {
            for (int m = 0; m < s->fp.n_members && st == MST_OK; m++) st = infer_call(ex, &s->fp.calls[m]);
        }
        if (st != MST_OK) return st;
    }
    return MST_OK;
}

/* ---- run ---- */

static mst_status bind_inputs(mst_graph_exec *ex, mst_tensor *const in[], int n_in) {
    const mst_graph *g = ex->g;
    int64_t batch = ex->batch;
    for (int v = 0; v < g->n_values; v++) {
        const mst_gvalue *x = &g->values[v];
        if (x->kind != MST_GV_INPUT) continue;
        if (x->input_index >= n_in || !in[x->input_index])
            return mst_ctx_fail(ex->ctx, MST_ERR_ARG, "graph %s: input %d is missing", g->name, x->input_index);
        const mst_tensor *t = in[x->input_index];
        mst_tensor *h = &ex->hdr[v];
        if (ex->traced_batch >= 0 && t->ndim >= 1) batch = t->shape[0];
        mst_tensor_set_shape(h, t->ndim, t->shape);
        h->storage = t->storage;
        h->offset = t->offset;
    }
    bind_views(ex);
    if (ex->traced_batch >= 0 && batch != ex->batch) {
        ex->batch = batch;
        return reinfer(ex);
    }
    return MST_OK;
}

static int64_t step_flops(const exec_step *s, int64_t *bytes) {
    int64_t f = 0, b = 0;
    switch (s->kind) {
    case STEP_KERNEL:
        f = mst_op_flops(&s->call);
        b = mst_op_bytes(&s->call);
        if (s->relu_kernel) f += mst_op_flops(&s->relu_call);     /* in place: no extra traffic */
        break;
    case STEP_FUSED:
        for (int m = 0; m < s->fp.n_members; m++) f += mst_op_flops(&s->fp.calls[m]);
        for (int e = 0; e < s->fp.n_ext; e++) b += (int64_t)mst_tensor_nbytes(s->fp.ext[e]);
        for (int k = 0; k < s->fp.n_out; k++) b += (int64_t)mst_tensor_nbytes(s->fp.out[k]);
        break;
    case STEP_OPTIM:
        for (int m = 0; m < s->n_calls; m++) {
            f += mst_op_flops(&s->calls[m]);
            b += mst_op_bytes(&s->calls[m]);
        }
        break;
    case STEP_VIEW: break;
    }
    *bytes = b;
    return f;
}

static mst_status run_step(mst_ctx *ctx, exec_step *s, bool optim_may_try) {
    switch (s->kind) {
    case STEP_VIEW: return MST_OK;
    case STEP_KERNEL: {
        if (s->seed_slot >= 0) s->call.attrs.i[s->seed_slot] = (int64_t)mst_ctx_next_seed(ctx);
        mst_status st = s->choice ? mst_kernel_run_bound(ctx, &s->binding, &s->call) : s->kernel(ctx, &s->call);
        if (st == MST_OK && s->relu_kernel) st = s->relu_kernel(ctx, &s->relu_call);
        return st;
    }
    case STEP_FUSED: run_fused(ctx, &s->fp); return MST_OK;
    case STEP_OPTIM: return run_optim(ctx, s, optim_may_try);
    }
    return MST_OK;
}

/* Attach the context's shared arena, grown (once) when this plan needs more than it has. It is
 * reserved memory: counted in no category (the values in it are, by account). */
static mst_status attach_arena(mst_graph_exec *ex) {
    mst_ctx *ctx = ex->ctx;
    size_t need = (size_t)ex->arena_bytes + MST_GRAPH_ALIGN;
    if (ctx->graph_arena_bytes < need) {
        void *a = ctx->backend->alloc(ctx, need, MST_MEM_RESERVED);
        if (!a) return mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: graph arena of %lld bytes", (long long)ex->arena_bytes);
        ctx->backend->free(ctx, ctx->graph_arena);
        ctx->graph_arena = a;
        ctx->graph_arena_bytes = need;
    }
    ex->arena.data = ctx->graph_arena;
    return MST_OK;
}

/* Count a row of born (sign 1) or died (sign -1) bytes in the allocator, by category. */
static void account(mst_graph_exec *ex, const int64_t *row, int sign) {
    for (int c = 0; c < MST_MEM_COUNT; c++) {
        if (!row[c]) continue;
        ex->live[c] += sign * row[c];
        mst_allocator_account(ex->ctx->alloc, (mst_mem_cat)c, sign * row[c]);
    }
}

/* Every fused optimizer has its split verdict (or nothing to decide). */
static bool optim_trials_done(mst_graph_exec *ex) {
    if (ex->optim_settled) return true;
    for (int i = 0; i < ex->n_steps; i++)
        if (ex->steps[i].kind == STEP_OPTIM && ex->steps[i].optim_trial < k_optim_trial_runs) return false;
    return ex->optim_settled = true;
}

mst_status mst_graph_exec_run(mst_graph_exec *ex, mst_tensor *const in[], int n_in) {
    mst_ctx *ctx = ex->ctx;
    mst_status st = attach_arena(ex);
    if (st == MST_OK) st = bind_inputs(ex, in, n_in);
    /* the fused optimizer's split trial first, on all threads, then the thread trial: its two-thread
     * runs then update with the split the plan will keep (run serially, the mlp's update took
     * 86-118 us against 40-48 split, of a 0.3 ms step: a bias toward one thread) */
    const bool optim_settled = optim_trials_done(ex);
    const bool deciding = optim_settled && !mst_step_threads_decided(&ex->threads);
    const bool serial = (deciding || mst_step_threads_decided(&ex->threads)) && mst_step_threads_next(&ex->threads);
    const bool optim_may_try = !optim_settled, was_serial = ctx->serial;
    ctx->serial = was_serial || serial;
    const uint64_t t0 = deciding ? mst_prof_now_ns() : 0;
    for (int i = 0; i < ex->n_steps && st == MST_OK; i++) {
        exec_step *s = &ex->steps[i];
        account(ex, &ex->born[(size_t)i * MST_MEM_COUNT], 1);
        if (s->kind != STEP_VIEW) {
            mst_prof_kernel_begin(s->prof_name, s->op, s->prof_sig, 0);
            st = run_step(ctx, s, optim_may_try);
            mst_prof_event *end = mst_prof_on(MST_PROF_LEVEL_OPS) ? mst_prof_record_(MST_EV_END, MST_CAT_KERNEL, s->prof_name, s->op, 0, 0)
                                                                  : NULL;
            if (end) {      /* counted after the kernel's end is stamped, as the dispatcher does */
                uint64_t prep = mst_prof_prep_begin();
                end->a = step_flops(s, &end->b);
                mst_prof_prep_end(prep);
            }
            if (ctx->dp) mst_dp_progress(ctx);      /* a bucket's all-reduce in flight moves on between steps, as in eager */
        }
        account(ex, &ex->died[(size_t)i * MST_MEM_COUNT], -1);
    }
    ctx->serial = was_serial;
    if (deciding && st == MST_OK) {
        mst_step_threads_record(&ex->threads, serial, (double)(mst_prof_now_ns() - t0));
        if (mst_step_threads_decided(&ex->threads)) {
            const mst_step_threads *v = &ex->threads;
            if (mst_step_threads_measured_new(v))   /* a confirmed verdict is on file already */
                mst_plan_verdict_put(ex->threads_key, ctx->n_threads, v->serial, v->median_ns[0], v->median_ns[1],
                                     ex->threads_quiet && mst_machine_quiet(), ex->g->name);
            if (mst_kernels_log_on()) {
                fprintf(stderr, "mstune graph: ");
                mst_step_threads_describe(v, ctx->n_threads, stderr);
            }
        }
    }
    if (st == MST_OK) account(ex, &ex->died[(size_t)ex->n_steps * MST_MEM_COUNT], -1);  /* the outputs, copied out */
    int64_t left[MST_MEM_COUNT];                /* nothing after a failed step: release what it left */
    memcpy(left, ex->live, sizeof(left));
    account(ex, left, -1);
    return st;
}

void mst_graph_exec_describe_fusions(const mst_graph_exec *ex, FILE *f) {
    mst_step_threads_describe(&ex->threads, ex->ctx->n_threads, f);
    for (int i = 0; i < ex->n_steps; i++) {
        const exec_step *s = &ex->steps[i];
        if (s->kind != STEP_OPTIM) continue;
        fprintf(f, "fusion %s: %d updates, %lld elements, one loop over all parameters; ", mst_op_name(s->op), s->n_calls,
                (long long)s->optim_total);
        if (!s->ranges) fprintf(f, "run one whole parameter at a time (no split kernel for this dtype)\n");
        else if (mst_parallel_chunks_ctx(ex->ctx, s->optim_total, k_optim_min_elems) <= 1)
            fprintf(f, "serial (too few elements for %d threads)\n", ex->ctx->n_threads);
        else if (s->optim_ns[0] == 0) fprintf(f, "%s (forced by MSTUNE_OPTIM_SPLIT)\n", s->optim_split ? "split" : "serial");
        else if (s->optim_trial < k_optim_trial_runs)
            fprintf(f, "serial or split over the pool: decided by the plan's first %d runs (split kept only when %.0f%% faster)\n",
                    k_optim_trial_runs, 100 * k_optim_split_margin);
        else if (mst_step_threads_decided(&ex->threads) && ex->threads.serial)
            fprintf(f, "serial (the step runs on one thread)\n");
        else
            fprintf(f, "%s: split over the pool %.1f us vs serial %.1f us (best in-step times of the first runs)\n",
                    s->optim_split ? "split kept" : "split rejected", s->optim_ns[1] / 1e3, s->optim_ns[0] / 1e3);
    }
}

void mst_graph_exec_pin_step_threads(mst_graph_exec *ex, int pin, const char *pin_by) {
    if (ex->ctx->step_threads_pin != MST_STEP_THREADS_AUTO || ex->threads.runs > 0) return;
    init_step_threads(ex, (mst_step_threads_pin)pin, pin_by);
}

int mst_graph_exec_step_threads(const mst_graph_exec *ex) {
    if (!mst_step_threads_decided(&ex->threads)) return 0;
    return ex->threads.serial ? 1 : ex->ctx->n_threads;
}

int64_t mst_graph_exec_flops(const mst_graph_exec *ex) {
    int64_t f = 0, bytes;
    for (int i = 0; i < ex->n_steps; i++) f += step_flops(&ex->steps[i], &bytes);
    return f;
}
