/* loader.h — the data loader: shuffle, per-sample transforms, batching and prefetch over a source.
 *
 * Plain C over float arrays; it knows nothing about tensors (the trainer copies each batch in).
 * Batches are BIT-IDENTICAL whatever num_workers and prefetch are: the epoch's order comes from a
 * Fisher-Yates shuffle driven by Philox(seed, epoch), each sample's augmentation from
 * (seed, epoch, sample index), and batches are delivered strictly in order. Trade-off: workers
 * split the work by whole batches (one worker fills one batch), which keeps each batch's
 * arithmetic independent of scheduling and needs no per-sample synchronisation, at the cost of
 * latency when prefetch is shallow and batches are big.
 *
 * Usage:
 *     mst_loader_config cfg = {.batch_size = 64, .shuffle = true, .seed = 42, .num_workers = 2,
 *                              .prefetch = 4, .augment = MST_AUGMENT_LIGHT, .normalize = true,
 *                              .mean = MST_FASHION_MNIST_MEAN, .std = MST_FASHION_MNIST_STD};
 *     char err[256];
 *     mst_loader *ld = mst_loader_new(src, &cfg, err, sizeof err);
 *     if (!ld) { fprintf(stderr, "error: %s\n", err); return 2; }
 *     for (int64_t epoch = 0; epoch < n_epochs; epoch++) {
 *         mst_loader_start_epoch(ld, epoch, 0);
 *         mst_batch b;
 *         while (mst_loader_next(ld, &b) == 1) train_step(b.x, b.y, b.size);   // x: (size, C, H, W)
 *     }
 *     mst_loader_free(ld);
 */
#ifndef MST_RUNTIME_DATA_LOADER_H
#define MST_RUNTIME_DATA_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/data/source.h"
#include "runtime/data/transform.h"

#define MST_LOADER_MAX_WORKERS 256

typedef struct {
    int batch_size;         /* >= 1 */
    bool drop_remainder;    /* drop the last batch when it would be smaller than batch_size */
    bool shuffle;           /* a new permutation per epoch from (seed, epoch) */
    uint64_t seed;          /* shuffle and augmentation */
    int num_workers;        /* 0 = batches are produced in the caller of mst_loader_next */
    int prefetch;           /* >= 1: batches workers may produce ahead of the one the consumer holds */
    mst_augment augment;
    bool normalize;
    float mean, std;        /* used when normalize; std > 0 */
    int64_t limit;          /* use only the first `limit` samples of the source; 0 = all (larger = all) */
    /* Data parallelism: this loader is rank shard_rank of shard_count (0 or 1 = unsharded).
     * batch_size is then the per-rank batch: global batch k is samples [k*G, (k+1)*G) of the epoch's
     * order, G = batch_size * shard_count, and rank r takes its r-th contiguous share of it
     * (exactly [r*batch_size, (r+1)*batch_size) of a full one; a partial last one is split as
     * evenly as the integers allow, and dropped when it has fewer samples than ranks). Every
     * sample of an epoch goes to exactly one rank, the same whatever num_workers is. */
    int shard_rank, shard_count;
} mst_loader_config;

typedef struct {
    const float *x;         /* (size, C, H, W) */
    const int32_t *tokens;  /* token sources: the same memory as i32 ids (size, L); NULL for images */
    const int32_t *y;       /* (size) */
    const float *target;    /* paired sources: (size, target C, H, W) images; NULL otherwise */
    int64_t size;           /* samples in this batch: batch_size, or fewer for the last one */
    int64_t index;          /* batch number within the epoch */
} mst_batch;

typedef struct mst_loader mst_loader;

/* The source must outlive the loader. Returns NULL with a message naming the offending field in
 * err (err may be NULL) on a bad config, and on a failed allocation or thread start. Workers start
 * here and wait on a condition variable until the first mst_loader_start_epoch. */
mst_loader *mst_loader_new(const mst_source *src, const mst_loader_config *cfg, char *err, size_t errn);

/* drop_remainder ? n / batch_size : ceil(n / batch_size), n = samples in use (after limit);
 * sharded: the same over the global batch (every rank gets the same count). */
int64_t mst_loader_batches_per_epoch(const mst_loader *ld);
/* The configured batch size: every batch but a last partial one has it. */
int64_t mst_loader_batch_size(const mst_loader *ld);
/* The worker threads it runs (num_workers; 0: batches made in the caller). */
int mst_loader_num_workers(const mst_loader *ld);
/* Samples in use: min(limit, source length), or the source length when limit is 0. */
int64_t mst_loader_num_samples(const mst_loader *ld);

/* Begins `epoch` (>= 0) at batch `first_batch` (0 <= first_batch <= batches_per_epoch): a resumed
 * run that skips the batches it already consumed then sees exactly the batches an uninterrupted
 * run would. May be called at any point, also mid-epoch: batches in flight are discarded (the call
 * waits for batches being produced right now to finish). Returns 0, or -1 on a bad argument
 * (message in mst_loader_error). */
int mst_loader_start_epoch(mst_loader *ld, int64_t epoch, int64_t first_batch);

/* 1: *out holds the next batch, valid until the next call to mst_loader_next, start_epoch or free;
 * 0: the epoch is finished (and stays finished until the next start_epoch);
 * -1: no epoch was started (message in mst_loader_error). */
int mst_loader_next(mst_loader *ld, mst_batch *out);

/* The last error message ("" when none). */
const char *mst_loader_error(const mst_loader *ld);

/* Stops and joins the workers at any point, mid-epoch included (each finishes at most the batch
 * it is producing), then frees everything. NULL is a no-op. */
void mst_loader_free(mst_loader *ld);

#endif
