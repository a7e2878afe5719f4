/* alloc.c — size-class caching allocator with per-category accounting.
 *
 * Each block carries a 64-byte header (size class, category, requested bytes) so mst_free needs
 * only the pointer and the payload stays 64-byte aligned for vector loads.
 */
#include "runtime/alloc.h"

#include <stdlib.h>
#include <string.h>

#include "profiler/events.h"
#include "runtime/status.h"

#define HEADER 64
#define N_CLASSES 256           /* 4 classes per octave from 64 bytes up: far past any real size */
#define MAGIC_LIVE 0x6d73746c   /* "mstl" */
#define MAGIC_FREE 0x6d737466   /* "mstf" */

typedef struct block {
    struct block *next_free;
    uint32_t magic;
    uint16_t cls;
    uint16_t cat;
    size_t requested;
} block;
_Static_assert(sizeof(block) <= HEADER, "block header must fit in HEADER bytes");

struct mst_allocator {
    block *free_list[N_CLASSES];
    mst_alloc_stats stats;
    int64_t fail_countdown;     /* >0: counts down; the allocation that reaches 0 fails */
    uint32_t counter_names[MST_MEM_COUNT];
};

static const char *const k_cat_names[MST_MEM_COUNT] = {
    [MST_MEM_PARAM] = "parameters", [MST_MEM_GRAD] = "gradients", [MST_MEM_OPTIM] = "optimizer_state",
    [MST_MEM_ACT] = "activations",  [MST_MEM_WORKSPACE] = "workspace",
};
_Static_assert(MST_MEM_COUNT == 5, "a new memory category needs a name");

const char *mst_mem_cat_name(mst_mem_cat c) { return (unsigned)c < MST_MEM_COUNT ? k_cat_names[c] : "?"; }

/* Class c covers sizes up to class_size(c): 64, 80, 96, 112, 128, 160, ... */
static size_t class_size(unsigned c) {
    unsigned octave = c / 4, step = c % 4;
    return ((size_t)64 << octave) + step * (((size_t)64 << octave) / 4);
}

static unsigned size_class(size_t bytes) {
    if (bytes <= 64) return 0;
    unsigned octave = 63 - (unsigned)__builtin_clzll((unsigned long long)(bytes - 1)) - 6 + 1;  /* 2^(octave+6) >= bytes */
    /* start one octave lower and walk up: at most 5 steps */
    unsigned c = octave > 0 ? (octave - 1) * 4 : 0;
    while (class_size(c) < bytes) c++;
    return c;
}

mst_allocator *mst_allocator_new(void) {
    mst_allocator *a = calloc(1, sizeof(*a));
    if (!a) return NULL;
    char name[64];
    for (int c = 0; c < MST_MEM_COUNT; c++) {
        snprintf(name, sizeof(name), "mem.%s", k_cat_names[c]);
        a->counter_names[c] = mst_prof_intern(name);
    }
    return a;
}

void mst_allocator_trim(mst_allocator *a) {
    for (unsigned c = 0; c < N_CLASSES; c++) {
        for (block *b = a->free_list[c], *next; b; b = next) {
            next = b->next_free;
            a->stats.cached_bytes -= (int64_t)class_size(c);
            free(b);
        }
        a->free_list[c] = NULL;
    }
}

void mst_allocator_free(mst_allocator *a) {
    if (!a) return;
    mst_allocator_trim(a);
    free(a);
}

void mst_allocator_fail_at(mst_allocator *a, int64_t n) { a->fail_countdown = n > 0 ? n : 0; }

const mst_alloc_stats *mst_allocator_stats(const mst_allocator *a) { return &a->stats; }

void mst_allocator_reset_peak(mst_allocator *a) {
    for (int c = 0; c < MST_MEM_COUNT; c++) a->stats.peak[c] = a->stats.in_use[c];
    a->stats.peak_total = a->stats.in_use_total;
}

void mst_allocator_account(mst_allocator *a, mst_mem_cat cat, int64_t delta) {
    MST_ASSERT((unsigned)cat < MST_MEM_COUNT);
    a->stats.in_use[cat] += delta;
    if (a->stats.in_use[cat] > a->stats.peak[cat]) a->stats.peak[cat] = a->stats.in_use[cat];
    mst_prof_counter_detail(a->counter_names[cat], a->stats.in_use[cat]);
}

void *mst_alloc(mst_allocator *a, size_t bytes, mst_mem_cat cat) {
    MST_ASSERT((unsigned)cat <= MST_MEM_COUNT);     /* MST_MEM_COUNT: MST_MEM_RESERVED */
    if (a->fail_countdown > 0 && --a->fail_countdown == 0) return NULL;
    if (bytes > ((size_t)1 << 46)) return NULL;
    unsigned cls = size_class(bytes ? bytes : 1);
    MST_ASSERT(cls < N_CLASSES);
    block *b = a->free_list[cls];
    if (b) {
        a->free_list[cls] = b->next_free;
        a->stats.cached_bytes -= (int64_t)class_size(cls);
        a->stats.n_cache_hit++;
    } else {
        size_t total = (HEADER + class_size(cls) + HEADER - 1) / HEADER * HEADER;  /* C11: a multiple of the alignment */
        b = aligned_alloc(HEADER, total);
        if (!b) {                               /* give the cache back and try once more */
            mst_allocator_trim(a);
            b = aligned_alloc(HEADER, total);
            if (!b) return NULL;
        }
        a->stats.n_system++;
    }
    b->magic = MAGIC_LIVE;
    b->cls = (uint16_t)cls;
    b->cat = (uint16_t)cat;
    b->requested = bytes;
    a->stats.n_alloc++;
    a->stats.in_use_total += (int64_t)bytes;
    if (a->stats.in_use_total > a->stats.peak_total) a->stats.peak_total = a->stats.in_use_total;
    if (cat == MST_MEM_RESERVED) a->stats.reserved_bytes += (int64_t)bytes;
    else mst_allocator_account(a, cat, (int64_t)bytes);
    return (char *)b + HEADER;
}

void mst_free(mst_allocator *a, void *p) {
    if (!p) return;
    block *b = (block *)((char *)p - HEADER);
    MST_ASSERT(b->magic == MAGIC_LIVE);         /* double free or foreign pointer */
    b->magic = MAGIC_FREE;
    a->stats.in_use_total -= (int64_t)b->requested;
    if (b->cat == MST_MEM_RESERVED) a->stats.reserved_bytes -= (int64_t)b->requested;
    else mst_allocator_account(a, (mst_mem_cat)b->cat, -(int64_t)b->requested);
    b->next_free = a->free_list[b->cls];
    a->free_list[b->cls] = b;
    a->stats.cached_bytes += (int64_t)class_size(b->cls);
}
