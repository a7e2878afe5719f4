/* kernel_choice.c — see kernel_choice.h. The verdicts are one map from shape key to provider per
 * process, filled at the first call of a shape; a decision costs each candidate kernel eight runs
 * in turns with the others (k_warm_rounds untimed: caches, the oneDNN primitive, the second
 * thread's wake-ups; then k_timed_rounds timed, the fastest kept) and one more of the winner,
 * whose output the call returns. While it times them, the caller and the
 * kernel team's threads are each bound to a CPU of their own (runtime/cpu_pin.h). Timing decides which kernel runs, never whether a result
 * is right: both providers are checked against the reference kernels in tests/runtime.
 *
 * Why per process and per machine, not per context: the verdict is a fact about the machine, like
 * its CPU features, and two runs of one job (a test's two contexts, eager against graph, the
 * advisor's trials, a resumed run) must get the same bits from the same seed; with per-context
 * verdicts a close race between the providers went one way in one run and the other way in the
 * next, and the cnn's eager and graph losses parted by 2% after 200 steps. So verdicts are kept in
 * one map per process (mutex-guarded, grow-only: with the file's records kept beside it, the one
 * mutable file-scope state of runtime/, on purpose) and in a calibration file per machine that
 * every process reads before it measures and appends to after (read on from where this process
 * last read it: util/append_reader.h): MSTUNE_KERNELS_CACHE names it (`off`: per process only), default
 * $XDG_CACHE_HOME/mstune/kernel-choices.tsv (or ~/.cache/...). A line is one verdict:
 *   v7 <TAB> machine <TAB> op <TAB> dtype <TAB> key hash <TAB> provider <TAB> builtin us <TAB> onednn us <TAB> onednn_blocked us <TAB> onednn_winograd us <TAB> onednn_f32 us <TAB> quiet|busy <TAB> shapes
 * where machine is the CPU model and its available features (a masked run is another machine), the
 * key covers shapes, attributes and the thread budget, a time is the candidate's on plain tensors
 * plus, where graph mode could block the call's operands, on nChw16c ones (measure below), and a
 * provider that does not serve the shape shows 0 us. (v1-v6 lines are ignored: v1, v2 and v4 weighed
 * fewer providers, v3 timed plain tensors only, v5 timed the builtin convolutions before their
 * direct path for inputs of few channels, runtime/ops/conv_direct.h, v6 with the threads free to
 * share a CPU, runtime/cpu_pin.h.) Lines are appended with
 * one O_APPEND write each (atomic for lines this short); the first quiet line for a key wins.
 *
 * quiet|busy: whether other work was runnable on the machine while the candidates were timed
 * (/proc/loadavg's runnable count minus the process's own runnable threads, read before and after:
 * more than one other task is busy). A verdict timed beside other processes is kept, so that the
 * processes of that moment agree, but it is not final: the next process that finds only busy
 * lines for a key while the machine is quiet measures again and appends a quiet line, which every
 * later process uses. (Verdicts timed
 * during a sanitizer run had made the cnn's O2 step 1.6x slower in every later run.)
 *
 * A candidate's time is its best of k_timed_rounds runs, the candidates taking turns round by
 * round, so a few milliseconds of the VM running slow land on every candidate alike.
 */
#include "runtime/backend/kernel_choice.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profiler/events.h"
#include "runtime/amp/half.h"
#include "runtime/backend/onednn.h"
#include "runtime/backend/shape_key.h"
#include "runtime/context.h"
#include "runtime/cpu_features.h"
#include "runtime/layout.h"
#include "runtime/omp_team.h"
#include "util/append_reader.h"
#include "util/fsutil.h"
#include "util/hash.h"

static const char k_line_tag[] = "v7";     /* the calibration file's line format (above) */

/* oneDNN must beat builtin by this fraction of builtin's time to be chosen in auto mode: a close
 * race is noise on a shared machine. (Processes agree through the file whatever the margin: the
 * rule below is applied to the times a line records, so a verdict never flips between processes.)
 * It was 0.25 until the nChw16c layout: then a 1x1 gradient convolution of the cnn whose blocked
 * oneDNN kernel was 18% faster stayed on builtin and paid plain copies of its blocked operands in
 * graph mode, and the mlp's batch-16 GEMMs kept a kernel 15-22% slower (docs/benchmarks.md). */
static const double k_choice_margin = 0.10;

/* The provider for candidate times t_us (0: does not serve the shape), as a line of the file
 * records them (0.1 us): the fastest oneDNN candidate when it beats builtin by the margin. */
