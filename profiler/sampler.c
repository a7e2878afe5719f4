/* sampler.c — SIGPROF stack sampling with libunwind, symbolization and the dispatch/kernel split.
 *
 * Collection: every sampled thread owns a timer (SIGEV_THREAD_ID) whose signal carries the
 * thread's slot in si_value; the handler takes the stack with libgcc's unwinder (_Unwind_Backtrace,
 * no system call), keeps the frames from the ucontext's RIP on, or else walks from the ucontext
 * with libunwind's unw_step, straight into the slot's single-producer ring, and publishes the
 * record with one release store. A full ring counts the sample as lost. Analysis (stop): IPs are mapped to functions through the ELF
 * .symtab of every loaded object that has one (the executable's static kernels included) and
 * dladdr otherwise, cached per IP; stacks are folded per thread and classified against the
 * caller's kernel and dispatcher addresses (docs/sampler.md).
 *
 * The mutable file-scope state is the running sampler, a count of handlers in flight and the
 * holds since its start: a signal handler takes no user argument, and the disposition it serves is
 * process-wide, so one sampler runs at a time. Per thread: its label, its hold, and the signal
 * stack the handler runs on (installed by add_thread, released by a thread-specific key's
 * destructor when the thread exits).
 */
#define _GNU_SOURCE
#define UNW_LOCAL_ONLY
#include "profiler/sampler.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <libunwind.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

#include "profiler/events.h"

#define MAX_THREADS 256
#define MAX_DEPTH_LIMIT 256
#define PENDING_WAIT_NS (200u * 1000u * 1000u)    /* stop: how long a thread may keep SIGPROF pending */

enum { REC_UNWIND_ERROR = 1, REC_DEPTH_LIMIT = 2, REC_TRUNCATED = REC_UNWIND_ERROR | REC_DEPTH_LIMIT, REC_STEP_WALK = 4 };

/* One ring slot: the header, then max_depth instruction pointers, leaf first. */
typedef struct {
    uint64_t t_ns;
    uint32_t tid;
    uint16_t depth;
    uint16_t flags;
    const char *label;              /* the thread's label at the sample (mst_sampler_set_label), or NULL */
} rec_hdr;

typedef struct {
    uint32_t tid;
    bool has_timer, removed;
    timer_t timer;
    struct timespec remaining;      /* paused: the time its timer had left (0: a full period on resume) */
    unsigned char *ring;            /* cap records of stride bytes */
    _Atomic uint64_t head;          /* written by the handler only */
    _Atomic uint64_t tail;          /* written by the drain (stop) only */
    _Atomic int64_t lost, overruns;
    const char *volatile *label_cell;   /* the thread's tl_label, its address taken outside the handler */
    struct hold_cell *hold_cell;        /* the thread's tl_hold, likewise */
    mst_sampler_stats st;           /* aggregated at stop */
} slot;

/* A resolved function: the name (in the sampler's string arena) and its start address (0 when
 * only the object is known). */
typedef struct {
    const char *name;
    uintptr_t start;
} fn_info;

typedef struct {
    uintptr_t ip;                   /* 0 = empty */
    fn_info fn;
} ip_entry;

typedef struct {
    uintptr_t addr, size;
    const char *name;
    uint8_t global;
} elf_sym;

typedef struct {
    uintptr_t lo, hi;               /* the union of its PT_LOAD segments, at run time */
    const char *base;               /* file name without directories */
    elf_sym *syms;                  /* sorted by addr; NULL: no .symtab, use dladdr */
    size_t n_syms;
} objfile;

typedef struct {
    uint32_t tid;
    uint64_t hash;
    const char *folded;
    int64_t count;
} folded_entry;

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    char data[];
} arena_block;

struct mst_sampler {
    int hz, max_depth;
    bool step_unwind;               /* MSTUNE_SAMPLER_UNWIND=step: every sample walked by unw_step */
    size_t cap, stride;
    mst_sampler_clock clock;
    pthread_mutex_t lock;           /* threads registering, start/stop */
    bool running;
    bool paused;                    /* running with every timer disarmed (mst_sampler_pause) */
    atomic_bool accepting;          /* the handler records (false while stopping) */
    struct sigaction old_sa;
    slot *_Atomic slots[MAX_THREADS];
    atomic_int n_slots;
    _Atomic int64_t stray;
    _Atomic int64_t handler_ns, deliveries;     /* self-cost: time in the handler, signals taken */
    _Atomic int64_t deferred;                   /* ticks that came inside a hold, taken at its release */
    double delivery_ns;                         /* calibrated: one timer tick's cost besides the handler */
    double delivery_self_ns;                    /* calibrated: a signal sent to the thread itself */
    double hold_ns;                             /* calibrated: one mst_sampler_hold + release, no tick */

    uintptr_t *kernels, *dispatchers, *callsites;   /* sorted */
    size_t n_kernels, n_dispatchers, n_callsites, cap_callsites;

    /* symbolization */
    objfile *objs;
    size_t n_objs;
    ip_entry *ipc;                  /* open addressing, power-of-two size */
    size_t ipc_cap, ipc_len;
    arena_block *arena;

    /* aggregation */
    folded_entry *folded;
    size_t n_folded, cap_folded;
    uint32_t *fidx;                 /* open addressing into folded (index + 1), power of two */
    size_t fidx_cap;

    char err[256];
};

static mst_sampler *_Atomic g_active;
/* The thread's label (mst_sampler_set_label). The handler never touches TLS itself (in a dlopen'd
 * module, the Python extension, that would go through __tls_get_addr, which may allocate, and
 * initial-exec TLS makes the module's whole TLS block need static TLS space the loader may not
 * have): mst_sampler_add_thread stores the variable's address in the thread's slot and the
 * handler reads through it. */
static __thread const char *volatile tl_label;
/* The thread's hold (mst_sampler_hold): while depth > 0 the handler takes no stack, only notes
 * that a tick came (deferred, and through which slot); the release takes that sample itself, from
 * where the held call returned. Read by the handler through slot.hold_cell, like tl_label. */
struct hold_cell {
    volatile sig_atomic_t depth;
    volatile sig_atomic_t deferred;
    void *volatile slot;
};
static __thread struct hold_cell tl_hold;

void mst_sampler_set_label(const char *label) { tl_label = label; }
bool mst_sampler_running(void) { return atomic_load_explicit(&g_active, memory_order_relaxed) != NULL; }
static atomic_int g_inflight;

static uint32_t current_tid(void) { return (uint32_t)syscall(SYS_gettid); }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int fail(mst_sampler *s, const char *what) {
    snprintf(s->err, sizeof(s->err), "%s: %s", what, strerror(errno));
    return -1;
}

/* ---------------------------------------------------------------- the signal handler ---- */

static slot *find_slot(mst_sampler *s, void *p) {
    int n = atomic_load(&s->n_slots);
    for (int i = 0; i < n; i++)
        if (atomic_load(&s->slots[i]) == p) return p;
    return NULL;
}

