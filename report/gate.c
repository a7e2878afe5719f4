/* gate.c — the regression gate's rules: loading runs and stored histories, the machine and config
 * fingerprint, the per-metric verdicts (paired and history modes), calibration. The outputs (table,
 * JSON, Markdown, JUnit XML, GitHub annotations) are in gate_output.c. Rules and reasons: docs/gate.md.
 *
 * Trade-off: timing is compared on log values, so effects are ratios and one slow run moves a rank
 * test by one rank, not by its size; the price is that an A/A comparison of k = 5 runs a side can
 * only reach p = 1/252, so alpha 0.01 needs nearly complete separation (U <= 1), which is why a
 * FAIL also needs an effect above max(5%, 3 x CV): significance alone flags tiny real shifts. */
#define _GNU_SOURCE
#include "report/gate.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/stats.h"
#include "util/fsutil.h"

#define MIB 1048576.0

const mst_gate_metric_desc mst_gate_metrics[MST_GATE_METRIC_COUNT] = {
    [MST_GATE_METRIC_STEP_TIME] = {"step_time_ms_median", "step time", "ms", 1, MST_GATE_RULE_TIMING, false},
    [MST_GATE_METRIC_STEP_TIME_P90] = {"step_time_ms_p90", "step time p90", "ms", 1, MST_GATE_RULE_TIMING, false},
    [MST_GATE_METRIC_THROUGHPUT] = {"samples_per_s", "throughput", "samples/s", 1, MST_GATE_RULE_TIMING, true},
    [MST_GATE_METRIC_PEAK_MEMORY] = {"peak_memory_bytes", "peak memory", "MiB", 1 / MIB, MST_GATE_RULE_MEMORY, false},
    [MST_GATE_METRIC_QUALITY] = {"metric", "val metric", "", 1, MST_GATE_RULE_QUALITY, true},
};

static const char *const verdict_names[MST_GATE_VERDICT_COUNT] = {
    [MST_GATE_PASS] = "PASS", [MST_GATE_WARN] = "WARN", [MST_GATE_FAIL] = "FAIL",
    [MST_GATE_INCONCLUSIVE] = "INCONCLUSIVE", [MST_GATE_JOB_FAILED] = "JOB FAILED", [MST_GATE_ABSENT] = "ABSENT",
};
_Static_assert(sizeof(verdict_names) / sizeof(verdict_names[0]) == MST_GATE_VERDICT_COUNT, "a verdict needs a name");

/* machine keys that identify the build or the host rather than what the timing depends on */
static const char *const machine_ignored[] = {"git_revision", "host"};

const char *mst_gate_verdict_name(mst_gate_verdict v) {
    return v >= 0 && v < MST_GATE_VERDICT_COUNT ? verdict_names[v] : "?";
}

static void appendf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t n, const char *fmt, ...) {
    size_t k = strlen(buf);
    if (k + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, n - k, fmt, ap);
    va_end(ap);
}

/* ---- config ---- */

void mst_gate_config_default(mst_gate_config *c) {
    *c = (mst_gate_config){.alpha = 0.01,
                           .min_effect = 0.05,
                           .cv_multiplier = 3,
                           .memory_pct = 5,
                           .memory_mib = 64,
                           .accuracy_margin_points = 0.5,
                           .runs = 5,
                           .allow_config_change = false};
}

typedef struct {
    const char *key;
    size_t offset;
    bool is_int, is_bool;
    double lo, hi;          /* inclusive range */
    const char *what;
} config_field;

static const config_field config_fields[] = {
    {"alpha", offsetof(mst_gate_config, alpha), false, false, 1e-9, 0.25, "one-sided significance level"},
    {"min_effect", offsetof(mst_gate_config, min_effect), false, false, 0, 0.99,
     "smallest failing slowdown as a fraction (0.05 = 5%)"},
    {"cv_multiplier", offsetof(mst_gate_config, cv_multiplier), false, false, 0, 100, "multiple of the run-to-run CV"},
    {"memory_pct", offsetof(mst_gate_config, memory_pct), false, false, 0, 10000, "peak memory growth in percent"},
    {"memory_mib", offsetof(mst_gate_config, memory_mib), false, false, 0, 1e9, "peak memory growth in MiB"},
    {"accuracy_margin_points", offsetof(mst_gate_config, accuracy_margin_points), false, false, 0, 100,
     "margin for the job's metric, in its points (percentage points for accuracy, dB for PSNR)"},
    {"runs", offsetof(mst_gate_config, runs), true, false, 1, MST_GATE_MAX_RUNS, "runs per side"},
    {"allow_config_change", offsetof(mst_gate_config, allow_config_change), false, true, 0, 1,
     "compare runs of different job configs"},
};

int mst_gate_config_parse(mst_gate_config *c, const char *text, const char *origin, char *err, size_t errn) {
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        snprintf(err, errn, "%s: not a JSON object", origin);
        cJSON_Delete(root);
        return -1;
    }
    mst_gate_config out = *c;
    int rc = 0;
    for (cJSON *it = root->child; it && rc == 0; it = it->next) {
        const config_field *f = NULL;
        for (size_t i = 0; i < sizeof(config_fields) / sizeof(config_fields[0]); i++)
            if (strcmp(config_fields[i].key, it->string) == 0) f = &config_fields[i];
        if (!f) {
            snprintf(err, errn, "%s: unknown key '%s' (known: alpha, min_effect, cv_multiplier, memory_pct, memory_mib, "
                                "accuracy_margin_points, runs, allow_config_change)",
                     origin, it->string);
            rc = -1;
        } else if (f->is_bool) {
            if (!cJSON_IsBool(it)) {
                snprintf(err, errn, "%s: '%s' must be true or false", origin, f->key);
                rc = -1;
            } else {
                *(bool *)((char *)&out + f->offset) = cJSON_IsTrue(it);
            }
        } else if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < f->lo ||
                   it->valuedouble > f->hi || (f->is_int && it->valuedouble != floor(it->valuedouble))) {
            snprintf(err, errn, "%s: '%s' (%s) must be %s in [%g, %g]", origin, f->key, f->what,
                     f->is_int ? "an integer" : "a number", f->lo, f->hi);
            rc = -1;
        } else if (f->is_int) {
            *(int *)((char *)&out + f->offset) = (int)it->valuedouble;
        } else {
            *(double *)((char *)&out + f->offset) = it->valuedouble;
        }
    }
    cJSON_Delete(root);
    if (rc == 0) *c = out;
    return rc;
}

