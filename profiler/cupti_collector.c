/* cupti_collector.c — CUPTI Activity API buffers turned into per-stream profiler records.
 *
 * CUPTI hands back filled activity buffers through callbacks that carry no user pointer and is
 * itself process-wide, so the collector's state is one file-scope struct (the exception to "no
 * hidden globals", as events.c's single active profiler). Everything else — record conversion,
 * clock mapping, grouping per stream — is the decoder, an ordinary object the tests drive with
 * hand-built records. Device timestamps come in CUPTI's clock (CLOCK_REALTIME on Linux) and are
 * mapped to CLOCK_MONOTONIC through paired samples of both clocks taken at start, at each
 * buffer, flush and stop. Reference: the CUPTI samples activity_trace_async and the Activity API
 * documentation (docs.nvidia.com/cupti, "CUPTI Activity API").
 */
#define _GNU_SOURCE
#include "profiler/cupti_collector.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- clock mapping ---- */

void mst_cupti_clock_add(mst_cupti_clock *clk, uint64_t cupti_ns, uint64_t mono_ns) {
    if (clk->cupti0 == 0 && clk->mono0 == 0) {
        clk->cupti0 = cupti_ns;
        clk->mono0 = mono_ns;
    }
    clk->cupti1 = cupti_ns;
    clk->mono1 = mono_ns;
}

static uint64_t clamp_ns(__int128 t) {
    if (t < 0) return 0;
    if (t > (__int128)UINT64_MAX) return UINT64_MAX;
    return (uint64_t)t;
}

uint64_t mst_cupti_clock_map(const mst_cupti_clock *clk, uint64_t cupti_ns) {
    if (clk->cupti1 > clk->cupti0 && clk->mono1 > clk->mono0 &&
        clk->cupti1 - clk->cupti0 >= MST_CUPTI_CLOCK_MIN_SPAN_NS) {
        uint64_t dc = clk->cupti1 - clk->cupti0, dm = clk->mono1 - clk->mono0;
        double rate = (double)dm / (double)dc;
        if (rate > 1.0 - MST_CUPTI_CLOCK_MAX_SKEW && rate < 1.0 + MST_CUPTI_CLOCK_MAX_SKEW) {
            __int128 d = (__int128)(int64_t)(cupti_ns - clk->cupti0) * (__int128)dm / (__int128)dc;
            return clamp_ns((__int128)clk->mono0 + d);
        }
    }
    /* Too short a span to trust a rate, or a rate no two real clocks have (a step): offset only,
     * from the latest sample, which is nearest the records being delivered. */
    return clamp_ns((__int128)clk->mono1 + (int64_t)(cupti_ns - clk->cupti1));
}

/* ---- record conversion ---- */

static const char *const k_memcpy_names[] = {
    [CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN] = "memcpy.unknown",
    [CUPTI_ACTIVITY_MEMCPY_KIND_HTOD] = "memcpy.htod",
    [CUPTI_ACTIVITY_MEMCPY_KIND_DTOH] = "memcpy.dtoh",
    [CUPTI_ACTIVITY_MEMCPY_KIND_HTOA] = "memcpy.htoa",
    [CUPTI_ACTIVITY_MEMCPY_KIND_ATOH] = "memcpy.atoh",
    [CUPTI_ACTIVITY_MEMCPY_KIND_ATOA] = "memcpy.atoa",
    [CUPTI_ACTIVITY_MEMCPY_KIND_ATOD] = "memcpy.atod",
    [CUPTI_ACTIVITY_MEMCPY_KIND_DTOA] = "memcpy.dtoa",
    [CUPTI_ACTIVITY_MEMCPY_KIND_DTOD] = "memcpy.dtod",
    [CUPTI_ACTIVITY_MEMCPY_KIND_HTOH] = "memcpy.htoh",
    [CUPTI_ACTIVITY_MEMCPY_KIND_PTOP] = "memcpy.ptop",
};
_Static_assert(sizeof(k_memcpy_names) / sizeof(k_memcpy_names[0]) == CUPTI_ACTIVITY_MEMCPY_KIND_PTOP + 1,
               "a new CUPTI memcpy kind needs a name in k_memcpy_names");

/* Fills the pair; false when the activity has no usable timing (0 = not collected, or an end
 * before the start from a record flushed while still running). */
