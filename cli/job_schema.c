/* job_schema.c — the job schema table and what is done to one key at a time: read a value from
 * text, check its range, format it back, describe it for messages, docs and `mstune list keys`.
 *
 * Values are read by the key's type, not by YAML's tag resolution: `batch_size: "64"` is 64 and
 * `name: 123` is the string "123". That is what makes `--set key=value` (raw text, no YAML) and
 * the file behave the same. Floats are written in the shortest form that reads back to the same
 * double, with a '.' so YAML 1.1 readers (PyYAML) also see a float.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/job.h"
#include "runtime/data/loader.h"
#include "runtime/status.h"

/* ---- enum names, indexed by the C enum ---- */

#define NAMES(var, count, ...)                                  \
    static const char *const var[] = {__VA_ARGS__, NULL};       \
    _Static_assert(sizeof(var) / sizeof(var[0]) == (count) + 1, #var " must name every value of its enum")

NAMES(model_names, MST_JOB_MODEL_COUNT, "mlp", "cnn", "resnet", "transformer", "srnet", "python");
NAMES(dataset_names, MST_JOB_DATASET_COUNT, "fashion_mnist", "synthetic", "langid", "fashion_sr");
NAMES(loss_names, MST_JOB_LOSS_COUNT, "l1", "mse");
NAMES(augment_names, MST_JOB_AUGMENT_COUNT, "none", "light", "heavy");
NAMES(optim_names, MST_JOB_OPTIM_COUNT, "sgd", "adam", "adamw");
NAMES(schedule_names, MST_JOB_SCHED_COUNT, "constant", "step", "cosine");
NAMES(mode_names, MST_JOB_MODE_COUNT, "eager", "graph");
NAMES(device_names, MST_JOB_DEVICE_COUNT, "cpu", "cuda");
NAMES(kernels_names, MST_JOB_KERNELS_COUNT, "auto", "onednn", "builtin");
NAMES(step_threads_names, MST_JOB_STEP_THREADS_COUNT, "auto", "all", "one");
NAMES(amp_names, MST_JOB_AMP_COUNT, "O0", "O1", "O2", "O3");
NAMES(half_names, MST_JOB_HALF_COUNT, "f16", "bf16");
NAMES(scale_names, MST_JOB_SCALE_COUNT, "none", "fixed", "dynamic", "auto");

/* Enum fields are stored and read as int. */
_Static_assert(sizeof(mst_job_model) == sizeof(int) && sizeof(mst_job_dataset) == sizeof(int) &&
                   sizeof(mst_job_augment) == sizeof(int) && sizeof(mst_job_optim) == sizeof(int) &&
                   sizeof(mst_job_schedule) == sizeof(int) && sizeof(mst_job_mode) == sizeof(int) &&
                   sizeof(mst_job_device) == sizeof(int) && sizeof(mst_job_amp_level) == sizeof(int) &&
                   sizeof(mst_job_half) == sizeof(int) && sizeof(mst_job_scale) == sizeof(int) &&
                   sizeof(mst_job_kernels) == sizeof(int) && sizeof(mst_job_loss) == sizeof(int) &&
                   sizeof(mst_job_step_threads) == sizeof(int),
               "job enums must be int-sized");

/* ---- the table ---- */

/* Upper bounds of the keys whose size drives memory: each is the one limit of its key, and the
 * memory estimate (mst_job_memory_estimate) checks what they combine to. */
#define MST_JOB_MAX_HIDDEN 65536
#define MST_JOB_MAX_CNN_WIDTH 1024
#define MST_JOB_MAX_BATCH 65536
#define MST_JOB_MAX_THREADS 256
#define MST_JOB_MAX_SAMPLE_DIM 4096

#define AT(member) offsetof(mst_job, member), sizeof(((mst_job *)0)->member)
#define STR(p, m, def, doc, fl, help) {p, MST_JOB_STRING, AT(m), def, doc, 0, 0, fl, NULL, help}
#define INT(p, m, def, lo, help) {p, MST_JOB_INT, AT(m), def, NULL, lo, 0, 0, NULL, help}
#define INTMAX(p, m, def, lo, hi, help) {p, MST_JOB_INT, AT(m), def, NULL, lo, hi, MST_JOB_HAS_MAX, NULL, help}
#define FLT(p, m, def, lo, hi, fl, help) {p, MST_JOB_FLOAT, AT(m), def, NULL, lo, hi, fl, NULL, help}
#define BOOL(p, m, def, help) {p, MST_JOB_BOOL, AT(m), def, NULL, 0, 0, 0, NULL, help}
#define ENUM(p, m, def, names, help) {p, MST_JOB_ENUM, AT(m), def, NULL, 0, 0, 0, names, help}

/* Order matters: it is the order of docs, YAML and JSON output, and a section's keys are
 * contiguous (tests/cli/test_job.c checks it). */
const mst_job_key mst_job_keys[] = {
    STR("name", name, "job", "file name", MST_JOB_NAME_CHARS,
        "run name: outputs go to out/<name>/; defaults to the job file's name without extension"),

    ENUM("model.name", model.name, "mlp", model_names, "model from the zoo"),
    STR("model.file", model.file, "", NULL, MST_JOB_EMPTY_OK,
        "python: the model file defining build(info, **args) (relative paths: to the job file's folder; docs/python.md)"),
    STR("model.args", model.args, "{}", NULL, MST_JOB_JSON_OBJECT,
        "python: keyword arguments for build(), a mapping (numbers, strings, booleans, lists)"),
    INTMAX("model.hidden1", model.hidden1, "256", 1, MST_JOB_MAX_HIDDEN, "mlp: width of the first hidden layer"),
    INTMAX("model.hidden2", model.hidden2, "128", 1, MST_JOB_MAX_HIDDEN, "mlp: width of the second hidden layer"),
    INTMAX("model.width", model.width, "32", 1, MST_JOB_MAX_CNN_WIDTH, "cnn: stem channels (each later block doubles them); resnet: first stage bottleneck width; srnet: feature channels"),
    INTMAX("model.blocks", model.blocks, "2", 1, 16, "cnn: residual blocks (each after the first halves H and W); resnet: bottlenecks per stage (depth 9 blocks + 2); srnet: residual blocks"),
    INTMAX("model.d_model", model.d_model, "64", 1, MST_JOB_MAX_HIDDEN, "transformer: width of the token representations"),
    INTMAX("model.heads", model.heads, "4", 1, 256, "transformer: attention heads (model.d_model must be a multiple)"),
    INTMAX("model.layers", model.layers, "2", 1, 24, "transformer: encoder blocks"),
    INTMAX("model.ff", model.ff, "0", 0, MST_JOB_MAX_HIDDEN, "transformer: MLP hidden width (0 = 4 x model.d_model)"),
    ENUM("model.loss", model.loss, "l1", loss_names, "srnet: training loss against the high-resolution image"),
    FLT("model.init_gain", model.init_gain, "1", 0, 0, MST_JOB_MIN_OPEN,
        "multiplies every weight's init bound (1 = PyTorch's default init)"),
    FLT("model.dropout", model.dropout, "0", 0, 1, MST_JOB_HAS_MAX | MST_JOB_MAX_OPEN,
        "mlp: dropout probability after each hidden layer"),

    ENUM("data.dataset", data.dataset, "fashion_mnist", dataset_names, "training data source"),
    STR("data.path", data.path, "/usr/share/datasets/fashion-mnist", NULL, 0,
        "fashion_mnist: folder holding the IDX files (relative paths: to the working directory)"),
    INTMAX("data.batch_size", data.batch_size, "64", 1, MST_JOB_MAX_BATCH, "samples per training step"),
    INTMAX("data.num_workers", data.num_workers, "0", 0, MST_LOADER_MAX_WORKERS, "loader threads (0 = load on the training thread)"),
    INTMAX("data.prefetch", data.prefetch, "2", 1, 1024, "batches prepared ahead of the training step"),
    BOOL("data.drop_remainder", data.drop_remainder, "false", "drop the last partial batch of each epoch"),
    BOOL("data.shuffle", data.shuffle, "true", "reshuffle the training samples each epoch (seeded)"),
    ENUM("data.augment", data.augment, "none", augment_names,
         "training augmentation: light = random crop + flip; heavy adds an expensive distortion"),
    BOOL("data.normalize", data.normalize, "true", "scale pixels to zero mean, unit variance"),
    INT("data.limit", data.limit, "0", 0, "use the first N training samples (0 = all)"),
    INT("data.synthetic.samples", data.synthetic.samples, "8192", 1, "synthetic: training samples"),
    INT("data.synthetic.test_samples", data.synthetic.test_samples, "2048", 1, "synthetic: held-out samples"),
    INTMAX("data.synthetic.classes", data.synthetic.classes, "10", 2, 65536, "synthetic: number of classes"),
    INTMAX("data.synthetic.channels", data.synthetic.channels, "1", 1, MST_JOB_MAX_SAMPLE_DIM, "synthetic: sample channels"),
    INTMAX("data.synthetic.height", data.synthetic.height, "28", 1, MST_JOB_MAX_SAMPLE_DIM, "synthetic: sample height"),
    INTMAX("data.synthetic.width", data.synthetic.width, "28", 1, MST_JOB_MAX_SAMPLE_DIM, "synthetic: sample width"),
    INTMAX("data.synthetic.delay_us", data.synthetic.delay_us, "0", 0, 1000000,
           "synthetic, testing knob: busy work per sample in microseconds (a known loader cost)"),
    STR("data.langid.dir", data.langid.dir, "/usr/share/dict", NULL, 0,
        "langid: folder of Debian's word lists (american-english, ngerman, french, italian, spanish, portuguese, dutch, swedish)"),
    INTMAX("data.langid.max_len", data.langid.max_len, "24", 2, 1024,
           "langid: tokens per word, [CLS] included (longer words are truncated)"),
    INT("data.langid.per_language", data.langid.per_language, "20000", 1,
        "langid: training words per language, a uniform subset by hash (the test split gets a ninth as many)"),

    INT("train.epochs", train.epochs, "1", 0, "passes over the training data"),
    INT("train.steps", train.steps, "0", 0, "optimizer steps; > 0 caps the run, 0 = the epochs decide"),
    INT("train.seed", train.seed, "0", 0, "seed of every random draw (init, shuffle, augmentation, dropout)"),
    BOOL("train.eval", train.eval, "true", "evaluate on the held-out split after each epoch"),
    INT("train.log_every", train.log_every, "50", 1, "without a terminal: a progress line every N steps"),
    BOOL("train.checkpoint", train.checkpoint, "true", "write resumable checkpoints (atomically) during the run"),
    BOOL("train.allow_config_change", train.allow_config_change, "false",
         "--resume even when training settings differ from the checkpoint's (they are listed)"),
    FLT("train.clip_grad_norm", train.clip_grad_norm, "0", 0, 0, 0,
        "clip gradients to this global L2 norm after unscaling (0 = off)"),
    INTMAX("train.accumulate_steps", train.accumulate_steps, "1", 1, 64,
           "batches per optimizer step (gradient accumulation); an epoch's remainder batches are dropped"),

    ENUM("optimizer.name", optimizer.name, "sgd", optim_names, "update rule (PyTorch semantics)"),
    FLT("optimizer.lr", optimizer.lr, "0.05", 0, 0, MST_JOB_MIN_OPEN, "base learning rate"),
    FLT("optimizer.momentum", optimizer.momentum, "0.9", 0, 0, 0, "sgd: momentum"),
    BOOL("optimizer.nesterov", optimizer.nesterov, "false", "sgd: Nesterov momentum (needs momentum > 0)"),
    FLT("optimizer.weight_decay", optimizer.weight_decay, "0", 0, 0, 0,
        "L2 penalty (sgd, adam) or decoupled decay (adamw)"),
    FLT("optimizer.beta1", optimizer.beta1, "0.9", 0, 1, MST_JOB_HAS_MAX | MST_JOB_MAX_OPEN,
        "adam/adamw: first-moment decay"),
    FLT("optimizer.beta2", optimizer.beta2, "0.999", 0, 1, MST_JOB_HAS_MAX | MST_JOB_MAX_OPEN,
        "adam/adamw: second-moment decay"),
    FLT("optimizer.eps", optimizer.eps, "1e-8", 0, 0, MST_JOB_MIN_OPEN, "adam/adamw: denominator epsilon"),
    ENUM("optimizer.schedule", optimizer.schedule, "constant", schedule_names,
         "learning-rate schedule after the warmup"),
    INT("optimizer.warmup_steps", optimizer.warmup_steps, "0", 0, "linear warmup steps (0 = none)"),
    INT("optimizer.step_size", optimizer.step_size, "1000", 1, "step: multiply the lr by gamma every N steps"),
    FLT("optimizer.gamma", optimizer.gamma, "0.1", 0, 0, MST_JOB_MIN_OPEN, "step: decay factor"),
    FLT("optimizer.min_lr", optimizer.min_lr, "0", 0, 0, 0, "cosine: learning rate at the end of the run"),

    ENUM("runtime.mode", runtime.mode, "eager", mode_names, "eager dispatch per op, or a traced, compiled graph"),
    ENUM("runtime.device", runtime.device, "cpu", device_names, "where kernels run (cuda needs a CUDA build)"),
    INTMAX("runtime.threads", runtime.threads, "0", 0, MST_JOB_MAX_THREADS, "thread budget for kernels and loader (0 = all cores)"),
    ENUM("runtime.kernels", runtime.kernels, "auto", kernels_names,
         "CPU provider for matmul/linear/conv: auto (faster of oneDNN and builtin, measured per shape), onednn, builtin"),
    ENUM("runtime.step_threads", runtime.step_threads, "auto", step_threads_names,
         "the training step on all threads or the calling thread alone: auto (the faster, timed by the first steps and kept per machine; the budgets' bits differ in f32 rounding), all, one"),
    BOOL("runtime.dynamic_batch", runtime.dynamic_batch, "false",
         "graph: one compiled plan for every batch size instead of one per shape"),
    BOOL("runtime.flush_denormals", runtime.flush_denormals, "false",
         "flush subnormal floats to zero (FTZ/DAZ) on every computing thread; changes the numerics"),
    FLT("runtime.comm.bucket_mb", runtime.comm.bucket_mb, "25", 0, 4096, MST_JOB_MIN_OPEN | MST_JOB_HAS_MAX,
        "data parallel (--nproc N): gradient bucket size in MiB; each bucket is one all-reduce"),
    BOOL("runtime.comm.overlap", runtime.comm.overlap, "true",
         "data parallel: start each bucket's all-reduce during backward as soon as its gradients are complete"),
    BOOL("runtime.comm.progress_thread", runtime.comm.progress_thread, "false",
         "data parallel: test the buckets' all-reduces on a thread of their own, so transfers move while backward computes (needs a spare core)"),
    FLT("runtime.comm.timeout_s", runtime.comm.timeout_s, "120", 0, 86400, MST_JOB_HAS_MAX,
        "data parallel: a collective that waits longer for the other ranks fails the run (0 = wait forever)"),

    INTMAX("profile.level", profile.level, "1", 0, 2,
           "mstune profile: 0 per-step totals, 1 plus per-op ranges, 2 plus memory events"),
    INT("profile.skip", profile.skip, "0", 0, "schedule: steps not recorded at the start"),
    INT("profile.warmup", profile.warmup, "1", 0, "schedule: steps recorded then dropped before each active window"),
    INT("profile.active", profile.active, "0", 0, "schedule: steps kept per window (0 = every step)"),
    INT("profile.repeat", profile.repeat, "0", 0, "schedule: windows (0 = until the run ends)"),
    INT("profile.wait", profile.wait, "0", 0,
        "schedule: steps not recorded (sampler paused too) opening each window; > 0 measures the profile's cost in this run"),
    INT("profile.op_every", profile.op_every, "4", 1,
        "level >= 1: per-op ranges (and level 2's memory events) on one kept step in N, per-step totals on the others"),
    INT("profile.trace_steps", profile.trace_steps, "20", 0, "steps whose raw events are kept for the trace"),
    BOOL("profile.sampler", profile.sampler, "true", "sample call stacks for the flame graph and to cross-check dispatch time"),
    INTMAX("profile.sample_hz", profile.sample_hz, "29", 1, 10000,
           "sampler rate per thread (its cost against the rate: bench/profile_cost_inrun.sh, docs/sampler.md)"),

    ENUM("amp.level", amp.level, "O0", amp_names,
         "mixed precision: O0 f32, O1 allow-list half, O2 half but norms/loss, O3 all half"),
    ENUM("amp.dtype", amp.dtype, "f16", half_names, "half-precision type"),
    ENUM("amp.loss_scale.type", amp.loss_scale.type, "auto", scale_names,
         "loss scaling; auto = dynamic at O2, none at O0/O1/O3 (MindSpore's defaults)"),
    FLT("amp.loss_scale.init", amp.loss_scale.init, "16777216", 0, 0, MST_JOB_MIN_OPEN,
        "initial (or fixed) loss scale; the default is 2^24"),
    FLT("amp.loss_scale.factor", amp.loss_scale.factor, "2", 1, 0, MST_JOB_MIN_OPEN,
        "dynamic: grow/shrink factor of the scale"),
    INT("amp.loss_scale.window", amp.loss_scale.window, "2000", 1, "dynamic: clean steps before the scale grows"),
    BOOL("amp.loss_scale.drop_overflow_update", amp.loss_scale.drop_overflow_update, "true",
         "fixed: skip the optimizer update on a step with inf/NaN gradients (dynamic always does)"),
};
const int mst_job_key_count = (int)(sizeof(mst_job_keys) / sizeof(mst_job_keys[0]));

static const char *const type_names[] = {"string", "int", "float", "bool", "enum"};
_Static_assert(sizeof(type_names) / sizeof(type_names[0]) == MST_JOB_TYPE_COUNT, "type_names must name every type");

const char *mst_job_type_name(mst_job_type t) {
    return (unsigned)t < MST_JOB_TYPE_COUNT ? type_names[t] : "?";
}

const mst_job_key *mst_job_key_find(const char *path) {
    for (int i = 0; i < mst_job_key_count; i++)
        if (strcmp(mst_job_keys[i].path, path) == 0) return &mst_job_keys[i];
    return NULL;
}

/* ---- text helpers ---- */

/* snprintf at the end of buf[0..*len), never past n. */
static void append(char *buf, size_t n, size_t *len, const char *fmt, ...) {
    if (*len >= n) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *len, n - *len, fmt, ap);
    va_end(ap);
    if (w > 0) *len = (size_t)w >= n - *len ? n - 1 : *len + (size_t)w;
}

