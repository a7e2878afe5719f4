/* loader.c — epoch order, batch production and the prefetch ring behind mst_loader_next.
 *
 * With num_workers = 0 the caller produces each batch itself. With num_workers > 0 a ring of
 * prefetch + 1 slots holds batch b in slot b % n_slots: the consumer holds one, and workers fill
 * up to `prefetch` more ahead of it, each worker one whole batch at a time, taking batch numbers in
 * order under one mutex. The consumer waits on a condition variable for the slot of exactly the
 * batch it wants, so delivery is in order whatever order workers finish in. Trade-off: one mutex
 * and two condition variables for everything — taken twice per batch, not per sample — which is
 * simple to reason about (no lock-free ring). Sleeping workers are woken when half the prefetch
 * depth is free (wake_batch below), not for every slot: on tiny steps a wake cost more than the
 * lock.
 * Restarting an epoch mid-way waits for the batches being produced right now (bounded by one
 * batch's work), so no worker ever writes a slot the new epoch has reused.
 */
#define _GNU_SOURCE     /* pthread_setname_np */
#include "runtime/data/loader.h"
#include "runtime/status.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"
#include "runtime/rng.h"
#include "runtime/fpu.h"
#include "runtime/cpu_pin.h"
#include "runtime/threadpool.h"

#define TAG_SHUFFLE 0x73687566666c65ULL     /* "shuffle" */
#define MAX_PREFETCH 4096

typedef struct {
    float *x;                   /* (batch_size, C, H, W) */
    int32_t *y;                 /* (batch_size) */
    float *t;                   /* (batch_size, target numel) for paired sources, else NULL */
    int64_t batch;              /* batch it holds or is being filled with; -1 = none */
    int64_t size;
    bool ready;                 /* filled and not yet taken by the consumer */
} slot;

typedef struct {
    pthread_t thread;
    struct mst_loader *ld;
    float *scratch;             /* (C, H, W): transform workspace of this worker */
} worker;

struct mst_loader {
    const mst_source *src;
    mst_loader_config cfg;
    mst_transform_config tcfg;
    int c, h, w;
    int64_t numel;              /* C * H * W */
    int64_t target_numel;       /* paired sources: floats per target; 0 = labels only */
    int64_t n;                  /* samples in use */
    int64_t n_batches;
    int64_t *perm;              /* (n): this epoch's order; NULL without shuffle */
    float *scratch;             /* (C, H, W): transform workspace when num_workers = 0 */
    int n_slots;
    slot *slots;
    bool flush_denormals;       /* the creating thread's FTZ/DAZ mode (runtime/fpu.h), set on every worker */

    /* consumer-side state, also read by workers under `lock` */
    pthread_mutex_t lock;
    pthread_cond_t work_cv;     /* workers wait: a batch may be produced, or shutdown */
    pthread_cond_t ready_cv;    /* consumer waits for its batch; start_epoch for busy == 0 */
    bool started;               /* an epoch is running: workers may take batches */
    bool shutdown;
    int64_t epoch;
    int64_t next_produce;       /* next batch number to hand to a worker */
    int64_t cursor;             /* next batch number to deliver */
    bool holding;               /* the consumer holds batch cursor - 1 */
    int busy;                   /* workers producing a batch right now */
    int ready_count;            /* filled batches not yet delivered */

    worker *workers;
    int n_workers;              /* threads actually running */
    bool pin;                   /* the consumer and each worker on a CPU of their own (loader_pins) */
    int pin_base;               /* the consumer's CPU (mst_cpu_pin_self's index); worker i takes the i + 1st after it */
    bool consumer_pinned;       /* this loader bound `consumer` (mst_loader_free lets it go) */
    pthread_t consumer;

    uint32_t name_wait, name_produce, name_depth;
    char err[256];
};


/* How many samples ahead produce_batch asks for a sample's bytes (mst_source_prefetch). 16 shuffled
 * Fashion-MNIST images (standalone, -O3): 11.1 us a batch without, 7.6 with 2 ahead. */
enum { k_prefetch_ahead = 2 };

/* Fills `s` with batch b of the current epoch. Runs without the lock: it reads only what
 * start_epoch never changes while a batch is being produced (perm, epoch), and writes only `s`. */