static int fill_range(mst_cupti_range *out, const mst_cupti_clock *clk, mst_prof_cat cat, const char *name,
                      uint64_t start, uint64_t end, int64_t bytes) {
    if (start == 0 || end < start) return 0;
    uint64_t t0 = mst_cupti_clock_map(clk, start);
    uint64_t t1 = mst_cupti_clock_map(clk, end);
    if (t1 < t0) t1 = t0;
    uint32_t id = mst_prof_intern(name);
    out->ev[0] = (mst_prof_event){.t_ns = t0, .a = out->correlation, .b = 0, .name = id, .op = -1,
                                  .kind = MST_EV_BEGIN, .cat = (uint8_t)cat};
    out->ev[1] = (mst_prof_event){.t_ns = t1, .a = 0, .b = bytes, .name = id, .op = -1,
                                  .kind = MST_EV_END, .cat = (uint8_t)cat};
    return 1;
}

mst_cupti_conv mst_cupti_convert(const CUpti_Activity *rec, const mst_cupti_clock *clk, mst_cupti_range *out) {
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const mst_cupti_kernel_rec *k = (const mst_cupti_kernel_rec *)rec;
        out->device = k->deviceId;
        out->stream = k->streamId;
        out->correlation = k->correlationId;
        out->correlation2 = 0;
        const char *name = k->name && k->name[0] ? k->name : "kernel";
        return fill_range(out, clk, MST_CAT_KERNEL, name, k->start, k->end, 0) ? MST_CUPTI_CONV_RANGE
                                                                                : MST_CUPTI_CONV_UNTIMED;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const mst_cupti_memcpy_rec *m = (const mst_cupti_memcpy_rec *)rec;
        out->device = m->deviceId;
        out->stream = m->streamId;
        out->correlation = m->correlationId;
        out->correlation2 = m->runtimeCorrelationId;
        unsigned ck = m->copyKind;
        const char *name = ck <= CUPTI_ACTIVITY_MEMCPY_KIND_PTOP ? k_memcpy_names[ck] : k_memcpy_names[0];
        return fill_range(out, clk, MST_CAT_MEMCPY, name, m->start, m->end, (int64_t)m->bytes) ? MST_CUPTI_CONV_RANGE
                                                                                              : MST_CUPTI_CONV_UNTIMED;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const mst_cupti_memset_rec *s = (const mst_cupti_memset_rec *)rec;
        out->device = s->deviceId;
        out->stream = s->streamId;
        out->correlation = s->correlationId;
        out->correlation2 = 0;
        return fill_range(out, clk, MST_CAT_MEMCPY, "memset", s->start, s->end, (int64_t)s->bytes) ? MST_CUPTI_CONV_RANGE
                                                                                                  : MST_CUPTI_CONV_UNTIMED;
    }
    default:
        return MST_CUPTI_CONV_OTHER;
    }
}

/* ---- the decoder ---- */

/* Launch times by correlation id, direct-mapped: ids grow, and a device record arrives within a
 * buffer or two of its API call, long before its slot is reused. */
#define CORR_SLOTS 16384

typedef struct {
    uint32_t id;
    uint64_t t_ns;      /* the API call's start, CLOCK_MONOTONIC */
} corr_slot;

typedef struct {
    uint32_t tid;
    uint32_t name;      /* interned "gpu.<device>.<stream>[.<lane>]" */
    uint64_t last_end;  /* end of the latest range delivered on this lane */
    int named;          /* its thread-name record went out */
} lane;

typedef struct {
    uint32_t device, stream;
    lane *lanes;
    size_t nlanes;
} stream_ent;

typedef struct {
    mst_cupti_range r;
    uint64_t seq;
    uint32_t si, li, tid;   /* stream index, lane index, the lane's tid */
} pending;

struct mst_cupti_decoder {
    mst_cupti_emit_fn emit;
    void *user;
    corr_slot corr[CORR_SLOTS];
    stream_ent *streams;
    size_t nstreams, cap_streams;
    pending *pend;
    size_t npend, cap_pend;
    mst_prof_event *out;
    size_t cap_out;
    uint32_t next_tid;
    uint64_t seq;
    mst_cupti_stats stats;
};

/* Grows *p (elements of size sz) to hold at least need; false when memory ran out. */
static int grow(void **p, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * sz);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

mst_cupti_decoder *mst_cupti_decoder_new(mst_cupti_emit_fn emit, void *user) {
    mst_cupti_decoder *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->emit = emit;
    d->user = user;
    d->next_tid = MST_CUPTI_TID_BASE;
    return d;
}