static mst_provider choose(const double *t_us) {
    mst_provider fast = MST_PROVIDER_COUNT;     /* the fastest oneDNN candidate */
    for (int p = MST_PROVIDER_ONEDNN; p < MST_PROVIDER_COUNT; p++)
        if (t_us[p] > 0 && (fast == MST_PROVIDER_COUNT || t_us[p] < t_us[fast])) fast = (mst_provider)p;
    if (fast == MST_PROVIDER_COUNT) return MST_PROVIDER_BUILTIN;
    if (!(t_us[MST_PROVIDER_BUILTIN] > 0)) return fast;
    return t_us[fast] < t_us[MST_PROVIDER_BUILTIN] * (1 - k_choice_margin) ? fast : MST_PROVIDER_BUILTIN;
}

/* Timed runs per candidate (after one warm-up), taken in turns: with two, the 20-40% swings of a
 * shared VM decided close races between oneDNN's layouts one way in one file and the other way in
 * the next. */
enum { k_timed_rounds = 4 };
/* Untimed rounds before them, in the same turns. With one, the mlp's batch-16 linear on oneDNN
 * timed 70-80 us against its 39-41 us back to back, the second thread freshly bound and woken
 * after every serial builtin run, close to losing to builtin's 95 us by the margin; its first ~5
 * such turns are the slow ones (a tight loop alternating the two: 80-108 us, then ~50). */
enum { k_warm_rounds = 4 };

static const char *const mode_names[MST_KERNELS_MODE_COUNT] = {"auto", "onednn", "builtin"};
static const char *const provider_names[MST_PROVIDER_COUNT] = {"builtin", "onednn", "onednn_blocked", "onednn_winograd",
                                                              "onednn_f32"};

/* The oneDNN layout a oneDNN provider runs in (onednn_f32: blocked, Winograd where its f32 verdict says). */
static mst_onednn_layout layout_of(mst_provider p) {
    return p == MST_PROVIDER_ONEDNN            ? MST_ONEDNN_PLAIN
           : p == MST_PROVIDER_ONEDNN_WINOGRAD ? MST_ONEDNN_WINOGRAD
                                               : MST_ONEDNN_BLOCKED;
}

const char *mst_kernels_mode_name(mst_kernels_mode m) { return (unsigned)m < MST_KERNELS_MODE_COUNT ? mode_names[m] : "?"; }
const char *mst_provider_name(mst_provider p) { return (unsigned)p < MST_PROVIDER_COUNT ? provider_names[p] : "?"; }

int mst_kernels_mode_parse(const char *s) {
    for (int m = 0; m < MST_KERNELS_MODE_COUNT; m++)
        if (strcmp(mode_names[m], s) == 0) return m;
    return -1;
}

void mst_ctx_set_kernels(mst_ctx *ctx, mst_kernels_mode m) { ctx->kernels = m; }

static pthread_mutex_t verdict_lock = PTHREAD_MUTEX_INITIALIZER;
static mst_shape_map verdicts;     /* values: (void *)(uintptr_t)(provider + 1) */

/* ---- the per-machine calibration file (under verdict_lock) ---- */

static bool cache_ready;
static char cache_path[512];       /* "" = off */
/* The file's lines for this machine as records, in file order, brought up to date at each lookup
 * (util/append_reader.h): what cache_find and mst_plan_verdict_get read. */
typedef struct {
    uint64_t key;           /* the line's key hash */
    uint64_t what;          /* a kernel line's op and dtype (FNV-1a of "op/dtype"); 0 for a plan line */
    bool plan;              /* a step-thread line (s1) */
    int8_t value;           /* kernel: the provider its times (or its provider field) give; plan: 1 one, 0 all */
    bool quiet;
} file_record;
static mst_append_reader file_reader;
static file_record *records;
static size_t n_records, cap_records;
static char machine[320];

static void cache_setup(void) {
    if (cache_ready) return;
    cache_ready = true;
    mst_cpu_machine_id(machine, sizeof(machine));
    const char *env = getenv("MSTUNE_KERNELS_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[400] = "";
    if (env && *env) {
        if (strcmp(env, "off") != 0) snprintf(cache_path, sizeof(cache_path), "%s", env);
        return;
    }
    if (xdg && *xdg) snprintf(dir, sizeof(dir), "%s/mstune", xdg);
    else if (home && *home) snprintf(dir, sizeof(dir), "%s/.cache/mstune", home);
    char err[256];
    if (!*dir || mst_mkdirs(dir, err, sizeof(err)) != 0) return;     /* no cache: verdicts per process */
    snprintf(cache_path, sizeof(cache_path), "%s/kernel-choices.tsv", dir);
}

/* This process's threads that are running or runnable now (state R in /proc/self/task/<tid>/stat). */
static int own_runnable(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[300], buf[512];
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t k = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[k] = '\0';
        const char *close_paren = strrchr(buf, ')');    /* "tid (comm) S ...": comm may hold spaces */
        n += close_paren && close_paren[1] == ' ' && close_paren[2] == 'R';
    }
    closedir(d);
    return n;
}

