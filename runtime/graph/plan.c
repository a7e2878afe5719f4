/* plan.c — liveness intervals, best-fit packing into one arena, and the live bytes per category
 * at each node (see plan.h).
 *
 * The trade-off: greedy by size with best fit is not optimal (the problem is NP-hard, a form of
 * dynamic storage allocation) but is what TFLite's and ggml-alloc's planners do, and it is close
 * to the peak of simultaneously live bytes on training graphs. All categories share the arena (a
 * gradient takes the slot an activation left); per-category counts come from the liveness instead.
 */
#include "runtime/graph/plan.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static int find(int *parent, int v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
}

static void unite(int *parent, int a, int b) {
    a = find(parent, a);
    b = find(parent, b);
    if (a != b) parent[b] = a;
}

static int64_t align_up(int64_t x) { return (x + MST_GRAPH_ALIGN - 1) / MST_GRAPH_ALIGN * MST_GRAPH_ALIGN; }

/* Which values the executor materializes: intermediates some live node writes (fused groups
 * keep their internal values in registers and scratch). */
static void mark_materialized(const mst_graph *g, bool *mat) {
    for (int i = 0; i < g->n_nodes; i++) {
        const mst_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_out; k++) mat[n->out[k]] = true;
        if (n->relu_epilogue) mat[n->relu_value] = true;
    }
}

static void touch(int *start, int *end, int b, int i) {
    if (start[b] < 0 || i < start[b]) start[b] = i;
    if (i > end[b]) end[b] = i;
}

static void node_touches(const mst_graph *g, const mst_gnode *n, int i, const int *buf_of_root, int *start, int *end) {
    for (int k = 0; k < n->n_in; k++) {
        int b = buf_of_root[mst_graph_root(g, n->in[k])];
        if (b >= 0) touch(start, end, b, i);
    }
    for (int k = 0; k < n->n_out; k++) {
        int b = buf_of_root[mst_graph_root(g, n->out[k])];
        if (b >= 0) touch(start, end, b, i);
    }
    if (n->relu_epilogue) {
        int b = buf_of_root[n->relu_value];
        if (b >= 0) touch(start, end, b, i);
    }
}

typedef struct { int64_t lo, hi; } range;

