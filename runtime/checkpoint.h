/* checkpoint.h — training state on disk: named tensors plus where training stood.
 *
 * Written atomically (a temp file in the same folder, fsync, rename, fsync of the folder), so a
 * crash at any moment leaves either the old checkpoint or the new one, never a torn file. The
 * format has a header with a format version and a CRC-32 (zlib) over the whole file; loading
 * checks both, then matches tensors by name, dtype and shape. See docs/checkpoint.md.
 *
 *     mst_ckpt_entry e[] = {{"fc1.weight", w1}, ...};
 *     mst_checkpoint_save(ctx, "out/job/checkpoint.bin", &meta, e, n);
 *     mst_checkpoint_load(ctx, "out/job/checkpoint.bin", &meta, e, n);   // fills e[i].t in place
 */
#ifndef MST_RUNTIME_CHECKPOINT_H
#define MST_RUNTIME_CHECKPOINT_H

#include <stdint.h>

#include "runtime/context.h"

#define MST_CKPT_VERSION 2        /* 2 added the config text; version 1 files still load, with none */
#define MST_CKPT_CONFIG_MAX 8192
#define MST_CKPT_STEP_THREADS_ALL 1
#define MST_CKPT_STEP_THREADS_ONE 2

typedef struct {
    int64_t epoch;              /* epoch in progress (0-based) */
    int64_t batch;              /* batches of that epoch already trained */
    int64_t step;               /* global optimizer steps taken */
    int64_t optim_steps;
    mst_rng rng;                /* the context's generator (dropout seeds, ...) */
    uint64_t seed;              /* the run's seed, to refuse resuming with another one */
    char config[MST_CKPT_CONFIG_MAX];   /* the training-relevant settings, "key=value\n" lines
                                           sorted as the job schema; "" when not recorded */
    int32_t step_threads;       /* the thread budget the training step had settled on when written:
                                   0 not decided (the step-thread trial still running, or one
                                   thread only), MST_CKPT_STEP_THREADS_ALL or _ONE (the values of
                                   mst_step_threads_pin, runtime/graph/step_threads.h); a resumed
                                   run goes on with it, so its steps run as the interrupted one's */
} mst_ckpt_meta;

typedef struct {
    const char *name;
    mst_tensor *t;
} mst_ckpt_entry;

mst_status mst_checkpoint_save(mst_ctx *ctx, const char *path, const mst_ckpt_meta *meta, const mst_ckpt_entry *e, int n);
/* Every entry must be present in the file with the same dtype and shape; extra tensors in the
 * file are an error too (the model changed). On any error nothing is modified. */
mst_status mst_checkpoint_load(mst_ctx *ctx, const char *path, mst_ckpt_meta *meta, const mst_ckpt_entry *e, int n);

/* The keys whose values differ between two config texts ("key=value\n" lines), as
 * "optimizer.lr (0.05 in the checkpoint, 0.1 now), ..." in out; returns how many differ. */
int mst_ckpt_config_diff(const char *saved, const char *now, char *out, size_t n);

#endif
