/* events.c — thread-local event buffers and the in-memory collector.
 *
 * Each recording thread owns one heap chunk of CHUNK_EVENTS records; recording is a bounds check
 * and a 32-byte store. A full chunk goes to the profiler's sink under its lock, then is reused.
 * The profiler keeps a registry of the chunks of every thread that recorded, so stop() can flush
 * them: callers stop the profiler once other recording threads are idle (joined or waiting).
 * Thread exit flushes the thread's chunk through a pthread key destructor.
 */
#define _GNU_SOURCE
#include "profiler/events.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_EVENTS 4096

int mst_prof_enabled;

typedef struct thread_buf {
    struct thread_buf *next_registered;
    mst_profiler *owner;        /* profiler the records belong to; NULL once detached */
    uint32_t tid;
    size_t n;
    /* record preparation (mst_prof_prep_begin/end), moved to the owner at flush: brackets, and the
     * timed ones kept (not interrupted) with their time */
    uint64_t prep_brackets, prep_kept, prep_kept_ns;
    uint64_t sig_build_ns;      /* signature cache misses, each timed whole (mst_prof_intern_sig) */
    mst_prof_event ev[CHUNK_EVENTS];
} thread_buf;

typedef struct stored_chunk {
    struct stored_chunk *next;
    uint32_t tid;
    size_t n;
    mst_prof_event ev[];
} stored_chunk;

struct mst_profiler {
    pthread_mutex_t lock;
    mst_prof_config cfg;
    mst_prof_overhead overhead;
    mst_prof_sink_fn sink;
    void *sink_user;
    thread_buf *registered;     /* every thread buffer that recorded for this profiler */
    stored_chunk *head, *tail;  /* in-memory sink */
    size_t count;
    uint64_t dropped;
    uint64_t prep_brackets, prep_kept, prep_kept_ns;    /* flushed from the threads (thread_buf) */
    uint64_t sig_build_ns;
    mst_prof_phase_hook phase_hook;
    void *phase_hook_user;
    bool recording;             /* as of the last start or step: recording (the hook fires on changes) */
    uint64_t last_handoff_ns;   /* the step-marking thread's last hand-off (mst_profiler_step_done) */
};

static pthread_mutex_t g_active_lock = PTHREAD_MUTEX_INITIALIZER;
static mst_profiler *g_active;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static __thread thread_buf *t_buf;
static __thread char t_name[32];

uint64_t mst_prof_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void memory_sink(void *user, uint32_t tid, const mst_prof_event *ev, size_t n) {
    mst_profiler *p = user;
    stored_chunk *c = malloc(sizeof(*c) + n * sizeof(*ev));
    if (!c) { p->dropped += n; return; }
    c->next = NULL;
    c->tid = tid;
    c->n = n;
    memcpy(c->ev, ev, n * sizeof(*ev));
    if (p->tail) p->tail->next = c; else p->head = c;
    p->tail = c;
    p->count += n;
}

/* The thread's preparation counters, moved to its owner at a flush or dropped at an attach. */
static void buf_reset_prep(thread_buf *b) { b->prep_brackets = b->prep_kept = b->prep_kept_ns = b->sig_build_ns = 0; }

/* Caller holds p->lock. */
static void buf_flush_locked(mst_profiler *p, thread_buf *b) {
    if (b->n > 0 && p->sink) {
        uint64_t t0 = mst_prof_now_ns();
        p->sink(p->sink_user, b->tid, b->ev, b->n);
        p->overhead.flush_ns += mst_prof_now_ns() - t0;
        p->overhead.flushes++;
        p->overhead.records += b->n;
    }
    p->prep_brackets += b->prep_brackets;
    p->prep_kept += b->prep_kept;
    p->prep_kept_ns += b->prep_kept_ns;
    p->sig_build_ns += b->sig_build_ns;
    buf_reset_prep(b);
    b->n = 0;
}

static void thread_exit(void *arg) {
    thread_buf *b = arg;
    pthread_mutex_lock(&g_active_lock);
    mst_profiler *p = b->owner;
    if (p) {
        pthread_mutex_lock(&p->lock);
        buf_flush_locked(p, b);
        /* unlink: the profiler must not touch freed memory later */
        for (thread_buf **pp = &p->registered; *pp; pp = &(*pp)->next_registered)
            if (*pp == b) { *pp = b->next_registered; break; }
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&g_active_lock);
    free(b);
}

static void make_key(void) { pthread_key_create(&g_key, thread_exit); }