static int cmp_range(const void *a, const void *b) {
    const range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

typedef struct { int64_t size; int start, id; } sort_key;

static int cmp_size_desc(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void sort_order(const mst_graph_plan *p, int *order) {
    sort_key *k = malloc(((size_t)p->n_buffers + 1) * sizeof(*k));
    MST_ASSERT(k);
    for (int b = 0; b < p->n_buffers; b++) k[b] = (sort_key){p->buf_size[b], p->buf_start[b], b};
    qsort(k, (size_t)p->n_buffers, sizeof(*k), cmp_size_desc);
    for (int b = 0; b < p->n_buffers; b++) order[b] = k[b].id;
    free(k);
}

static void place(mst_graph_plan *p, const int *order) {
    range *busy = malloc(((size_t)p->n_buffers + 1) * sizeof(range));
    bool *placed = calloc((size_t)p->n_buffers + 1, sizeof(bool));
    MST_ASSERT(busy && placed);
    p->arena_bytes = 0;
    for (int q = 0; q < p->n_buffers; q++) {
        int b = order[q];
        int n = 0;
        for (int o = 0; o < p->n_buffers; o++)
            if (placed[o] && p->buf_start[o] <= p->buf_end[b] && p->buf_start[b] <= p->buf_end[o])
                busy[n++] = (range){p->buf_offset[o], p->buf_offset[o] + p->buf_size[o]};
        qsort(busy, (size_t)n, sizeof(range), cmp_range);
        int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
        for (int k = 0; k <= n; k++) {
            int64_t gap_end = k < n ? busy[k].lo : INT64_MAX;
            if (gap_end - cursor >= p->buf_size[b] && (best < 0 || gap_end - cursor < best_gap)) {
                best = cursor;
                best_gap = gap_end - cursor;
            }
            if (k < n && align_up(busy[k].hi) > cursor) cursor = align_up(busy[k].hi);
        }
        p->buf_offset[b] = best;
        placed[b] = true;
        if (best + p->buf_size[b] > p->arena_bytes) p->arena_bytes = best + p->buf_size[b];
    }
    p->arena_bytes = align_up(p->arena_bytes);
    free(busy);
    free(placed);
}

/* Per node and category, the bytes that become live before it runs (buffers starting there) and
 * that die after it (ending there; row n_nodes: the graph outputs, after the run); and walking
 * them in order, each category's peak of live bytes. */
static void account(const mst_graph *g, mst_graph_plan *p, const int64_t *own) {
    size_t rows = (size_t)g->n_nodes + 1;
    p->born = calloc(rows * MST_MEM_COUNT, sizeof(int64_t));
    p->died = calloc(rows * MST_MEM_COUNT, sizeof(int64_t));
    MST_ASSERT(p->born && p->died);
    for (int b = 0; b < p->n_buffers; b++) {
        if (p->buf_start[b] < 0) continue;
        p->born[(size_t)p->buf_start[b] * MST_MEM_COUNT + p->buf_cat[b]] += own[b];
        p->died[(size_t)p->buf_end[b] * MST_MEM_COUNT + p->buf_cat[b]] += own[b];
    }
    int64_t live[MST_MEM_COUNT] = {0};
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < MST_MEM_COUNT; c++) {
            live[c] += p->born[i * MST_MEM_COUNT + c];
            if (live[c] > p->live_peak[c]) p->live_peak[c] = live[c];
            live[c] -= p->died[i * MST_MEM_COUNT + c];
        }
}

void mst_graph_plan_build(const mst_graph *g, mst_graph_plan *p) {
    memset(p, 0, sizeof(*p));
    int nv = g->n_values;
    p->n_values = nv;
    p->offset = malloc(((size_t)nv + 1) * sizeof(int64_t));
    p->buffer = malloc(((size_t)nv + 1) * sizeof(int));
    int *parent = malloc(((size_t)nv + 1) * sizeof(int));
    int *buf_of_root = malloc(((size_t)nv + 1) * sizeof(int));
    bool *mat = calloc((size_t)nv + 1, sizeof(bool));
    MST_ASSERT(p->offset && p->buffer && parent && buf_of_root && mat);
    for (int v = 0; v < nv; v++) parent[v] = v;
    mark_materialized(g, mat);
    /* in-place edges and relu epilogues share a buffer (views share through mst_graph_root) */
    for (int i = 0; i < g->n_nodes; i++) {
        const mst_gnode *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_out && k < MST_MAX_OP_OUTPUTS; k++)
            if (n->inplace[k] >= 0) unite(parent, mst_graph_root(g, n->in[n->inplace[k]]), n->out[k]);
        if (n->relu_epilogue) unite(parent, mst_graph_root(g, n->out[0]), n->relu_value);
    }
    /* one buffer per class of materialized intermediates; it is counted under the category of the
     * class's first value, the one whose storage eager allocates (the in-place pass shares a
     * buffer only between values of one category, so the rest of a class agrees with it) */
    for (int v = 0; v < nv; v++) buf_of_root[v] = -1;
    int *class_buf = malloc(((size_t)nv + 1) * sizeof(int));
    mst_mem_cat *class_cat = malloc(((size_t)nv + 1) * sizeof(mst_mem_cat));
    MST_ASSERT(class_buf && class_cat);
    for (int v = 0; v < nv; v++) class_buf[v] = -1;
    for (int v = 0; v < nv; v++) {
        if (g->values[v].kind != MST_GV_INTERMEDIATE || !mat[v]) continue;
        int c = find(parent, v);
        if (class_buf[c] < 0) {
            class_cat[p->n_buffers] = (unsigned)g->values[v].cat < MST_MEM_COUNT ? g->values[v].cat : MST_MEM_ACT;
            class_buf[c] = p->n_buffers++;
        }
        buf_of_root[v] = class_buf[c];
        p->intermediate_bytes += mst_gvalue_bytes(&g->values[v]);
    }
    int nb = p->n_buffers;
    p->buf_size = calloc((size_t)nb + 1, sizeof(int64_t));
    p->buf_offset = calloc((size_t)nb + 1, sizeof(int64_t));
    p->buf_start = malloc(((size_t)nb + 1) * sizeof(int));
    p->buf_end = malloc(((size_t)nb + 1) * sizeof(int));
    p->buf_cat = malloc(((size_t)nb + 1) * sizeof(mst_mem_cat));
    MST_ASSERT(p->buf_size && p->buf_offset && p->buf_start && p->buf_end && p->buf_cat);
    memcpy(p->buf_cat, class_cat, (size_t)nb * sizeof(mst_mem_cat));
    int64_t *own = calloc((size_t)nb + 1, sizeof(int64_t));    /* per buffer: the bytes eager would allocate */
    MST_ASSERT(own);
    for (int b = 0; b < nb; b++) p->buf_start[b] = p->buf_end[b] = -1;
    for (int v = 0; v < nv; v++) {
        int b = buf_of_root[v];
        if (b < 0) continue;
        int64_t bytes = mst_gvalue_bytes(&g->values[v]);
        if (bytes > own[b]) own[b] = bytes;
        if (align_up(bytes) > p->buf_size[b]) p->buf_size[b] = align_up(bytes);
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) node_touches(g, &g->nodes[i], i, buf_of_root, p->buf_start, p->buf_end);
    for (int k = 0; k < g->n_outputs; k++) {
        int b = buf_of_root[mst_graph_root(g, g->outputs[k])];
        if (b >= 0) touch(p->buf_start, p->buf_end, b, g->n_nodes);
    }
    int *order = malloc(((size_t)nb + 1) * sizeof(int));
    MST_ASSERT(order);
    sort_order(p, order);
    place(p, order);
    account(g, p, own);
    for (int v = 0; v < nv; v++) {
        int b = g->values[v].kind == MST_GV_VIEW ? buf_of_root[mst_graph_root(g, v)] : buf_of_root[v];
        p->buffer[v] = b;
        p->offset[v] = b >= 0 ? p->buf_offset[b] : -1;
    }
    free(order);
    free(own);
    free(class_buf);
    free(class_cat);
    free(parent);
    free(buf_of_root);
    free(mat);
}