/* The shortest %g form that reads back to exactly x. */
static void shortest_double(double x, char *buf, size_t n) {
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, x);
        if (strtod(tmp, NULL) == x) break;
    }
    snprintf(buf, n, "%s", tmp);
}

static void range_words(const mst_job_key *k, char *buf, size_t n, bool for_range_column) {
    char lo[40], hi[40];
    size_t len = 0;
    buf[0] = '\0';
    shortest_double(k->min, lo, sizeof(lo));
    shortest_double(k->max, hi, sizeof(hi));
    append(buf, n, &len, "%s %s", (k->flags & MST_JOB_MIN_OPEN) ? ">" : ">=", lo);
    if (k->flags & MST_JOB_HAS_MAX)
        append(buf, n, &len, "%s%s %s", for_range_column ? ", " : " and ", (k->flags & MST_JOB_MAX_OPEN) ? "<" : "<=", hi);
}

static void join_values(const mst_job_key *k, const char *sep, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; k->values[i]; i++) append(buf, n, &len, "%s%s", i ? sep : "", k->values[i]);
}

void mst_job_key_expect(const mst_job_key *k, char *buf, size_t n) {
    char r[256];
    if (n == 0) return;
    switch (k->type) {
    case MST_JOB_STRING:
        if (k->flags & MST_JOB_NAME_CHARS)
            snprintf(buf, n, "a name of 1 to %zu characters from A-Z a-z 0-9 . _ - (not starting with '.')", k->size - 1);
        else if (k->flags & MST_JOB_JSON_OBJECT)
            snprintf(buf, n, "a mapping (or its JSON text) of at most %zu bytes as JSON", k->size - 1);
        else if (k->flags & MST_JOB_EMPTY_OK)
            snprintf(buf, n, "a string of at most %zu bytes (empty: unset)", k->size - 1);
        else
            snprintf(buf, n, "a non-empty string of at most %zu bytes", k->size - 1);
        break;
    case MST_JOB_INT: range_words(k, r, sizeof(r), false); snprintf(buf, n, "an integer %s", r); break;
    case MST_JOB_FLOAT: range_words(k, r, sizeof(r), false); snprintf(buf, n, "a number %s", r); break;
    case MST_JOB_BOOL: snprintf(buf, n, "true or false"); break;
    case MST_JOB_ENUM: join_values(k, ", ", r, sizeof(r)); snprintf(buf, n, "one of %s", r); break;
    default: snprintf(buf, n, "?"); break;
    }
}