/* The fast trace is the unwinder of GCC's runtime (libgcc_s: _Unwind_Backtrace), called through
 * pointers looked up in libgcc_s itself, because libunwind exports functions of the same names.
 * libunwind's own fast trace (unw_backtrace) caches its unwind rules per exact IP, and a sample's
 * leaf lands on a new IP almost every time: each miss looked the IP up with dl_iterate_phdr
 * between two rt_sigprocmask calls and validated reads with mincore and write, and a frame its
 * cache cannot describe sent the whole sample down the unw_step walk, ~14 such lookups. On the
 * mlp that was 15 us per sample on average, a third of them 20-400 us (a system call costs ~1 us
 * on these VMs). libgcc finds each frame's FDE with _dl_find_object (glibc >= 2.35: no lock, no
 * system call; older ones walk dl_iterate_phdr under the loader's recursive lock) and makes no
 * system call. (Unwind tables registered at run time with __register_frame_info, which nothing
 * in this process does, are searched under libgcc's mutex: a tick that interrupted the thread
 * holding it would deadlock there.) Resolved once, outside any handler (warm_unwinder); NULL
 * where libgcc_s is not found, and then every sample takes the unw_step walk. */
typedef struct {
    _Unwind_Reason_Code (*backtrace)(_Unwind_Trace_Fn, void *);
    uintptr_t (*get_ip_info)(struct _Unwind_Context *, int *);
    void *(*find_function)(void *);
} gcc_unwinder;

static gcc_unwinder g_gcc;          /* written once under g_gcc_once, read by handlers after */
static pthread_once_t g_gcc_once = PTHREAD_ONCE_INIT;

static void gcc_unwinder_resolve(void) {
    void *h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);      /* kept open for the process */
    if (!h) return;
    gcc_unwinder u = {(_Unwind_Reason_Code(*)(_Unwind_Trace_Fn, void *))dlsym(h, "_Unwind_Backtrace"),
                      (uintptr_t(*)(struct _Unwind_Context *, int *))dlsym(h, "_Unwind_GetIPInfo"),
                      (void *(*)(void *))dlsym(h, "_Unwind_FindEnclosingFunction")};
    if (u.backtrace && u.get_ip_info && u.find_function) g_gcc = u;
}

typedef struct {
    uintptr_t *buf;
    int n, cap;
} gcc_walk;

static _Unwind_Reason_Code gcc_frame(struct _Unwind_Context *ctx, void *arg) {
    gcc_walk *w = arg;
    if (w->n == w->cap) return _URC_END_OF_STACK;
    int before = 0;
    const uintptr_t ip = g_gcc.get_ip_info(ctx, &before);
    if (ip == 0) return _URC_END_OF_STACK;
    w->buf[w->n++] = ip;
    return _URC_NO_REASON;
}

/* The fast trace from the sampler's own frame on; the sample's frames are those from `from` on:
 * the ucontext's RIP (a tick taken in the handler, the trace passing through the signal frame), or
 * the return address into a held call's caller (a tick taken at the release). False (the caller
 * then walks with unw_step) when `from` is not among the first frames found, or when the trace
 * ended in code without unwind information (JIT code, hand-written assembly): libgcc stops there,
 * where libunwind's walk can still follow the frame pointers. */
static bool fast_trace(const mst_sampler *s, uintptr_t from, uintptr_t *ips, int *depth, int *flags) {
    enum { HANDLER_FRAMES = 8 };
    if (!g_gcc.backtrace) return false;
    uintptr_t buf[MAX_DEPTH_LIMIT + HANDLER_FRAMES];
    gcc_walk w = {buf, 0, s->max_depth + HANDLER_FRAMES};
    g_gcc.backtrace(gcc_frame, &w);
    const int n = w.n;
    int i = 0;
    while (i < n && i < HANDLER_FRAMES && buf[i] != from) i++;
    if (i >= n || i == HANDLER_FRAMES) return false;
    if (n < w.cap && !g_gcc.find_function((void *)(buf[n - 1] - (n - 1 > i))))
        return false;       /* stopped at a frame without unwind information, not at the stack's end */
    int d = n - i;
    if (d > s->max_depth) d = s->max_depth, *flags |= REC_DEPTH_LIMIT;
    else if (n == w.cap) *flags |= REC_DEPTH_LIMIT;
    for (int k = 0; k < d; k++) ips[k] = buf[i + k];
    *depth = d;
    return true;
}

/* The interrupted PC of a signal's ucontext (its register name is the ABI's: only x86-64's is known
 * here; elsewhere 0, and a signal's samples take the unw_step walk). */