int mst_gate_config_load(mst_gate_config *c, const char *path, char *err, size_t errn) {
    char *text = mst_read_file(path, NULL);
    if (!text) {
        snprintf(err, errn, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    int rc = mst_gate_config_parse(c, text, path, err, errn);
    free(text);
    return rc;
}

cJSON *mst_gate_config_to_json(const mst_gate_config *c) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "alpha", c->alpha);
    cJSON_AddNumberToObject(o, "min_effect", c->min_effect);
    cJSON_AddNumberToObject(o, "cv_multiplier", c->cv_multiplier);
    cJSON_AddNumberToObject(o, "memory_pct", c->memory_pct);
    cJSON_AddNumberToObject(o, "memory_mib", c->memory_mib);
    cJSON_AddNumberToObject(o, "accuracy_margin_points", c->accuracy_margin_points);
    cJSON_AddNumberToObject(o, "runs", c->runs);
    cJSON_AddBoolToObject(o, "allow_config_change", c->allow_config_change);
    return o;
}

/* ---- runs ---- */

static void run_init(mst_gate_run *r, const char *dir) {
    memset(r, 0, sizeof(*r));
    snprintf(r->dir, sizeof(r->dir), "%s", dir);
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) r->value[m] = NAN;
}

void mst_gate_run_set_failed(mst_gate_run *r, const char *dir, const char *why) {
    run_init(r, dir);
    r->ok = false;
    snprintf(r->error, sizeof(r->error), "%s", why);
}

void mst_gate_run_free(mst_gate_run *r) {
    cJSON_Delete(r->config);
    cJSON_Delete(r->machine);
    r->config = r->machine = NULL;
}

static bool finite_number(const cJSON *v) { return cJSON_IsNumber(v) && isfinite(v->valuedouble); }

static void quality_set(mst_gate_quality *q, const char *name, const char *label, const char *unit, double scale, bool higher) {
    snprintf(q->name, sizeof(q->name), "%s", name);
    snprintf(q->label, sizeof(q->label), "val %s", label);
    snprintf(q->unit, sizeof(q->unit), "%s", unit);
    snprintf(q->diff_unit, sizeof(q->diff_unit), "%s", strcmp(unit, "%") == 0 ? "pt" : unit);
    q->scale = scale;
    q->higher_is_better = higher;
}

/* The job's metric from summary.json's "metric" {name, value, higher_is_better, label, unit,
 * display_scale}; an older summary has val_accuracy only (-1: no evaluation ran). */
static void read_quality(const cJSON *j, mst_gate_run *r) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "metric"), *name = cJSON_GetObjectItemCaseSensitive(m, "name");
    if (cJSON_IsObject(m) && cJSON_IsString(name) && name->valuestring[0]) {
        const cJSON *label = cJSON_GetObjectItemCaseSensitive(m, "label"), *unit = cJSON_GetObjectItemCaseSensitive(m, "unit");
        const cJSON *scale = cJSON_GetObjectItemCaseSensitive(m, "display_scale"), *v = cJSON_GetObjectItemCaseSensitive(m, "value");
        bool acc = strcmp(name->valuestring, "accuracy") == 0;
        double sc = finite_number(scale) && scale->valuedouble > 0 && scale->valuedouble <= 1e6 ? scale->valuedouble : acc ? 100 : 1;
        quality_set(&r->quality, name->valuestring, cJSON_IsString(label) ? label->valuestring : name->valuestring,
                    cJSON_IsString(unit) ? unit->valuestring : acc ? "%" : "", sc,
                    !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(m, "higher_is_better")));
        if (finite_number(v) && (!acc || (v->valuedouble >= 0 && v->valuedouble <= 1))) r->value[MST_GATE_METRIC_QUALITY] = v->valuedouble;
        return;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "val_accuracy");
    quality_set(&r->quality, "accuracy", "accuracy", "%", 100, true);
    if (finite_number(v) && v->valuedouble >= 0 && v->valuedouble <= 1) r->value[MST_GATE_METRIC_QUALITY] = v->valuedouble;
}

mst_gate_metric_desc mst_gate_desc(const mst_gate_result *r, int metric) {
    mst_gate_metric_desc d = mst_gate_metrics[metric];
    if (metric == MST_GATE_METRIC_QUALITY && r->quality.name[0]) {
        d.label = r->quality.label;
        d.unit = r->quality.unit;
        d.display_scale = r->quality.scale;
        d.higher_is_better = r->quality.higher_is_better;
    }
    return d;
}

/* The quality row's metric: the first usable run's (baseline first); "" when the sides judge
 * different metrics, which then do not compare. */
static void result_quality(mst_gate_result *r, const mst_gate_run *base, int nb, const mst_gate_run *cand, int nc) {
    const mst_gate_quality *qb = NULL, *qc = NULL;
    for (int i = 0; i < nb && !qb; i++)
        if (base[i].ok && base[i].quality.name[0]) qb = &base[i].quality;
    for (int i = 0; i < nc && !qc; i++)
        if (cand[i].ok && cand[i].quality.name[0]) qc = &cand[i].quality;
    if (qb && qc && strcmp(qb->name, qc->name) != 0) {
        memset(&r->quality, 0, sizeof(r->quality));
        return;
    }
    if (qb || qc) r->quality = qb ? *qb : *qc;
    else quality_set(&r->quality, "accuracy", "accuracy", "%", 100, true);
}

int mst_gate_run_load(mst_gate_run *r, const char *dir) {
    run_init(r, dir);
    char path[1100];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    char *text = mst_read_file(path, NULL);
    if (!text) {
        snprintf(r->error, sizeof(r->error), "%s: %s", path, errno == ENOENT ? "missing (the run did not finish)" : strerror(errno));
        return -1;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(j)) {
        snprintf(r->error, sizeof(r->error), "%s: not a JSON object", path);
        cJSON_Delete(j);
        return -1;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "interrupted"))) {
        snprintf(r->error, sizeof(r->error), "%s: the run was interrupted", path);
        goto fail;
    }
    /* a diverged run: cJSON writes a NaN or infinite loss as null */
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(j, "final_train_loss");
    if (fl && !finite_number(fl)) {
        snprintf(r->error, sizeof(r->error), "%s: diverged (final_train_loss is not finite)", path);
        goto fail;
    }
    const cJSON *losses = cJSON_GetObjectItemCaseSensitive(j, "train_loss"), *l;
    int step = 0;
    cJSON_ArrayForEach(l, losses) {
        if (!finite_number(l)) {
            snprintf(r->error, sizeof(r->error), "%s: diverged (train_loss of step %d is not finite)", path, step);
            goto fail;
        }
        step++;
    }
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        if (m == MST_GATE_METRIC_QUALITY) continue;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, mst_gate_metrics[m].key);
        if (finite_number(v) && v->valuedouble > 0) r->value[m] = v->valuedouble;
    }
    read_quality(j, r);
    if (isnan(r->value[MST_GATE_METRIC_STEP_TIME])) {
        snprintf(r->error, sizeof(r->error), "%s: no positive step_time_ms_median", path);
        goto fail;
    }
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(j, "config");
    const cJSON *mach = cJSON_GetObjectItemCaseSensitive(j, "machine");
    if (cJSON_IsObject(cfg)) r->config = cJSON_Duplicate(cfg, true);
    if (cJSON_IsObject(mach)) r->machine = cJSON_Duplicate(mach, true);
    cJSON_Delete(j);
    r->ok = true;
    return 0;
