/* attribution.c — step partition by innermost range, hidden time by interval union, per-op
 * statistics in log-linear histograms.
 *
 * The partition is a sweep: a cursor moves from t_begin to t_end and each gap between records
 * is charged to the category on top of the open-range stack, so the parts sum to the window by
 * construction (no subtraction of nested durations, which is where double counting creeps in).
 * The histogram is HdrHistogram's layout with 4 significant bits (Gil Tene, HdrHistogram).
 * docs/attribution.md has the definition and its edge cases.
 */
#include "profiler/attribution.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline mst_prof_cat clamp_cat(unsigned c) { return c < MST_CAT_COUNT ? (mst_prof_cat)c : MST_CAT_OTHER; }

/* ---- per-thread range tracking ---- */

int mst_attr_track(mst_attr_tracker *tr, const mst_prof_event *ev, mst_attr_range *closed) {
    uint64_t t = ev->t_ns;
    if (t < tr->last_t) {
        tr->out_of_order++;
        t = tr->last_t;
    }
    tr->last_t = t;
    if (ev->kind == MST_EV_BEGIN) {
        if (ev->cat >= MST_CAT_COUNT) tr->bad_category++;
        if (tr->depth == MST_ATTR_MAX_DEPTH) {
            tr->too_deep++;
            return 0;
        }
        mst_attr_frame *f = &tr->stack[tr->depth++];
        f->t_begin = t;
        f->a = ev->a;
        f->b = ev->b;
        f->name = ev->name;
        f->op = ev->op;
        f->cat = (uint8_t)clamp_cat(ev->cat);
        return 0;
    }
    if (ev->kind != MST_EV_END) return 0;
    uint8_t cat = (uint8_t)clamp_cat(ev->cat);
    int i = tr->depth - 1;
    while (i >= 0 && !(tr->stack[i].cat == cat && tr->stack[i].name == ev->name)) i--;
    if (i < 0) {
        tr->unmatched_end++;
        return 0;
    }
    const mst_attr_frame f = tr->stack[i];
    memmove(&tr->stack[i], &tr->stack[i + 1], (size_t)(tr->depth - 1 - i) * sizeof(tr->stack[0]));
    tr->depth--;
    if (closed) {
        closed->t0 = f.t_begin;
        closed->t1 = t;
        closed->flops = ev->a;
        closed->bytes = ev->b;
        closed->name = f.name;
        closed->op = f.op;
        closed->cat = f.cat;
        closed->begin_a = f.a;
        closed->begin_b = f.b;
    }
    return 1;
}

mst_prof_cat mst_attr_innermost(const mst_attr_tracker *tr) {
    return tr->depth > 0 ? (mst_prof_cat)tr->stack[tr->depth - 1].cat : MST_CAT_OTHER;
}

/* ---- windows ---- */

void mst_attr_window_begin(mst_attr_window *w, const mst_attr_tracker *tr, uint64_t t_begin) {
    memset(w, 0, sizeof(*w));
    w->t_begin = w->cursor = t_begin;
    w->unmatched0 = tr->unmatched_end;
    w->too_deep0 = tr->too_deep;
    w->out_of_order0 = tr->out_of_order;
}

void mst_attr_window_advance(mst_attr_window *w, const mst_attr_tracker *tr, uint64_t t) {
    if (t <= w->cursor) return;
    w->ns[mst_attr_innermost(tr)] += t - w->cursor;
    w->cursor = t;
}

void mst_attr_window_end(mst_attr_window *w, const mst_attr_tracker *tr, uint64_t t_end, mst_attr_result *out) {
    mst_attr_window_advance(w, tr, t_end);
    memset(out, 0, sizeof(*out));
    out->t_begin = w->t_begin;
    out->t_end = w->cursor;
    memcpy(out->ns, w->ns, sizeof(out->ns));
    out->unmatched_end = tr->unmatched_end - w->unmatched0;
    out->too_deep = tr->too_deep - w->too_deep0;
    out->out_of_order = tr->out_of_order - w->out_of_order0;
    out->open_at_end = (uint64_t)tr->depth;
}

void mst_attr_partition(uint64_t t_begin, uint64_t t_end, const mst_prof_event *ev, size_t n, mst_attr_result *out) {
    mst_attr_tracker tr;
    memset(&tr, 0, sizeof(tr));
    mst_attr_window w;
    int started = 0;
    if (t_end < t_begin) t_end = t_begin;
    for (size_t i = 0; i < n; i++) {
        const uint64_t t = ev[i].t_ns;
        if (!started) {
            if (t < t_begin) {
                mst_attr_track(&tr, &ev[i], NULL);
                continue;
            }
            mst_attr_window_begin(&w, &tr, t_begin);
            started = 1;
        }
        if (t > t_end) break;
        mst_attr_window_advance(&w, &tr, t);
        mst_attr_track(&tr, &ev[i], NULL);
    }
    if (!started) mst_attr_window_begin(&w, &tr, t_begin);
    mst_attr_window_end(&w, &tr, t_end, out);
}