void mst_cupti_decoder_free(mst_cupti_decoder *d) {
    if (!d) return;
    for (size_t i = 0; i < d->nstreams; i++) free(d->streams[i].lanes);
    free(d->streams);
    free(d->pend);
    free(d->out);
    free(d);
}

mst_cupti_stats mst_cupti_decoder_stats(const mst_cupti_decoder *d) { return d->stats; }

static void corr_put(mst_cupti_decoder *d, uint32_t id, uint64_t t_ns) {
    if (id == 0) return;
    corr_slot *s = &d->corr[id & (CORR_SLOTS - 1)];
    /* A runtime call and the driver call inside it may share the id: keep the outer start. */
    if (s->id == id && s->t_ns <= t_ns) return;
    s->id = id;
    s->t_ns = t_ns;
}

static uint64_t corr_get(const mst_cupti_decoder *d, uint32_t id) {
    if (id == 0) return 0;
    const corr_slot *s = &d->corr[id & (CORR_SLOTS - 1)];
    return s->id == id ? s->t_ns : 0;
}

void mst_cupti_decoder_add(mst_cupti_decoder *d, const CUpti_Activity *rec, const mst_cupti_clock *clk) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME || rec->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
        const CUpti_ActivityAPI *api = (const CUpti_ActivityAPI *)rec;
        d->stats.api_calls++;
        if (api->start != 0) corr_put(d, api->correlationId, mst_cupti_clock_map(clk, api->start));
        return;
    }
    mst_cupti_range r;
    switch (mst_cupti_convert(rec, clk, &r)) {
    case MST_CUPTI_CONV_OTHER: d->stats.other++; return;
    case MST_CUPTI_CONV_UNTIMED: d->stats.untimed++; return;
    case MST_CUPTI_CONV_RANGE: break;
    }
    if (!grow((void **)&d->pend, &d->cap_pend, d->npend + 1, sizeof(*d->pend))) { d->stats.lost++; return; }
    d->pend[d->npend++] = (pending){.r = r, .seq = d->seq++};
    if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) d->stats.memcpys++;
    else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) d->stats.memsets++;
    else d->stats.kernels++;
}

static int cmp_u64(uint64_t a, uint64_t b) { return (a > b) - (a < b); }

static int by_stream_start(const void *pa, const void *pb) {
    const pending *a = pa, *b = pb;
    int c;
    if ((c = cmp_u64(a->r.device, b->r.device))) return c;
    if ((c = cmp_u64(a->r.stream, b->r.stream))) return c;
    if ((c = cmp_u64(a->r.ev[0].t_ns, b->r.ev[0].t_ns))) return c;
    if ((c = cmp_u64(a->r.ev[1].t_ns, b->r.ev[1].t_ns))) return c;
    return cmp_u64(a->seq, b->seq);
}

static int by_tid_start(const void *pa, const void *pb) {
    const pending *a = pa, *b = pb;
    int c;
    if ((c = cmp_u64(a->tid, b->tid))) return c;
    if ((c = cmp_u64(a->r.ev[0].t_ns, b->r.ev[0].t_ns))) return c;
    if ((c = cmp_u64(a->r.ev[1].t_ns, b->r.ev[1].t_ns))) return c;
    return cmp_u64(a->seq, b->seq);
}

/* The stream's index, created on first sight; SIZE_MAX when memory ran out. */
static size_t stream_index(mst_cupti_decoder *d, uint32_t device, uint32_t stream) {
    for (size_t i = 0; i < d->nstreams; i++)
        if (d->streams[i].device == device && d->streams[i].stream == stream) return i;
    if (!grow((void **)&d->streams, &d->cap_streams, d->nstreams + 1, sizeof(*d->streams))) return SIZE_MAX;
    d->streams[d->nstreams] = (stream_ent){.device = device, .stream = stream};
    return d->nstreams++;
}

/* The first lane free at `start` (its last range ended by then), a new one if none; SIZE_MAX
 * when memory ran out. */
static size_t lane_for(mst_cupti_decoder *d, stream_ent *s, uint64_t start) {
    for (size_t k = 0; k < s->nlanes; k++)
        if (s->lanes[k].last_end <= start) return k;
    lane *l = realloc(s->lanes, (s->nlanes + 1) * sizeof(*l));
    if (!l) return SIZE_MAX;
    s->lanes = l;
    char name[64];
    if (s->nlanes == 0) snprintf(name, sizeof(name), "gpu.%u.%u", s->device, s->stream);
    else snprintf(name, sizeof(name), "gpu.%u.%u.%zu", s->device, s->stream, s->nlanes);
    s->lanes[s->nlanes] = (lane){.tid = d->next_tid++, .name = mst_prof_intern(name)};
    return s->nlanes++;
}