/* Whether the machine looks quiet for a measurement: at most one runnable task besides this
 * process's own (/proc/loadavg's fourth field, "running/total", minus the process's threads in
 * state R; MSTUNE_LOADAVG names another file, for tests). Without the file (not Linux) every
 * measurement is quiet. */
static bool machine_quiet(void) {
    const char *path = getenv("MSTUNE_LOADAVG");
    FILE *f = fopen(path && *path ? path : "/proc/loadavg", "r");
    if (!f) return true;
    double l1, l5, l15;
    int running = 0, total = 0;
    int n = fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total);
    fclose(f);
    return n != 5 || running - own_runnable() <= 1;
}

static uint64_t op_dtype_hash(const char *op, const char *dtype) {
    return mst_fnv1a(mst_fnv1a(mst_fnv1a(MST_FNV1A_OFFSET, op, strlen(op)), "/", 1), dtype, strlen(dtype));
}

static void records_drop(void *user) {
    (void)user;
    n_records = 0;
}

static const char k_plan_tag[] = "s1";

/* One line of the file as a record, when it is a verdict of this machine in a known format. */
static void record_line(void *user, char **field, int n) {
    (void)user;
    file_record r = {0};
    if (n >= 7 + MST_PROVIDER_COUNT && strcmp(field[0], k_line_tag) == 0 && strcmp(field[1], machine) == 0) {
        /* tag machine op dtype key provider times... quiet: the verdict from the recorded times
         * under today's margin (lines written under another margin included); the provider
         * field where the times do not parse */
        double t_us[MST_PROVIDER_COUNT];
        bool times = true;
        for (int p = 0; p < MST_PROVIDER_COUNT; p++) {
            char *end = NULL;
            t_us[p] = strtod(field[6 + p], &end);
            times = times && end != field[6 + p] && *end == '\0' && t_us[p] >= 0;
        }
        r.value = -1;
        if (times) r.value = (int8_t)choose(t_us);
        for (int p = 0; !times && p < MST_PROVIDER_COUNT; p++)
            if (strcmp(field[5], provider_names[p]) == 0) r.value = (int8_t)p;
        if (r.value < 0) return;
        r.what = op_dtype_hash(field[2], field[3]);
        r.quiet = strcmp(field[6 + MST_PROVIDER_COUNT], "quiet") == 0;
    } else if (n >= 9 && strcmp(field[0], k_plan_tag) == 0 && strcmp(field[1], machine) == 0 &&
               strcmp(field[2], "step_threads") == 0 && (strcmp(field[5], "one") == 0 || strcmp(field[5], "all") == 0)) {
        /* tag machine step_threads key threads verdict all one quiet */
        r.plan = true;
        r.value = strcmp(field[5], "one") == 0;
        r.quiet = strcmp(field[8], "quiet") == 0;
    } else {
        return;
    }
    const char *key_field = r.plan ? field[3] : field[4], *end = NULL;
    r.key = strtoull(key_field, (char **)&end, 16);
    if (end == key_field || *end != '\0') return;
    if (n_records == cap_records) {
        size_t cap = cap_records ? 2 * cap_records : 512;
        file_record *grown = realloc(records, cap * sizeof(*grown));
        if (!grown) return;         /* a verdict not kept is measured again */
        records = grown, cap_records = cap;
    }
    records[n_records++] = r;
}

/* Caller holds verdict_lock. */
static void records_sync(void) {
    cache_setup();
    if (*cache_path) mst_append_reader_sync(&file_reader, cache_path, records_drop, record_line, NULL);
}

/* The file's verdict for (op, dtype, hash) on this machine: its first quiet line, else its first
 * busy one (*busy set); false when it has none. Caller holds verdict_lock. */
static bool cache_find(const char *op, const char *dtype, uint64_t hash, mst_provider *out, bool *busy) {
    if (!*cache_path) return false;
    records_sync();
    const uint64_t what = op_dtype_hash(op, dtype);
    bool found = false, quiet = false;
    for (size_t i = 0; i < n_records && !quiet; i++) {
        const file_record *r = &records[i];
        if (r->plan || r->key != hash || r->what != what) continue;
        if (found && !r->quiet) continue;       /* a busy line after the first one found: no news */
        *out = (mst_provider)r->value, found = true, quiet = r->quiet;
    }
    if (busy) *busy = found && !quiet;
    return found;
}