/* This rank's positions [start, start + size) of the epoch's order that batch b takes. */
static void batch_range(const mst_loader *ld, int64_t b, int64_t *start, int64_t *size) {
    const int64_t bs = ld->cfg.batch_size, ranks = ld->cfg.shard_count > 1 ? ld->cfg.shard_count : 1;
    const int64_t global = bs * ranks, gstart = b * global;
    const int64_t gsize = ld->n - gstart < global ? ld->n - gstart : global;
    const int64_t r = ranks > 1 ? ld->cfg.shard_rank : 0;
    *start = gstart + r * gsize / ranks;
    *size = gstart + (r + 1) * gsize / ranks - *start;
}

static int64_t sample_at(const mst_loader *ld, int64_t pos) { return ld->perm ? ld->perm[pos] : pos; }

/* Asks for batch b's samples' bytes (b past the epoch's end: nothing). */
static void prefetch_batch(const mst_loader *ld, int64_t b) {
    if (b >= ld->n_batches) return;
    int64_t start, size;
    batch_range(ld, b, &start, &size);
    for (int64_t i = 0; i < size; i++) mst_source_prefetch(ld->src, sample_at(ld, start + i));
}

static void produce_batch(const mst_loader *ld, int64_t epoch, int64_t b, slot *s, float *scratch) {
    int64_t start, size;
    batch_range(ld, b, &start, &size);
    for (int64_t i = 0; i < size; i++) {
        const int64_t idx = sample_at(ld, start + i);
        if (i + k_prefetch_ahead < size)    /* a shuffled sample is mostly in no cache */
            mst_source_prefetch(ld->src, sample_at(ld, start + i + k_prefetch_ahead));
        float *x = s->x + i * ld->numel;
        mst_source_get(ld->src, idx, x, &s->y[i]);
        if (s->t) mst_source_get_target(ld->src, idx, s->t + i * ld->target_numel);
        mst_transform_apply(&ld->tcfg, epoch, idx, x, scratch, ld->c, ld->h, ld->w);
    }
    s->size = size;
}

/* First batch whose slot is still taken (held by the consumer or not yet delivered). Lock held. */
static int64_t free_from(const mst_loader *ld) { return ld->holding ? ld->cursor - 1 : ld->cursor; }

static bool can_produce(const mst_loader *ld) {
    return ld->started && ld->next_produce < ld->n_batches && ld->next_produce < free_from(ld) + ld->n_slots;
}

/* Batches the workers could start now. Lock held. */
static int64_t producible(const mst_loader *ld) {
    if (!ld->started || ld->next_produce >= ld->n_batches) return 0;
    return free_from(ld) + ld->n_slots - ld->next_produce;
}

/* How many free slots the consumer lets accumulate before it wakes sleeping workers: half the
 * prefetch depth (1 at the default depth of 2, as before). Waking a worker is a futex syscall on
 * the consumer's thread and, on a VM, an interrupt to a halted vCPU: on subnormal_weights (40-50 us
 * steps, 2 workers, prefetch 4) it held the training step ~9 us in every step's data wait (the
 * profile's steps.csv). Woken in batches, a worker produces several batches in a row; and the
 * consumer wakes every worker before it waits for a batch, so it never waits on a worker that is
 * asleep with that batch still to make. */
static int64_t wake_batch(const mst_loader *ld) { return ld->cfg.prefetch / 2 > 1 ? ld->cfg.prefetch / 2 : 1; }

/* Whether the consumer and the workers each get a CPU of their own for the loader's life: when they
 * fit the CPUs the process may use (and one rank has the machine: ranks of a data-parallel job on
 * one machine would bind their consumers to the same CPU). A worker sleeps when the queue is full
 * and its consumer wakes it when a slot frees; the scheduler often put the woken thread on its
 * waker's CPU (as it did the kernel team's, runtime/cpu_pin.h), and the two then took turns on
 * one CPU while the other idled: on subnormal_weights with one worker (2 vCPUs, ~30 us steps),
 * 13 of 30 runs trained at 0.056-0.070 ms a step, as slow as the synchronous loader's 0.055-0.058
 * or slower, the rest at 0.034-0.045; bound, 30 of 30 ran at 0.034-0.052 (bench/train_variants.sh,
 * docs/benchmarks.md). More threads than CPUs are left to the scheduler. The consumer keeps the
 * CPU the creating thread ran on when the loader was made and the workers take the next ones, so
 * two processes on one machine bind where the scheduler had spread them, not both to the first
 * CPU. MSTUNE_PIN_THREADS=0 turns binding off. */