void mst_cupti_decoder_emit(mst_cupti_decoder *d) {
    if (d->npend == 0) return;
    for (size_t i = 0; i < d->npend; i++) {
        mst_cupti_range *r = &d->pend[i].r;
        uint64_t launch = corr_get(d, r->correlation);
        if (!launch) launch = corr_get(d, r->correlation2);
        r->ev[0].b = (int64_t)launch;
    }
    /* Lanes: in start order per stream, each range to the first lane it does not overlap. */
    qsort(d->pend, d->npend, sizeof(*d->pend), by_stream_start);
    size_t kept = 0;
    for (size_t i = 0, si = SIZE_MAX; i < d->npend; i++) {
        pending *p = &d->pend[i];
        if (si == SIZE_MAX || d->streams[si].device != p->r.device || d->streams[si].stream != p->r.stream)
            si = stream_index(d, p->r.device, p->r.stream);
        size_t li = si == SIZE_MAX ? SIZE_MAX : lane_for(d, &d->streams[si], p->r.ev[0].t_ns);
        if (li == SIZE_MAX) { d->stats.lost++; continue; }
        lane *l = &d->streams[si].lanes[li];
        l->last_end = p->r.ev[1].t_ns;
        p->si = (uint32_t)si;
        p->li = (uint32_t)li;
        p->tid = l->tid;
        d->pend[kept++] = *p;
    }
    d->npend = kept;
    qsort(d->pend, d->npend, sizeof(*d->pend), by_tid_start);
    for (size_t i = 0; i < d->npend;) {
        size_t j = i;
        while (j < d->npend && d->pend[j].tid == d->pend[i].tid) j++;
        lane *l = &d->streams[d->pend[i].si].lanes[d->pend[i].li];
        size_t n = 0;
        if (!grow((void **)&d->out, &d->cap_out, 2 * (j - i) + 1, sizeof(*d->out))) {
            d->stats.lost += j - i;
            i = j;
            continue;
        }
        if (!l->named) {        /* a stream opens with its name, as a host thread's does */
            d->out[n++] = (mst_prof_event){.t_ns = d->pend[i].r.ev[0].t_ns, .name = l->name, .op = -1,
                                           .kind = MST_EV_THREAD_NAME, .cat = MST_CAT_OTHER};
            l->named = 1;
        }
        for (size_t k = i; k < j; k++) {
            d->out[n++] = d->pend[k].r.ev[0];
            d->out[n++] = d->pend[k].r.ev[1];
        }
        d->emit(d->user, l->tid, d->out, n);
        i = j;
    }
    d->npend = 0;
}

/* ---- the collector ---- */

#define BUFFER_BYTES (1u << 20)
#define ERR_BYTES 512

/* Every CUPTI call goes through these: on failure the message names file, line, call and result. */
#define CUPTI_CHECK(call) cupti_ok((call), #call, __FILE__, __LINE__)
#define CUPTI_CHECK_AS(call, what) cupti_ok((call), (what), __FILE__, __LINE__)

static struct {
    pthread_mutex_t ctl;        /* serializes start, flush and stop */
    pthread_mutex_t lock;       /* the decoder, clock and counters: buffer callbacks take it */
    pthread_mutex_t err_lock;
    int running;
    mst_cupti_decoder *dec;
    mst_cupti_clock clk;
    uint64_t cupti_dropped, buffers;
    mst_cupti_stats last;       /* the stopped session's totals */
    void *driver;               /* libcuda.so.1, kept loaded once probed */
    char err[ERR_BYTES];
} g = {
    .ctl = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .err_lock = PTHREAD_MUTEX_INITIALIZER,
};

static const struct {
    CUpti_ActivityKind kind;
    const char *what;
} k_kinds[] = {
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)"},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY)"},
    {CUPTI_ACTIVITY_KIND_MEMSET, "cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET)"},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME)"},
    {CUPTI_ACTIVITY_KIND_DRIVER, "cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER)"},
};
#define NKINDS (sizeof(k_kinds) / sizeof(k_kinds[0]))

static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g.err_lock);
    vsnprintf(g.err, sizeof(g.err), fmt, ap);
    pthread_mutex_unlock(&g.err_lock);
    va_end(ap);
}