void mst_graph_plan_free(mst_graph_plan *p) {
    free(p->offset);
    free(p->buffer);
    free(p->buf_size);
    free(p->buf_offset);
    free(p->buf_start);
    free(p->buf_end);
    free(p->buf_cat);
    free(p->born);
    free(p->died);
    memset(p, 0, sizeof(*p));
}

int mst_graph_plan_check(const mst_graph *g, const mst_graph_plan *p) {
    (void)g;
    int bad = 0;
    for (int a = 0; a < p->n_buffers; a++) {
        if ((unsigned)p->buf_cat[a] >= MST_MEM_COUNT || p->buf_offset[a] < 0 || p->buf_offset[a] % MST_GRAPH_ALIGN ||
            p->buf_offset[a] + p->buf_size[a] > p->arena_bytes)
            bad++;
        for (int b = a + 1; b < p->n_buffers; b++) {
            bool live_together = p->buf_start[a] <= p->buf_end[b] && p->buf_start[b] <= p->buf_end[a];
            bool overlap = p->buf_offset[a] < p->buf_offset[b] + p->buf_size[b] &&
                           p->buf_offset[b] < p->buf_offset[a] + p->buf_size[a];
            if (live_together && overlap && p->buf_size[a] && p->buf_size[b]) {
                bad++;
                if (getenv("MST_GRAPH_DEBUG"))
                    fprintf(stderr, "plan: buffers %d [%d,%d] @%lld+%lld and %d [%d,%d] @%lld+%lld overlap\n", a, p->buf_start[a],
                            p->buf_end[a], (long long)p->buf_offset[a], (long long)p->buf_size[a], b, p->buf_start[b], p->buf_end[b],
                            (long long)p->buf_offset[b], (long long)p->buf_size[b]);
            }
        }
    }
    return bad;
}
