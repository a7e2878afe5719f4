/* job.h — the job file: every setting of a training job as one plain struct, the schema table that
 * describes each setting once (path, type, default, range, help, offset), and the functions that
 * fill the struct from YAML, from `--set key.path=value`, validate it and write it back out.
 *
 * The trade-off: one flat table of leaf keys instead of per-section parsers. The loader, --set,
 * validation, JSON, YAML output, `mstune list keys` and docs/job.md all walk the same table, so a
 * key added there is parsed, checked, printed and documented everywhere; sections (data,
 * data.synthetic, ...) are just the dotted prefixes of the leaf paths. See docs/job.md.
 *
 *     mst_job job;
 *     char err[1024];
 *     if (mst_job_load(&job, "job.yaml", err, sizeof(err)) != 0 ||
 *         mst_job_set(&job, "data.batch_size=128", err, sizeof(err)) != 0 ||
 *         mst_job_validate(&job, err, sizeof(err)) != 0) {
 *         fprintf(stderr, "mstune: %s\n", err);      // "job.yaml:4:15: data.batch_size must be ..."
 *         return 2;
 *     }
 *     cJSON *cfg;
 *     if (mst_job_to_json(&job, &cfg) == 0) { ...; cJSON_Delete(cfg); }
 *
 * All functions returning int: 0 on success, -1 on error with a one-line message in err (err may
 * be NULL or errn 0 to discard it; messages are truncated to errn - 1 bytes).
 */
#ifndef MST_CLI_JOB_H
#define MST_CLI_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <cjson/cJSON.h>

/* ---- enumerated settings (value = index into the key's `values` names) ---- */

/* index = the row of workloads/zoo.c's mst_zoo with the same name (session.c looks it up by name) */
typedef enum { MST_JOB_MODEL_MLP, MST_JOB_MODEL_CNN, MST_JOB_MODEL_RESNET, MST_JOB_MODEL_TRANSFORMER, MST_JOB_MODEL_SRNET, MST_JOB_MODEL_PYTHON, MST_JOB_MODEL_COUNT } mst_job_model;
typedef enum { MST_JOB_DATASET_FASHION_MNIST, MST_JOB_DATASET_SYNTHETIC, MST_JOB_DATASET_LANGID, MST_JOB_DATASET_FASHION_SR, MST_JOB_DATASET_COUNT } mst_job_dataset;
typedef enum { MST_JOB_LOSS_L1, MST_JOB_LOSS_MSE, MST_JOB_LOSS_COUNT } mst_job_loss;
typedef enum { MST_JOB_AUGMENT_NONE, MST_JOB_AUGMENT_LIGHT, MST_JOB_AUGMENT_HEAVY, MST_JOB_AUGMENT_COUNT } mst_job_augment;
typedef enum { MST_JOB_OPTIM_SGD, MST_JOB_OPTIM_ADAM, MST_JOB_OPTIM_ADAMW, MST_JOB_OPTIM_COUNT } mst_job_optim;
typedef enum { MST_JOB_SCHED_CONSTANT, MST_JOB_SCHED_STEP, MST_JOB_SCHED_COSINE, MST_JOB_SCHED_COUNT } mst_job_schedule;
typedef enum { MST_JOB_MODE_EAGER, MST_JOB_MODE_GRAPH, MST_JOB_MODE_COUNT } mst_job_mode;
/* runtime.kernels, in the order of runtime/backend/kernel_choice.h's mst_kernels_mode */
typedef enum { MST_JOB_KERNELS_AUTO, MST_JOB_KERNELS_ONEDNN, MST_JOB_KERNELS_BUILTIN, MST_JOB_KERNELS_COUNT } mst_job_kernels;
/* the order of mst_step_threads_pin (runtime/graph/step_threads.h) */
typedef enum { MST_JOB_STEP_THREADS_AUTO, MST_JOB_STEP_THREADS_ALL, MST_JOB_STEP_THREADS_ONE, MST_JOB_STEP_THREADS_COUNT } mst_job_step_threads;
typedef enum { MST_JOB_DEVICE_CPU, MST_JOB_DEVICE_CUDA, MST_JOB_DEVICE_COUNT } mst_job_device;
typedef enum { MST_JOB_AMP_O0, MST_JOB_AMP_O1, MST_JOB_AMP_O2, MST_JOB_AMP_O3, MST_JOB_AMP_COUNT } mst_job_amp_level;
typedef enum { MST_JOB_HALF_F16, MST_JOB_HALF_BF16, MST_JOB_HALF_COUNT } mst_job_half;
/* auto: dynamic at O2, none at O0/O1/O3 (MindSpore's defaults); mst_job_loss_scale resolves it */
typedef enum { MST_JOB_SCALE_NONE, MST_JOB_SCALE_FIXED, MST_JOB_SCALE_DYNAMIC, MST_JOB_SCALE_AUTO, MST_JOB_SCALE_COUNT } mst_job_scale;