void mst_cupti_last_error(char *buf, size_t n) {
    if (!buf || n == 0) return;
    pthread_mutex_lock(&g.err_lock);
    snprintf(buf, n, "%s", g.err);
    pthread_mutex_unlock(&g.err_lock);
}

static int cupti_ok(CUptiResult r, const char *what, const char *file, int line) {
    if (r == CUPTI_SUCCESS) return 1;
    const char *name = NULL, *msg = NULL;
    if (cuptiGetResultString(r, &name) != CUPTI_SUCCESS || !name) name = "unknown CUPTI result";
    if (cuptiGetErrorMessage(r, &msg) != CUPTI_SUCCESS || !msg || strcmp(msg, name) == 0) msg = "";
    const char *base = strrchr(file, '/');
    set_error("%s:%d: %s failed: %s (%d)%s%s", base ? base + 1 : file, line, what, name, (int)r,
              msg[0] ? ": " : "", msg);
    return 0;
}

/* Pairs the clocks: the CUPTI reading bracketed by two monotonic ones, narrowest of 5 tries, the
 * monotonic time taken at the bracket's middle. */
static int clock_sample(uint64_t *cupti_ns, uint64_t *mono_ns) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t c = 0, m0 = mst_prof_now_ns();
        if (!CUPTI_CHECK(cuptiGetTimestamp(&c))) return 0;
        uint64_t m1 = mst_prof_now_ns();
        if (m1 - m0 < best) {
            best = m1 - m0;
            *cupti_ns = c;
            *mono_ns = m0 + (m1 - m0) / 2;
        }
    }
    return 1;
}

/* Caller holds g.lock. */
static void clock_update_locked(void) {
    uint64_t c = 0, m = 0;
    if (clock_sample(&c, &m)) mst_cupti_clock_add(&g.clk, c, m);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;     /* no buffer: CUPTI drops records and counts them */
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    pthread_mutex_lock(&g.lock);
    if (g.dec && buffer) {      /* after stop, late buffers are only freed */
        clock_update_locked();
        CUpti_Activity *rec = NULL;
        for (;;) {
            CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &rec);
            if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;      /* the buffer's end */
            if (!CUPTI_CHECK_AS(r, "cuptiActivityGetNextRecord")) break;
            mst_cupti_decoder_add(g.dec, rec, &g.clk);
        }
        size_t dropped = 0;
        if (CUPTI_CHECK(cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped))) g.cupti_dropped += dropped;
        g.buffers++;
        mst_cupti_decoder_emit(g.dec);
    }
    pthread_mutex_unlock(&g.lock);
    free(buffer);
}

typedef CUresult (*cu_init_fn)(unsigned int);
typedef CUresult (*cu_count_fn)(int *);
typedef CUresult (*cu_errstr_fn)(CUresult, const char **);

/* CUPTI without a usable driver fails with CUPTI_ERROR_UNKNOWN at the first enable; probing the
 * driver first turns that into a message that says what is missing. The driver is opened, not
 * linked, so the program still loads on machines without one. */
static int probe_driver(void) {
    if (!g.driver) {
        g.driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (!g.driver) {
            const char *why = dlerror();
            set_error("no NVIDIA driver: %s", why ? why : "libcuda.so.1 could not be loaded");
            return -1;
        }
    }
    cu_init_fn cu_init;
    cu_count_fn cu_count;
    cu_errstr_fn cu_name, cu_string;
    *(void **)&cu_init = dlsym(g.driver, "cuInit");
    *(void **)&cu_count = dlsym(g.driver, "cuDeviceGetCount");
    *(void **)&cu_name = dlsym(g.driver, "cuGetErrorName");
    *(void **)&cu_string = dlsym(g.driver, "cuGetErrorString");
    if (!cu_init || !cu_count) {
        set_error("NVIDIA driver library lacks cuInit/cuDeviceGetCount");
        return -1;
    }
    CUresult r = cu_init(0);
    int count = 0;
    if (r == CUDA_SUCCESS) r = cu_count(&count);
    if (r != CUDA_SUCCESS) {
        const char *name = NULL, *text = NULL;
        if (!cu_name || cu_name(r, &name) != CUDA_SUCCESS || !name) name = "CUDA error";
        if (!cu_string || cu_string(r, &text) != CUDA_SUCCESS || !text) text = "";
        const char *hint = r == CUDA_ERROR_NO_DEVICE ? " (no CUDA device)"
                         : r == CUDA_ERROR_STUB_LIBRARY ? " (the toolkit's stub libcuda was found, not a driver)"
                         : r == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH ? " (the driver and its kernel module differ in version)"
                         : "";
        set_error("CUDA driver unusable: cuInit/cuDeviceGetCount failed with %s (%d)%s%s%s", name, (int)r,
                  text[0] ? ": " : "", text, hint);
        return -1;
    }
    if (count == 0) {
        set_error("no CUDA device: the driver reports 0 devices");
        return -1;
    }
    return 0;
}