fail:
    cJSON_Delete(j);
    r->ok = false;
    return -1;
}

/* ---- fingerprint ---- */

static void hash_hex(const cJSON *config, char out[17]) {
    if (!config) {
        snprintf(out, 17, "unknown");
        return;
    }
    char *s = cJSON_PrintUnformatted(config);
    uint64_t h = 1469598103934665603ull;        /* FNV-1a 64 */
    for (const char *p = s ? s : ""; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    cJSON_free(s);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

static void short_json(const cJSON *v, char *out, size_t n) {
    if (!v) {
        snprintf(out, n, "(absent)");
        return;
    }
    char *s = cJSON_PrintUnformatted(v);
    if (s && strlen(s) > 40) snprintf(out, n, "%.37s...", s);
    else snprintf(out, n, "%s", s ? s : "?");
    cJSON_free(s);
}

/* Leaf paths where two configs differ, "data.augment: "none" -> "heavy"", the first few. */
static void json_diff(const cJSON *a, const cJSON *b, const char *path, char *out, size_t n, int *count) {
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        const cJSON *it;
        char sub[256];
        cJSON_ArrayForEach(it, a) {
            snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", it->string);
            json_diff(it, cJSON_GetObjectItemCaseSensitive(b, it->string), sub, out, n, count);
        }
        cJSON_ArrayForEach(it, b) {
            if (cJSON_GetObjectItemCaseSensitive(a, it->string)) continue;
            snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", it->string);
            json_diff(NULL, it, sub, out, n, count);
        }
        return;
    }
    if (a && b && cJSON_Compare(a, b, true)) return;
    if (++*count <= 3) {
        char sa[48], sb[48];
        short_json(a, sa, sizeof(sa));
        short_json(b, sb, sizeof(sb));
        appendf(out, n, "%s%s: %s -> %s", *count > 1 ? ", " : "", path, sa, sb);
    }
}

static bool machine_key_ignored(const char *k) {
    for (size_t i = 0; i < sizeof(machine_ignored) / sizeof(machine_ignored[0]); i++)
        if (strcmp(k, machine_ignored[i]) == 0) return true;
    return false;
}

static void machine_value(const cJSON *v, char *out, size_t n) {
    if (cJSON_IsString(v)) snprintf(out, n, "%s", v->valuestring);
    else if (cJSON_IsNumber(v)) snprintf(out, n, "%.17g", v->valuedouble);
    else short_json(v, out, n);
}

/* The (config, machine) pairs of both sides; history mode passes one pair for the baseline. */
typedef struct {
    const cJSON **config, **machine;
    int n;
    const char *name;
} side_prints;

static const cJSON *first_config(const side_prints *s) {
    for (int i = 0; i < s->n; i++)
        if (s->config[i]) return s->config[i];
    return NULL;
}

/* Checks that a side's runs share one config. */
static bool side_config_consistent(const side_prints *s, char *msg, size_t n) {
    const cJSON *ref = first_config(s);
    for (int i = 0; i < s->n; i++) {
        if (!s->config[i] || !ref || cJSON_Compare(ref, s->config[i], true)) continue;
        char diff[512] = "";
        int count = 0;
        json_diff(ref, s->config[i], "", diff, sizeof(diff), &count);
        appendf(msg, n, "the %s runs ran different job configs (%s); ", s->name, diff);
        return false;
    }
    return true;
}

static void fingerprint(const side_prints *b, const side_prints *c, mst_gate_result *r) {
    bool ok = true;
    char *fp = r->fingerprint;
    size_t fn = sizeof(r->fingerprint);
    fp[0] = '\0';
    const cJSON *bc = first_config(b), *cc = first_config(c);
    hash_hex(bc, r->config_hash_base);
    hash_hex(cc, r->config_hash_cand);
    if (!side_config_consistent(b, fp, fn)) ok = false;
    if (!side_config_consistent(c, fp, fn)) ok = false;
    if (!bc || !cc) {
        appendf(fp, fn, "job config unknown for the %s runs; ", !bc && !cc ? "baseline and candidate" : !bc ? "baseline" : "candidate");
    } else if (!cJSON_Compare(bc, cc, true)) {
        char diff[512] = "";
        int count = 0;
        json_diff(bc, cc, "", diff, sizeof(diff), &count);
        if (r->config.allow_config_change) {
            appendf(fp, fn, "job config differs, allowed by allow_config_change (%d key%s: %s); ", count, count == 1 ? "" : "s", diff);
        } else {
            appendf(fp, fn, "job config differs (%d key%s: %s); ", count, count == 1 ? "" : "s", diff);
            ok = false;
        }
    } else {
        appendf(fp, fn, "same job config %s; ", r->config_hash_base);
    }

    /* machine: every key but the ignored ones must agree wherever two runs both know it */
    const side_prints *sides[2] = {b, c};
    int unknown[2] = {0, 0};
    const cJSON *ref = NULL;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sides[s]->n; i++) {
            if (!sides[s]->machine[i]) unknown[s]++;
            else if (!ref) ref = sides[s]->machine[i];
        }
    int compared = 0, mismatches = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sides[s]->n; i++) {
            const cJSON *m = sides[s]->machine[i], *it;
            if (!m) continue;
            cJSON_ArrayForEach(it, m) {
                if (!it->string || machine_key_ignored(it->string)) continue;
                /* the first run (either side) that has this key is the reference for it */
                const cJSON *first = NULL;
                const char *first_side = NULL;
                for (int s2 = 0; s2 < 2 && !first; s2++)
                    for (int i2 = 0; i2 < sides[s2]->n && !first; i2++)
                        if (sides[s2]->machine[i2] && cJSON_GetObjectItemCaseSensitive(sides[s2]->machine[i2], it->string)) {
                            first = cJSON_GetObjectItemCaseSensitive(sides[s2]->machine[i2], it->string);
                            first_side = sides[s2]->name;
                        }
                if (first == it) {
                    compared++;
                    continue;
                }
                char va[200], vb[200];
                machine_value(first, va, sizeof(va));
                machine_value(it, vb, sizeof(vb));
                if (strcmp(va, vb) == 0) continue;
                mismatches++;
                char tag[160];
                snprintf(tag, sizeof(tag), "machine differs: %s '", it->string);
                if (!strstr(fp, tag))       /* each key once, however many runs differ */
                    appendf(fp, fn, "machine differs: %s '%s' (%s) vs '%s' (%s); ", it->string, va, first_side, vb,
                            sides[s]->name);
            }
        }
    if (mismatches) {
        ok = false;
    } else if (!ref) {
        appendf(fp, fn, "machine unknown (no machine object in summary.json)");
    } else {
        char cpu[200] = "?", cores[64] = "?";
        machine_value(cJSON_GetObjectItemCaseSensitive(ref, "cpu_model"), cpu, sizeof(cpu));
        machine_value(cJSON_GetObjectItemCaseSensitive(ref, "cpu_cores"), cores, sizeof(cores));
        appendf(fp, fn, "same machine: %s, %s cores (%d fields compared)", cpu, cores, compared);
        if (unknown[0] || unknown[1])
            appendf(fp, fn, "; machine unknown for %d baseline and %d candidate runs", unknown[0], unknown[1]);
    }
    size_t len = strlen(fp);
    while (len >= 2 && fp[len - 2] == ';' && fp[len - 1] == ' ') fp[len -= 2] = '\0';
    r->comparable = ok;
}