static uintptr_t ucontext_pc(const void *uc) {
#if defined(__x86_64__)
    return (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
#else
    (void)uc;
    return 0;
#endif
}

/* The walk with unw_step: from the signal's ucontext (uc), or from here, skipping the sampler's
 * own frames up to the return address `from` (at a release). */
static int step_walk(const mst_sampler *s, void *uc, uintptr_t from, uintptr_t *ips, int *flags) {
    enum { OWN_FRAMES = 8 };
    unw_cursor_t cur;
    unw_context_t here;
    int depth = 0;
    if (uc ? unw_init_local2(&cur, (unw_context_t *)uc, UNW_INIT_SIGNAL_FRAME) < 0
           : unw_getcontext(&here) != 0 || unw_init_local(&cur, &here) < 0) {
        *flags |= REC_UNWIND_ERROR;
        return 0;
    }
    for (int skipped = 0; !uc;) {         /* at a release: up to the held call's caller */
        unw_word_t ip;
        if (unw_get_reg(&cur, UNW_REG_IP, &ip) < 0 || ip == from) break;
        if (++skipped > OWN_FRAMES || unw_step(&cur) <= 0) {
            *flags |= REC_UNWIND_ERROR;
            return 0;
        }
    }
    for (;;) {
        unw_word_t ip;
        if (unw_get_reg(&cur, UNW_REG_IP, &ip) < 0 || ip == 0) break;
        if (depth == s->max_depth) {
            *flags |= REC_DEPTH_LIMIT;
            break;
        }
        ips[depth++] = (uintptr_t)ip;
        int st = unw_step(&cur);
        if (st < 0) *flags |= REC_UNWIND_ERROR;
        if (st <= 0) break;
    }
    return depth;
}

/* One sample into the thread's ring: from the signal's ucontext (uc, in the handler), or from the
 * return address `from` into a held call's caller (uc NULL, at the release). Async-signal-safe:
 * the unwinders above, clock_gettime and stores into the ring. */
static void record(mst_sampler *s, slot *sl, void *uc, uintptr_t from) {
    uint64_t h = atomic_load_explicit(&sl->head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&sl->tail, memory_order_acquire);
    if (h - t >= s->cap) {
        atomic_fetch_add_explicit(&sl->lost, 1, memory_order_relaxed);
        return;
    }
    rec_hdr *r = (rec_hdr *)(sl->ring + (size_t)(h % s->cap) * s->stride);
    uintptr_t *ips = (uintptr_t *)(r + 1);
    int depth = 0, flags = 0;
    if (uc) from = ucontext_pc(uc);
    if (s->step_unwind || !from || !fast_trace(s, from, ips, &depth, &flags)) {
        flags |= REC_STEP_WALK;
        depth = step_walk(s, uc, from, ips, &flags);
    }
    r->t_ns = now_ns();
    r->label = sl->label_cell ? *sl->label_cell : NULL;
    r->tid = sl->tid;
    r->depth = (uint16_t)depth;
    r->flags = (uint16_t)flags;
    atomic_store_explicit(&sl->head, h + 1, memory_order_release);
}

static void on_sigprof(int sig, siginfo_t *si, void *uc) {
    int saved_errno = errno;
    uint64_t t0 = now_ns();
    atomic_fetch_add(&g_inflight, 1);
    mst_sampler *s = atomic_load(&g_active);
    if (s) {
        slot *sl = si && si->si_code == SI_TIMER ? find_slot(s, si->si_value.sival_ptr) : NULL;
        if (!sl || !atomic_load_explicit(&s->accepting, memory_order_acquire)) {
            atomic_fetch_add_explicit(&s->stray, 1, memory_order_relaxed);
        } else if (sl->hold_cell->depth > 0) {              /* inside a held call: no stack now */
            if (si->si_overrun > 0) atomic_fetch_add_explicit(&sl->overruns, si->si_overrun, memory_order_relaxed);
            sl->hold_cell->slot = sl;
            sl->hold_cell->deferred = 1;
            atomic_fetch_add_explicit(&s->deferred, 1, memory_order_relaxed);
        } else {
            if (si->si_overrun > 0) atomic_fetch_add_explicit(&sl->overruns, si->si_overrun, memory_order_relaxed);
            record(s, sl, uc, 0);
        }
        atomic_fetch_add_explicit(&s->handler_ns, (int64_t)(now_ns() - t0), memory_order_relaxed);
        atomic_fetch_add_explicit(&s->deliveries, 1, memory_order_relaxed);
    }
    atomic_fetch_sub(&g_inflight, 1);
    errno = saved_errno;
}

/* libunwind initializes itself (and, with per-thread caching, the thread's cache) on first use,
 * and libgcc's unwinder its register table: do both here, outside any signal handler. */
static void warm_unwinder(void) {
    unw_context_t ctx;
    unw_cursor_t cur;
    if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0) return;
    for (int i = 0; i < MAX_DEPTH_LIMIT && unw_step(&cur) > 0; i++) {}
    pthread_once(&g_gcc_once, gcc_unwinder_resolve);
    if (g_gcc.backtrace) {          /* libgcc's one-time setup (its register table) */
        uintptr_t buf[MAX_DEPTH_LIMIT];
        gcc_walk w = {buf, 0, MAX_DEPTH_LIMIT};
        g_gcc.backtrace(gcc_frame, &w);
    }
}

/* ---------------------------------------------------------------- threads, start, stop ---- */

mst_sampler *mst_sampler_new(int hz, int max_depth, size_t ring_capacity) {
    mst_sampler *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->hz = hz > 0 ? hz : 1000;
    s->max_depth = max_depth <= 0 ? 64 : max_depth > MAX_DEPTH_LIMIT ? MAX_DEPTH_LIMIT : max_depth;
    const char *unwind = getenv("MSTUNE_SAMPLER_UNWIND");
    s->step_unwind = unwind && strcmp(unwind, "step") == 0;
    s->cap = ring_capacity ? ring_capacity : 16384;
    s->stride = sizeof(rec_hdr) + (size_t)s->max_depth * sizeof(uintptr_t);
    s->clock = MST_SAMPLER_CLOCK_WALL;
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        return NULL;
    }
    atomic_init(&s->accepting, false);
    atomic_init(&s->n_slots, 0);
    atomic_init(&s->stray, 0);
    atomic_init(&s->handler_ns, 0);
    atomic_init(&s->deliveries, 0);
    atomic_init(&s->deferred, 0);
    return s;
}

void mst_sampler_set_clock(mst_sampler *s, mst_sampler_clock clock) { s->clock = clock; }

static int cmp_uptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static int set_addrs(mst_sampler *s, uintptr_t **dst, size_t *n_dst, const void *const *addrs, size_t n) {
    uintptr_t *a = n ? malloc(n * sizeof(*a)) : NULL;
    if (n && !a) return fail(s, "set addresses");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (addrs[i]) a[k++] = (uintptr_t)addrs[i];
    qsort(a, k, sizeof(*a), cmp_uptr);
    size_t u = 0;                                   /* f32 and f64 slots may share a kernel */
    for (size_t i = 0; i < k; i++)
        if (u == 0 || a[u - 1] != a[i]) a[u++] = a[i];
    free(*dst);
    *dst = a;
    *n_dst = u;
    return 0;
}

int mst_sampler_set_kernel_addrs(mst_sampler *s, const void *const *addrs, size_t n) {
    return set_addrs(s, &s->kernels, &s->n_kernels, addrs, n);
}

int mst_sampler_set_dispatch_addrs(mst_sampler *s, const void *const *addrs, size_t n) {
    return set_addrs(s, &s->dispatchers, &s->n_dispatchers, addrs, n);
}

/* Arm (on) or disarm a thread's timer. Arming resumes the countdown a pause left (sl->remaining),
 * so sampling time adds up over recording windows shorter than the period; disarming keeps it. */
static int arm(mst_sampler *s, slot *sl, bool on) {
    struct itimerspec its, old;
    memset(&its, 0, sizeof(its));
    if (on) {
        long period = 1000000000L / s->hz;
        its.it_interval.tv_sec = period / 1000000000L;
        its.it_interval.tv_nsec = period > 0 ? period % 1000000000L : 1;
        its.it_value = sl->remaining.tv_sec || sl->remaining.tv_nsec ? sl->remaining : its.it_interval;
        sl->remaining = (struct timespec){0, 0};
    }
    if (timer_settime(sl->timer, 0, &its, &old) != 0) return fail(s, "timer_settime");
    if (!on) sl->remaining = old.it_value;
    return 0;
}

/* The handler runs on a stack of its own (SA_ONSTACK), installed once per sampled thread and kept
 * for the thread's life. With the signal frame pushed on the interrupted thread's own stack,
 * `mstune profile` of the cnn and the resnet at 997 Hz died in 3 of 3 runs ("corrupted size vs.
 * prev_size", SIGFPE) even when the handler only noted a tick inside oneDNN; on this stack, in
 * none (docs/sampler.md). That is what code keeping data below its stack pointer past the 128-byte
 * red zone suffers (test_sampler's test_handler_off_the_stack reproduces it). A guard page below
 * the stack turns an overflow into a fault. */
