/* profile_view.h — one profile database read into memory for rendering: run metadata and the job
 * config, the breakdown (profiler/store.h's own reader, so the numbers equal summary.json's),
 * every step row, the memory timeline, op statistics, folded stacks, sampler and overhead rows,
 * advisor trials. Reading it all up front keeps the renderers free of SQL; a 10-epoch cnn
 * profile (~9 400 steps) is well under a megabyte in memory.
 *
 *     rpt_profile p;
 *     if (rpt_profile_load(&p, "run/profile.db", err, errn) != 0) return -1;
 *     ... p.bd.share[MST_CAT_KERNEL], p.steps[i].wall_ms, p.ops[0].name ...
 *     rpt_profile_free(&p);
 */
#ifndef MST_PROFILER_PROFILE_VIEW_H
#define MST_PROFILER_PROFILE_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "profiler/events.h"
#include "profiler/store.h"

typedef struct {
    int64_t step;
    double wall_ms;
    double cat_ms[MST_CAT_COUNT];
    bool warmup;
    bool used;                          /* one of the steps the summaries cover (bd.includes_warmup aware) */
    bool has_loss, has_lr, has_scale;
    double loss, lr, loss_scale;
    int overflow;                       /* 1 skipped by the loss scaler, 0 not, -1 not recorded */
    int64_t unmatched;
    int64_t n_events;                   /* the main thread's records inside the step, markers included */
    /* data parallel: the communicator's counters for the step (runtime/comm/comm.c), 0 when absent */
    bool has_comm;
    double comm_wait_ms, comm_busy_ms;  /* exposed wait; start-to-completion of the all-reduces */
    int64_t comm_calls, comm_bytes;     /* gradient all-reduces and their payload bytes */
} rpt_step;

/* An op's statistics: the store's one row type (profiler/store.h). */
typedef mst_op_row rpt_op;

/* One call signature of a kernel as the events recorded it (kernel BEGIN payloads, profiler level
 * ops): the slice's name (the op_stats row it counts in), the op id, the signature text
 * ("[[64,784],[256,784]]|f32,f32|i:0,1", runtime/op.h: mst_op_signature) and its number of calls. */
typedef struct {
    char *name;
    int op;
    char *sig;
    int64_t calls;
} rpt_op_sig;

typedef struct {
    char *stack;        /* "root;...;leaf" */
    int64_t count;      /* summed over threads */
} rpt_sample;

typedef struct {
    char *change, *status, *reason;
    char *rule, *evidence;              /* from metrics_json (the advisor's finding); "" when absent */
    double predicted, measured, ci_low, ci_high, accuracy_delta;  /* NAN when not recorded */
    int64_t memory_delta;
    bool has_memory_delta;
} rpt_trial;

#define RPT_MEM_CATS 8

typedef struct {
    char *path;
    /* run metadata */
    char **meta_key, **meta_value;
    int n_meta;
    cJSON *config;                      /* the job config from run.config (NULL if absent or unparsable) */
    const char *job_name, *model_name;  /* from config; "" when unknown */
    int64_t batch_size;                 /* 0 when unknown */
    int64_t num_workers;                /* -1 when unknown */
    int level;                          /* profiler.level */
    int op_every;                       /* profiler.op_every: profiled steps record ops one in N (1: all; older profiles) */
    /* steps */
    mst_breakdown bd;
    rpt_step *steps;
    int64_t n_steps, n_used;
    int64_t n_loss, n_scale, n_overflow, n_unmatched_steps;
    int64_t n_comm;                     /* steps with the communicator's counters */
    /* memory timeline (level 2): mem_bytes[c][i] for step mem_steps[i], -1 where not sampled */
    int n_mem_cats;
    char *mem_cat[RPT_MEM_CATS];
    int64_t *mem_steps;
    int64_t *mem_bytes[RPT_MEM_CATS];
    int64_t n_mem_steps;
    int64_t mem_peak_step_total;        /* max over steps of the categories' sum; -1 without a timeline */
    int64_t mem_peak_step;
    int n_peaks;
    char *peak_cat[RPT_MEM_CATS];
    int64_t peak_bytes[RPT_MEM_CATS];
    /* ops, largest total kernel time first */
    rpt_op *ops;
    int n_ops;
    int64_t ops_total_ns;
    /* kernel call signatures, most calls first within an op, after rpt_profile_load_sigs (none
     * below level ops, or from profiles written before signatures were recorded) */
    rpt_op_sig *sigs;
    int n_sigs;
    /* sampler */
    rpt_sample *samples;
    int64_t n_samples, samples_total;
    double sampler_dispatch_share;      /* -1 when the sampler did not run */
    int64_t sampler_samples;            /* the main thread's samples the share rests on */
    double sampler_hz;
    /* profiler health */
    double overhead_share;              /* -1 when not recorded */
    double record_ns;                   /* one record's calibrated cost; NAN when not recorded */
    double prep_ns_per_record;          /* the callers' preparation of records, per record, signature-cache
                                           misses left out (a steady step's); NAN likewise */
    int64_t events_dropped;
    int64_t n_threads;
    /* advisor */
    rpt_trial *trials;
    int n_trials;
} rpt_profile;

/* Read the profile at path. 0, or -1 with a message naming the path (missing file, not a
 * profile, wrong schema version, unreadable table). */
int rpt_profile_load(rpt_profile *p, const char *path, char *err, size_t errn);
void rpt_profile_free(rpt_profile *p);
/* Read the kernel call signatures into p->sigs (a scan of the events: only its users pay it). 0, or
 * -1 with a message naming the path. */
int rpt_profile_load_sigs(rpt_profile *p, char *err, size_t errn);
/* A run metadata value, or NULL. */
const char *rpt_profile_meta(const rpt_profile *p, const char *key);
/* The category with the largest share of step time. */
mst_prof_cat rpt_profile_top_category(const rpt_profile *p);
/* Median of n doubles (copied, input untouched); 0 when n is 0. */
double rpt_median(const double *v, int64_t n);

#endif