/* The middle of five timings, sorted in place (not util/stats: its GSL would follow the recorder
 * into every program that links the runtime; tests/install builds one against its .pc). */
static double median5(double v[5]) {
    for (int i = 1; i < 5; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    return v[2];
}

/* The cost of one record: a clock read and a 32-byte store, timed over a loop (median of 5). */
static double calibrate_record_ns(void) {
    enum { N = 4096 };
    static __thread mst_prof_event scratch[64];
    double best[5];
    for (int r = 0; r < 5; r++) {
        uint64_t t0 = mst_prof_now_ns();
        for (int i = 0; i < N; i++) {
            mst_prof_event *e = &scratch[i & 63];
            e->t_ns = mst_prof_now_ns();
            e->a = i;
            e->kind = MST_EV_BEGIN;
        }
        best[r] = (double)(mst_prof_now_ns() - t0) / N;
    }
    return median5(best);
}

/* What an empty timed bracket reads: the time from one clock read's sample to the next one's
 * (median over loops of back-to-back pairs). Every timed preparation bracket includes it on top
 * of its work; on a step of tiny ops (dispatch_bound, ~45 ns a bracket) it was half of what the
 * brackets read, and the estimate of a profile recording every op came out ~20 points over the
 * measured cost (docs/benchmarks.md). */
static double calibrate_bracket_ns(void) {
    enum { N = 2048 };
    double best[5];
    for (int r = 0; r < 5; r++) {
        uint64_t sum = 0;
        for (int i = 0; i < N; i++) {
            uint64_t t0 = mst_prof_now_ns();
            sum += mst_prof_now_ns() - t0;
        }
        best[r] = (double)sum / N;
    }
    return median5(best);
}

mst_profiler *mst_profiler_new(void) {
    mst_profiler *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->sink = memory_sink;
    p->sink_user = p;
    p->cfg.level = MST_PROF_LEVEL_OPS;
    p->overhead.record_ns = calibrate_record_ns();
    p->overhead.bracket_ns = calibrate_bracket_ns();
    return p;
}

void mst_profiler_configure(mst_profiler *p, const mst_prof_config *cfg) { p->cfg = *cfg; }
const mst_prof_config *mst_profiler_config(const mst_profiler *p) { return &p->cfg; }

/* An active step that is the k-th (from 0) of its window: its ops recorded, or totals only. */
static mst_prof_phase active_phase(const mst_prof_config *c, int64_t k) {
    return c->level >= MST_PROF_LEVEL_OPS && c->op_every > 1 && k % c->op_every != 0 ? MST_PROF_STEP_TOTALS
                                                                                       : MST_PROF_STEP_ACTIVE;
}

mst_prof_phase mst_prof_schedule_phase(const mst_prof_config *c, int64_t step) {
    if (step < c->skip) return MST_PROF_STEP_OFF;
    int64_t t = step - c->skip;
    if (c->active <= 0) return t < c->warmup ? MST_PROF_STEP_WARMUP : active_phase(c, t - c->warmup);
    int64_t wait = c->wait > 0 ? c->wait : 0, cycle = wait + c->warmup + c->active;
    if (c->repeat > 0 && t >= cycle * c->repeat) return MST_PROF_STEP_OFF;
    int64_t in = t % cycle;
    return in < wait ? MST_PROF_STEP_OFF : in < wait + c->warmup ? MST_PROF_STEP_WARMUP : active_phase(c, in - wait - c->warmup);
}

void mst_profiler_set_phase_hook(mst_profiler *p, mst_prof_phase_hook fn, void *user) {
    p->phase_hook = fn;
    p->phase_hook_user = user;
}

mst_prof_phase mst_profiler_step(mst_profiler *p, int64_t step) {
    mst_prof_phase ph = mst_prof_schedule_phase(&p->cfg, step);
    bool recording = ph != MST_PROF_STEP_OFF, changed = false;
    pthread_mutex_lock(&g_active_lock);
    if (g_active == p) {
        const int level = ph == MST_PROF_STEP_TOTALS ? MST_PROF_LEVEL_STEPS : (int)p->cfg.level;
        __atomic_store_n(&mst_prof_enabled, recording ? level + 1 : 0, __ATOMIC_RELEASE);
        changed = recording != p->recording;
        p->recording = recording;
    }
    pthread_mutex_unlock(&g_active_lock);
    if (changed && p->phase_hook) p->phase_hook(p->phase_hook_user, recording);
    return ph;
}

bool mst_prof_handoff_due(const mst_prof_config *cfg, int64_t step, uint64_t now_ns, uint64_t last_ns) {
    if (mst_prof_schedule_phase(cfg, step) == MST_PROF_STEP_OFF) return false;
    return now_ns - last_ns >= MST_PROF_HANDOFF_NS || mst_prof_schedule_phase(cfg, step + 1) == MST_PROF_STEP_OFF;
}

bool mst_profiler_step_done(mst_profiler *p, int64_t step) {
    const uint64_t now = mst_prof_now_ns();
    if (!mst_prof_handoff_due(&p->cfg, step, now, p->last_handoff_ns)) return false;
    mst_prof_thread_flush();
    p->last_handoff_ns = now;
    return true;
}

void mst_profiler_pause(mst_profiler *p) {
    pthread_mutex_lock(&g_active_lock);
    if (g_active == p) __atomic_store_n(&mst_prof_enabled, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_active_lock);
    mst_prof_thread_flush();
    p->last_handoff_ns = mst_prof_now_ns();
}

mst_prof_overhead mst_profiler_overhead(const mst_profiler *p) {
    mst_profiler *q = (mst_profiler *)p;
    pthread_mutex_lock(&q->lock);
    mst_prof_overhead o = q->overhead;
    /* every bracket at the mean of the timed ones, less what timing one adds (its clock reads) */
    const double mean = q->prep_kept ? (double)q->prep_kept_ns / (double)q->prep_kept - o.bracket_ns : 0;
    o.prep_ns = mean > 0 ? (uint64_t)(mean * (double)q->prep_brackets) : 0;
    o.prep_ns += q->sig_build_ns;       /* the misses, timed whole and taken out of their brackets */
    o.sig_miss_ns = q->sig_build_ns;
    pthread_mutex_unlock(&q->lock);
    return o;
}

double mst_prof_overhead_ns(const mst_prof_overhead *o) {
    return (double)o->records * o->record_ns + (double)o->flush_ns + (double)o->sampler_ns + (double)o->probe_ns +
           (double)o->prep_ns;
}

void mst_prof_set_thread_name(const char *name) {
    snprintf(t_name, sizeof(t_name), "%s", name ? name : "");
    thread_buf *b = t_buf;
    if (b && b->owner && mst_prof_enabled) {
        uint32_t id = mst_prof_intern(t_name);
        mst_prof_record_(MST_EV_THREAD_NAME, MST_CAT_OTHER, id, -1, 0, 0);
    }
}

void mst_profiler_set_sink(mst_profiler *p, mst_prof_sink_fn fn, void *user) {
    p->sink = fn;
    p->sink_user = user;
}

int mst_profiler_start(mst_profiler *p) {
    pthread_once(&g_key_once, make_key);
    pthread_mutex_lock(&g_active_lock);
    if (g_active) { pthread_mutex_unlock(&g_active_lock); return -1; }
    g_active = p;
    p->recording = true;
    __atomic_store_n(&mst_prof_enabled, (int)p->cfg.level + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_active_lock);
    return 0;
}

void mst_profiler_stop(mst_profiler *p) {
    pthread_mutex_lock(&g_active_lock);
    if (g_active == p) {
        __atomic_store_n(&mst_prof_enabled, 0, __ATOMIC_RELEASE);
        g_active = NULL;
    }
    pthread_mutex_lock(&p->lock);
    for (thread_buf *b = p->registered; b; b = b->next_registered) {
        buf_flush_locked(p, b);
        b->owner = NULL;
    }
    p->registered = NULL;
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&g_active_lock);
}

