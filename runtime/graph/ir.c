/* ir.c — building, copying, querying and dumping graph-mode IR (see ir.h).
 *
 * Node input/output lists are heap arrays so fused nodes can carry any number of operands; the
 * arrays grow by doubling. Out of memory while building the IR is a broken invariant (the IR is
 * tiny next to tensor data), as for the autorelease pool array.
 */
#include "runtime/graph/ir.h"

#include <stdlib.h>
#include <string.h>

#include "util/hash.h"

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    MST_ASSERT(q);
    return q;
}

static int *int_dup(const int *a, int n) {
    int *p = xrealloc(NULL, (size_t)n * sizeof(int));
    if (n) memcpy(p, a, (size_t)n * sizeof(int));
    return p;
}

static const char *const k_kind_names[MST_GV_KIND_COUNT] = {"input", "persistent", "constant", "intermediate", "view"};
const char *mst_gvalue_kind_name(mst_gvalue_kind k) { return (unsigned)k < MST_GV_KIND_COUNT ? k_kind_names[k] : "?"; }

mst_graph *mst_graph_new(const char *name) {
    mst_graph *g = calloc(1, sizeof(*g));
    MST_ASSERT(g);
    snprintf(g->name, sizeof(g->name), "%s", name ? name : "graph");
    return g;
}

void mst_gnode_clear(mst_gnode *n) {
    for (int m = 0; m < n->n_members; m++) mst_gnode_clear(&n->members[m]);
    free(n->members);
    free(n->in);
    free(n->out);
    n->members = NULL;
    n->in = n->out = NULL;
    n->n_members = 0;
}

void mst_graph_free(mst_graph *g) {
    if (!g) return;
    for (int v = 0; v < g->n_values; v++) mst_tensor_release(g->values[v].tensor);
    for (int i = 0; i < g->n_nodes; i++) mst_gnode_clear(&g->nodes[i]);
    free(g->values);
    free(g->nodes);
    free(g->outputs);
    free(g);
}

static void node_copy(mst_gnode *dst, const mst_gnode *src) {
    *dst = *src;
    dst->in = int_dup(src->in, src->n_in);
    dst->out = int_dup(src->out, src->n_out);
    dst->members = NULL;
    if (src->n_members) {
        dst->members = xrealloc(NULL, (size_t)src->n_members * sizeof(mst_gnode));
        for (int m = 0; m < src->n_members; m++) node_copy(&dst->members[m], &src->members[m]);
    }
}

mst_graph *mst_graph_clone(const mst_graph *g) {
    mst_graph *c = mst_graph_new(g->name);
    *c = *g;
    c->values = xrealloc(NULL, (size_t)g->cap_values * sizeof(mst_gvalue));
    memcpy(c->values, g->values, (size_t)g->n_values * sizeof(mst_gvalue));
    for (int v = 0; v < g->n_values; v++) mst_tensor_retain(c->values[v].tensor);
    c->nodes = xrealloc(NULL, (size_t)g->cap_nodes * sizeof(mst_gnode));
    for (int i = 0; i < g->n_nodes; i++) node_copy(&c->nodes[i], &g->nodes[i]);
    c->outputs = int_dup(g->outputs, g->cap_outputs);
    return c;
}

int mst_graph_add_value(mst_graph *g, mst_gvalue_kind kind, mst_dtype dtype, int ndim, const int64_t *shape) {
    if (g->n_values == g->cap_values) {
        g->cap_values = g->cap_values ? 2 * g->cap_values : 64;
        g->values = xrealloc(g->values, (size_t)g->cap_values * sizeof(mst_gvalue));
    }
    mst_gvalue *v = &g->values[g->n_values];
    memset(v, 0, sizeof(*v));
    v->kind = kind;
    v->dtype = dtype;
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++) v->shape[d] = shape[d];
    v->view_of = -1;
    v->input_index = -1;
    v->cat = MST_MEM_ACT;
    return g->n_values++;
}

int mst_graph_add_node(mst_graph *g, mst_op op, const mst_attrs *attrs, int n_in, const int *in, int n_out, const int *out) {
    if (g->n_nodes == g->cap_nodes) {
        g->cap_nodes = g->cap_nodes ? 2 * g->cap_nodes : 64;
        g->nodes = xrealloc(g->nodes, (size_t)g->cap_nodes * sizeof(mst_gnode));
    }
    mst_gnode *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof(*n));
    n->kind = MST_GN_OP;
    n->op = op;
    if (attrs) n->attrs = *attrs;
    n->n_in = n_in;
    n->n_out = n_out;
    n->in = int_dup(in, n_in);
    n->out = int_dup(out, n_out);
    n->mutates = mst_op_table[op]->mutates & ((1u << n_in) - 1);
    for (int k = 0; k < MST_MAX_OP_OUTPUTS; k++) n->inplace[k] = -1;
    n->relu_value = -1;
    n->trace_index = g->n_nodes;
    return g->n_nodes++;
}

