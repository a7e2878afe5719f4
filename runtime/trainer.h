/* trainer.h — the training loop: epochs or a step budget, evaluation on the held-out split,
 * progress on the terminal, atomic checkpoints and resume, a clean stop on a non-finite loss.
 *
 * Each step runs inside its own pool and profiler step markers: wait for `accumulate_steps`
 * batches (the loader's `data` range), then one call of mst_step_run (runtime/step.h: forward
 * under autocast, loss, loss scaling, backward per micro-batch; unscale, clipping, optimizer
 * update with the schedule's learning rate) and mst_step_finish for the host's bookkeeping.
 * Evaluation runs mst_step_eval per batch.
 * Same seed and config give the same bits: every random draw comes from the context's seeded
 * generator or from the loader's (seed, epoch, index) streams.
 *
 *     mst_train_config cfg = mst_train_defaults();
 *     cfg.epochs = 1; cfg.optim = mst_optim_defaults(MST_OPTIM_SGD); ...
 *     mst_train_result res;
 *     if (mst_train(ctx, model, train_loader, test_loader, &cfg, &res) != MST_OK) ...;
 *     mst_train_result_free(&res);
 */
#ifndef MST_RUNTIME_TRAINER_H
#define MST_RUNTIME_TRAINER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "profiler/events.h"

#include "runtime/amp/loss_scale.h"
#include "runtime/amp/underflow.h"
#include "runtime/data/loader.h"
#include "runtime/lr_schedule.h"
#include "runtime/model.h"
#include "runtime/optim.h"

typedef struct {
    int64_t epochs;                 /* >= 0 */
    int64_t max_steps;              /* > 0 caps the run; 0 = epochs decide */
    int64_t sample_shape[3];        /* (C, H, W) of one sample; token sequences: (1, 1, L) */
    bool sample_tokens;             /* samples are i32 token ids: x is (N, L) i32, else (N, C, H, W) f32 */
    int64_t target_shape[3];        /* paired sources: (C, H, W) of the target images; zeros: i32 labels */
    bool eval;                      /* evaluate on the test loader after each epoch */
    int log_every;                  /* non-TTY progress: a line every log_every steps */
    mst_optim_config optim;
    mst_lr_schedule lr;             /* total_steps of a cosine schedule is set from the run length when 0 */
    const char *checkpoint_path;    /* NULL: no checkpoints */
    bool resume;                    /* continue from resume_path (NULL: checkpoint_path) */
    const char *resume_path;
    const char *config_text;        /* training-relevant settings ("key=value\n" lines), recorded in
                                       checkpoints; a resume with other values is refused, naming
                                       them, unless allow_config_change. NULL: not recorded */
    bool allow_config_change;
    bool finished_is_done;          /* resuming a checkpoint of a finished run: do nothing (set
                                       already_finished); false: evaluate and report it (a run
                                       killed after training, before its outputs were kept) */
    FILE *progress;                 /* NULL: silent */
    int progress_tty;               /* -1: detect with isatty */
    mst_profiler *profiler;         /* NULL: instrumentation off; else its schedule gates each step */
    volatile sig_atomic_t *stop;    /* when set (a SIGINT handler), stop cleanly after the current step */
    int amp_level;                  /* 0..3 = O0..O3 (runtime/amp/autocast.h); 0: all f32 */
    mst_dtype amp_dtype;            /* MST_DTYPE_F16 or MST_DTYPE_BF16 */
    mst_loss_scale_config loss_scale;   /* type none: no scaler (and no overflow check) */
    double clip_grad_norm;          /* > 0: clip gradients to this global L2 norm; 0 = off */
    bool graph;                     /* graph mode: the steps are traced once and replayed (runtime/step_runner.h) */
    bool dynamic_batch;             /* graph mode: one plan for every batch size up to the configured one */
    int accumulate_steps;           /* loader batches per optimizer step, 1..64; a step of an epoch's
                                       remainder batches is dropped */
    /* data parallelism (runtime/comm/): NULL or one rank = a single process. With N ranks the
     * loaders are the ranks' shards (mst_loader_config.shard_*), parameters and state are
     * broadcast from rank 0 at start, gradients averaged in buckets, the loss and evaluation
     * reduced over ranks, and only rank 0 writes checkpoints. */
    struct mst_comm *comm;
    double comm_bucket_mb;          /* gradient bucket size in MiB (> 0; 0 = 25, PyTorch DDP's default) */
    bool comm_overlap;              /* start each bucket's all-reduce during backward */
    int underflow_every;            /* profiled runs (profiler set) at O1..O3: the partial-underflow probe
                                       (runtime/amp/underflow.h) due on every N-th step, steps 0, N, 2N, ...,
                                       after the step, outside its profiler markers; 0 = never. Default
                                       MST_UNDERFLOW_EVERY */
    double underflow_budget;        /* the probes after the first two (steps 0 and N always run) run only
                                       while all but the first take at most this share of the training
                                       loop's time so far, the next one's estimated cost (the last one's)
                                       included; >= 1: every due probe. Default MST_UNDERFLOW_BUDGET */
} mst_train_config;

/* The default sampling period of the underflow probe: two extra eager forward + backward passes
 * every 50 steps (docs/amp.md has the measured cost). */
#define MST_UNDERFLOW_EVERY 50
/* ... and the share of the training loop the later probes may take: a warm probe costs about two
 * steps, so every 50 steps was ~4% of the loop, more than the whole default profile may cost
 * (docs/amp.md). */