/* One line onto the file with one O_APPEND write: lines of concurrent processes never interleave. */
static void append_line(const char *line, size_t n) {
    int fd = open(cache_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t w = write(fd, line, n);
    (void)w;
    close(fd);
}

static void cache_append(const char *op, const char *dtype, uint64_t hash, mst_provider p, const double *t_ns, bool quiet,
                         const char *shapes) {
    if (!*cache_path) return;
    char line[1024];
    int n = snprintf(line, sizeof(line), "%s\t%s\t%s\t%s\t%016" PRIx64 "\t%s", k_line_tag, machine, op, dtype, hash,
                     provider_names[p]);
    for (int q = 0; q < MST_PROVIDER_COUNT && n > 0 && n < (int)sizeof(line); q++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "\t%.1f", t_ns[q] / 1e3);
    if (n > 0 && n < (int)sizeof(line)) n += snprintf(line + n, sizeof(line) - (size_t)n, "\t%s\t%s\n", quiet ? "quiet" : "busy", shapes);
    if (n > 0 && n < (int)sizeof(line)) append_line(line, (size_t)n);
}

/* ---- graph plans' step-thread verdicts (kernel_choice.h) ---- */

bool mst_machine_quiet(void) { return machine_quiet(); }

/* A verdict timed under load is timed again once the machine is quiet, unless the verdicts are
 * kept (MSTUNE_VERDICTS=keep). The load is read only here, where it decides (~0.2 ms of /proc). */
static bool busy_timed_again(bool busy) { return busy && !mst_verdicts_kept() && machine_quiet(); }

bool mst_plan_verdict_use(uint64_t key, bool *one_thread, bool *quiet) {
    bool busy = false;
    const bool found = mst_plan_verdict_get(key, one_thread, &busy);
    if (!found) {
        *quiet = machine_quiet();
        return false;
    }
    const bool again = busy_timed_again(busy);
    *quiet = !busy || again;        /* a busy line kept as it stands: nothing will be timed or written */
    return !again;
}

bool mst_plan_verdict_get(uint64_t key, bool *one_thread, bool *busy) {
    pthread_mutex_lock(&verdict_lock);
    cache_setup();
    records_sync();
    bool found = false, quiet = false;
    /* the newest line wins (a confirmation that overturned a verdict appends the new one), a quiet
     * one over any busy one */
    for (size_t i = 0; *cache_path && i < n_records; i++) {
        const file_record *r = &records[i];
        if (!r->plan || r->key != key) continue;
        if (quiet && !r->quiet) continue;
        *one_thread = r->value == 1, found = true, quiet = r->quiet;
    }
    pthread_mutex_unlock(&verdict_lock);
    *busy = found && !quiet;
    return found;
}

void mst_plan_verdict_put(uint64_t key, int threads, bool one_thread, double all_ns, double one_ns, bool quiet,
                          const char *graph) {
    pthread_mutex_lock(&verdict_lock);
    cache_setup();
    pthread_mutex_unlock(&verdict_lock);
    if (!*cache_path) return;
    char line[1024], name[128];
    snprintf(name, sizeof(name), "%s", graph ? graph : "");
    for (char *p = name; *p; p++)
        if (*p == '\t' || *p == '\n') *p = ' ';
    int n = snprintf(line, sizeof(line), "%s\t%s\tstep_threads\t%016" PRIx64 "\t%d\t%s\t%.1f\t%.1f\t%s\t%s\n", k_plan_tag,
                     machine, key, threads, one_thread ? "one" : "all", all_ns / 1e3, one_ns / 1e3, quiet ? "quiet" : "busy", name);
    if (n > 0 && n < (int)sizeof(line)) append_line(line, (size_t)n);
}

mst_kernel_fn mst_kernel_builtin(const mst_ctx *ctx, const mst_op_desc *d, mst_dtype key) {
    mst_kernel_fn kernel = ctx->force_ref && d->ref[MST_DEVICE_CPU][key] ? d->ref[MST_DEVICE_CPU][key] : d->kernels[MST_DEVICE_CPU][key];
    if (!kernel && mst_half_kernel_applies(d, key)) kernel = mst_half_kernel;   /* f16/bf16 via f32 */
    return kernel;
}

static mst_op op_of(const mst_op_desc *d) {
    static const mst_op served[] = {MST_OP_MATMUL, MST_OP_LINEAR, MST_OP_CONV2D, MST_OP_CONV2D_GRAD_INPUT,
                                    MST_OP_CONV2D_GRAD_WEIGHT};
    for (size_t i = 0; i < sizeof(served) / sizeof(served[0]); i++)
        if (mst_op_table[served[i]] == d) return served[i];
    return MST_OP_COUNT;
}

static mst_dtype key_dtype(const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    return c->n_in > 0 ? c->in[d->dtype_arg]->dtype : c->out[0]->dtype;
}

/* MSTUNE_KERNELS_LOG=1 prints every auto verdict to stderr: a measured one with the candidates'
 * times, one read from the file with its key. */
bool mst_kernels_log_on(void) {
    const char *e = getenv("MSTUNE_KERNELS_LOG");
    return e && *e && strcmp(e, "0") != 0;
}

bool mst_verdicts_kept(void) {
    const char *e = getenv("MSTUNE_VERDICTS");
    return e && strcmp(e, "keep") == 0;
}

/* Provider p's kernel k on c: a call with nChw16c tensors (graph mode's blocked chains,
 * runtime/layout.h) goes to oneDNN as it is (its run binds them where the primitive chose that
 * layout and copies them otherwise), to the builtin kernels through plain copies. */
static mst_status run_provider(mst_ctx *ctx, mst_provider p, mst_kernel_fn k, const mst_op_call *c) {
    if (p == MST_PROVIDER_BUILTIN && mst_call_has_blocked(c) && !mst_builtin_takes_blocked(c)) return mst_layout_run_plain(ctx, c, k);
    return k(ctx, c);
}

static double run_ns(mst_ctx *ctx, mst_provider p, mst_kernel_fn k, const mst_op_call *c, mst_status *s) {
    uint64_t t0 = mst_prof_now_ns();
    *s = run_provider(ctx, p, k, c);
    return (double)(mst_prof_now_ns() - t0);
}

static mst_provider decide(mst_ctx *ctx, const mst_op_call *c, bool *just_measured);

/* onednn_f32's kernel on the widened (f32) twin of a half convolution: oneDNN's f32 Winograd kernel
 * where the f32 verdict of the shape takes it (and it serves the shape), its blocked direct one
 * otherwise. */
static mst_status onednn_f32_wide(mst_ctx *ctx, const mst_op_call *wide) {
    bool measured;
    mst_onednn_layout l = decide(ctx, wide, &measured) == MST_PROVIDER_ONEDNN_WINOGRAD &&
                                  mst_onednn_supports(ctx, wide, MST_DTYPE_F32, MST_ONEDNN_WINOGRAD)
                              ? MST_ONEDNN_WINOGRAD
                              : MST_ONEDNN_BLOCKED;
    return mst_onednn_kernel(wide->op, MST_DTYPE_F32, l)(ctx, wide);
}

static mst_status onednn_f32_run(mst_ctx *ctx, const mst_op_call *c) { return mst_half_run_wide(ctx, c, onednn_f32_wide); }

mst_kernel_fn mst_provider_kernel(const mst_ctx *ctx, mst_provider p, mst_op op, mst_dtype key) {
    if ((unsigned)op >= MST_OP_COUNT || (unsigned)p >= MST_PROVIDER_COUNT) return NULL;
    if (p == MST_PROVIDER_BUILTIN) return mst_kernel_builtin(ctx, mst_op_table[op], key);
    if (p == MST_PROVIDER_ONEDNN_F32)
        return mst_dtype_is_half(key) && mst_onednn_kernel(op, MST_DTYPE_F32, MST_ONEDNN_BLOCKED) ? onednn_f32_run : NULL;
    return mst_onednn_kernel(op, key, layout_of(p));
}

bool mst_kernel_choice_applies(mst_op op, mst_dtype key) {
    return mst_onednn_kernel(op, key, MST_ONEDNN_PLAIN) || mst_provider_kernel(NULL, MST_PROVIDER_ONEDNN_F32, op, key);
}

/* Whether p can run this call's shape (oneDNN: a primitive exists for it; made on first ask). */
static bool serves(mst_ctx *ctx, mst_provider p, const mst_op_call *c, mst_dtype key) {
    if (!mst_provider_kernel(ctx, p, c->op, key)) return false;
    if (p == MST_PROVIDER_BUILTIN) return true;
    return mst_onednn_supports(ctx, c, p == MST_PROVIDER_ONEDNN_F32 ? MST_DTYPE_F32 : key, layout_of(p));
}

/* Times the candidates (served[p]) on c's tensors, and where graph mode could keep c's operands in
 * nChw16c (the layouts allowed, oneDNN's blocked kernels a candidate, c all plain) on the call as
 * its blocked chains make it too (mst_blocked_call: builtin and oneDNN's plain kernels pay copies
 * there, the blocked ones none): t_ns[p] is the best of k_timed_rounds after a warm-up, summed
 * over the two calls (0 when not a candidate). Eager and graph mode share one verdict per shape
 * (the same bits from the same seed), so it is the one fastest over both ways the runtime makes
 * the call: timed on plain tensors alone, a bf16 weight gradient of the cnn picked oneDNN's plain
 * kernel (731 us against the blocked one's 824 with its reorders), which then took 1.7 ms inside
 * graph mode's blocked chain. Leaves c's outputs as whichever ran last (the caller reruns). The
 * fastest oneDNN kernel wins when it beats builtin by the margin; a candidate that fails is dropped. */
static mst_provider measure(mst_ctx *ctx, const mst_op_call *c, mst_kernel_fn *kernels, bool *served, double *t_ns, bool *dual_out) {
    mst_status s;
    mst_blocked_call bc;
    bool dual = mst_layout_blocked_allowed(ctx) && served[MST_PROVIDER_ONEDNN_BLOCKED] && !mst_call_has_blocked(c) &&
                mst_blocked_call_make(ctx, c, &bc);
    for (int r = 0; r < k_warm_rounds; r++)
        for (int p = 0; p < MST_PROVIDER_COUNT; p++) {
            if (served[p] && (run_ns(ctx, (mst_provider)p, kernels[p], c, &s), s != MST_OK)) served[p] = false;
            if (served[p] && dual && (run_ns(ctx, (mst_provider)p, kernels[p], &bc.call, &s), s != MST_OK)) served[p] = false;
            if (!served[p]) mst_ctx_clear_error(ctx);   /* the chosen kernel reruns and reports for real */
        }
    double best[MST_PROVIDER_COUNT], best_blocked[MST_PROVIDER_COUNT];
    for (int p = 0; p < MST_PROVIDER_COUNT; p++) best[p] = 1e300, best_blocked[p] = dual ? 1e300 : 0;
    for (int r = 0; r < k_timed_rounds; r++)
        for (int p = 0; p < MST_PROVIDER_COUNT; p++) {
            if (!served[p]) continue;
            double t = run_ns(ctx, (mst_provider)p, kernels[p], c, &s);
            if (t < best[p]) best[p] = t;
            if (!dual) continue;
            t = run_ns(ctx, (mst_provider)p, kernels[p], &bc.call, &s);
            if (t < best_blocked[p]) best_blocked[p] = t;
        }
    if (dual) mst_blocked_call_free(&bc);
    *dual_out = dual;
    for (int p = 0; p < MST_PROVIDER_COUNT; p++) best[p] += best_blocked[p];
    /* decided on the times as the file records them (0.1 us), so a process reading the line
     * decides the same */
    double t_us[MST_PROVIDER_COUNT];
    for (int p = 0; p < MST_PROVIDER_COUNT; p++) {
        t_us[p] = served[p] ? fmax(round(best[p] / 100.0) / 10.0, 0.1) : 0;
        t_ns[p] = t_us[p] * 1e3;
    }
    return choose(t_us);
}

/* Each thread's copy of the verdicts it has used, direct-mapped by the call's signature key (its
 * op, dtypes, shapes and attributes: mst_op_signature_key, ~10-20 ns) and thread count. The map
 * below is grow-only and a verdict in it never changes, so a copy never goes stale. It spares the
 * eager per-call choice the 240-byte shape key, its hash and the process-wide lock (perf: ~9% of
 * an eager run of the dispatch-bound scenario's tiny ops). An entry the hash sends elsewhere, or
 * one overwritten by another shape of the same slot, is looked up in the map as before. */
#define TL_VERDICTS 256
typedef struct {
    uint64_t sig;
    int threads;            /* 0: empty */
    mst_provider provider;
} tl_verdict;
static _Thread_local tl_verdict tl_verdicts[TL_VERDICTS];

static tl_verdict *tl_verdict_slot(uint64_t sig, int threads) {
    uint64_t h = (sig ^ (uint64_t)threads * 0x9e3779b97f4a7c15ull) * 0xff51afd7ed558ccdull;
    return &tl_verdicts[(h >> 32) & (TL_VERDICTS - 1)];
}

/* The call's provider. The hot path is this thread's copy (above), then one map lookup: a shape is
 * settled once per process (from the calibration file, a measurement, or "only builtin serves it")
 * and kept in the map. */
static mst_provider decide_in_map(mst_ctx *ctx, const mst_op_call *c, bool *just_measured);

static mst_provider decide(mst_ctx *ctx, const mst_op_call *c, bool *just_measured) {
    *just_measured = false;
    if (ctx->force_ref || ctx->kernels == MST_KERNELS_BUILTIN) return MST_PROVIDER_BUILTIN;
    if (ctx->kernels == MST_KERNELS_ONEDNN)     /* forced: the plain layout, no timing */
        return serves(ctx, MST_PROVIDER_ONEDNN, c, key_dtype(c)) ? MST_PROVIDER_ONEDNN : MST_PROVIDER_BUILTIN;
    const uint64_t sig = mst_op_signature_key(c);
    const int threads = mst_ctx_threads(ctx);
    tl_verdict *e = tl_verdict_slot(sig, threads);
    if (e->threads == threads && e->sig == sig) return e->provider;
    const mst_provider p = decide_in_map(ctx, c, just_measured);
    *e = (tl_verdict){sig, threads, p};
    return p;
}

static mst_provider decide_in_map(mst_ctx *ctx, const mst_op_call *c, bool *just_measured) {
    mst_dtype key = key_dtype(c);
    mst_shape_key k;
    mst_shape_key_of(&k, c, key);
    k.threads = mst_ctx_threads(ctx);
    pthread_mutex_lock(&verdict_lock);
    void *v = mst_shape_map_get(&verdicts, &k);
    pthread_mutex_unlock(&verdict_lock);
    if (v) return (mst_provider)((uintptr_t)v - 1);
    /* first call of the shape in this process: the file's verdict first, so that a oneDNN
     * primitive is made only for the provider it names (making every candidate's primitive before
     * reading the file put ~1 ms (a tiny MLP) to ~10 ms (the cnn) of primitive creation into the first
     * training step of a job whose verdicts were all on file: bench/loop_setup.sh) */
    mst_kernel_fn kernels[MST_PROVIDER_COUNT];
    bool served[MST_PROVIDER_COUNT] = {false}, any_onednn = false, may_choose = false;
    for (int p = 0; p < MST_PROVIDER_COUNT; p++) {
        kernels[p] = mst_provider_kernel(ctx, (mst_provider)p, c->op, key);
        may_choose |= p != MST_PROVIDER_BUILTIN && kernels[p];
    }
    uint64_t hash = mst_shape_key_hash(&k);
    const char *op = mst_op_name(c->op), *dt = mst_dtype_name(key);
    mst_provider p = MST_PROVIDER_BUILTIN;
    bool known = false, from_file = false;
    bool quiet = true;
    if (may_choose) {
        bool busy = false;
        pthread_mutex_lock(&verdict_lock);
        cache_setup();
        known = cache_find(op, dt, hash, &p, &busy);
        pthread_mutex_unlock(&verdict_lock);
        if (known && busy_timed_again(busy)) known = false;     /* timed under load: again, now */
        if (known && !serves(ctx, p, c, key)) known = false;     /* its provider cannot run the shape here */
        from_file = known;
    }
    if (!known) {
        for (int q = 0; q < MST_PROVIDER_COUNT; q++) {
            served[q] = serves(ctx, (mst_provider)q, c, key);
            any_onednn |= q != MST_PROVIDER_BUILTIN && served[q];
        }
        if (!any_onednn) {                      /* nothing to choose: builtin, not written to the file */
            known = true;
            p = MST_PROVIDER_BUILTIN;
        }
    }
    double t_ns[MST_PROVIDER_COUNT] = {0};
    bool summed = false;        /* t_ns sum the plain call's and the nChw16c call's times */
    /* measured outside the lock: another thread may measure the same shape; the first verdict stays */
    const bool measured = !known;
    if (measured) {
        quiet = machine_quiet();
        /* no two of the timed threads on one CPU (cpu_pin.h); a measurement inside another (a half
         * convolution's onednn_f32 candidate deciding its f32 twin) leaves the binding to the outer */
        static _Thread_local int measuring;
        const bool pin = mst_ctx_threads(ctx) > 1 && measuring++ == 0;
        if (pin) mst_omp_team_pin(true);
        p = measure(ctx, c, kernels, served, t_ns, &summed);
        if (pin) mst_omp_team_pin(false);
        measuring--;
        quiet = quiet && machine_quiet();
    }
    *just_measured = measured;
    char shapes[200] = "";
    for (int i = 0, n = 0; measured && i < c->n_in && n < (int)sizeof(shapes); i++) {
        char t[64];
        n += snprintf(shapes + n, sizeof(shapes) - (size_t)n, "%s%s", i ? ", " : "", mst_tensor_desc(c->in[i], t, sizeof(t)));
    }

    pthread_mutex_lock(&verdict_lock);
    void **slot = mst_shape_map_slot(&verdicts, &k);
    if (slot && !*slot) {
        if (measured) {
            mst_provider q;
            bool busy = false;
            /* another process got there first with a quiet verdict (or with a busy one while this
             * measurement was busy too): use it */
            if (cache_find(op, dt, hash, &q, &busy) && (!busy || !quiet)) p = q;
            else cache_append(op, dt, hash, p, t_ns, quiet, shapes);
        }
        *slot = (void *)(uintptr_t)(p + 1);
    }
    if (slot) p = (mst_provider)((uintptr_t)*slot - 1);
    pthread_mutex_unlock(&verdict_lock);
    if (from_file && mst_kernels_log_on())
        fprintf(stderr, "mstune kernels: %s %s key %016" PRIx64 " at %d threads: from %s -> %s\n", op, dt, hash, mst_ctx_threads(ctx),
                cache_path, mst_provider_name(p));
    if (measured && mst_kernels_log_on()) {
        const char *ip = mst_onednn_impl(ctx, c, key, MST_ONEDNN_PLAIN), *ib = mst_onednn_impl(ctx, c, key, MST_ONEDNN_BLOCKED);
        const char *iw = mst_onednn_impl(ctx, c, key, MST_ONEDNN_WINOGRAD);
        fprintf(stderr,
                "mstune kernels: %s(%s) at %d threads%s: builtin %.1f us, onednn %.1f us (%s), onednn_blocked %.1f us (%s), "
                "onednn_winograd %.1f us (%s), onednn_f32 %.1f us -> %s%s\n",
                op, shapes, mst_ctx_threads(ctx), summed ? ", plain + nChw16c call" : "", t_ns[0] / 1e3, t_ns[1] / 1e3, ip ? ip : "-", t_ns[2] / 1e3, ib ? ib : "-",
                t_ns[3] / 1e3, iw ? iw : "-", t_ns[4] / 1e3, mst_provider_name(p), quiet ? "" : " (machine busy: to be measured again)");
    }
    return p;
}

mst_provider mst_kernel_provider(mst_ctx *ctx, const mst_op_call *c) {
    bool measured;
    return decide(ctx, c, &measured);
}

/* The call's provider (decided now when new) and that provider's kernel. */
static mst_status provider_for(mst_ctx *ctx, const mst_op_call *c, mst_provider *p, mst_kernel_fn *k) {
    bool measured;
    *p = decide(ctx, c, &measured);
    const mst_dtype key = key_dtype(c);
    *k = mst_provider_kernel(ctx, *p, c->op, key);
    return *k ? MST_OK : mst_op_fail(ctx, c, MST_ERR_DTYPE, "no cpu kernel for dtype %s", mst_dtype_name(key));
}

static mst_status choose_and_run(mst_ctx *ctx, const mst_op_call *c) {
    mst_provider p;
    mst_kernel_fn k;
    mst_status s = provider_for(ctx, c, &p, &k);
    return s == MST_OK ? run_provider(ctx, p, k, c) : s;
}

bool mst_kernel_is_choice(mst_kernel_fn k) { return k == choose_and_run; }

mst_status mst_kernel_run_bound(mst_ctx *ctx, mst_kernel_binding *b, const mst_op_call *c) {
    const int threads = mst_ctx_threads(ctx);
    const uint64_t call_key = mst_op_signature_key(c);
    if (!b->kernel || b->threads != threads || b->call_key != call_key) {
        mst_provider p;
        mst_kernel_fn k;
        mst_status s = provider_for(ctx, c, &p, &k);
        if (s != MST_OK) return s;
        *b = (mst_kernel_binding){call_key, threads, p, k};
    }
    return run_provider(ctx, b->provider, b->kernel, c);
}

mst_kernel_fn mst_kernel_lookup(const mst_ctx *ctx, const mst_op_desc *d, mst_dtype key) {
    mst_kernel_fn builtin = mst_kernel_builtin(ctx, d, key);
    if (ctx->force_ref || ctx->kernels == MST_KERNELS_BUILTIN) return builtin;
    mst_op op = op_of(d);
    if (op == MST_OP_COUNT || !mst_kernel_choice_applies(op, key)) return builtin;
    return choose_and_run;
}

size_t mst_op_kernel_addrs(const void **out, size_t cap) {
    size_t n = 0;
    for (int op = 0; op < MST_OP_COUNT; op++) {
        const mst_op_desc *d = mst_op_table[op];
        if (!d) continue;
        for (int dev = 0; dev < MST_DEVICE_COUNT; dev++)
            for (int t = 0; t < MST_DTYPE_COUNT; t++) {
                if (d->kernels[dev][t] && n < cap) out[n++] = (const void *)d->kernels[dev][t];
                if (d->ref[dev][t] && n < cap) out[n++] = (const void *)d->ref[dev][t];
            }
    }
    mst_kernel_fn providers[] = {choose_and_run, onednn_f32_run, mst_onednn_kernel(MST_OP_MATMUL, MST_DTYPE_F32, MST_ONEDNN_PLAIN),
                                 mst_onednn_kernel(MST_OP_CONV2D, MST_DTYPE_F32, MST_ONEDNN_BLOCKED),
                                 mst_onednn_kernel(MST_OP_CONV2D, MST_DTYPE_F32, MST_ONEDNN_WINOGRAD)};
    for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++)
        if (providers[i] && n < cap) out[n++] = (const void *)providers[i];
    return n;
}