void mst_job_key_range(const mst_job_key *k, char *buf, size_t n) {
    if (n == 0) return;
    switch (k->type) {
    case MST_JOB_STRING:
        snprintf(buf, n, "%s", (k->flags & MST_JOB_NAME_CHARS)    ? "A-Z a-z 0-9 . _ -"
                               : (k->flags & MST_JOB_JSON_OBJECT) ? "mapping"
                               : (k->flags & MST_JOB_EMPTY_OK)    ? ""
                                                                  : "non-empty");
        break;
    case MST_JOB_INT:
    case MST_JOB_FLOAT: range_words(k, buf, n, true); break;
    case MST_JOB_BOOL: snprintf(buf, n, "true|false"); break;
    case MST_JOB_ENUM: join_values(k, "|", buf, n); break;
    default: buf[0] = '\0'; break;
    }
}

static int expect_error(const mst_job_key *k, const char *extra, char *err, size_t errn) {
    if (err && errn) {
        char e[256];
        mst_job_key_expect(k, e, sizeof(e));
        snprintf(err, errn, "%s must be %s%s", k->path, e, extra ? extra : "");
    }
    return -1;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* [+-]?[0-9]+ */
static bool int_syntax(const char *s, size_t len) {
    size_t i = 0;
    if (i < len && (s[i] == '+' || s[i] == '-')) i++;
    if (i == len) return false;
    for (; i < len; i++)
        if (!is_digit(s[i])) return false;
    return true;
}

/* [+-]? (digits [. digits*] | . digits) ([eE] [+-]? digits)? — no inf, nan, hex or blanks. */
static bool float_syntax(const char *s, size_t len) {
    size_t i = 0, mant = 0;
    if (i < len && (s[i] == '+' || s[i] == '-')) i++;
    while (i < len && is_digit(s[i])) i++, mant++;
    if (i < len && s[i] == '.') {
        i++;
        while (i < len && is_digit(s[i])) i++, mant++;
    }
    if (mant == 0) return false;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-')) i++;
        size_t exp = 0;
        while (i < len && is_digit(s[i])) i++, exp++;
        if (exp == 0) return false;
    }
    return i == len;
}