static bool loader_pins(const mst_loader_config *cfg) {
    return cfg->num_workers > 0 && cfg->shard_count <= 1 && cfg->num_workers + 1 <= mst_cpu_pin_count();
}

static void *worker_main(void *arg) {
    worker *wk = arg;
    mst_loader *ld = wk->ld;
    char name[32];
    snprintf(name, sizeof(name), "loader.worker.%d", (int)(wk - ld->workers));
    mst_prof_set_thread_name(name);
    snprintf(name, sizeof(name), "mst-loader.%d", (int)(wk - ld->workers));   /* top, gdb: 15 chars at most */
    pthread_setname_np(pthread_self(), name);
    mst_fpu_set_flush(ld->flush_denormals);    /* augmentation computes too: the creator's FTZ/DAZ mode */
    if (ld->pin) mst_cpu_pin_self(ld->pin_base + 1 + (int)(wk - ld->workers));     /* after the consumer's */
    pthread_mutex_lock(&ld->lock);
    for (;;) {
        while (!ld->shutdown && !can_produce(ld)) pthread_cond_wait(&ld->work_cv, &ld->lock);
        if (ld->shutdown) break;
        const int64_t b = ld->next_produce++, epoch = ld->epoch;
        slot *s = &ld->slots[b % ld->n_slots];
        s->batch = b;
        s->ready = false;
        ld->busy++;
        pthread_mutex_unlock(&ld->lock);

        mst_prof_begin(MST_CAT_DATA, ld->name_produce, -1);
        produce_batch(ld, epoch, b, s, wk->scratch);
        mst_prof_end(MST_CAT_DATA, ld->name_produce, -1);

        pthread_mutex_lock(&ld->lock);
        ld->busy--;
        s->ready = true;
        ld->ready_count++;
        pthread_cond_broadcast(&ld->ready_cv);
    }
    pthread_mutex_unlock(&ld->lock);
    mst_prof_thread_flush();
    return NULL;
}

static int validate(const mst_source *src, const mst_loader_config *cfg, char *err, size_t errn) {
    if (!src) { mst_errf(err, errn, "loader: source is NULL"); return -1; }
    if (!cfg) { mst_errf(err, errn, "loader: config is NULL"); return -1; }
    if (cfg->shard_count < 0 || (cfg->shard_count > 1 && (cfg->shard_rank < 0 || cfg->shard_rank >= cfg->shard_count))) {
        mst_errf(err, errn, "loader config: shard_rank = %d of shard_count = %d, expected 0 <= shard_rank < shard_count",
                 cfg->shard_rank, cfg->shard_count);
        return -1;
    }
    if (cfg->batch_size < 1) {
        mst_errf(err, errn, "loader config: batch_size = %d, expected >= 1", cfg->batch_size);
        return -1;
    }
    if (cfg->num_workers < 0 || cfg->num_workers > MST_LOADER_MAX_WORKERS) {
        mst_errf(err, errn, "loader config: num_workers = %d, expected 0 to %d (0 = produce in the caller)",
                cfg->num_workers, MST_LOADER_MAX_WORKERS);
        return -1;
    }
    if (cfg->prefetch < 1 || cfg->prefetch > MAX_PREFETCH) {
        mst_errf(err, errn, "loader config: prefetch = %d, expected 1 to %d", cfg->prefetch, MAX_PREFETCH);
        return -1;
    }
    if ((unsigned)cfg->augment >= MST_AUGMENT_COUNT) {
        mst_errf(err, errn, "loader config: augment = %d, expected MST_AUGMENT_NONE, _LIGHT or _HEAVY", (int)cfg->augment);
        return -1;
    }
    if (mst_source_sample_type(src) == MST_SAMPLE_I32 && (cfg->augment != MST_AUGMENT_NONE || cfg->normalize)) {
        mst_errf(err, errn, "loader config: augment and normalize transform images; this source yields token ids (set "
                            "augment none and normalize false)");
        return -1;
    }
    if (mst_source_target_numel(src) > 0 && (cfg->augment != MST_AUGMENT_NONE || cfg->normalize)) {
        mst_errf(err, errn, "loader config: augment and normalize would change the input but not its paired target image "
                            "(set augment none and normalize false)");
        return -1;
    }
    if (cfg->normalize && !(isfinite(cfg->std) && cfg->std > 0.0f)) {
        mst_errf(err, errn, "loader config: std = %g, expected a finite value > 0 when normalize is set", (double)cfg->std);
        return -1;
    }
    if (cfg->normalize && !isfinite(cfg->mean)) {
        mst_errf(err, errn, "loader config: mean = %g, expected a finite value when normalize is set", (double)cfg->mean);
        return -1;
    }
    if (cfg->limit < 0) {
        mst_errf(err, errn, "loader config: limit = %lld, expected >= 0 (0 = all samples)", (long long)cfg->limit);
        return -1;
    }
    return 0;
}