#define ALT_STACK_BYTES (256u * 1024u)
typedef struct {
    void *map;          /* guard page + stack; NULL until installed */
    size_t map_bytes;
    stack_t prev;       /* what the thread had: restored when it exits */
} alt_stack;
static pthread_key_t g_alt_key;
static pthread_once_t g_alt_once = PTHREAD_ONCE_INIT;
static __thread alt_stack tl_alt;

static void alt_stack_release(void *p) {
    alt_stack *a = p;
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp >= a->map && (char *)cur.ss_sp < (char *)a->map + a->map_bytes) {
        if (a->prev.ss_flags & SS_DISABLE) a->prev = (stack_t){.ss_flags = SS_DISABLE};
        sigaltstack(&a->prev, NULL);
    }
    munmap(a->map, a->map_bytes);
    a->map = NULL;
}

static void alt_key_create(void) { pthread_key_create(&g_alt_key, alt_stack_release); }

static int install_alt_stack(mst_sampler *s) {
    if (tl_alt.map) return 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = ALT_STACK_BYTES + page;
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return fail(s, "add_thread: signal stack");
    mprotect(map, page, PROT_NONE);
    stack_t ss = {.ss_sp = (char *)map + page, .ss_size = ALT_STACK_BYTES, .ss_flags = 0};
    if (sigaltstack(&ss, &tl_alt.prev) != 0) {
        munmap(map, bytes);
        return fail(s, "add_thread: sigaltstack");
    }
    tl_alt.map = map;
    tl_alt.map_bytes = bytes;
    pthread_once(&g_alt_once, alt_key_create);
    pthread_setspecific(g_alt_key, &tl_alt);
    return 0;
}