static bool in_range(const mst_job_key *k, double v) {
    if ((k->flags & MST_JOB_MIN_OPEN) ? !(v > k->min) : !(v >= k->min)) return false;
    if (k->flags & MST_JOB_HAS_MAX) {
        if ((k->flags & MST_JOB_MAX_OPEN) ? !(v < k->max) : !(v <= k->max)) return false;
    }
    return true;
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '.' || c == '_' || c == '-';
}

static bool json_object_ok(const char *s, size_t len) {
    cJSON *j = cJSON_ParseWithLength(s, len);
    bool ok = j && cJSON_IsObject(j);
    cJSON_Delete(j);
    return ok;
}

static bool string_ok(const mst_job_key *k, const char *s, size_t len) {
    if (len == 0) return (k->flags & MST_JOB_EMPTY_OK) != 0;
    if (len >= k->size || memchr(s, '\0', len)) return false;
    if ((k->flags & MST_JOB_JSON_OBJECT) && !json_object_ok(s, len)) return false;
    if (k->flags & MST_JOB_NAME_CHARS) {
        if (s[0] == '.') return false;
        for (size_t i = 0; i < len; i++)
            if (!name_char(s[i])) return false;
    }
    return true;
}

/* YAML 1.1 booleans, without the single letters y/n. */
static int parse_bool(const char *s, size_t len) {
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strlen(yes[i]) == len && memcmp(yes[i], s, len) == 0) return 1;
        if (strlen(no[i]) == len && memcmp(no[i], s, len) == 0) return 0;
    }
    return -1;
}