void mst_profiler_free(mst_profiler *p) {
    if (!p) return;
    mst_profiler_stop(p);
    for (stored_chunk *c = p->head, *next; c; c = next) { next = c->next; free(c); }
    pthread_mutex_destroy(&p->lock);
    free(p);
}

size_t mst_profiler_event_count(const mst_profiler *p) { return p->count; }
uint64_t mst_profiler_dropped(const mst_profiler *p) { return p->dropped; }

void mst_profiler_foreach(const mst_profiler *p, mst_prof_visit_fn fn, void *user) {
    for (const stored_chunk *c = p->head; c; c = c->next)
        for (size_t i = 0; i < c->n; i++) fn(user, c->tid, &c->ev[i]);
}

/* Slow path: first record of this thread for the active profiler, or a full chunk. */
static thread_buf *buf_for_active(void) {
    pthread_mutex_lock(&g_active_lock);
    mst_profiler *p = g_active;
    if (!p) { pthread_mutex_unlock(&g_active_lock); return NULL; }
    thread_buf *b = t_buf;
    if (!b) {
        b = malloc(sizeof(*b));
        if (!b) { p->dropped++; pthread_mutex_unlock(&g_active_lock); return NULL; }
        b->owner = NULL;
        b->n = 0;
        buf_reset_prep(b);
        b->tid = (uint32_t)syscall(SYS_gettid);
        t_buf = b;
        pthread_setspecific(g_key, b);
    }
    pthread_mutex_lock(&p->lock);
    bool attached = false;
    if (b->owner != p) {            /* records of a stopped profiler were flushed at its stop */
        b->n = 0;
        buf_reset_prep(b);
        b->owner = p;
        b->next_registered = p->registered;
        p->registered = b;
        attached = true;
    }
    if (b->n == CHUNK_EVENTS) buf_flush_locked(p, b);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&g_active_lock);
    if (attached && t_name[0]) {    /* a named thread's stream starts with its name */
        mst_prof_event *e = &b->ev[b->n++];
        memset(e, 0, sizeof(*e));
        e->t_ns = mst_prof_now_ns();
        e->name = mst_prof_intern(t_name);
        e->op = -1;
        e->kind = MST_EV_THREAD_NAME;
    }
    return b;
}