mst_loader *mst_loader_new(const mst_source *src, const mst_loader_config *cfg, char *err, size_t errn) {
    if (err && errn) err[0] = '\0';
    if (validate(src, cfg, err, errn) != 0) return NULL;
    mst_loader *ld = calloc(1, sizeof(*ld));
    if (!ld) { mst_errf(err, errn, "loader: out of memory"); return NULL; }
    ld->src = src;
    ld->cfg = *cfg;
    ld->tcfg = (mst_transform_config){.augment = cfg->augment, .normalize = cfg->normalize,
                                      .mean = cfg->mean, .std = cfg->std, .seed = cfg->seed};
    int64_t shape[3];
    mst_source_shape(src, shape);
    ld->c = (int)shape[0];
    ld->h = (int)shape[1];
    ld->w = (int)shape[2];
    ld->numel = shape[0] * shape[1] * shape[2];
    ld->target_numel = mst_source_target_numel(src);
    const int64_t len = mst_source_len(src);
    ld->n = cfg->limit > 0 && cfg->limit < len ? cfg->limit : len;
    const int64_t bs = cfg->batch_size;
    const int64_t ranks = cfg->shard_count > 1 ? cfg->shard_count : 1, global = bs * ranks;
    ld->n_batches = cfg->drop_remainder || ld->n % global < ranks ? ld->n / global : ld->n / global + 1;
    ld->n_slots = cfg->num_workers > 0 ? cfg->prefetch + 1 : 1;
    ld->epoch = -1;
    ld->name_wait = mst_prof_intern("loader.wait");
    ld->name_produce = mst_prof_intern("loader.produce");
    ld->name_depth = mst_prof_intern("loader.queue_depth");
    pthread_mutex_init(&ld->lock, NULL);
    pthread_cond_init(&ld->work_cv, NULL);
    pthread_cond_init(&ld->ready_cv, NULL);

    const uint64_t slot_floats = (uint64_t)bs * (uint64_t)ld->numel;
    if (slot_floats > SIZE_MAX / sizeof(float) / (uint64_t)ld->n_slots) {
        mst_errf(err, errn, "loader config: batch_size = %d with prefetch = %d needs more memory than this machine can address",
                cfg->batch_size, cfg->prefetch);
        goto fail;
    }
    ld->slots = calloc((size_t)ld->n_slots, sizeof(*ld->slots));
    ld->scratch = malloc((size_t)ld->numel * sizeof(float));
    if (cfg->shuffle) ld->perm = malloc((size_t)ld->n * sizeof(*ld->perm));
    if (!ld->slots || !ld->scratch || (cfg->shuffle && !ld->perm)) goto oom;
    for (int i = 0; i < ld->n_slots; i++) {
        ld->slots[i].batch = -1;
        ld->slots[i].x = malloc((size_t)slot_floats * sizeof(float));
        ld->slots[i].y = malloc((size_t)bs * sizeof(int32_t));
        if (ld->target_numel) ld->slots[i].t = malloc((size_t)bs * (size_t)ld->target_numel * sizeof(float));
        if (!ld->slots[i].x || !ld->slots[i].y || (ld->target_numel && !ld->slots[i].t)) goto oom;
    }
    ld->flush_denormals = mst_fpu_flushing();
    if (cfg->num_workers > 0) {
        ld->workers = calloc((size_t)cfg->num_workers, sizeof(*ld->workers));
        if (!ld->workers) goto oom;
        for (int i = 0; i < cfg->num_workers; i++) {
            ld->workers[i].ld = ld;
            ld->workers[i].scratch = malloc((size_t)ld->numel * sizeof(float));
            if (!ld->workers[i].scratch) goto oom;      /* mst_loader_free frees every worker's scratch */
        }
        /* the workers start with the program's stop signals blocked, as the kernel pool's threads
         * do: a Ctrl-C or SIGTERM is handled by the threads that expect it */
        ld->pin = loader_pins(cfg);
        ld->pin_base = ld->pin ? mst_cpu_pin_index_here() : 0;
        sigset_t old;
        mst_threadpool_block_signals(&old);
        int rc = 0;
        for (; ld->n_workers < cfg->num_workers; ld->n_workers++) {
            worker *wk = &ld->workers[ld->n_workers];
            if ((rc = pthread_create(&wk->thread, NULL, worker_main, wk)) != 0) break;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            mst_errf(err, errn, "loader: cannot start worker %d of %d: %s", ld->n_workers + 1, cfg->num_workers, strerror(rc));
            goto fail;
        }
    }
    return ld;
oom:
    mst_errf(err, errn, "loader: out of memory for %d batch slots of %d samples of %lld floats", ld->n_slots,
            cfg->batch_size, (long long)ld->numel);
fail:
    mst_loader_free(ld);
    return NULL;
}