void mst_graph_add_output(mst_graph *g, int v) {
    if (g->n_outputs == g->cap_outputs) {
        g->cap_outputs = g->cap_outputs ? 2 * g->cap_outputs : 8;
        g->outputs = xrealloc(g->outputs, (size_t)g->cap_outputs * sizeof(int));
    }
    g->outputs[g->n_outputs++] = v;
}

void mst_graph_compact(mst_graph *g) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) { mst_gnode_clear(&g->nodes[i]); continue; }
        g->nodes[k++] = g->nodes[i];
    }
    g->n_nodes = k;
}

int mst_graph_root(const mst_graph *g, int v) {
    while (g->values[v].kind == MST_GV_VIEW) v = g->values[v].view_of;
    return v;
}

bool mst_gnode_mutates_root(const mst_graph *g, const mst_gnode *n, int root) {
    if (n->kind != MST_GN_OP) {
        for (int m = 0; m < n->n_members; m++)
            if (mst_gnode_mutates_root(g, &n->members[m], root)) return true;
        return false;
    }
    for (int i = 0; i < n->n_in; i++)
        if ((n->mutates >> i & 1) && mst_graph_root(g, n->in[i]) == root) return true;
    return false;
}

bool mst_graph_value_mutated(const mst_graph *g, int v) {
    int root = mst_graph_root(g, v);
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && mst_gnode_mutates_root(g, &g->nodes[i], root)) return true;
    return false;
}

int mst_graph_live_nodes(const mst_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead;
    return n;
}

int mst_graph_kernel_count(const mst_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const mst_gnode *nd = &g->nodes[i];
        if (nd->dead) continue;
        if (nd->kind == MST_GN_OP && (mst_op_table[nd->op]->flags & MST_OPF_VIEW)) continue;
        n++;
    }
    return n;
}

int64_t mst_gvalue_bytes(const mst_gvalue *v) {
    return mst_shape_numel(v->ndim, v->shape) * (int64_t)mst_dtype_size(v->dtype);
}

static uint64_t hash_value(uint64_t h, const mst_gvalue *v) {
    int32_t head[4] = {(int32_t)v->kind, (int32_t)v->dtype, v->ndim, v->layout};
    h = mst_fnv1a(h, head, sizeof(head));
    return mst_fnv1a(h, v->shape, (size_t)v->ndim * sizeof(v->shape[0]));
}

static uint64_t hash_node(uint64_t h, const mst_graph *g, const mst_gnode *n) {
    int32_t head[6] = {(int32_t)n->kind, (int32_t)n->op, n->n_in, n->n_out, (int32_t)n->mutates, n->relu_epilogue};
    h = mst_fnv1a(h, head, sizeof(head));
    h = mst_fnv1a(h, n->attrs.i, sizeof(n->attrs.i));
    h = mst_fnv1a(h, n->attrs.f, sizeof(n->attrs.f));
    for (int i = 0; i < n->n_in; i++) h = hash_value(h, &g->values[n->in[i]]);
    for (int k = 0; k < n->n_out; k++) h = hash_value(h, &g->values[n->out[k]]);
    for (int m = 0; m < n->n_members; m++) h = hash_node(h, g, &n->members[m]);
    return h;
}

uint64_t mst_graph_hash(const mst_graph *g, uint64_t h) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) h = hash_node(h, g, &g->nodes[i]);
    return h;
}

/* ---- dumps ---- */

static void value_desc(const mst_graph *g, int v, char *buf, size_t n) {
    const mst_gvalue *x = &g->values[v];
    char s[96];
    mst_shape_str(x->ndim, x->shape, s, sizeof(s));
    snprintf(buf, n, "%s%s%s", mst_dtype_name(x->dtype), s, x->layout == MST_LAYOUT_NCHW16C ? " nChw16c" : "");
}

static void dump_attrs(const mst_gnode *n, FILE *f) {
    const mst_op_desc *d = mst_op_table[n->op];
    for (int k = 0; k < MST_MAX_ATTR_I && d->attr_i[k]; k++) fprintf(f, " %s=%lld", d->attr_i[k], (long long)n->attrs.i[k]);
    for (int k = 0; k < MST_MAX_ATTR_F && d->attr_f[k]; k++) fprintf(f, " %s=%g", d->attr_f[k], n->attrs.f[k]);
}