mst_prof_event *mst_prof_record_(mst_prof_kind kind, mst_prof_cat cat, uint32_t name, int op, int64_t a, int64_t b) {
    thread_buf *buf = t_buf;
    if (!buf || !buf->owner || buf->n == CHUNK_EVENTS) {
        buf = buf_for_active();
        if (!buf) return NULL;
    }
    mst_prof_event *e = &buf->ev[buf->n++];
    e->t_ns = mst_prof_now_ns();
    e->a = a;
    e->b = b;
    e->name = name;
    e->op = (int16_t)op;
    e->kind = (uint8_t)kind;
    e->cat = (uint8_t)cat;
    return e;
}

/* Time inside the timed bracket that is counted elsewhere (signature builds, timed whole). */
static __thread uint64_t t_prep_counted_ns;

uint64_t mst_prof_prep_begin(void) {
    thread_buf *b = t_buf;
    if (!b || !b->owner || b->prep_brackets++ % MST_PROF_PREP_EVERY) return 0;
    t_prep_counted_ns = 0;
    return mst_prof_now_ns();
}

void mst_prof_prep_end(uint64_t t0) {
    thread_buf *b = t_buf;
    if (!t0 || !b) return;
    uint64_t d = mst_prof_now_ns() - t0;
    d = d > t_prep_counted_ns ? d - t_prep_counted_ns : 0;
    if (d > MST_PROF_PREP_MAX_NS) return;       /* interrupted: the thread was descheduled inside */
    b->prep_kept++;
    b->prep_kept_ns += d;
}

static _Atomic bool g_spare_core;
void mst_prof_set_spare_core(bool spare) { atomic_store_explicit(&g_spare_core, spare, memory_order_relaxed); }
bool mst_prof_spare_core(void) { return atomic_load_explicit(&g_spare_core, memory_order_relaxed); }

void mst_prof_thread_flush(void) {
    thread_buf *b = t_buf;
    if (!b) return;
    pthread_mutex_lock(&g_active_lock);
    mst_profiler *p = b->owner;
    if (p) {
        pthread_mutex_lock(&p->lock);
        buf_flush_locked(p, b);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&g_active_lock);
}

/* ---- string interning: a small open-addressing table, ids index `names` (0 = none) ---- */

static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;
static char **g_names;          /* id -> string */
static uint32_t g_names_n = 1, g_names_cap;
static uint32_t *g_slots;       /* hash slot -> id */
static uint32_t g_slots_cap;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;          /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int slots_grow(void) {
    uint32_t cap = g_slots_cap ? g_slots_cap * 2 : 256;
    uint32_t *slots = calloc(cap, sizeof(*slots));
    if (!slots) return -1;
    for (uint32_t id = 1; id < g_names_n; id++) {
        uint32_t h = (uint32_t)hash_str(g_names[id]) & (cap - 1);
        while (slots[h]) h = (h + 1) & (cap - 1);
        slots[h] = id;
    }
    free(g_slots);
    g_slots = slots;
    g_slots_cap = cap;
    return 0;
}

