/* trace.c — recording dispatcher calls into graph IR (see trace.h).
 *
 * Tensors are identified by address through an open-addressing map. An address stays unique only
 * while the tensor lives, so the release hook removes an entry as its tensor is freed (a
 * tombstone keeps the probe chains intact); the tracer holds no references, so the traced step
 * sees exactly the refcounts eager mode does (autograd decides whether to copy a gradient from them).
 */
#include "runtime/graph/trace.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"
#include "runtime/graph/ir.h"

#define TOMBSTONE ((const mst_tensor *)(uintptr_t)1)

struct mst_tracer {
    mst_ctx *ctx;
    mst_graph *g;
    const mst_tensor **keys;
    int *vals;
    size_t cap, used;       /* used counts live entries and tombstones */
};

static size_t hash_ptr(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static void map_put(mst_tracer *tr, const mst_tensor *t, int v);

static void map_grow(mst_tracer *tr) {
    const mst_tensor **keys = tr->keys;
    int *vals = tr->vals;
    size_t cap = tr->cap;
    tr->cap = cap ? cap * 2 : 1024;
    tr->keys = calloc(tr->cap, sizeof(*tr->keys));
    tr->vals = calloc(tr->cap, sizeof(*tr->vals));
    MST_ASSERT(tr->keys && tr->vals);
    tr->used = 0;
    for (size_t i = 0; i < cap; i++)
        if (keys[i] && keys[i] != TOMBSTONE) map_put(tr, keys[i], vals[i]);
    free(keys);
    free(vals);
}

static void map_put(mst_tracer *tr, const mst_tensor *t, int v) {
    if (2 * (tr->used + 1) > tr->cap) map_grow(tr);
    size_t i = hash_ptr(t, tr->cap);
    while (tr->keys[i] && tr->keys[i] != TOMBSTONE && tr->keys[i] != t) i = (i + 1) & (tr->cap - 1);
    if (!tr->keys[i]) tr->used++;
    tr->keys[i] = t;
    tr->vals[i] = v;
}

static size_t map_find(const mst_tracer *tr, const mst_tensor *t) {
    if (!tr->cap) return SIZE_MAX;
    size_t i = hash_ptr(t, tr->cap);
    while (tr->keys[i]) {
        if (tr->keys[i] == t) return i;
        i = (i + 1) & (tr->cap - 1);
    }
    return SIZE_MAX;
}

mst_tracer *mst_tracer_new(mst_ctx *ctx, mst_graph *g) {
    mst_tracer *tr = calloc(1, sizeof(*tr));
    if (!tr) { mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: graph tracer"); return NULL; }
    tr->ctx = ctx;
    tr->g = g;
    map_grow(tr);
    return tr;
}

void mst_tracer_free(mst_tracer *tr) {
    if (!tr) return;
    free(tr->keys);
    free(tr->vals);
    free(tr);
}

void mst_trace_forget(mst_tracer *tr, const mst_tensor *t) {
    size_t i = map_find(tr, t);
    if (i != SIZE_MAX) tr->keys[i] = TOMBSTONE;
}

static int value_like(mst_tracer *tr, mst_gvalue_kind kind, const mst_tensor *t) {
    int v = mst_graph_add_value(tr->g, kind, t->dtype, t->ndim, t->shape);
    memcpy(tr->g->values[v].name, t->name, sizeof(tr->g->values[v].name));
    if (t->storage) tr->g->values[v].cat = t->storage->cat;    /* what eager would count it as */
    map_put(tr, t, v);
    return v;
}

int mst_trace_bind_input(mst_tracer *tr, mst_tensor *t, int index) {
    int v = value_like(tr, MST_GV_INPUT, t);
    tr->g->values[v].input_index = index;
    if (index + 1 > tr->g->n_inputs) tr->g->n_inputs = index + 1;
    return v;
}

int mst_trace_value_of(mst_tracer *tr, mst_tensor *t) {
    size_t i = map_find(tr, t);
    if (i != SIZE_MAX) return tr->vals[i];
    char d[96];
    if (t->persistent) {
        int v = value_like(tr, MST_GV_PERSISTENT, t);
        tr->g->values[v].tensor = mst_tensor_retain(t);
        return v;
    }
    if (mst_tensor_is_meta(t)) {
        mst_ctx_fail(tr->ctx, MST_ERR_INTERNAL, "graph trace: shape-only tensor %s (\"%s\") was not produced by the trace",
                     mst_tensor_desc(t, d, sizeof(d)), t->name);
        return -1;
    }
    /* a tensor made on the host during the step (the backward seed): its value now is the constant */
    mst_tensor *snap = mst_tensor_clone(tr->ctx, t);
    if (!snap) return -1;
    int v = value_like(tr, MST_GV_CONSTANT, t);
    tr->g->values[v].tensor = mst_tensor_retain(snap);
    return v;
}

static mst_status cannot_capture(mst_ctx *ctx, const mst_op_call *c, const char *fmt, int i) {
    char d[96];
    return mst_op_fail(ctx, c, MST_ERR_UNSUPPORTED, "cannot capture: %s %s input %d %s", mst_op_name(c->op),
                       fmt, i, mst_tensor_desc(c->in[i], d, sizeof(d)));
}

mst_status mst_trace_record(mst_ctx *ctx, const mst_op_call *c) {
    mst_tracer *tr = ctx->tracer;
    const mst_op_desc *d = mst_op_table[c->op];
    int in[MST_MAX_OP_INPUTS], out[MST_MAX_OP_OUTPUTS];
    for (int i = 0; i < c->n_in; i++) {
        in[i] = mst_trace_value_of(tr, c->in[i]);
        if (in[i] < 0) return ctx->status;
        mst_gvalue_kind k = tr->g->values[mst_graph_root(tr->g, in[i])].kind;
        if ((d->mutates >> i & 1) && k == MST_GV_CONSTANT)
            return cannot_capture(ctx, c, "updates a tensor that is neither state nor a graph value:", i);
    }
    for (int k = 0; k < c->n_out; k++) {
        mst_tensor *t = c->out[k];
        if (d->flags & MST_OPF_VIEW) {
            out[k] = value_like(tr, MST_GV_VIEW, t);
            tr->g->values[out[k]].view_of = in[0];
        } else {
            out[k] = value_like(tr, MST_GV_INTERMEDIATE, t);
        }
    }
    mst_graph_add_node(tr->g, c->op, &c->attrs, c->n_in, in, c->n_out, out);
    return MST_OK;
}