#define MST_JOB_NAME_MAX 128    /* bytes of mst_job.name, NUL included */
#define MST_JOB_PATH_MAX 4096   /* bytes of mst_job.data.path, NUL included */
#define MST_JOB_ARGS_MAX 2048   /* bytes of mst_job.model.args (JSON text), NUL included */

/* Every setting. Defaults and ranges are in the schema table (mst_job_keys), not here.
 * String fields are always NUL-terminated and zero-filled past the terminator, so two jobs with
 * the same settings compare equal with memcmp when both were filled through this API. */
typedef struct mst_job {
    char name[MST_JOB_NAME_MAX];            /* run name: out/<name>/ */
    struct {
        mst_job_model name;
        int hidden1, hidden2;               /* mlp hidden widths */
        int width;                          /* cnn stem channels */
        int blocks;                         /* cnn residual blocks */
        int d_model, heads, layers, ff;     /* transformer */
        mst_job_loss loss;                  /* srnet */
        double dropout;
        double init_gain;
        char file[MST_JOB_PATH_MAX];        /* python: the model file (resolved against the job file's folder on load) */
        char args[MST_JOB_ARGS_MAX];        /* python: the builder's keyword arguments, a JSON object */
    } model;
    struct {
        mst_job_dataset dataset;
        char path[MST_JOB_PATH_MAX];        /* Fashion-MNIST IDX folder */
        int batch_size, num_workers, prefetch;
        bool drop_remainder, shuffle, normalize;
        mst_job_augment augment;
        int limit;                          /* training samples used; 0 = all */
        struct {
            int samples, test_samples, classes;
            int channels, height, width;
            int delay_us;                   /* testing knob: busy work per sample, to inject a known loader cost */
        } synthetic;
        struct {
            char dir[MST_JOB_PATH_MAX];     /* Debian word lists */
            int max_len;                    /* tokens per sample, [CLS] included */
            int per_language;               /* training words per language (test: a ninth) */
        } langid;
    } data;
    struct {
        int epochs;
        int steps;                          /* > 0 caps the run; 0 = epochs decide */
        int seed;
        bool eval, checkpoint;
        bool allow_config_change;           /* --resume despite other training settings than the checkpoint's */
        int log_every;
        double clip_grad_norm;              /* > 0: clip to this global gradient norm; 0 = off */
        int accumulate_steps;               /* batches per optimizer step */
    } train;
    struct {
        mst_job_optim name;
        double lr, momentum;
        bool nesterov;
        double weight_decay, beta1, beta2, eps;
        mst_job_schedule schedule;
        int warmup_steps, step_size;
        double gamma, min_lr;
    } optimizer;
    struct {
        mst_job_mode mode;
        mst_job_device device;
        int threads;                        /* 0 = all cores */
        mst_job_kernels kernels;            /* which CPU provider runs matmul/conv (auto measures) */
        mst_job_step_threads step_threads;  /* the training step on all threads or one (auto measures) */
        bool dynamic_batch;                 /* graph mode: one plan for every batch size (read by graph mode) */
        bool flush_denormals;               /* FTZ/DAZ on every computing thread (runtime/fpu.h) */
        struct {                            /* data parallelism over several ranks (docs/distributed.md) */
            double bucket_mb;               /* gradient bucket size, MiB */
            bool overlap;                   /* all-reduce each bucket during backward */
            bool progress_thread;           /* test the buckets' all-reduces on a thread of their own */
            double timeout_s;               /* a collective waiting longer fails the run; 0 = never */
        } comm;
    } runtime;
    struct {
        int level;                          /* 0 steps, 1 ops, 2 detail (profiler/events.h) */
        int skip, warmup, active, repeat;   /* schedule */
        int wait;                           /* schedule: off steps opening each cycle (the cost measured in-run) */
        int op_every;                       /* per-op ranges on one kept step in op_every; totals on the others */
        int trace_steps;                    /* steps whose raw events are kept for the trace */
        bool sampler;                       /* libunwind stack sampler */
        int sample_hz;
    } profile;
    struct {
        mst_job_amp_level level;
        mst_job_half dtype;
        struct {
            mst_job_scale type;
            double init, factor;
            int window;
            bool drop_overflow_update;      /* fixed: skip the update on overflow */
        } loss_scale;
    } amp;
} mst_job;

/* ---- the schema: one row per leaf setting ---- */

typedef enum {
    MST_JOB_STRING,     /* char[size], NUL-terminated */
    MST_JOB_INT,        /* int, decimal */
    MST_JOB_FLOAT,      /* double, decimal or exponent notation, finite */
    MST_JOB_BOOL,       /* bool: true/false, yes/no, on/off */
    MST_JOB_ENUM,       /* a C enum (int-sized); the text is one of `values` */
    MST_JOB_TYPE_COUNT
} mst_job_type;