int64_t mst_loader_batches_per_epoch(const mst_loader *ld) { return ld->n_batches; }
int64_t mst_loader_batch_size(const mst_loader *ld) { return ld->cfg.batch_size; }
int mst_loader_num_workers(const mst_loader *ld) { return ld->cfg.num_workers; }

int64_t mst_loader_num_samples(const mst_loader *ld) { return ld->n; }
const char *mst_loader_error(const mst_loader *ld) { return ld->err; }

/* Fisher-Yates over [0, n), one Philox draw per swap; j = floor(u * (i + 1)) by a 64x64 -> 128
 * multiply (Lemire), bias below 2^-40 for any n that fits in memory. */
static void shuffle_order(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    mst_rng r = mst_rng_make(mst_hash64(seed ^ TAG_SHUFFLE), (uint64_t)epoch);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(((unsigned __int128)mst_rng_u64(&r) * (uint64_t)(i + 1)) >> 64);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int mst_loader_start_epoch(mst_loader *ld, int64_t epoch, int64_t first_batch) {
    if (epoch < 0) {
        mst_errf(ld->err, sizeof ld->err, "loader: epoch = %lld, expected >= 0", (long long)epoch);
        return -1;
    }
    if (first_batch < 0 || first_batch > ld->n_batches) {
        mst_errf(ld->err, sizeof ld->err, "loader: first_batch = %lld, expected 0 to %lld (batches per epoch)",
                (long long)first_batch, (long long)ld->n_batches);
        return -1;
    }
    pthread_mutex_lock(&ld->lock);
    /* stop handing out batches of the old epoch and let the ones in production land */
    ld->started = false;
    while (ld->busy > 0) pthread_cond_wait(&ld->ready_cv, &ld->lock);
    for (int i = 0; i < ld->n_slots; i++) {
        ld->slots[i].batch = -1;
        ld->slots[i].ready = false;
    }
    if (ld->perm) shuffle_order(ld->perm, ld->n, ld->cfg.seed, epoch);
    ld->epoch = epoch;
    ld->cursor = ld->next_produce = first_batch;
    ld->holding = false;
    ld->ready_count = 0;
    ld->started = true;
    pthread_cond_broadcast(&ld->work_cv);
    pthread_mutex_unlock(&ld->lock);
    return 0;
}

int mst_loader_next(mst_loader *ld, mst_batch *out) {
    if (ld->epoch < 0) {
        mst_errf(ld->err, sizeof ld->err, "loader: mst_loader_next before mst_loader_start_epoch");
        return -1;
    }
    slot *s;
    int depth = 0;
    if (ld->n_workers == 0) {
        ld->holding = false;
        if (ld->cursor >= ld->n_batches) return 0;
        s = &ld->slots[0];
        mst_prof_begin(MST_CAT_DATA, ld->name_wait, -1);
        produce_batch(ld, ld->epoch, ld->cursor, s, ld->scratch);
        /* the next batch is read after this step's compute: its bytes arrive meanwhile (16
         * shuffled images after 4 MB of other traffic, standalone: 13.4 -> 8.0 us a batch) */
        prefetch_batch(ld, ld->cursor + 1);
        mst_prof_end(MST_CAT_DATA, ld->name_wait, -1);
        s->batch = ld->cursor;
        ld->cursor++;
        ld->holding = true;
    } else {
        /* cursor is written only by this thread, so reading it unlocked is safe */
        const bool finished = ld->cursor >= ld->n_batches;
        /* bound again after anything let it go (the kernel choice binds and releases the caller) */
        if (ld->pin && mst_cpu_pinned_self() < 0 && mst_cpu_pin_self(ld->pin_base) >= 0) {
            ld->consumer = pthread_self();
            ld->consumer_pinned = true;
        }
        if (!finished) mst_prof_begin(MST_CAT_DATA, ld->name_wait, -1);
        pthread_mutex_lock(&ld->lock);
        if (ld->holding) {
            ld->holding = false;            /* its slot is free: one more batch may be produced */
            if (producible(ld) >= wake_batch(ld)) pthread_cond_broadcast(&ld->work_cv);
        }
        if (finished) {
            pthread_mutex_unlock(&ld->lock);
            return 0;
        }
        s = &ld->slots[ld->cursor % ld->n_slots];
        if (!(s->batch == ld->cursor && s->ready)) {
            pthread_cond_broadcast(&ld->work_cv);   /* about to wait: every worker with work must be awake */
            while (!(s->batch == ld->cursor && s->ready)) pthread_cond_wait(&ld->ready_cv, &ld->lock);
        }
        s->ready = false;
        depth = --ld->ready_count;
        ld->cursor++;
        ld->holding = true;
        pthread_mutex_unlock(&ld->lock);
        mst_prof_end(MST_CAT_DATA, ld->name_wait, -1);
    }
    /* the prefetch queue's depth; a loader without workers has no queue (its depth is always 0), and
     * its counter row cost a store row a step for nothing (~1.5 us: bench_store) */
    if (ld->n_workers > 0) mst_prof_counter(ld->name_depth, depth);
    out->x = s->x;
    out->tokens = mst_source_sample_type(ld->src) == MST_SAMPLE_I32 ? (const int32_t *)(const void *)s->x : NULL;
    out->y = s->y;
    out->target = s->t;
    out->size = s->size;
    out->index = s->batch;
    return 1;
}

void mst_loader_free(mst_loader *ld) {
    if (!ld) return;
    if (ld->consumer_pinned && pthread_equal(ld->consumer, pthread_self())) mst_cpu_unpin_self();
    pthread_mutex_lock(&ld->lock);
    ld->shutdown = true;
    pthread_cond_broadcast(&ld->work_cv);
    pthread_mutex_unlock(&ld->lock);
    for (int i = 0; i < ld->n_workers; i++) pthread_join(ld->workers[i].thread, NULL);
    if (ld->workers)
        for (int i = 0; i < ld->cfg.num_workers; i++) free(ld->workers[i].scratch);
    free(ld->workers);
    if (ld->slots)
        for (int i = 0; i < ld->n_slots; i++) {
            free(ld->slots[i].x);
            free(ld->slots[i].y);
            free(ld->slots[i].t);
        }
    free(ld->slots);
    free(ld->scratch);
    free(ld->perm);
    pthread_cond_destroy(&ld->work_cv);
    pthread_cond_destroy(&ld->ready_cv);
    pthread_mutex_destroy(&ld->lock);
    free(ld);
}