/* ---- hidden time ---- */

void mst_attr_sweep_init(mst_attr_sweep *s, size_t n, const uint64_t *t_begin, const uint64_t *t_end,
                         uint64_t (*hidden)[MST_CAT_COUNT]) {
    memset(s, 0, sizeof(*s));
    s->n = n;
    s->t_begin = t_begin;
    s->t_end = t_end;
    s->hidden = hidden;
}

/* Spread one merged piece [a, b) of category c over the windows it overlaps. Pieces of a category
 * arrive in increasing order, so the first window that can overlap only moves forward. */
static void sweep_emit(mst_attr_sweep *s, int c, uint64_t a, uint64_t b) {
    size_t k = s->cat[c].cursor;
    while (k < s->n && s->t_end[k] <= a) k++;
    s->cat[c].cursor = k;
    for (; k < s->n && s->t_begin[k] < b; k++) {
        uint64_t lo = a > s->t_begin[k] ? a : s->t_begin[k];
        uint64_t hi = b < s->t_end[k] ? b : s->t_end[k];
        if (hi > lo) s->hidden[k][c] += hi - lo;
    }
}

int mst_attr_sweep_add(mst_attr_sweep *s, mst_prof_cat cat, uint64_t t0, uint64_t t1) {
    int c = clamp_cat(cat);
    if (t1 <= t0) return 0;     /* empty: adds nothing */
    if (s->cat[c].open && t0 < s->cat[c].a) return -1;
    if (s->cat[c].open && t0 <= s->cat[c].b) {
        if (t1 > s->cat[c].b) s->cat[c].b = t1;
        return 0;
    }
    if (s->cat[c].open) sweep_emit(s, c, s->cat[c].a, s->cat[c].b);
    s->cat[c].a = t0;
    s->cat[c].b = t1;
    s->cat[c].open = 1;
    return 0;
}

void mst_attr_sweep_finish(mst_attr_sweep *s) {
    for (int c = 0; c < MST_CAT_COUNT; c++)
        if (s->cat[c].open) {
            sweep_emit(s, c, s->cat[c].a, s->cat[c].b);
            s->cat[c].open = 0;
        }
}

static int cmp_interval(const void *pa, const void *pb) {
    const mst_attr_interval *a = pa, *b = pb;
    int ca = clamp_cat(a->cat), cb = clamp_cat(b->cat);
    if (ca != cb) return ca < cb ? -1 : 1;
    return a->t0 < b->t0 ? -1 : a->t0 > b->t0;
}

void mst_attr_hidden(uint64_t t_begin, uint64_t t_end, mst_attr_interval *iv, size_t n, uint64_t out[MST_CAT_COUNT]) {
    uint64_t hidden[1][MST_CAT_COUNT];
    memset(hidden, 0, sizeof(hidden));
    if (n > 1) qsort(iv, n, sizeof(*iv), cmp_interval);
    mst_attr_sweep s;
    mst_attr_sweep_init(&s, t_end > t_begin ? 1 : 0, &t_begin, &t_end, hidden);
    for (size_t i = 0; i < n; i++) mst_attr_sweep_add(&s, (mst_prof_cat)iv[i].cat, iv[i].t0, iv[i].t1);
    mst_attr_sweep_finish(&s);
    memcpy(out, hidden[0], sizeof(hidden[0]));
}

/* ---- per-op histograms ---- */

unsigned mst_attr_hist_bucket(uint64_t v) {
    if (v < MST_ATTR_HIST_SUB) return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);      /* 2^e <= v < 2^(e+1), e >= 4 */
    unsigned sub = (unsigned)(v >> (e - 4)) - MST_ATTR_HIST_SUB;
    return MST_ATTR_HIST_SUB + (e - 4) * MST_ATTR_HIST_SUB + sub;
}

void mst_attr_hist_range(unsigned bucket, uint64_t *lo, uint64_t *hi) {
    if (bucket < MST_ATTR_HIST_SUB) {
        *lo = bucket;
        *hi = bucket + 1;
        return;
    }
    unsigned e = (bucket - MST_ATTR_HIST_SUB) / MST_ATTR_HIST_SUB + 4, sub = (bucket - MST_ATTR_HIST_SUB) % MST_ATTR_HIST_SUB;
    *lo = (uint64_t)(MST_ATTR_HIST_SUB + sub) << (e - 4);
    /* the top bucket's end is 2^64: saturate */
    *hi = (e == 63 && sub == MST_ATTR_HIST_SUB - 1) ? UINT64_MAX : (uint64_t)(MST_ATTR_HIST_SUB + sub + 1) << (e - 4);
}