int mst_sampler_add_thread(mst_sampler *s) {
    uint32_t tid = current_tid();
    int rc = -1;
    pthread_mutex_lock(&s->lock);
    int n = atomic_load(&s->n_slots);
    for (int i = 0; i < n; i++) {
        slot *o = atomic_load(&s->slots[i]);
        if (o->tid == tid && !o->removed) {
            rc = 0;
            goto out;
        }
    }
    if (n == MAX_THREADS) {
        snprintf(s->err, sizeof(s->err), "add_thread: at most %d threads", MAX_THREADS);
        goto out;
    }
    slot *sl = calloc(1, sizeof(*sl));
    if (!sl) {
        fail(s, "add_thread");
        goto out;
    }
    if (install_alt_stack(s) != 0) {
        free(sl);
        goto out;
    }
    sl->tid = tid;
    sl->label_cell = &tl_label;
    sl->hold_cell = &tl_hold;
    atomic_init(&sl->head, 0);
    atomic_init(&sl->tail, 0);
    atomic_init(&sl->lost, 0);
    atomic_init(&sl->overruns, 0);
    /* touch every page now: the handler must not take page faults in a fresh mapping */
    sl->ring = calloc(s->cap, s->stride);
    if (!sl->ring) {
        fail(s, "add_thread: ring");
        free(sl);
        goto out;
    }
    memset(sl->ring, 0, s->cap * s->stride);
    warm_unwinder();
    struct sigevent sev;
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev.sigev_value.sival_ptr = sl;
    sev._sigev_un._tid = (pid_t)tid;
    clockid_t clk = s->clock == MST_SAMPLER_CLOCK_CPU ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
    if (timer_create(clk, &sev, &sl->timer) != 0) {
        fail(s, "timer_create");
        free(sl->ring);
        free(sl);
        goto out;
    }
    sl->has_timer = true;
    atomic_store(&s->slots[n], sl);
    atomic_store(&s->n_slots, n + 1);               /* published: the handler accepts it now */
    rc = s->running && !s->paused ? arm(s, sl, true) : 0;
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int mst_sampler_remove_thread(mst_sampler *s) {
    uint32_t tid = current_tid();
    pthread_mutex_lock(&s->lock);
    int n = atomic_load(&s->n_slots), rc = -1;
    for (int i = 0; i < n; i++) {
        slot *sl = atomic_load(&s->slots[i]);
        if (sl->tid != tid || sl->removed) continue;
        if (sl->has_timer) timer_delete(sl->timer);  /* a pending signal reaches this thread now */
        sl->has_timer = false;
        sl->removed = true;
        rc = 0;
    }
    if (rc) snprintf(s->err, sizeof(s->err), "remove_thread: thread %u is not sampled", tid);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* A fixed amount of work for the delivery calibration: a counted loop, its time in ns. */
static uint64_t spin_for(uint64_t iters) {
    const uint64_t t0 = now_ns();
    for (volatile uint64_t i = 0; i < iters; i++) {}
    return now_ns() - t0;
}

/* The fallback price of a delivery: signal this thread (the handler, not accepting yet, only
 * counts it as stray) and time the round trip less the handler's own time; the median of 31. */
static double self_signal_ns(mst_sampler *s) {
    enum { N = 31 };
    uint64_t trip[N];
    for (int i = 0; i < N; i++) {
        int64_t h0 = atomic_load(&s->handler_ns);
        uint64_t t0 = now_ns();
        pthread_kill(pthread_self(), SIGPROF);     /* delivered to this thread before the call returns */
        uint64_t t = now_ns() - t0;
        int64_t h = atomic_load(&s->handler_ns) - h0;
        trip[i] = t > (uint64_t)h ? t - (uint64_t)h : 0;
    }
    qsort(trip, N, sizeof(trip[0]), cmp_u64);
    return (double)trip[N / 2];
}

/* What one timer tick costs the thread it interrupts, besides the handler's measured time: the
 * timer's interrupt, the signal frame and its return. A signal a thread sends itself costs ~5-6 us
 * on these VMs, but a timer tick, which is what the sampler takes, costs ~30 us: the timer's
 * interrupt goes through the hypervisor. So a timer of this thread's (as the sampler arms, not yet
 * accepting: the handler counts its ticks as stray) fires every CAL_PERIOD_NS while a counted loop
 * of ~CAL_LOOP_NS runs, against the same loop without it, in PAIRS alternated pairs; each pair's
 * extra time less the handler's, per tick, and the median. Only what the ticks cost that loop is
 * seen (a loop with a larger working set loses more to the caches). ~50 ms. Without a timer, or
 * with no tick in most pairs, the self-sent signal's round trip. The calibration's ticks are taken
 * back out of the counts. */
static void calibrate_delivery(mst_sampler *s) {
    enum { PAIRS = 9 };
    const uint64_t CAL_PERIOD_NS = 100000, CAL_LOOP_NS = 2000000;
    const int64_t stray0 = atomic_load(&s->stray);
    double price = 0;
    struct sigevent sev;
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = (pid_t)current_tid();
    timer_t tm;
    if (timer_create(CLOCK_MONOTONIC, &sev, &tm) == 0) {
        const uint64_t probe = 200000, probe_ns = spin_for(probe);
        const uint64_t iters = probe_ns ? probe * CAL_LOOP_NS / probe_ns : probe;
        const struct itimerspec on = {{0, (long)CAL_PERIOD_NS}, {0, (long)CAL_PERIOD_NS}}, off = {{0, 0}, {0, 0}};
        uint64_t per[PAIRS];
        int n = 0;
        for (int i = 0; i < PAIRS; i++) {
            const uint64_t t_off = spin_for(iters);
            const int64_t h0 = atomic_load(&s->handler_ns), d0 = atomic_load(&s->deliveries);
            if (timer_settime(tm, 0, &on, NULL) != 0) break;
            const uint64_t t_on = spin_for(iters);
            timer_settime(tm, 0, &off, NULL);       /* a pending tick is delivered as this returns */
            const int64_t ticks = atomic_load(&s->deliveries) - d0, h = atomic_load(&s->handler_ns) - h0;
            if (ticks <= 0) continue;
            const int64_t extra = (int64_t)t_on - (int64_t)t_off - h;
            per[n++] = extra > 0 ? (uint64_t)extra / (uint64_t)ticks : 0;
        }
        timer_delete(tm);
        if (n > PAIRS / 2) {
            qsort(per, (size_t)n, sizeof(per[0]), cmp_u64);
            price = (double)per[n / 2];
        }
    }
    s->delivery_self_ns = self_signal_ns(s);
    s->delivery_ns = price > s->delivery_self_ns ? price : s->delivery_self_ns;
    atomic_store(&s->stray, stray0);
    atomic_store(&s->handler_ns, 0);
    atomic_store(&s->deliveries, 0);
}

/* Calls into code without unwind information, held (mst_sampler_hold): the handler takes no
 * stack inside them. A hold is two stores to the thread's cell and one count, no system call; the
 * holds are counted for the sampler running when they happen and priced at start (calibrate_hold). */
static _Atomic int64_t g_holds;

bool mst_sampler_hold(void) {
    if (!mst_sampler_running()) return false;
    tl_hold.depth++;
    atomic_signal_fence(memory_order_seq_cst);      /* the depth is stored before the held code runs */
    atomic_fetch_add_explicit(&g_holds, 1, memory_order_relaxed);
    return true;
}

/* A tick that came while held, taken at the release by the thread itself: no second signal
 * (until 2026-12-06 the release sent one with pthread_sigqueue, ~5-6 us a round trip on these
 * VMs). The hold stays up while it records, so a tick meanwhile only marks the hold again; that
 * one is counted as an overrun (merged into this sample). In flight like a handler, so that stop
 * waits for it; a sampler that stopped in between (or a slot no longer registered) takes nothing. */
static __attribute__((noinline)) void take_held_tick(uintptr_t from) {
    const uint64_t t0 = now_ns();
    atomic_fetch_add(&g_inflight, 1);
    mst_sampler *s = atomic_load(&g_active);
    slot *sl = s && atomic_load(&s->accepting) ? find_slot(s, tl_hold.slot) : NULL;
    tl_hold.deferred = 0;
    if (sl) record(s, sl, NULL, from);
    atomic_signal_fence(memory_order_seq_cst);
    tl_hold.depth = 0;
    atomic_signal_fence(memory_order_seq_cst);
    if (tl_hold.deferred) {
        tl_hold.deferred = 0;
        if (sl) atomic_fetch_add_explicit(&sl->overruns, 1, memory_order_relaxed);
    }
    if (sl) atomic_fetch_add_explicit(&s->handler_ns, (int64_t)(now_ns() - t0), memory_order_relaxed);
    atomic_fetch_sub(&g_inflight, 1);
}

void mst_sampler_release(void) {
    atomic_signal_fence(memory_order_seq_cst);
    if (tl_hold.depth > 1 || !tl_hold.deferred) {
        tl_hold.depth--;
        return;
    }
    /* the stack is the held call's caller's, from where the held call returned */
    take_held_tick((uintptr_t)__builtin_return_address(0));
}

/* One hold and release, timed: the median of 31 rounds of 64 pairs (not counted as holds). */
static void calibrate_hold(mst_sampler *s) {
    enum { N = 31, PAIRS = 64 };
    uint64_t round[N];
    for (int i = 0; i < N; i++) {
        uint64_t t0 = now_ns();
        for (int k = 0; k < PAIRS; k++) {
            mst_sampler_hold();
            mst_sampler_release();
        }
        round[i] = now_ns() - t0;
    }
    qsort(round, N, sizeof(round[0]), cmp_u64);
    s->hold_ns = (double)round[N / 2] / PAIRS;
}

double mst_sampler_hold_ns(const mst_sampler *s) { return s->hold_ns; }
double mst_sampler_tick_ns(const mst_sampler *s) { return s->delivery_ns; }
double mst_sampler_self_signal_ns(const mst_sampler *s) { return s->delivery_self_ns; }
int64_t mst_sampler_holds(void) { return atomic_load(&g_holds); }

double mst_sampler_cost_ns(const mst_sampler *s) {
    return (double)atomic_load(&s->handler_ns) + (double)atomic_load(&s->deliveries) * s->delivery_ns +
           (double)atomic_load(&g_holds) * s->hold_ns;
}

int64_t mst_sampler_deliveries(const mst_sampler *s) { return atomic_load(&s->deliveries); }
int64_t mst_sampler_deferred(const mst_sampler *s) { return atomic_load(&s->deferred); }

int mst_sampler_start(mst_sampler *s) {
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    if (s->running) goto out;
    mst_sampler *expect = NULL;
    if (!atomic_compare_exchange_strong(&g_active, &expect, s)) {
        snprintf(s->err, sizeof(s->err), "start: another sampler is running");
        rc = -1;
        goto out;
    }
    /* per-thread caches: sampled threads never contend on libunwind's global cache lock */
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    warm_unwinder();
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, &s->old_sa) != 0) {
        rc = fail(s, "sigaction");
        atomic_store(&g_active, NULL);
        goto out;
    }
    calibrate_delivery(s);
    calibrate_hold(s);
    atomic_store(&g_holds, 0);
    atomic_store(&s->deferred, 0);
    atomic_store(&s->accepting, true);
    s->running = true;
    int n = atomic_load(&s->n_slots);
    for (int i = 0; i < n && !s->paused; i++) {
        slot *sl = atomic_load(&s->slots[i]);
        if (sl->has_timer && arm(s, sl, true) != 0) rc = -1;
    }
out:
    pthread_mutex_unlock(&s->lock);
    if (rc != 0 && s->running) mst_sampler_stop(s);
    return rc;
}