static int parse_enum(const mst_job_key *k, const char *s, size_t len) {
    for (int i = 0; k->values[i]; i++) {
        const char *v = k->values[i];
        if (strlen(v) != len) continue;
        size_t j = 0;
        while (j < len && tolower((unsigned char)v[j]) == tolower((unsigned char)s[j])) j++;
        if (j == len) return i;
    }
    return -1;
}

int mst_job_key_parse(mst_job *job, const mst_job_key *k, const char *text, size_t len, char *err, size_t errn) {
    char *field = (char *)job + k->offset;
    char num[320];
    switch (k->type) {
    case MST_JOB_STRING:
        if (!string_ok(k, text, len)) return expect_error(k, NULL, err, errn);
        memset(field, 0, k->size);
        memcpy(field, text, len);
        return 0;
    case MST_JOB_INT: {
        if (!int_syntax(text, len)) return expect_error(k, NULL, err, errn);
        if (len >= 24) return expect_error(k, (k->flags & MST_JOB_HAS_MAX) ? NULL : " and <= 2147483647", err, errn);
        memcpy(num, text, len);
        num[len] = '\0';
        errno = 0;
        long long v = strtoll(num, NULL, 10);
        if (errno == ERANGE || v > INT_MAX || v < INT_MIN)
            return expect_error(k, (k->flags & MST_JOB_HAS_MAX) ? NULL : " and <= 2147483647", err, errn);
        if (!in_range(k, (double)v)) return expect_error(k, NULL, err, errn);
        *(int *)field = (int)v;
        return 0;
    }
    case MST_JOB_FLOAT: {
        if (len >= sizeof(num) || !float_syntax(text, len)) return expect_error(k, NULL, err, errn);
        memcpy(num, text, len);
        num[len] = '\0';
        double v = strtod(num, NULL);
        if (!isfinite(v) || !in_range(k, v)) return expect_error(k, NULL, err, errn);
        *(double *)field = v;
        return 0;
    }
    case MST_JOB_BOOL: {
        int b = parse_bool(text, len);
        if (b < 0) return expect_error(k, NULL, err, errn);
        *(bool *)field = b != 0;
        return 0;
    }
    case MST_JOB_ENUM: {
        int e = parse_enum(k, text, len);
        if (e < 0) return expect_error(k, NULL, err, errn);
        *(int *)field = e;
        return 0;
    }
    default: MST_ASSERT(!"unknown job key type"); return -1;
    }
}