/* ---- per-metric rules ---- */

static int collect(const mst_gate_run *runs, int n, int metric, double *out) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (runs[i].ok && !isnan(runs[i].value[metric])) out[k++] = runs[i].value[metric];
    return k;
}

/* significance and size combine the same way for timing and accuracy */
static mst_gate_verdict combine(bool significant, bool large) {
    if (significant && large) return MST_GATE_FAIL;
    if (significant || large) return MST_GATE_WARN;
    return MST_GATE_PASS;
}

static void set_absent(mst_gate_metric_result *m, int nb, int nc) {
    m->verdict = MST_GATE_ABSENT;
    m->n_base = nb;
    m->n_cand = nc;
    if (nb == 0 && nc == 0) snprintf(m->note, sizeof(m->note), "not in the runs' summary.json");
    else snprintf(m->note, sizeof(m->note), "only the %s runs have it", nb ? "baseline" : "candidate");
}

/* The rank interval of the shift is unbounded when the groups are too small for its level: say
 * so (NAN bounds) with the equal group size that would bound it, rather than [-100%, +inf]. */
static void unbounded_interval(const mst_gate_config *cfg, const mst_shift *s, mst_gate_metric_result *m) {
    if (s->bounded) return;
    m->change_lo = m->change_hi = NAN;
    m->interval_needs_runs = -1;
    for (int k = 2; k <= MST_GATE_MAX_RUNS; k++) {
        int c = mst_stats_mwu_critical(k, k, cfg->alpha);
        if (c >= 0 && (size_t)c < (size_t)k * (size_t)k / 2) {
            m->interval_needs_runs = k;
            break;
        }
    }
}

/* The equal group size whose smallest attainable p reaches alpha (what "use more runs" means). */
static int runs_to_reach(double alpha) {
    for (int k = 2; k <= MST_GATE_MAX_RUNS; k++)
        if (mst_stats_mwu_min_p(k, k) <= alpha) return k;
    return -1;
}

static void timing_paired(const mst_gate_config *cfg, const mst_gate_metric_desc *d, const double *b, int nb,
                          const double *c, int nc, mst_gate_metric_result *m) {
    double wb[MST_GATE_MAX_RUNS * 4], wc[MST_GATE_MAX_RUNS * 4];
    double sign = d->higher_is_better ? -1 : 1;     /* w grows when the candidate is worse */
    for (int i = 0; i < nb; i++) wb[i] = sign * log(b[i]);
    for (int i = 0; i < nc; i++) wc[i] = sign * log(c[i]);
    m->cv = mst_stats_shamos_pooled(wb, nb, wc, nc);
    m->threshold = fmax(cfg->min_effect, cfg->cv_multiplier * m->cv);
    mst_mwu t;
    mst_shift s;
    mst_stats_mann_whitney(wb, nb, wc, nc, &t);
    mst_stats_hodges_lehmann(wb, nb, wc, nc, 1 - 2 * cfg->alpha, &s);
    m->p_value = t.p_greater;
    m->exact = t.exact;
    m->change = expm1(sign * s.estimate);
    m->change_lo = sign > 0 ? expm1(s.lo) : expm1(-s.hi);
    m->change_hi = sign > 0 ? expm1(s.hi) : expm1(-s.lo);
    unbounded_interval(cfg, &s, m);
    double min_p = mst_stats_mwu_min_p(nb, nc);
    if (min_p > cfg->alpha) {
        m->verdict = MST_GATE_INCONCLUSIVE;
        snprintf(m->note, sizeof(m->note), "%d and %d runs cannot reach alpha %g (smallest p is %.3g): use at least %d runs per side",
                 nb, nc, cfg->alpha, min_p, runs_to_reach(cfg->alpha));
        return;
    }
    /* the size of the worsening in natural terms: +x% step time, or -x% throughput */
    double worse = d->higher_is_better ? -m->change : m->change;
    bool sig = t.p_greater <= cfg->alpha, large = worse > m->threshold;
    m->verdict = combine(sig, large);
    const char *word = d->higher_is_better ? "lower" : "slower";
    if (m->verdict == MST_GATE_FAIL)
        snprintf(m->note, sizeof(m->note), "%.1f%% %s (p %.2g <= %g, above the %.1f%% threshold)", 100 * worse, word,
                 t.p_greater, cfg->alpha, 100 * m->threshold);
    else if (sig)
        snprintf(m->note, sizeof(m->note), "significantly %s (p %.2g) but by %.1f%%, within the %.1f%% threshold", word,
                 t.p_greater, 100 * worse, 100 * m->threshold);
    else if (large)
        snprintf(m->note, sizeof(m->note), "%.1f%% %s but not significant (p %.2g > %g): noisy runs or too few", 100 * worse,
                 word, t.p_greater, cfg->alpha);
    else if (t.p_less <= cfg->alpha && -worse > m->threshold)
        snprintf(m->note, sizeof(m->note), "improved: %.1f%% %s", -100 * worse, d->higher_is_better ? "higher" : "faster");
}

static void memory_rule(const mst_gate_config *cfg, double base, double cand, mst_gate_metric_result *m) {
    m->base_value = base;
    m->cand_value = cand;
    m->change = cand / base - 1;
    m->change_lo = m->change_hi = NAN;
    m->p_value = NAN;
    m->threshold = cfg->memory_pct / 100;
    double delta = cand - base;
    bool pct = delta > 0 && m->change >= m->threshold, abs_ = delta > 0 && delta >= cfg->memory_mib * MIB;
    m->verdict = pct && abs_ ? MST_GATE_FAIL : pct || abs_ ? MST_GATE_WARN : MST_GATE_PASS;
    if (delta != 0)
        snprintf(m->note, sizeof(m->note), "%+.1f MiB (%+.1f%%; fails at +%g%% and +%g MiB together)", delta / MIB,
                 100 * m->change, cfg->memory_pct, cfg->memory_mib);
}

/* The job's metric in its points, signed so that higher is better (accuracy x 100, PSNR in dB). */
static double points(const mst_gate_quality *q, double v) { return (q->higher_is_better ? 1 : -1) * q->scale * v; }