int mst_sampler_pause(mst_sampler *s, bool paused) {
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    if (s->running && paused != s->paused) {
        int n = atomic_load(&s->n_slots);
        for (int i = 0; i < n; i++) {
            slot *sl = atomic_load(&s->slots[i]);
            if (sl->has_timer && arm(s, sl, !paused) != 0) rc = -1;
        }
    }
    s->paused = paused;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* SIGPROF pending for thread tid (its SigPnd line): a disarmed timer's signal may still be queued. */
static bool sigprof_pending(uint32_t tid) {
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/self/task/%u/status", tid);
    FILE *f = fopen(path, "r");
    if (!f) return false;                           /* the thread is gone */
    bool pending = false;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "SigPnd:", 7) == 0) {
            unsigned long long mask = strtoull(line + 7, NULL, 16);
            pending = mask >> (SIGPROF - 1) & 1;
            break;
        }
    fclose(f);
    return pending;
}

static void aggregate(mst_sampler *s);

void mst_sampler_stop(mst_sampler *s) {
    pthread_mutex_lock(&s->lock);
    if (!s->running) {
        pthread_mutex_unlock(&s->lock);
        return;
    }
    atomic_store(&s->accepting, false);
    int n = atomic_load(&s->n_slots);
    for (int i = 0; i < n; i++) {
        slot *sl = atomic_load(&s->slots[i]);
        if (sl->has_timer) arm(s, sl, false);
    }
    /* A signal queued before the disarm is delivered when its thread next runs; the handler is
     * still ours and counts it as stray. Restoring the old disposition (SIG_DFL terminates on
     * SIGPROF) before that would let it through, so wait, bounded, for the queues to empty. */
    uint64_t deadline = now_ns() + PENDING_WAIT_NS;
    for (int i = 0; i < n; i++) {
        slot *sl = atomic_load(&s->slots[i]);
        while (!sl->removed && sigprof_pending(sl->tid) && now_ns() < deadline) sched_yield();
    }
    atomic_store(&g_active, NULL);
    while (atomic_load(&g_inflight) != 0) sched_yield();    /* handlers already running */
    sigaction(SIGPROF, &s->old_sa, NULL);
    s->running = false;
    aggregate(s);
    pthread_mutex_unlock(&s->lock);
}

/* ---------------------------------------------------------------- symbolization ---- */

static const char *arena_strdup(mst_sampler *s, const char *str) {
    size_t len = strlen(str) + 1;
    arena_block *b = s->arena;
    if (!b || b->cap - b->used < len) {
        size_t cap = len > 65536 ? len : 65536;
        b = malloc(sizeof(*b) + cap);
        if (!b) return "[oom]";
        b->next = s->arena;
        b->used = 0;
        b->cap = cap;
        s->arena = b;
    }
    char *p = b->data + b->used;
    memcpy(p, str, len);
    b->used += len;
    return p;
}

static int cmp_sym(const void *a, const void *b) {
    const elf_sym *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    if (x->global != y->global) return x->global ? -1 : 1;     /* the global alias first */
    return (x->size == 0) - (y->size == 0);                     /* then one with a size */
}

/* The function symbols of path's .symtab, relocated by bias. 0 when the file has none. */
static size_t read_symtab(mst_sampler *s, const char *path, uintptr_t bias, elf_sym **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    size_t n_out = 0;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return 0;
    }
    size_t size = (size_t)st.st_size;
    const unsigned char *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return 0;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff == 0 ||
        eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > size)
        goto done;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(m + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr *strsh = &sh[sh[i].sh_link];
        if (sh[i].sh_offset + sh[i].sh_size > size || strsh->sh_offset + strsh->sh_size > size) continue;
        const Elf64_Sym *sym = (const Elf64_Sym *)(m + sh[i].sh_offset);
        const char *strtab = (const char *)(m + strsh->sh_offset);
        size_t n = sh[i].sh_size / sizeof(Elf64_Sym), k = 0;
        elf_sym *v = malloc((n ? n : 1) * sizeof(*v));
        if (!v) goto done;
        for (size_t j = 0; j < n; j++) {
            int type = ELF64_ST_TYPE(sym[j].st_info);
            if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym[j].st_shndx == SHN_UNDEF ||
                sym[j].st_value == 0 || sym[j].st_name >= strsh->sh_size)
                continue;
            v[k].addr = (uintptr_t)sym[j].st_value + bias;
            v[k].size = (uintptr_t)sym[j].st_size;
            v[k].global = ELF64_ST_BIND(sym[j].st_info) != STB_LOCAL;
            v[k].name = arena_strdup(s, strtab + sym[j].st_name);
            k++;
        }
        qsort(v, k, sizeof(*v), cmp_sym);
        size_t u = 0;                               /* one name per address */
        for (size_t j = 0; j < k; j++)
            if (u == 0 || v[u - 1].addr != v[j].addr) v[u++] = v[j];
        *out = v;
        n_out = u;
        break;
    }
done:
    munmap((void *)m, size);
    return n_out;
}

static int add_object(struct dl_phdr_info *info, size_t info_size, void *user) {
    mst_sampler *s = user;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lo) lo = a;
        if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
    }
    if (lo >= hi) return 0;
    for (size_t i = 0; i < s->n_objs; i++)
        if (s->objs[i].lo == lo) return 0;          /* known */
    objfile *grown = realloc(s->objs, (s->n_objs + 1) * sizeof(*grown));
    if (!grown) return 1;
    s->objs = grown;
    bool exe = !info->dlpi_name || !info->dlpi_name[0];
    const char *path = exe ? "/proc/self/exe" : info->dlpi_name;
    const char *slash = strrchr(path, '/');
    objfile *o = &s->objs[s->n_objs++];
    o->lo = lo;
    o->hi = hi;
    o->base = arena_strdup(s, exe ? "[exe]" : slash ? slash + 1 : path);
    o->n_syms = read_symtab(s, path, info->dlpi_addr, &o->syms);
    return 0;
}

static const objfile *find_object(const mst_sampler *s, uintptr_t ip) {
    for (size_t i = 0; i < s->n_objs; i++)
        if (ip >= s->objs[i].lo && ip < s->objs[i].hi) return &s->objs[i];
    return NULL;
}