int mst_job_key_check(const mst_job *job, const mst_job_key *k, char *err, size_t errn) {
    const char *field = (const char *)job + k->offset;
    switch (k->type) {
    case MST_JOB_STRING: {
        const char *end = memchr(field, '\0', k->size);
        if (!end || !string_ok(k, field, (size_t)(end - field))) return expect_error(k, NULL, err, errn);
        return 0;
    }
    case MST_JOB_INT: return in_range(k, (double)*(const int *)field) ? 0 : expect_error(k, NULL, err, errn);
    case MST_JOB_FLOAT: {
        double v = *(const double *)field;
        return isfinite(v) && in_range(k, v) ? 0 : expect_error(k, NULL, err, errn);
    }
    case MST_JOB_BOOL: {
        unsigned char b;
        memcpy(&b, field, 1);   /* a hand-filled bool may hold any byte */
        return b <= 1 ? 0 : expect_error(k, NULL, err, errn);
    }
    case MST_JOB_ENUM: {
        int e = *(const int *)field, count = 0;
        while (k->values[count]) count++;
        return e >= 0 && e < count ? 0 : expect_error(k, NULL, err, errn);
    }
    default: MST_ASSERT(!"unknown job key type"); return -1;
    }
}

void mst_job_key_format(const mst_job *job, const mst_job_key *k, char *buf, size_t n) {
    const char *field = (const char *)job + k->offset;
    if (n == 0) return;
    switch (k->type) {
    case MST_JOB_STRING: {
        const char *end = memchr(field, '\0', k->size);
        int len = end ? (int)(end - field) : (int)k->size;
        snprintf(buf, n, "%.*s", len, field);
        break;
    }
    case MST_JOB_INT: snprintf(buf, n, "%d", *(const int *)field); break;
    case MST_JOB_FLOAT: {
        char s[48], out[56];
        shortest_double(*(const double *)field, s, sizeof(s));
        if (strpbrk(s, ".ni") || !strpbrk(s, "0123456789")) {     /* has a '.', or inf/nan */
            snprintf(buf, n, "%s", s);
            break;
        }
        char *e = strpbrk(s, "eE");
        if (e) snprintf(out, sizeof(out), "%.*s.0%s", (int)(e - s), s, e);
        else snprintf(out, sizeof(out), "%s.0", s);
        snprintf(buf, n, "%s", out);
        break;
    }
    case MST_JOB_BOOL: snprintf(buf, n, "%s", *(const bool *)field ? "true" : "false"); break;
    case MST_JOB_ENUM: {
        int e = *(const int *)field, count = 0;
        while (k->values[count]) count++;
        snprintf(buf, n, "%s", e >= 0 && e < count ? k->values[e] : "?");
        break;
    }
    default: MST_ASSERT(!"unknown job key type"); break;
    }
}