static void accuracy_paired(const mst_gate_config *cfg, const mst_gate_quality *q, const double *b, int nb, const double *c,
                            int nc, mst_gate_metric_result *m) {
    double pb[MST_GATE_MAX_RUNS * 4], pc[MST_GATE_MAX_RUNS * 4];
    for (int i = 0; i < nb; i++) pb[i] = points(q, b[i]);
    for (int i = 0; i < nc; i++) pc[i] = points(q, c[i]);
    mst_mwu t;
    mst_shift s;
    mst_stats_mann_whitney(pb, nb, pc, nc, &t);
    mst_stats_hodges_lehmann(pb, nb, pc, nc, 1 - 2 * cfg->alpha, &s);
    m->p_value = t.p_less;
    m->exact = t.exact;
    m->change = s.estimate;
    m->change_lo = s.lo;
    m->change_hi = s.hi;
    unbounded_interval(cfg, &s, m);
    m->cv = NAN;
    m->threshold = cfg->accuracy_margin_points;
    double min_p = mst_stats_mwu_min_p(nb, nc);
    if (min_p > cfg->alpha) {
        m->verdict = MST_GATE_INCONCLUSIVE;
        snprintf(m->note, sizeof(m->note), "%d and %d runs cannot reach alpha %g (smallest p is %.3g): use at least %d runs per side",
                 nb, nc, cfg->alpha, min_p, runs_to_reach(cfg->alpha));
        return;
    }
    double drop = -s.estimate;
    bool sig = t.p_less <= cfg->alpha, large = drop > cfg->accuracy_margin_points;
    m->verdict = combine(sig, large);
    if (m->verdict != MST_GATE_PASS)
        snprintf(m->note, sizeof(m->note), "%.2f %s worse (p %.2g, margin %g %s)", drop, q->diff_unit, t.p_less,
                 cfg->accuracy_margin_points, q->diff_unit);
}

static void metric_paired(const mst_gate_config *cfg, const mst_gate_quality *q, int metric, const mst_gate_run *base, int nb,
                          const mst_gate_run *cand, int nc, mst_gate_metric_result *m) {
    const mst_gate_metric_desc *d = &mst_gate_metrics[metric];
    memset(m, 0, sizeof(*m));
    m->p_value = m->cv = m->change = m->change_lo = m->change_hi = m->base_value = m->cand_value = NAN;
    double *b = malloc((size_t)(nb + 1) * sizeof(double)), *c = malloc((size_t)(nc + 1) * sizeof(double));
    if (!b || !c) {
        m->verdict = MST_GATE_INCONCLUSIVE;
        snprintf(m->note, sizeof(m->note), "out of memory");
        goto done;
    }
    int kb = collect(base, nb, metric, b), kc = collect(cand, nc, metric, c);
    if (kb == 0 || kc == 0) {
        set_absent(m, kb, kc);
        goto done;
    }
    if (d->rule == MST_GATE_RULE_QUALITY && !q->name[0]) {
        m->verdict = MST_GATE_INCONCLUSIVE;
        snprintf(m->note, sizeof(m->note), "the baseline and the candidate judge different metrics");
        goto done;
    }
    m->n_base = kb;
    m->n_cand = kc;
    m->base_value = mst_stats_median(b, kb);
    m->cand_value = mst_stats_median(c, kc);
    if (kb > MST_GATE_MAX_RUNS * 4 || kc > MST_GATE_MAX_RUNS * 4) {
        m->verdict = MST_GATE_INCONCLUSIVE;
        snprintf(m->note, sizeof(m->note), "more than %d runs a side", MST_GATE_MAX_RUNS * 4);
        goto done;
    }
    if (d->rule == MST_GATE_RULE_TIMING) {
        timing_paired(cfg, d, b, kb, c, kc, m);
    } else if (d->rule == MST_GATE_RULE_MEMORY) {
        double lb[MST_GATE_MAX_RUNS * 4], lc[MST_GATE_MAX_RUNS * 4];
        for (int i = 0; i < kb; i++) lb[i] = log(b[i]);
        for (int i = 0; i < kc; i++) lc[i] = log(c[i]);
        m->cv = mst_stats_shamos_pooled(lb, kb, lc, kc);
        memory_rule(cfg, m->base_value, m->cand_value, m);
    } else {
        accuracy_paired(cfg, q, b, kb, c, kc, m);
    }
done:
    free(b);
    free(c);
}

/* ---- overall ---- */

static void overall(mst_gate_result *r) {
    char *why = r->reason;
    size_t wn = sizeof(r->reason);
    why[0] = '\0';
    int counts[MST_GATE_VERDICT_COUNT] = {0};
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) counts[r->metric[m].verdict]++;
    if (r->n_failed) {
        r->verdict = MST_GATE_JOB_FAILED;
        appendf(why, wn, "%d of %d runs failed: %s", r->n_failed, r->n_base + r->n_cand, r->failure);
        return;
    }
    if (!r->comparable) {
        r->verdict = MST_GATE_INCONCLUSIVE;
        appendf(why, wn, "runs not comparable: %s", r->fingerprint);
        return;
    }
    mst_gate_verdict order[] = {MST_GATE_FAIL, MST_GATE_INCONCLUSIVE, MST_GATE_WARN};
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        if (!counts[order[k]]) continue;
        r->verdict = order[k];
        appendf(why, wn, "%s: ", order[k] == MST_GATE_FAIL ? "regression" : order[k] == MST_GATE_WARN ? "warning" : "inconclusive");
        bool first = true;
        for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
            if (r->metric[m].verdict != order[k]) continue;
            appendf(why, wn, "%s%s %s", first ? "" : "; ", mst_gate_desc(r, m).label, r->metric[m].note);
            first = false;
        }
        return;
    }
    if (counts[MST_GATE_ABSENT] == MST_GATE_METRIC_COUNT) {
        r->verdict = MST_GATE_INCONCLUSIVE;
        appendf(why, wn, "no metric to compare");
        return;
    }
    r->verdict = MST_GATE_PASS;
    appendf(why, wn, "no regression");
}

static void result_init(mst_gate_result *r, const mst_gate_config *cfg, mst_gate_mode mode) {
    memset(r, 0, sizeof(*r));
    r->mode = mode;
    r->config = *cfg;
}

static void note_failures(mst_gate_result *r, const mst_gate_run *runs, int n) {
    for (int i = 0; i < n; i++) {
        if (runs[i].ok) continue;
        if (r->n_failed++ < 3) appendf(r->failure, sizeof(r->failure), "%s%s", r->failure[0] ? "; " : "", runs[i].error);
    }
}

