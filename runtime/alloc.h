/* alloc.h — the one allocation wrapper: a caching allocator that counts bytes by category.
 *
 * Blocks are rounded to size classes (four per power of two) and kept on per-class free lists
 * when released, so a training loop that allocates the same shapes every step stops calling
 * malloc after the first step. In-use bytes are the bytes callers asked for; peak is tracked per
 * category and in total. `mst_allocator_fail_at(a, n)` makes the n-th allocation from now fail,
 * for error-path tests (SQLite's malloc tests, Redis's zmalloc). Not thread-safe: one per context.
 *
 * Reserved memory (allocated vs reserved, as in PyTorch): a block allocated under
 * MST_MEM_RESERVED (a graph arena) counts in reserved_bytes and the totals, in no category; its
 * owner reports the values that become live and die in it with mst_allocator_account, which
 * moves the categories' in_use and peak as real allocations would (not the totals, which already
 * hold the block).
 *
 *     mst_allocator *a = mst_allocator_new();
 *     float *x = mst_alloc(a, 1024 * sizeof(float), MST_MEM_ACT);
 *     mst_free(a, x);                       // back to the cache, not to malloc
 *     mst_allocator_stats(a)->peak[MST_MEM_ACT];
 */
#ifndef MST_RUNTIME_ALLOC_H
#define MST_RUNTIME_ALLOC_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    MST_MEM_PARAM,      /* model parameters (and their master copies) */
    MST_MEM_GRAD,       /* gradients */
    MST_MEM_OPTIM,      /* optimizer state: momentum, Adam moments */
    MST_MEM_ACT,        /* activations and other per-step tensors */
    MST_MEM_WORKSPACE,  /* kernel scratch such as im2col buffers */
    MST_MEM_COUNT
} mst_mem_cat;

/* Not a category: the category argument of a reserved block (see above). */
#define MST_MEM_RESERVED ((mst_mem_cat)MST_MEM_COUNT)

typedef struct {
    int64_t in_use[MST_MEM_COUNT];
    int64_t peak[MST_MEM_COUNT];
    int64_t in_use_total;       /* blocks held by callers, reserved ones included */
    int64_t peak_total;
    int64_t cached_bytes;       /* held on free lists, not in use */
    int64_t reserved_bytes;     /* held in MST_MEM_RESERVED blocks (part of in_use_total, of no category) */
    uint64_t n_alloc;           /* successful allocations */
    uint64_t n_cache_hit;       /* served from a free list */
    uint64_t n_system;          /* served by the system allocator */
} mst_alloc_stats;

typedef struct mst_allocator mst_allocator;

mst_allocator *mst_allocator_new(void);
void           mst_allocator_free(mst_allocator *a);   /* all blocks must have been freed */
void          *mst_alloc(mst_allocator *a, size_t bytes, mst_mem_cat cat);  /* 64-byte aligned; NULL on failure */
void           mst_free(mst_allocator *a, void *p);
/* delta bytes of cat became live (> 0) or died (< 0) inside reserved memory: in_use, peak, counter */
void           mst_allocator_account(mst_allocator *a, mst_mem_cat cat, int64_t delta);
void           mst_allocator_trim(mst_allocator *a);   /* return cached blocks to the system */
void           mst_allocator_fail_at(mst_allocator *a, int64_t n);  /* 1 = the next one; 0 = off */
const mst_alloc_stats *mst_allocator_stats(const mst_allocator *a);
void           mst_allocator_reset_peak(mst_allocator *a);
const char    *mst_mem_cat_name(mst_mem_cat c);

#endif