static void dump_op_line(const mst_graph *g, const mst_gnode *n, FILE *f, const char *indent) {
    fprintf(f, "%s", indent);
    for (int k = 0; k < n->n_out; k++) fprintf(f, "%s%%%d", k ? ", " : "", n->out[k]);
    fprintf(f, "%s%s(", n->n_out ? " = " : "", n->kind == MST_GN_OP ? mst_op_name(n->op)
                                                 : n->kind == MST_GN_FUSED_ELEM ? "fused_elementwise"
                                                                                : "fused_optimizer");
    for (int i = 0; i < n->n_in; i++)
        fprintf(f, "%s%%%d%s", i ? ", " : "", n->in[i], (n->kind == MST_GN_OP && (n->mutates >> i & 1)) ? "!" : "");
    fprintf(f, ")");
    if (n->kind == MST_GN_OP) dump_attrs(n, f);
    for (int k = 0; k < n->n_out; k++)
        if (n->inplace[k] >= 0) fprintf(f, "  [%%%d in place over %%%d]", n->out[k], n->in[n->inplace[k]]);
    if (n->relu_epilogue) fprintf(f, "  [+relu epilogue in place -> %%%d]", n->relu_value);
    bool any = false;     /* values in oneDNN's nChw16c (the layout pass, layout.c) */
    for (int p = 0; p < n->n_in + n->n_out; p++) {
        int v = p < n->n_in ? n->in[p] : n->out[p - n->n_in];
        if (g->values[v].layout != MST_LAYOUT_NCHW16C) continue;
        fprintf(f, "%s%%%d", any ? " " : "  [nChw16c: ", v);
        any = true;
    }
    if (any) fprintf(f, "]");
    fprintf(f, "\n");
}

void mst_graph_dump(const mst_graph *g, FILE *f) {
    fprintf(f, "graph %s: %d values, %d nodes, %d kernels, %d outputs\n", g->name, g->n_values,
            mst_graph_live_nodes(g), mst_graph_kernel_count(g), g->n_outputs);
    for (int v = 0; v < g->n_values; v++) {
        const mst_gvalue *x = &g->values[v];
        if (x->kind == MST_GV_INTERMEDIATE) continue;
        char d[128];
        value_desc(g, v, d, sizeof(d));
        fprintf(f, "  %%%d: %s %s", v, mst_gvalue_kind_name(x->kind), d);
        if (x->kind == MST_GV_INPUT) fprintf(f, " in[%d]", x->input_index);
        if (x->kind == MST_GV_VIEW) fprintf(f, " of %%%d", x->view_of);
        if (x->name[0]) fprintf(f, " \"%s\"", x->name);
        fprintf(f, "\n");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const mst_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "  n%d: ", i);
        dump_op_line(g, n, f, prefix);
        for (int m = 0; m < n->n_members; m++) dump_op_line(g, &n->members[m], f, "        | ");
    }
    fprintf(f, "  outputs:");
    for (int k = 0; k < g->n_outputs; k++) {
        char d[128];
        value_desc(g, g->outputs[k], d, sizeof(d));
        fprintf(f, " %%%d %s", g->outputs[k], d);
    }
    fprintf(f, "\n");
}

void mst_graph_dump_dot(const mst_graph *g, FILE *f) {
    fprintf(f, "digraph \"%s\" {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n", g->name);
    for (int v = 0; v < g->n_values; v++) {
        const mst_gvalue *x = &g->values[v];
        char d[128];
        value_desc(g, v, d, sizeof(d));
        fprintf(f, "  v%d [shape=ellipse, label=\"%%%d %s%s%s\"%s];\n", v, v, d, x->name[0] ? "\\n" : "", x->name,
                x->kind == MST_GV_PERSISTENT ? ", style=filled, fillcolor=lightyellow"
                : x->kind == MST_GV_INPUT    ? ", style=filled, fillcolor=lightblue"
                                             : "");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const mst_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        const char *name = n->kind == MST_GN_OP ? mst_op_name(n->op) : n->kind == MST_GN_FUSED_ELEM ? "fused_elementwise" : "fused_optimizer";
        fprintf(f, "  n%d [shape=box, label=\"n%d %s%s", i, i, name, n->relu_epilogue ? "+relu" : "");
        for (int m = 0; m < n->n_members; m++) fprintf(f, "\\n%s", mst_op_name(n->members[m].op));
        fprintf(f, "\"%s];\n", n->kind != MST_GN_OP ? ", style=filled, fillcolor=palegreen" : "");
        for (int k = 0; k < n->n_in; k++)
            fprintf(f, "  v%d -> n%d%s;\n", n->in[k], i, (n->kind == MST_GN_OP && (n->mutates >> k & 1)) ? " [color=red, label=\"updates\"]" : "");
        for (int k = 0; k < n->n_out; k++) fprintf(f, "  n%d -> v%d;\n", i, n->out[k]);
        if (n->relu_epilogue) fprintf(f, "  n%d -> v%d [style=dashed];\n", i, n->relu_value);
    }
    fprintf(f, "}\n");
}