static int prints_from_runs(const mst_gate_run *runs, int n, const char *name, side_prints *s) {
    s->config = calloc((size_t)(n + 1), sizeof(*s->config));
    s->machine = calloc((size_t)(n + 1), sizeof(*s->machine));
    s->name = name;
    s->n = 0;
    if (!s->config || !s->machine) return -1;
    for (int i = 0; i < n; i++) {
        if (!runs[i].ok) continue;
        s->config[s->n] = runs[i].config;
        s->machine[s->n] = runs[i].machine;
        s->n++;
    }
    return 0;
}

static void prints_free(side_prints *s) {
    free(s->config);
    free(s->machine);
}

int mst_gate_compare(const mst_gate_config *cfg, const mst_gate_run *base, int nb, const mst_gate_run *cand, int nc,
                     mst_gate_result *r) {
    result_init(r, cfg, MST_GATE_MODE_PAIRED);
    r->n_base = nb;
    r->n_cand = nc;
    note_failures(r, base, nb);
    note_failures(r, cand, nc);
    side_prints pb, pc;
    int rc = 0;
    if (prints_from_runs(base, nb, "baseline", &pb) != 0 || prints_from_runs(cand, nc, "candidate", &pc) != 0) {
        rc = -1;
    } else {
        fingerprint(&pb, &pc, r);
        result_quality(r, base, nb, cand, nc);
        for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) metric_paired(cfg, &r->quality, m, base, nb, cand, nc, &r->metric[m]);
        overall(r);
    }
    prints_free(&pb);
    prints_free(&pc);
    return rc;
}

/* ---- history mode ---- */

static void timing_history(const mst_gate_config *cfg, const mst_gate_metric_desc *d, const double *h, int n,
                           const double *c, int k, mst_gate_metric_result *m) {
    double *wh = malloc((size_t)n * sizeof(double)), *wc = malloc((size_t)k * sizeof(double));
    if (!wh || !wc) {
        free(wh);
        free(wc);
        m->verdict = MST_GATE_INCONCLUSIVE;
        snprintf(m->note, sizeof(m->note), "out of memory");
        return;
    }
    double sign = d->higher_is_better ? -1 : 1;
    for (int i = 0; i < n; i++) wh[i] = sign * log(h[i]);
    for (int i = 0; i < k; i++) wc[i] = sign * log(c[i]);
    double mh = mst_stats_mean(wh, n), sh = mst_stats_sd(wh, n), mc = mst_stats_mean(wc, k);
    m->base_value = exp(sign * mh);
    m->cand_value = exp(sign * mc);
    /* The history was recorded at other times than the current runs, so its whole spread, modes
     * of a shared machine included, is the run-to-run variation: the sd, not a robust scale. */
    m->cv = sh;
    m->threshold = fmax(cfg->min_effect, cfg->cv_multiplier * m->cv);
    double se = sh * sqrt(1.0 / n + 1.0 / k), diff = mc - mh;
    double half = mst_stats_t_quantile(1 - cfg->alpha, n - 1) * se;
    m->p_value = se > 0 ? 1 - mst_stats_t_cdf(diff / se, n - 1) : (diff > 0 ? 0 : 1);
    m->change = expm1(sign * diff);
    m->change_lo = sign > 0 ? expm1(diff - half) : expm1(-(diff + half));
    m->change_hi = sign > 0 ? expm1(diff + half) : expm1(-(diff - half));
    double worse = d->higher_is_better ? -m->change : m->change;
    bool sig = diff > half, large = worse > m->threshold;
    m->verdict = combine(sig, large);
    const char *word = d->higher_is_better ? "lower" : "slower";
    if (m->verdict == MST_GATE_FAIL)
        snprintf(m->note, sizeof(m->note), "%.1f%% %s, outside the %.0f%% prediction bound (p %.2g), above the %.1f%% threshold",
                 100 * worse, word, 100 * (1 - cfg->alpha), m->p_value, 100 * m->threshold);
    else if (sig)
        snprintf(m->note, sizeof(m->note), "outside the prediction bound (p %.2g) but %.1f%% %s, within the %.1f%% threshold",
                 m->p_value, 100 * worse, word, 100 * m->threshold);
    else if (large)
        snprintf(m->note, sizeof(m->note), "%.1f%% %s but inside the prediction bound (p %.2g)", 100 * worse, word, m->p_value);
    free(wh);
    free(wc);
}

static void accuracy_history(const mst_gate_config *cfg, const mst_gate_quality *q, const double *h, int n, const double *c,
                             int k, mst_gate_metric_result *m) {
    double ph[MST_GATE_MAX_RUNS * 4], pc[MST_GATE_MAX_RUNS * 4];
    for (int i = 0; i < n; i++) ph[i] = points(q, h[i]);
    for (int i = 0; i < k; i++) pc[i] = points(q, c[i]);
    double mh = mst_stats_mean(ph, n), sh = mst_stats_sd(ph, n), mc = mst_stats_mean(pc, k);
    m->base_value = points(q, 1) != 0 ? mh / points(q, 1) : NAN;
    m->cand_value = points(q, 1) != 0 ? mc / points(q, 1) : NAN;
    m->cv = NAN;
    m->threshold = cfg->accuracy_margin_points;
    double se = sh * sqrt(1.0 / n + 1.0 / k), diff = mc - mh;
    double half = mst_stats_t_quantile(1 - cfg->alpha, n - 1) * se;
    m->p_value = se > 0 ? mst_stats_t_cdf(diff / se, n - 1) : (diff < 0 ? 0 : 1);
    m->change = diff;
    m->change_lo = diff - half;
    m->change_hi = diff + half;
    bool sig = -diff > half, large = -diff > cfg->accuracy_margin_points;
    m->verdict = combine(sig, large);
    if (m->verdict != MST_GATE_PASS)
        snprintf(m->note, sizeof(m->note), "%.2f %s worse than the history's mean (p %.2g, margin %g %s)", -diff, q->diff_unit,
                 m->p_value, cfg->accuracy_margin_points, q->diff_unit);
}