/* Range flags for MST_JOB_INT and MST_JOB_FLOAT (every numeric key has a lower bound). */
enum {
    MST_JOB_MIN_OPEN = 1u << 0,     /* value > min (default: >= min) */
    MST_JOB_HAS_MAX = 1u << 1,      /* an upper bound (ints are always <= 2147483647) */
    MST_JOB_MAX_OPEN = 1u << 2,     /* value < max (default: <= max) */
    MST_JOB_NAME_CHARS = 1u << 3,   /* string of A-Z a-z 0-9 . _ - not starting with '.' */
    MST_JOB_EMPTY_OK = 1u << 4,     /* string that may be empty (unset) */
    MST_JOB_JSON_OBJECT = 1u << 5,  /* string holding a JSON object; a job file may write it as a YAML mapping */
};

typedef struct {
    const char *path;               /* dotted: "data.synthetic.height" */
    mst_job_type type;
    size_t offset;                  /* offsetof(mst_job, ...) */
    size_t size;                    /* bytes of the field */
    const char *def;                /* default, written as a user would write it */
    const char *def_doc;            /* how docs show the default when it is computed (NULL: def) */
    double min, max;                /* numeric range, see the flags */
    unsigned flags;
    const char *const *values;      /* MST_JOB_ENUM: names, NULL-terminated, index = C value */
    const char *help;               /* one line */
} mst_job_key;

extern const mst_job_key mst_job_keys[];
extern const int mst_job_key_count;

const char *mst_job_type_name(mst_job_type t);          /* "string", "int", ... */
const mst_job_key *mst_job_key_find(const char *path);  /* NULL when no such leaf */

/* What a key accepts, as used in messages and docs: "an integer >= 1", "one of sgd, adam, adamw". */
void mst_job_key_expect(const mst_job_key *k, char *buf, size_t n);
/* The range column of the schema: ">= 1", ">= 0, < 1", "sgd|adam|adamw", "" for none. */
void mst_job_key_range(const mst_job_key *k, char *buf, size_t n);

/* Reads `text` (len bytes, not necessarily NUL-terminated) as the key's type and stores it in
 * job after checking the range. On error nothing is stored and err says
 * "<path> must be <expectation>" (no position: callers add where the text came from). */
int mst_job_key_parse(mst_job *job, const mst_job_key *k, const char *text, size_t len, char *err, size_t errn);
/* Checks the value stored in job against the key's type and range (same message as parse). */
int mst_job_key_check(const mst_job *job, const mst_job_key *k, char *err, size_t errn);
/* The stored value as text that mst_job_key_parse reads back to the same bits; enums by name,
 * floats in the shortest form that round-trips, always with a '.' (YAML 1.1 floats). */
void mst_job_key_format(const mst_job *job, const mst_job_key *k, char *buf, size_t n);

/* ---- the job ---- */

/* Every setting at its default; name = "job". */
void mst_job_defaults(mst_job *job);

/* Defaults, name = the file name without its extension (characters outside the name set become
 * '_'), then the file. On error job is left as it was and err is "path:line:column: message"
 * (or "cannot open job file 'path': reason"). */
int mst_job_load(mst_job *job, const char *path, char *err, size_t errn);

/* The same, from a YAML text in memory; `source` names it in messages. */
int mst_job_load_string(mst_job *job, const char *source, const char *text, size_t len, char *err, size_t errn);

/* One `--set key.path=value` override, typed and checked like the file:
 * "--set data.batch_size=-3: data.batch_size must be an integer >= 1". The value is the raw text
 * after the first '=' (surrounding blanks removed, no YAML quoting). */
int mst_job_set(mst_job *job, const char *assignment, char *err, size_t errn);

/* A setting's value as text (what mst_job_set would take back). -1 for an unknown path. */
int mst_job_get(const mst_job *job, const char *path, char *buf, size_t n, char *err, size_t errn);

/* Every key's type and range again (the struct may have been filled by hand), then the checks
 * that involve several keys. Messages name the keys, without positions. */
int mst_job_validate(const mst_job *job, char *err, size_t errn);

/* Bytes the job needs at least (parameters, gradients, optimizer state, one batch's activations;
 * see job_schema.c). mst_job_validate refuses a job whose estimate exceeds physical memory. */
double mst_job_memory_estimate(const mst_job *job);

/* The resolved config as nested JSON objects mirroring the YAML (every key, effective value;
 * enums as their names). *out is a new object for the caller to cJSON_Delete. -1: out of memory. */
int mst_job_to_json(const mst_job *job, cJSON **out);

/* Every key as a YAML job file, written atomically: a temp file in the same folder, fsync,
 * rename over path, fsync of the folder. mst_job_load of the result gives the same struct. */
int mst_job_write_yaml(const mst_job *job, const char *path, char *err, size_t errn);

/* amp.loss_scale.type with `auto` resolved for the job's amp.level: dynamic at O2, else none. */
mst_job_scale mst_job_loss_scale(const mst_job *job);

/* The schema as an aligned text table (key, type, default, range, meaning): `mstune list keys`. */
void mst_job_schema_print(FILE *f);

#endif