static void copy_error(char *err, size_t errn) { mst_cupti_last_error(err, errn); }

int mst_cupti_start(mst_cupti_emit_fn emit, void *user, char *err, size_t errn) {
    size_t enabled = 0;
    mst_cupti_decoder *dec = NULL;
    pthread_mutex_lock(&g.ctl);
    set_error("%s", "");
    if (!emit) {
        set_error("mst_cupti_start: no emit function");
        goto fail;
    }
    if (g.running) {
        set_error("mst_cupti_start: the CUPTI collector is already running (one per process)");
        goto fail;
    }
    if (probe_driver() != 0) goto fail;
    dec = mst_cupti_decoder_new(emit, user);
    if (!dec) {
        set_error("mst_cupti_start: out of memory for the decoder");
        goto fail;
    }
    pthread_mutex_lock(&g.lock);
    g.dec = dec;
    g.clk = (mst_cupti_clock){0};
    g.cupti_dropped = g.buffers = 0;
    clock_update_locked();          /* before any buffer can complete */
    int clock_ok = g.clk.mono0 != 0;
    pthread_mutex_unlock(&g.lock);
    if (!clock_ok) goto fail_dec;
    if (!CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed))) goto fail_dec;
    for (; enabled < NKINDS; enabled++)
        if (!CUPTI_CHECK_AS(cuptiActivityEnable(k_kinds[enabled].kind), k_kinds[enabled].what)) goto fail_kinds;
    g.running = 1;
    pthread_mutex_unlock(&g.ctl);
    return 0;

fail_kinds:
    while (enabled-- > 0) cuptiActivityDisable(k_kinds[enabled].kind);  /* best effort: the first error stands */
fail_dec:
    pthread_mutex_lock(&g.lock);
    g.dec = NULL;
    pthread_mutex_unlock(&g.lock);
    mst_cupti_decoder_free(dec);
fail:
    copy_error(err, errn);
    pthread_mutex_unlock(&g.ctl);
    return -1;
}

int mst_cupti_flush(void) {
    int rc = 0;
    pthread_mutex_lock(&g.ctl);
    if (g.running) {
        pthread_mutex_lock(&g.lock);
        clock_update_locked();
        pthread_mutex_unlock(&g.lock);
        /* Default flush: buffers whose records are all complete, full or not. Delivery takes
         * g.lock in buffer_completed, so it is not held here. */
        if (!CUPTI_CHECK(cuptiActivityFlushAll(0))) rc = -1;
    }
    pthread_mutex_unlock(&g.ctl);
    return rc;
}

void mst_cupti_stop(void) {
    pthread_mutex_lock(&g.ctl);
    if (!g.running) {
        pthread_mutex_unlock(&g.ctl);
        return;
    }
    pthread_mutex_lock(&g.lock);
    clock_update_locked();
    pthread_mutex_unlock(&g.lock);
    CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    for (size_t i = NKINDS; i-- > 0;)
        CUPTI_CHECK_AS(cuptiActivityDisable(k_kinds[i].kind), "cuptiActivityDisable");
    CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));   /* what came in meanwhile */
    pthread_mutex_lock(&g.lock);
    g.last = mst_cupti_decoder_stats(g.dec);
    g.last.cupti_dropped = g.cupti_dropped;
    g.last.buffers = g.buffers;
    mst_cupti_decoder_free(g.dec);
    g.dec = NULL;
    pthread_mutex_unlock(&g.lock);
    g.running = 0;
    pthread_mutex_unlock(&g.ctl);
}

mst_cupti_stats mst_cupti_get_stats(void) {
    pthread_mutex_lock(&g.lock);
    mst_cupti_stats s = g.last;
    if (g.dec) {
        s = mst_cupti_decoder_stats(g.dec);
        s.cupti_dropped = g.cupti_dropped;
        s.buffers = g.buffers;
    }
    pthread_mutex_unlock(&g.lock);
    return s;
}