#define MST_UNDERFLOW_BUDGET 0.01

/* One underflow probe: the step it followed, its counts and its wall time. */
typedef struct {
    int64_t step;
    mst_underflow_counts counts;
    double probe_ms;
} mst_underflow_sample;

typedef struct {
    double wall_s;                  /* training time of the epoch (evaluation excluded) */
    double train_loss;              /* mean over the epoch's steps */
    double val_accuracy, val_loss;  /* -1 when not evaluated (val_accuracy also for models whose metric is not accuracy) */
    double val_metric;              /* the model's metric (mst_model.metric); NAN when not evaluated */
    int64_t steps;
} mst_epoch_record;

typedef struct {
    int64_t steps;                  /* optimizer steps taken in total (resumed runs count earlier ones) */
    int64_t epochs;                 /* epochs completed */
    double val_accuracy, val_loss;  /* last evaluation; -1 when none ran (val_accuracy also when the metric is not accuracy) */
    double val_metric;              /* last evaluation of the model's metric; NAN when none ran */
    double final_loss;              /* training loss of the last step */
    double step_time_ms_median;     /* over this run's steps, first step of each epoch excluded */
    double step_time_ms_p90;        /* the same steps' 90th percentile (nearest rank) */
    int64_t samples;                /* samples this run processed (every micro-batch of every step it took; all ranks') */
    double steps_per_s, samples_per_s;  /* this run's steps and samples over train_loop_s */
    int64_t peak_memory_bytes;      /* allocator peak, all categories */
    double *losses;                 /* training loss of every step this run took */
    double *step_ms;                /* the same steps' times (NAN: an epoch's first step, warm-up, and a
                                       short last batch: not the work of the others) */
    int64_t n_losses;
    mst_epoch_record *epoch;        /* one per epoch this run worked on */
    int64_t n_epoch;
    int64_t resumed_at_step;        /* 0 unless resumed */
    bool interrupted;               /* stopped early through cfg->stop */
    bool already_finished;          /* resumed from a checkpoint of a finished run: nothing ran,
                                       nothing was written */
    int64_t warmup_clamped_from;    /* > 0: the cosine warmup was longer than the run and was
                                       clamped to a tenth of it (a note went to cfg->progress) */
    double wall_s;
    double train_loop_s;            /* the training loop's wall time: each epoch from its start to its last
                                       step's end, summed (warm-up, compiles, data waits and the loop's own
                                       work included; evaluation and checkpoints excluded): the training work */
    int amp_level;                  /* as configured */
    double loss_scale_final;        /* the scale after the last step; 1 without a scaler */
    int64_t overflow_steps;         /* steps with inf/NaN gradients (scaler's count, resumed runs included) */
    int64_t skipped_steps;          /* of which the update was skipped */
    int64_t compile_count;          /* graph mode: plans compiled (training and evaluation); 0 in eager */
    double compile_ms;              /* graph mode: time spent tracing, optimizing and planning them */
    int64_t arena_bytes;            /* graph mode: the largest plan's planned arena */
    int64_t intermediate_bytes;     /* graph mode: that plan's intermediates, summed without reuse */
    int graph_step_threads;         /* graph mode: the threads the training plan's step runs on at the end
                                       (1: the calling thread alone; runtime/graph/step_threads.h); 0 in eager */
    int step_threads;               /* either mode: the threads the training step runs on at the end (eager:
                                       its own trial, step_runner.h); 0 while undecided */
    int64_t arena_cat_bytes[MST_MEM_COUNT];     /* graph mode: peak live bytes in the arena per category (the larger plan's) */
    /* data parallel (zeros in one process): ranks, gradient buckets and bytes per step, and the
     * gradient all-reduces' time over the timed steps: exposed (waited for) and hidden (overlapped) */
    int comm_size;
    int comm_buckets;
    int64_t comm_grad_bytes;
    double comm_exposed_ms_median, comm_hidden_ms_median;
    double comm_allreduce_ms_median; /* start to completion of all buckets, summed per step */
    double *rank_step_ms;           /* (comm_size) each rank's median step time, gathered on every rank */
    double *rank_exposed_ms;        /* (comm_size) each rank's median exposed comm per step */
    double *rank_hidden_ms;         /* (comm_size) each rank's median hidden (overlapped) comm per step */
    /* the underflow probe (cfg->underflow_every): one sample per probed step, in order; their time
     * is excluded from train_loop_s and the epochs' wall_s (measurement, not training work) */
    mst_underflow_sample *underflow;
    int64_t n_underflow;
    int64_t underflow_over_budget;  /* due probes skipped for the budget (cfg->underflow_budget) */
    double underflow_probe_s;
} mst_train_result;

mst_train_config mst_train_defaults(void);
mst_status mst_train(mst_ctx *ctx, mst_model *model, mst_loader *train, mst_loader *test, const mst_train_config *cfg,
                     mst_train_result *res);
/* The model's metric (accuracy, or PSNR in dB averaged over images) and mean loss over one pass
 * of the loader (evaluation mode, no tape). */
mst_status mst_evaluate(mst_ctx *ctx, mst_model *model, mst_loader *loader, const mst_train_config *cfg, double *metric,
                        double *loss);
void mst_train_result_free(mst_train_result *res);

#endif