void mst_job_defaults(mst_job *job) {
    memset(job, 0, sizeof(*job));
    for (int i = 0; i < mst_job_key_count; i++) {
        const mst_job_key *k = &mst_job_keys[i];
        int rc = mst_job_key_parse(job, k, k->def, strlen(k->def), NULL, 0);
        MST_ASSERT(rc == 0);    /* a default outside its own range is a broken table */
    }
}

void mst_job_schema_print(FILE *f) {
    static const char *const head[5] = {"key", "type", "default", "range", "meaning"};
    int w[4];
    for (int c = 0; c < 4; c++) w[c] = (int)strlen(head[c]);
    for (int i = 0; i < mst_job_key_count; i++) {
        const mst_job_key *k = &mst_job_keys[i];
        char r[256];
        mst_job_key_range(k, r, sizeof(r));
        int len[4] = {(int)strlen(k->path), (int)strlen(mst_job_type_name(k->type)),
                      (int)strlen(k->def_doc ? k->def_doc : k->def), (int)strlen(r)};
        for (int c = 0; c < 4; c++)
            if (len[c] > w[c]) w[c] = len[c];
    }
    fprintf(f, "%-*s  %-*s  %-*s  %-*s  %s\n", w[0], head[0], w[1], head[1], w[2], head[2], w[3], head[3], head[4]);
    for (int i = 0; i < mst_job_key_count; i++) {
        const mst_job_key *k = &mst_job_keys[i];
        char r[256];
        mst_job_key_range(k, r, sizeof(r));
        fprintf(f, "%-*s  %-*s  %-*s  %-*s  %s\n", w[0], k->path, w[1], mst_job_type_name(k->type), w[2],
                k->def_doc ? k->def_doc : k->def, w[3], r, k->help);
    }
}