typedef struct {
    uint32_t name;
    int16_t op;
    int64_t calls;
    uint64_t total_ns, min_ns, max_ns;
    int64_t flops, bytes;
    uint64_t hist[MST_ATTR_HIST_BUCKETS];
} op_entry;

#define OP_SLOTS (2 * MST_ATTR_MAX_OPS)     /* open addressing, load <= 1/2 */

struct mst_attr_ops {
    op_entry *entries[MST_ATTR_MAX_OPS];   /* in order of first appearance */
    size_t n;
    int32_t slot[OP_SLOTS];                /* name hash -> entry index, -1 empty */
    uint64_t untracked;
};

mst_attr_ops *mst_attr_ops_new(void) {
    mst_attr_ops *ops = calloc(1, sizeof(*ops));
    if (!ops) return NULL;
    for (size_t i = 0; i < OP_SLOTS; i++) ops->slot[i] = -1;
    return ops;
}

void mst_attr_ops_free(mst_attr_ops *ops) {
    if (!ops) return;
    for (size_t i = 0; i < ops->n; i++) free(ops->entries[i]);
    free(ops);
}

int mst_attr_ops_add(mst_attr_ops *ops, uint32_t name, int op, uint64_t dur_ns, int64_t flops, int64_t bytes) {
    uint32_t h = (name * 2654435761u) & (OP_SLOTS - 1);
    while (ops->slot[h] >= 0 && ops->entries[ops->slot[h]]->name != name) h = (h + 1) & (OP_SLOTS - 1);
    op_entry *e;
    if (ops->slot[h] >= 0) {
        e = ops->entries[ops->slot[h]];
    } else {
        if (ops->n == MST_ATTR_MAX_OPS || !(e = calloc(1, sizeof(*e)))) {
            ops->untracked++;
            return -1;
        }
        e->name = name;
        e->op = (int16_t)op;
        e->min_ns = UINT64_MAX;
        ops->slot[h] = (int32_t)ops->n;
        ops->entries[ops->n++] = e;
    }
    e->calls++;
    e->total_ns += dur_ns;
    if (dur_ns < e->min_ns) e->min_ns = dur_ns;
    if (dur_ns > e->max_ns) e->max_ns = dur_ns;
    e->flops += flops;
    e->bytes += bytes;
    e->hist[mst_attr_hist_bucket(dur_ns)]++;
    return 0;
}

size_t mst_attr_ops_count(const mst_attr_ops *ops) { return ops->n; }
uint64_t mst_attr_ops_untracked(const mst_attr_ops *ops) { return ops->untracked; }

double mst_attr_ops_percentile(const mst_attr_ops *ops, size_t i, double p) {
    const op_entry *e = ops->entries[i];
    if (e->calls == 0) return 0;
    if (p < 0) p = 0;
    if (p > 1) p = 1;
    /* nearest rank: the smallest sample with at least p of the samples at or below it */
    uint64_t rank = (uint64_t)ceil(p * (double)e->calls);
    if (rank < 1) rank = 1;
    if (rank > (uint64_t)e->calls) rank = (uint64_t)e->calls;
    uint64_t seen = 0;
    unsigned b = 0;
    for (; b < MST_ATTR_HIST_BUCKETS; b++) {
        seen += e->hist[b];
        if (seen >= rank) break;
    }
    uint64_t lo, hi;
    mst_attr_hist_range(b, &lo, &hi);
    double mid = ((double)lo + (double)(hi - 1)) / 2.0;    /* integer samples: [lo, hi - 1] */
    if (mid < (double)e->min_ns) mid = (double)e->min_ns;
    if (mid > (double)e->max_ns) mid = (double)e->max_ns;
    return mid;
}

void mst_attr_ops_summary(const mst_attr_ops *ops, size_t i, mst_attr_op_summary *out) {
    const op_entry *e = ops->entries[i];
    memset(out, 0, sizeof(*out));
    out->name = e->name;
    out->op = e->op;
    out->calls = e->calls;
    out->total_ns = e->total_ns;
    out->min_ns = e->calls ? e->min_ns : 0;
    out->max_ns = e->max_ns;
    out->mean_ns = e->calls ? (double)e->total_ns / (double)e->calls : 0;
    out->p50_ns = mst_attr_ops_percentile(ops, i, 0.50);
    out->p95_ns = mst_attr_ops_percentile(ops, i, 0.95);
    out->flops = e->flops;
    out->bytes = e->bytes;
    out->gflops = e->total_ns ? (double)e->flops / (double)e->total_ns : 0;
    out->gbps = e->total_ns ? (double)e->bytes / (double)e->total_ns : 0;
}