int mst_gate_compare_history(const mst_gate_config *cfg, const mst_gate_history *h, const mst_gate_run *cand, int nc,
                             mst_gate_result *r) {
    result_init(r, cfg, MST_GATE_MODE_HISTORY);
    r->n_base = h->n;
    r->n_cand = nc;
    note_failures(r, cand, nc);
    const cJSON *hc = h->config, *hm = h->machine;
    side_prints pb = {.config = &hc, .machine = &hm, .n = 1, .name = "history"}, pc;
    if (prints_from_runs(cand, nc, "candidate", &pc) != 0) {
        prints_free(&pc);
        return -1;
    }
    fingerprint(&pb, &pc, r);
    prints_free(&pc);
    result_quality(r, NULL, 0, cand, nc);       /* the history keeps values in the candidates' metric */
    for (int metric = 0; metric < MST_GATE_METRIC_COUNT; metric++) {
        const mst_gate_metric_desc *d = &mst_gate_metrics[metric];
        mst_gate_metric_result *m = &r->metric[metric];
        memset(m, 0, sizeof(*m));
        m->p_value = m->cv = m->change = m->change_lo = m->change_hi = m->base_value = m->cand_value = NAN;
        double hv[MST_GATE_MAX_RUNS * 4], cv[MST_GATE_MAX_RUNS * 4];
        int kh = 0, kc = 0;
        for (int i = 0; i < h->n && kh < MST_GATE_MAX_RUNS * 4; i++)
            if (!isnan(h->value[metric][i])) hv[kh++] = h->value[metric][i];
        if (nc <= MST_GATE_MAX_RUNS * 4) kc = collect(cand, nc, metric, cv);
        if (kh == 0 || kc == 0) {
            set_absent(m, kh, kc);
            if (kh) snprintf(m->note, sizeof(m->note), "only the history has it");
            if (kc && !kh) snprintf(m->note, sizeof(m->note), "not in the history");
            continue;
        }
        m->n_base = kh;
        m->n_cand = kc;
        if (d->rule == MST_GATE_RULE_MEMORY) {
            double lh[MST_GATE_MAX_RUNS * 4];
            for (int i = 0; i < kh; i++) lh[i] = log(hv[i]);
            m->cv = mst_stats_sd(lh, kh);
            memory_rule(cfg, mst_stats_median(hv, kh), mst_stats_median(cv, kc), m);
            continue;
        }
        if (kh < 5) {
            m->verdict = MST_GATE_INCONCLUSIVE;
            m->base_value = mst_stats_median(hv, kh);
            m->cand_value = mst_stats_median(cv, kc);
            snprintf(m->note, sizeof(m->note), "the history holds %d runs; a prediction interval needs at least 5", kh);
            continue;
        }
        if (d->rule == MST_GATE_RULE_TIMING) timing_history(cfg, d, hv, kh, cv, kc, m);
        else accuracy_history(cfg, &r->quality, hv, kh, cv, kc, m);
    }
    overall(r);
    return 0;
}

int mst_gate_exit_code(const mst_gate_result *r) {
    switch (r->verdict) {
    case MST_GATE_PASS:
    case MST_GATE_WARN: return 0;
    case MST_GATE_FAIL: return 1;
    case MST_GATE_JOB_FAILED: return 4;
    default: return 3;
    }
}

/* ---- history file ---- */

#define HISTORY_FORMAT "mstune-gate-history"
#define HISTORY_VERSION 1

void mst_gate_history_init(mst_gate_history *h) { memset(h, 0, sizeof(*h)); }

void mst_gate_history_free(mst_gate_history *h) {
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) free(h->value[m]);
    for (int i = 0; i < h->n && h->revision; i++) free(h->revision[i]);
    free(h->revision);
    cJSON_Delete(h->config);
    cJSON_Delete(h->machine);
    memset(h, 0, sizeof(*h));
}

/* Grows h to hold cap runs. */
static int history_reserve(mst_gate_history *h, int cap) {
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        double *v = realloc(h->value[m], (size_t)(cap > 0 ? cap : 1) * sizeof(double));
        if (!v) return -1;
        h->value[m] = v;
    }
    char **rv = realloc(h->revision, (size_t)(cap > 0 ? cap : 1) * sizeof(char *));
    if (!rv) return -1;
    h->revision = rv;
    return 0;
}

int mst_gate_history_load(mst_gate_history *h, const char *path, char *err, size_t errn) {
    mst_gate_history_init(h);
    char *text = mst_read_file(path, NULL);
    if (!text) {
        snprintf(err, errn, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format"), *ver = cJSON_GetObjectItemCaseSensitive(j, "version");
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(j, "runs");
    if (!cJSON_IsObject(j) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, HISTORY_FORMAT) != 0 ||
        !cJSON_IsNumber(ver) || ver->valuedouble != HISTORY_VERSION || !cJSON_IsArray(runs)) {
        snprintf(err, errn, "%s: not a gate history (expected \"format\": \"%s\", \"version\": %d and a \"runs\" array)",
                 path, HISTORY_FORMAT, HISTORY_VERSION);
        cJSON_Delete(j);
        return -1;
    }
    int n = cJSON_GetArraySize(runs);
    if (history_reserve(h, n) != 0) {
        snprintf(err, errn, "%s: out of memory", path);
        cJSON_Delete(j);
        return -1;
    }
    const cJSON *run;
    cJSON_ArrayForEach(run, runs) {
        if (!cJSON_IsObject(run)) {
            snprintf(err, errn, "%s: runs[%d] is not an object", path, h->n);
            cJSON_Delete(j);
            mst_gate_history_free(h);
            return -1;
        }
        for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(run, mst_gate_metrics[m].key);
            if (!v && m == MST_GATE_METRIC_QUALITY) v = cJSON_GetObjectItemCaseSensitive(run, "val_accuracy");    /* older files */
            h->value[m][h->n] = finite_number(v) ? v->valuedouble : NAN;
        }
        const cJSON *rev = cJSON_GetObjectItemCaseSensitive(run, "git_revision");
        h->revision[h->n] = strdup(cJSON_IsString(rev) ? rev->valuestring : "");
        h->n++;
    }
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(j, "config"), *mach = cJSON_GetObjectItemCaseSensitive(j, "machine");
    if (cJSON_IsObject(cfg)) h->config = cJSON_Duplicate(cfg, true);
    if (cJSON_IsObject(mach)) h->machine = cJSON_Duplicate(mach, true);
    cJSON_Delete(j);
    return 0;
}

int mst_gate_history_add(mst_gate_history *h, const mst_gate_run *runs, int n, int keep, char *err, size_t errn) {
    for (int i = 0; i < n; i++) {
        const mst_gate_run *r = &runs[i];
        if (!r->ok) {
            snprintf(err, errn, "run %s failed: %s", r->dir, r->error);
            return -1;
        }
        if (h->config && r->config && !cJSON_Compare(h->config, r->config, true)) {
            char diff[512] = "";
            int count = 0;
            json_diff(h->config, r->config, "", diff, sizeof(diff), &count);
            snprintf(err, errn, "run %s: job config differs from the history's (%s)", r->dir, diff);
            return -1;
        }
        if (h->machine && r->machine) {
            const cJSON *it;
            cJSON_ArrayForEach(it, r->machine) {
                if (!it->string || machine_key_ignored(it->string)) continue;
                const cJSON *hv = cJSON_GetObjectItemCaseSensitive(h->machine, it->string);
                char a[200], b[200];
                if (!hv) continue;
                machine_value(hv, a, sizeof(a));
                machine_value(it, b, sizeof(b));
                if (strcmp(a, b) != 0) {
                    snprintf(err, errn, "run %s ran on another machine: %s '%s', the history's is '%s'", r->dir, it->string, b, a);
                    return -1;
                }
            }
        }
        if (!h->config && r->config) h->config = cJSON_Duplicate(r->config, true);
        if (!h->machine && r->machine) h->machine = cJSON_Duplicate(r->machine, true);
        if (history_reserve(h, h->n + 1) != 0) {
            snprintf(err, errn, "out of memory");
            return -1;
        }
        for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) h->value[m][h->n] = r->value[m];
        const cJSON *rev = r->machine ? cJSON_GetObjectItemCaseSensitive(r->machine, "git_revision") : NULL;
        h->revision[h->n] = strdup(cJSON_IsString(rev) ? rev->valuestring : "");
        h->n++;
    }
    if (keep > 0 && h->n > keep) {
        int drop = h->n - keep;
        for (int i = 0; i < drop; i++) free(h->revision[i]);
        for (int m = 0; m < MST_GATE_METRIC_COUNT; m++)
            memmove(h->value[m], h->value[m] + drop, (size_t)keep * sizeof(double));
        memmove(h->revision, h->revision + drop, (size_t)keep * sizeof(char *));
        h->n = keep;
    }
    return 0;
}