/* ---- memory estimate ---- */

/* Bytes a run of the job needs at least, f32 throughout: parameters with their gradients and up to
 * two optimizer moments, plus one batch's activations kept for backward and their gradients (about
 * twice the forward tensors), plus the prefetched input batches. It counts the tensors the model
 * code creates (cnn.c, mlp.c) and leaves out workspace and allocator slack, so the real peak is
 * higher: a job refused on it could never fit. */
double mst_job_memory_estimate(const mst_job *job) {
    bool synth = job->data.dataset == MST_JOB_DATASET_SYNTHETIC;
    double c = synth ? job->data.synthetic.channels : 1, h = synth ? job->data.synthetic.height : 28;
    double w = synth ? job->data.synthetic.width : 28, classes = synth ? job->data.synthetic.classes : 10;
    double in = c * h * w, params = 0, acts = 0;    /* acts: forward values per sample */
    if (job->model.name == MST_JOB_MODEL_MLP) {
        double h1 = job->model.hidden1, h2 = job->model.hidden2;
        params = in * h1 + h1 + h1 * h2 + h2 + h2 * classes + classes;
        acts = in + 3 * (h1 + h2) + 2 * classes;        /* linear, relu, dropout per hidden layer */
    } else {
        double ch = job->model.width, hh = h, ww = w;
        params = 9 * c * ch + 2 * ch;
        acts = 3 * ch * hh * ww;                        /* stem conv, BN, ReLU */
        hh = floor(hh / 2), ww = floor(ww / 2);
        acts += ch * hh * ww;                           /* pool */
        for (int i = 0; i < job->model.blocks; i++) {
            double cout = i == 0 ? ch : 2 * ch;
            if (i > 0) hh = ceil(hh / 2), ww = ceil(ww / 2);
            params += 9 * ch * cout + 9 * cout * cout + 4 * cout;
            acts += 7 * cout * hh * ww;                 /* conv, BN, ReLU, conv, BN, add, ReLU */
            if (i > 0 || cout != ch) params += ch * cout + 2 * cout, acts += 2 * cout * hh * ww;
            ch = cout;
        }
        params += ch * classes + classes;
        acts += ch + classes;
    }
    double batch = job->data.batch_size, prefetch = job->data.prefetch + job->data.num_workers;
    return 4.0 * (4 * params + 2 * batch * acts + prefetch * batch * in);
}