static fn_info resolve_uncached(mst_sampler *s, uintptr_t ip) {
    const objfile *o = find_object(s, ip);
    if (!o) {                                       /* loaded since the last look: refresh */
        dl_iterate_phdr(add_object, s);
        o = find_object(s, ip);
    }
    if (o && o->syms) {
        size_t lo = 0, hi = o->n_syms;              /* last symbol with addr <= ip */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (o->syms[mid].addr <= ip) lo = mid + 1;
            else hi = mid;
        }
        if (lo > 0) {
            const elf_sym *sy = &o->syms[lo - 1];
            bool inside = sy->size ? ip - sy->addr < sy->size : lo == o->n_syms || ip < o->syms[lo].addr;
            if (inside) return (fn_info){sy->name, sy->addr};
        }
    }
    Dl_info di;
    if (dladdr((void *)ip, &di) && di.dli_sname && di.dli_saddr)
        return (fn_info){arena_strdup(s, di.dli_sname), (uintptr_t)di.dli_saddr};
    if (o) {
        char name[256];
        snprintf(name, sizeof(name), "[%s]", o->base);
        return (fn_info){arena_strdup(s, name), 0};
    }
    return (fn_info){"[unknown]", 0};
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static fn_info resolve(mst_sampler *s, uintptr_t ip) {
    if (s->ipc_len * 2 >= s->ipc_cap) {
        size_t cap = s->ipc_cap ? s->ipc_cap * 2 : 4096;
        ip_entry *t = calloc(cap, sizeof(*t));
        if (!t) return resolve_uncached(s, ip);
        for (size_t i = 0; i < s->ipc_cap; i++) {
            if (!s->ipc[i].ip) continue;
            size_t j = mix64(s->ipc[i].ip) & (cap - 1);
            while (t[j].ip) j = (j + 1) & (cap - 1);
            t[j] = s->ipc[i];
        }
        free(s->ipc);
        s->ipc = t;
        s->ipc_cap = cap;
    }
    size_t j = mix64(ip) & (s->ipc_cap - 1);
    while (s->ipc[j].ip && s->ipc[j].ip != ip) j = (j + 1) & (s->ipc_cap - 1);
    if (!s->ipc[j].ip) {
        s->ipc[j].ip = ip;
        s->ipc[j].fn = resolve_uncached(s, ip);
        s->ipc_len++;
    }
    return s->ipc[j].fn;
}

/* ---------------------------------------------------------------- aggregation ---- */

static bool in_sorted(const uintptr_t *a, size_t n, uintptr_t x) {
    return n && x && bsearch(&x, a, n, sizeof(*a), cmp_uptr) != NULL;
}

static bool is_dispatcher(const mst_sampler *s, fn_info f) {
    if (s->n_dispatchers) return in_sorted(s->dispatchers, s->n_dispatchers, f.start);
    return strncmp(f.name, "mst_dispatch", 12) == 0 && (f.name[12] == '\0' || f.name[12] == '.');
}

static void add_callsite(mst_sampler *s, uintptr_t ret) {
    if (in_sorted(s->callsites, s->n_callsites, ret)) return;
    if (s->n_callsites == s->cap_callsites) {
        size_t cap = s->cap_callsites ? 2 * s->cap_callsites : 8;
        uintptr_t *g = realloc(s->callsites, cap * sizeof(*g));
        if (!g) return;
        s->callsites = g;
        s->cap_callsites = cap;
    }
    size_t i = s->n_callsites++;
    while (i > 0 && s->callsites[i - 1] > ret) {
        s->callsites[i] = s->callsites[i - 1];
        i--;
    }
    s->callsites[i] = ret;
}

static uint64_t hash_str(uint32_t tid, const char *str) {
    uint64_t h = 1469598103934665603ull ^ tid;      /* FNV-1a */
    for (; *str; str++) h = (h ^ (unsigned char)*str) * 1099511628211ull;
    return h;
}

static void folded_add(mst_sampler *s, uint32_t tid, const char *str) {
    if (s->n_folded * 2 >= s->fidx_cap) {
        size_t cap = s->fidx_cap ? s->fidx_cap * 2 : 1024;
        uint32_t *t = calloc(cap, sizeof(*t));
        if (!t) return;
        for (size_t i = 0; i < s->n_folded; i++) {
            size_t j = s->folded[i].hash & (cap - 1);
            while (t[j]) j = (j + 1) & (cap - 1);
            t[j] = (uint32_t)(i + 1);
        }
        free(s->fidx);
        s->fidx = t;
        s->fidx_cap = cap;
    }
    uint64_t h = hash_str(tid, str);
    size_t j = h & (s->fidx_cap - 1);
    for (; s->fidx[j]; j = (j + 1) & (s->fidx_cap - 1)) {
        folded_entry *e = &s->folded[s->fidx[j] - 1];
        if (e->hash == h && e->tid == tid && strcmp(e->folded, str) == 0) {
            e->count++;
            return;
        }
    }
    if (s->n_folded == s->cap_folded) {
        size_t cap = s->cap_folded ? 2 * s->cap_folded : 1024;
        folded_entry *g = realloc(s->folded, cap * sizeof(*g));
        if (!g) return;
        s->folded = g;
        s->cap_folded = cap;
    }
    s->folded[s->n_folded] = (folded_entry){tid, h, arena_strdup(s, str), 1};
    s->fidx[j] = (uint32_t)++s->n_folded;
}

/* Frame i's function: return addresses (i > 0) point after the call, so look up ip - 1. */
static fn_info frame_fn(mst_sampler *s, const uintptr_t *ips, int i) {
    return resolve(s, i == 0 ? ips[0] : ips[i] - 1);
}

/* The classification of docs/sampler.md. */
typedef enum { CLS_OUTSIDE, CLS_DISPATCH, CLS_KERNEL, CLS_PROFILER } sample_class;

/* The event recorder's entry points: time under them is the instrumentation's own cost. */
static bool is_recorder(uintptr_t start) {
    return start && (start == (uintptr_t)mst_prof_record_ || start == (uintptr_t)mst_prof_thread_flush);
}

static sample_class classify(mst_sampler *s, const rec_hdr *r, const uintptr_t *ips) {
    for (int i = 0; i < r->depth; i++)
        if (is_recorder(frame_fn(s, ips, i).start)) return CLS_PROFILER;
    int outer = -1;                                 /* the outermost dispatcher frame */
    for (int i = r->depth - 1; i >= 0 && outer < 0; i--)
        if (is_dispatcher(s, frame_fn(s, ips, i))) outer = i;
    if (outer < 0) return CLS_OUTSIDE;
    for (int i = 0; i < outer; i++)
        if (in_sorted(s->kernels, s->n_kernels, frame_fn(s, ips, i).start)) return CLS_KERNEL;
    for (int i = 1; i <= outer; i++)                /* a kernel that tail-called out of its frame */
        if (in_sorted(s->callsites, s->n_callsites, ips[i]) && is_dispatcher(s, frame_fn(s, ips, i)))
            return CLS_KERNEL;
    return CLS_DISPATCH;
}

/* Appends ";name" (or "name" first) to the growing folded stack; false when out of memory. */
static bool append_frame(char **buf, size_t *cap, size_t *len, const char *name) {
    size_t nl = strlen(name);
    if (*len + nl + 2 > *cap) {
        char *g = realloc(*buf, 2 * (*len + nl + 2));
        if (!g) return false;
        *buf = g;
        *cap = 2 * (*len + nl + 2);
    }
    if (*len) (*buf)[(*len)++] = ';';
    memcpy(*buf + *len, name, nl);
    *len += nl;
    return true;
}

/* Drain every ring: learn the kernel call sites, then fold and classify each record. Safe while
 * the handlers run: each ring is single-producer, single-consumer, and only the records below the
 * head read here are consumed. Caller holds s->lock. */