uint32_t mst_prof_intern(const char *name) {
    if (!name) return 0;
    pthread_mutex_lock(&g_names_lock);
    uint32_t id = 0;
    if ((g_names_n + 1) * 2 > g_slots_cap && slots_grow() != 0) goto out;
    uint32_t h = (uint32_t)hash_str(name) & (g_slots_cap - 1);
    while (g_slots[h]) {
        if (strcmp(g_names[g_slots[h]], name) == 0) { id = g_slots[h]; goto out; }
        h = (h + 1) & (g_slots_cap - 1);
    }
    if (g_names_n >= g_names_cap) {
        uint32_t cap = g_names_cap ? g_names_cap * 2 : 256;
        char **names = realloc(g_names, cap * sizeof(*names));
        if (!names) goto out;
        g_names = names;
        g_names_cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) goto out;
    id = g_names_n++;
    g_names[id] = copy;
    g_slots[h] = id;
out:
    pthread_mutex_unlock(&g_names_lock);
    return id;
}

const char *mst_prof_name(uint32_t id) {
    pthread_mutex_lock(&g_names_lock);
    const char *s = (id > 0 && id < g_names_n) ? g_names[id] : "";
    pthread_mutex_unlock(&g_names_lock);
    return s;
}

static const char *const k_cat_names[MST_CAT_COUNT] = {
    [MST_CAT_DISPATCH] = "dispatch", [MST_CAT_KERNEL] = "kernel", [MST_CAT_COMM] = "comm",
    [MST_CAT_DATA] = "data",         [MST_CAT_COMPILE] = "compile", [MST_CAT_MEMCPY] = "memcpy",
    [MST_CAT_OTHER] = "other",
};
_Static_assert(MST_CAT_COUNT == 7, "a new category needs a name in k_cat_names");

const char *mst_prof_cat_name(mst_prof_cat cat) {
    return (unsigned)cat < MST_CAT_COUNT ? k_cat_names[cat] : "?";
}

/* ---- trace payload: input signatures and forward-backward links ---- */

/* Per thread, SIG_SETS sets of SIG_WAYS slots (a power of two each), a full set replacing in turn.
 * It was one slot a set: two signatures of one training step that met in a slot (the dispatch_bound
 * scenario's [8, 16] activation and its 16-element bias update) threw each other out on every call,
 * and each miss builds the text (snprintf, ~1-3 us) and interns it under a lock: that step's
 * profile cost +50% where its estimate said +20% (docs/benchmarks.md). */
#define SIG_SETS 128
#define SIG_WAYS 4

typedef struct {
    uint64_t key;
    uint32_t id;
} sig_slot;

static __thread sig_slot t_sig[SIG_SETS][SIG_WAYS];
static __thread uint8_t t_sig_victim[SIG_SETS];
static __thread int64_t t_flow_seq, t_flow_bwd;

uint32_t mst_prof_intern_sig(uint64_t key, void (*build)(const void *arg, char *buf, size_t n), const void *arg) {
    if (key == 0) key = 1;      /* 0 marks an empty slot */
    const size_t set = (size_t)((key ^ (key >> 29) ^ (key >> 47)) & (SIG_SETS - 1));
    sig_slot *s = t_sig[set];
    for (int w = 0; w < SIG_WAYS; w++)
        if (s[w].key == key) return s[w].id;
    /* a miss: the text built and interned, timed whole into the overhead (and out of the
     * enclosing preparation bracket, whose sampling would scale one miss by MST_PROF_PREP_EVERY,
     * or drop it as an interruption past MST_PROF_PREP_MAX_NS) */
    const uint64_t t0 = mst_prof_now_ns();
    char text[512];
    build(arg, text, sizeof(text));
    uint32_t id = mst_prof_intern(text);
    if (id) {
        int w = 0;
        while (w < SIG_WAYS && s[w].key != 0) w++;
        if (w == SIG_WAYS) w = t_sig_victim[set]++ % SIG_WAYS;
        s[w].key = key;
        s[w].id = id;
    }
    const uint64_t d = mst_prof_now_ns() - t0;
    t_prep_counted_ns += d;
    thread_buf *b = t_buf;
    if (b && b->owner) b->sig_build_ns += d;
    return id;
}

int64_t mst_prof_flow_next(void) { return ++t_flow_seq; }
int64_t mst_prof_flow_backward_of(void) { return t_flow_bwd; }
int64_t mst_prof_flow_enter_backward(int64_t seq) {
    int64_t prev = t_flow_bwd;
    t_flow_bwd = seq;
    return prev;
}