int mst_gate_history_save(const mst_gate_history *h, const char *path, char *err, size_t errn) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", HISTORY_FORMAT);
    cJSON_AddNumberToObject(j, "version", HISTORY_VERSION);
    char hash[17];
    hash_hex(h->config, hash);
    cJSON_AddStringToObject(j, "config_hash", hash);
    cJSON *runs = cJSON_AddArrayToObject(j, "runs");
    for (int i = 0; i < h->n; i++) {
        cJSON *o = cJSON_CreateObject();
        for (int m = 0; m < MST_GATE_METRIC_COUNT; m++)
            if (!isnan(h->value[m][i])) cJSON_AddNumberToObject(o, mst_gate_metrics[m].key, h->value[m][i]);
        if (h->revision[i] && h->revision[i][0]) cJSON_AddStringToObject(o, "git_revision", h->revision[i]);
        cJSON_AddItemToArray(runs, o);
    }
    if (h->machine) cJSON_AddItemToObject(j, "machine", cJSON_Duplicate(h->machine, true));
    if (h->config) cJSON_AddItemToObject(j, "config", cJSON_Duplicate(h->config, true));
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) {
        snprintf(err, errn, "%s: out of memory", path);
        return -1;
    }
    /* temp file and rename: a reader never sees half a history */
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int rc = 0;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        snprintf(err, errn, "%s: cannot write: %s", tmp, strerror(errno));
        rc = -1;
    }
    if (f && fclose(f) != 0 && rc == 0) {
        snprintf(err, errn, "%s: cannot write: %s", tmp, strerror(errno));
        rc = -1;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        snprintf(err, errn, "%s: cannot rename into place: %s", path, strerror(errno));
        rc = -1;
    }
    if (rc != 0) remove(tmp);
    cJSON_free(text);
    return rc;
}

/* ---- calibration ---- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double gaussian(uint64_t *s) {
    double u1 = ((splitmix64(s) >> 11) + 0.5) * 0x1.0p-53, u2 = (splitmix64(s) >> 11) * 0x1.0p-53;
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double mst_gate_power(const mst_gate_config *cfg, double cv, double effect, int k, int sims, uint64_t seed) {
    if (k < 1 || k > MST_GATE_MAX_RUNS || sims < 1) return NAN;
    int crit = mst_stats_mwu_critical(k, k, cfg->alpha);
    if (crit < 0) return 0;
    double b[MST_GATE_MAX_RUNS], c[MST_GATE_MAX_RUNS];
    double *d = malloc((size_t)k * k * sizeof(double));
    if (!d) return NAN;
    double shift = log1p(effect);
    int fails = 0;
    for (int s = 0; s < sims; s++) {
        for (int i = 0; i < k; i++) b[i] = cv * gaussian(&seed);
        for (int i = 0; i < k; i++) c[i] = shift + cv * gaussian(&seed);
        int u = 0;
        for (int j = 0; j < k; j++)
            for (int i = 0; i < k; i++) {
                u += c[j] > b[i];
                d[j * k + i] = c[j] - b[i];
            }
        /* continuous draws have no ties: p_greater <= alpha exactly when k*k - U <= crit */
        if (k * k - u > crit) continue;
        qsort(d, (size_t)k * k, sizeof(double), cmp_d);
        int mn = k * k;
        double hl = mn % 2 ? d[mn / 2] : 0.5 * (d[mn / 2 - 1] + d[mn / 2]);
        double thr = fmax(cfg->min_effect, cfg->cv_multiplier * mst_stats_shamos_pooled(b, k, c, k));
        fails += expm1(hl) > thr;
    }
    free(d);
    return (double)fails / sims;
}

int mst_gate_calibrate(const mst_gate_config *cfg, const mst_gate_run *runs, int n, double effect,
                       mst_gate_calibration *out, char *err, size_t errn) {
    memset(out, 0, sizeof(*out));
    double *v = malloc((size_t)(n + 1) * sizeof(double));
    if (!v) {
        snprintf(err, errn, "out of memory");
        return -1;
    }
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        int k = collect(runs, n, m, v);
        out->median[m] = out->cv[m] = NAN;
        if (m == MST_GATE_METRIC_STEP_TIME) out->n = k;
        if (k == 0) continue;
        out->median[m] = mst_stats_median(v, k);
        if (mst_gate_metrics[m].rule == MST_GATE_RULE_QUALITY) {
            const mst_gate_quality *q = NULL;
            for (int i = 0; i < n && !q; i++)
                if (runs[i].ok && runs[i].quality.name[0]) q = &runs[i].quality;
            for (int i = 0; i < k; i++) v[i] *= q ? q->scale : 100;
        } else {
            for (int i = 0; i < k; i++) v[i] = log(v[i]);
        }
        out->cv[m] = mst_stats_shamos(v, k);
    }
    free(v);
    if (out->n < 3) {
        snprintf(err, errn, "calibration needs at least 3 usable runs, got %d", out->n);
        return -1;
    }
    double cv = out->cv[MST_GATE_METRIC_STEP_TIME];
    out->threshold = fmax(cfg->min_effect, cfg->cv_multiplier * cv);
    out->effect = effect;
    out->runs_needed = -1;
    const int sims = 400;
    const uint64_t seed = 0x6a7e5eedull;
    for (int k = 2; k <= MST_GATE_MAX_RUNS; k++) {
        if (mst_stats_mwu_min_p(k, k) > cfg->alpha) continue;
        if (mst_gate_power(cfg, cv, effect, k, sims, seed) >= 0.8) {
            out->runs_needed = k;
            break;
        }
    }
    out->power_at_config_runs = mst_gate_power(cfg, cv, effect, cfg->runs, sims, seed);
    out->proposed = *cfg;
    if (out->runs_needed > cfg->runs) out->proposed.runs = out->runs_needed;
    return 0;
}