static void aggregate(mst_sampler *s) {
    int n = atomic_load(&s->n_slots);
    uint64_t heads[MAX_THREADS];
    for (int k = 0; k < n; k++) heads[k] = atomic_load_explicit(&atomic_load(&s->slots[k])->head, memory_order_acquire);
    if (s->n_objs == 0) dl_iterate_phdr(add_object, s);
    /* pass 1: the return addresses in dispatcher frames right above a kernel frame */
    for (int k = 0; k < n; k++) {
        slot *sl = atomic_load(&s->slots[k]);
        for (uint64_t t = atomic_load(&sl->tail); t != heads[k]; t++) {
            const rec_hdr *r = (const rec_hdr *)(sl->ring + (size_t)(t % s->cap) * s->stride);
            const uintptr_t *ips = (const uintptr_t *)(r + 1);
            for (int i = 1; i < r->depth; i++)
                if (in_sorted(s->kernels, s->n_kernels, frame_fn(s, ips, i - 1).start) &&
                    is_dispatcher(s, frame_fn(s, ips, i)))
                    add_callsite(s, ips[i]);
        }
    }
    /* pass 2 */
    size_t buf_cap = 4096;
    char *buf = malloc(buf_cap);
    if (!buf) return;
    for (int k = 0; k < n; k++) {
        slot *sl = atomic_load(&s->slots[k]);
        uint64_t t = atomic_load(&sl->tail);
        for (; t != heads[k]; t++) {
            const rec_hdr *r = (const rec_hdr *)(sl->ring + (size_t)(t % s->cap) * s->stride);
            const uintptr_t *ips = (const uintptr_t *)(r + 1);
            size_t len = 0;
            bool truncated = (r->flags & REC_TRUNCATED) != 0;
            /* the label goes right below the outermost dispatcher frame (the op it called), or at the leaf */
            int label_at = -2;
            if (r->label) {
                label_at = -1;
                for (int i = r->depth - 1; i >= 0 && label_at < 0; i--)
                    if (is_dispatcher(s, frame_fn(s, ips, i))) label_at = i;
            }
            for (int i = (truncated ? r->depth : r->depth - 1); i >= -1; i--) {
                if (i == label_at && !append_frame(&buf, &buf_cap, &len, r->label)) break;
                if (i >= 0 && !append_frame(&buf, &buf_cap, &len, i == r->depth ? "[truncated]" : frame_fn(s, ips, i).name))
                    break;
            }
            buf[len] = '\0';
            if (r->depth == 0 && !truncated) strcpy(buf, "[empty]");
            folded_add(s, sl->tid, buf);
            sl->st.samples++;
            sl->st.truncated += truncated;
            sl->st.step_walked += (r->flags & REC_STEP_WALK) != 0;
            switch (classify(s, r, ips)) {
            case CLS_OUTSIDE: sl->st.outside++; break;
            case CLS_DISPATCH: sl->st.dispatch++; break;
            case CLS_KERNEL: sl->st.kernel++; break;
            case CLS_PROFILER: sl->st.profiler++; break;
            }
        }
        atomic_store_explicit(&sl->tail, t, memory_order_release);     /* the space is free again */
    }
    free(buf);
}

int mst_sampler_drain(mst_sampler *s) {
    pthread_mutex_lock(&s->lock);
    aggregate(s);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* ---------------------------------------------------------------- results ---- */

static int cmp_folded(const void *a, const void *b) {
    const folded_entry *x = *(const folded_entry *const *)a, *y = *(const folded_entry *const *)b;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return strcmp(x->folded, y->folded);
}

int mst_sampler_foreach_folded(mst_sampler *s, mst_sampler_folded_fn fn, void *user) {
    pthread_mutex_lock(&s->lock);
    bool running = s->running;
    pthread_mutex_unlock(&s->lock);
    if (running) {
        snprintf(s->err, sizeof(s->err), "foreach_folded: stop the sampler first");
        return -1;
    }
    const folded_entry **order = malloc((s->n_folded ? s->n_folded : 1) * sizeof(*order));
    if (!order) return fail(s, "foreach_folded");
    for (size_t i = 0; i < s->n_folded; i++) order[i] = &s->folded[i];
    qsort(order, s->n_folded, sizeof(*order), cmp_folded);
    for (size_t i = 0; i < s->n_folded; i++) fn(user, order[i]->tid, order[i]->folded, order[i]->count);
    free(order);
    return 0;
}

mst_sampler_stats mst_sampler_stats_get(const mst_sampler *cs, uint32_t tid) {
    mst_sampler *s = (mst_sampler *)cs;             /* the lock and the atomics; nothing changes */
    mst_sampler_stats st = {0};
    pthread_mutex_lock(&s->lock);
    int n = atomic_load(&s->n_slots);
    for (int i = 0; i < n; i++) {
        slot *sl = atomic_load(&s->slots[i]);
        if (tid && sl->tid != tid) continue;
        st.samples += sl->st.samples;
        st.outside += sl->st.outside;
        st.dispatch += sl->st.dispatch;
        st.kernel += sl->st.kernel;
        st.profiler += sl->st.profiler;
        st.truncated += sl->st.truncated;
        st.step_walked += sl->st.step_walked;
        st.lost += atomic_load(&sl->lost);
        st.overruns += atomic_load(&sl->overruns);
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

int64_t mst_sampler_count(const mst_sampler *s, uint32_t tid) { return mst_sampler_stats_get(s, tid).samples; }

double mst_sampler_dispatch_share(const mst_sampler *s, uint32_t tid) {
    mst_sampler_stats st = mst_sampler_stats_get(s, tid);
    int64_t in_op = st.dispatch + st.kernel;
    return in_op ? (double)st.dispatch / (double)in_op : -1.0;
}

int64_t mst_sampler_lost(const mst_sampler *s) { return mst_sampler_stats_get(s, 0).lost; }

int64_t mst_sampler_stray(const mst_sampler *s) { return atomic_load(&((mst_sampler *)s)->stray); }

const char *mst_sampler_error(const mst_sampler *s) { return s->err; }

void mst_sampler_free(mst_sampler *s) {
    if (!s) return;
    mst_sampler_stop(s);
    int n = atomic_load(&s->n_slots);
    for (int i = 0; i < n; i++) {
        slot *sl = atomic_load(&s->slots[i]);
        if (sl->has_timer) timer_delete(sl->timer);
        free(sl->ring);
        free(sl);
    }
    for (size_t i = 0; i < s->n_objs; i++) free(s->objs[i].syms);
    free(s->objs);
    free(s->ipc);
    free(s->folded);
    free(s->fidx);
    free(s->kernels);
    free(s->dispatchers);
    free(s->callsites);
    while (s->arena) {
        arena_block *b = s->arena;
        s->arena = b->next;
        free(b);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}
