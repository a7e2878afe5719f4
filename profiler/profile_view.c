/* profile_view.c — reads a profile database into an rpt_profile (see profile_view.h). Each table
 * has its own small reader; any SQLite failure becomes a message naming the file and the table. */
#define _GNU_SOURCE
#include "profiler/profile_view.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/checked.h"

typedef struct {
    sqlite3 *db;
    const char *path;
    char *err;
    size_t errn;
} reader;

static int fail(reader *r, const char *table) {
    snprintf(r->err, r->errn, "profile '%s': cannot read %s: %s", r->path, table, sqlite3_errmsg(r->db));
    return -1;
}

static int oom(reader *r) {
    snprintf(r->err, r->errn, "profile '%s': out of memory", r->path);
    return -1;
}

static char *dup_col(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return strdup(t ? (const char *)t : "");
}

static double opt_double(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* Grow *arr (elements of size sz) to hold n + 1. */
static int grow(void *arr, int64_t n, int64_t *cap, size_t sz) {
    if (n < *cap) return 0;
    int64_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*(void **)arr, (size_t)c * sz);
    if (!p) return -1;
    *(void **)arr = p;
    *cap = c;
    return 0;
}

static int read_meta(reader *r, rpt_profile *p) {
    sqlite3_stmt *st = NULL;
    int64_t cap = 0;
    if (sqlite3_prepare_v2(r->db, "SELECT key, value FROM run ORDER BY key", -1, &st, NULL) != SQLITE_OK) return fail(r, "run");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t cap2 = cap;
        if (grow(&p->meta_key, p->n_meta, &cap, sizeof(char *)) != 0 || grow(&p->meta_value, p->n_meta, &cap2, sizeof(char *)) != 0) {
            sqlite3_finalize(st);
            return oom(r);
        }
        p->meta_key[p->n_meta] = dup_col(st, 0);
        p->meta_value[p->n_meta] = dup_col(st, 1);
        p->n_meta++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return fail(r, "run");
    const char *cfg = rpt_profile_meta(p, "config");
    p->config = cfg ? cJSON_Parse(cfg) : NULL;
    p->job_name = p->model_name = "";
    p->num_workers = -1;
    if (cJSON_IsObject(p->config)) {
        const cJSON *name = cJSON_GetObjectItem(p->config, "name");
        const cJSON *model = cJSON_GetObjectItem(cJSON_GetObjectItem(p->config, "model"), "name");
        const cJSON *data = cJSON_GetObjectItem(p->config, "data");
        const cJSON *bs = cJSON_GetObjectItem(data, "batch_size"), *nw = cJSON_GetObjectItem(data, "num_workers");
        if (cJSON_IsString(name)) p->job_name = name->valuestring;
        if (cJSON_IsString(model)) p->model_name = model->valuestring;
        if (cJSON_IsNumber(bs) && bs->valuedouble > 0) p->batch_size = mst_f64_to_i64_or(bs->valuedouble, 1, INT64_MAX / 2, 0);
        if (cJSON_IsNumber(nw)) p->num_workers = mst_f64_to_i64_or(nw->valuedouble, 0, INT64_MAX / 2, 0);
    }
    const char *lvl = rpt_profile_meta(p, "profiler.level");
    p->level = lvl ? atoi(lvl) : -1;
    const char *op_every = rpt_profile_meta(p, "profiler.op_every");
    p->op_every = op_every && atoi(op_every) > 1 ? atoi(op_every) : 1;
    return 0;
}

static int read_steps(reader *r, rpt_profile *p) {
    sqlite3_stmt *st = NULL;
    int64_t cap = 0;
    static const char sql[] =
        "SELECT step, wall_ns, dispatch_ns, kernel_ns, comm_ns, data_ns, compile_ns, memcpy_ns, other_ns, warmup,"
        " loss, lr, loss_scale, overflow, unmatched, n_events FROM steps ORDER BY step";
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return fail(r, "steps");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (grow(&p->steps, p->n_steps, &cap, sizeof(rpt_step)) != 0) {
            sqlite3_finalize(st);
            return oom(r);
        }
        rpt_step *s = &p->steps[p->n_steps++];
        memset(s, 0, sizeof(*s));
        s->step = sqlite3_column_int64(st, 0);
        s->wall_ms = (double)sqlite3_column_int64(st, 1) / 1e6;
        for (int c = 0; c < MST_CAT_COUNT; c++) s->cat_ms[c] = (double)sqlite3_column_int64(st, 2 + c) / 1e6;
        s->warmup = sqlite3_column_int(st, 9) != 0;
        s->used = !s->warmup || p->bd.includes_warmup;
        s->has_loss = sqlite3_column_type(st, 10) != SQLITE_NULL;
        s->has_lr = sqlite3_column_type(st, 11) != SQLITE_NULL;
        s->has_scale = sqlite3_column_type(st, 12) != SQLITE_NULL;
        s->loss = sqlite3_column_double(st, 10);
        s->lr = sqlite3_column_double(st, 11);
        s->loss_scale = sqlite3_column_double(st, 12);
        s->overflow = sqlite3_column_type(st, 13) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 13) != 0;
        s->unmatched = sqlite3_column_int64(st, 14);
        s->n_events = sqlite3_column_int64(st, 15);
        p->n_used += s->used;
        p->n_loss += s->has_loss;
        p->n_scale += s->has_scale;
        p->n_overflow += s->overflow == 1;
        p->n_unmatched_steps += s->unmatched != 0;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : fail(r, "steps");
}

static rpt_step *step_find(rpt_profile *p, int64_t step) {
    int64_t lo = 0, hi = p->n_steps;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (p->steps[mid].step < step) lo = mid + 1;
        else hi = mid;
    }
    return lo < p->n_steps && p->steps[lo].step == step ? &p->steps[lo] : NULL;
}

/* The communicator's per-step totals (counters comm.*: the step's last sample). */
static int read_comm(reader *r, rpt_profile *p) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT step, name, last_value FROM counters WHERE name LIKE 'comm.%' ORDER BY step", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(r, "counters");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        rpt_step *s = step_find(p, sqlite3_column_int64(st, 0));
        const unsigned char *name = sqlite3_column_text(st, 1);
        if (!s || !name) continue;
        int64_t v = sqlite3_column_int64(st, 2);
        const char *n = (const char *)name;
        if (strcmp(n, "comm.wait_ns") == 0) s->comm_wait_ms = (double)v / 1e6;
        else if (strcmp(n, "comm.busy_ns") == 0) s->comm_busy_ms = (double)v / 1e6;
        else if (strcmp(n, "comm.allreduce_calls") == 0) s->comm_calls = v;
        else if (strcmp(n, "comm.allreduce_bytes") == 0) s->comm_bytes = v;
        else continue;
        if (!s->has_comm) p->n_comm++;
        s->has_comm = true;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : fail(r, "counters");
}

static int cat_index(rpt_profile *p, const char *name) {
    for (int i = 0; i < p->n_mem_cats; i++)
        if (strcmp(p->mem_cat[i], name) == 0) return i;
    return -1;
}

static int read_memory(reader *r, rpt_profile *p) {
    sqlite3_stmt *st = NULL;
    int rc;
    p->mem_peak_step_total = -1;
    /* categories in a fixed, meaningful order: the allocator's, then any other by name */
    if (sqlite3_prepare_v2(r->db,
                           "SELECT DISTINCT category FROM memory ORDER BY CASE category WHEN 'parameters' THEN 0"
                           " WHEN 'gradients' THEN 1 WHEN 'optimizer_state' THEN 2 WHEN 'activations' THEN 3"
                           " WHEN 'workspace' THEN 4 ELSE 5 END, category",
                           -1, &st, NULL) != SQLITE_OK)
        return fail(r, "memory");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && p->n_mem_cats < RPT_MEM_CATS) {
        if (!(p->mem_cat[p->n_mem_cats] = dup_col(st, 0))) {
            sqlite3_finalize(st);
            return oom(r);
        }
        p->n_mem_cats++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return fail(r, "memory");
    int64_t cap = 0;
    if (p->n_mem_cats > 0) {
        if (sqlite3_prepare_v2(r->db, "SELECT step, category, max_bytes FROM memory ORDER BY step", -1, &st, NULL) != SQLITE_OK)
            return fail(r, "memory");
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            int64_t step = sqlite3_column_int64(st, 0);
            const unsigned char *name = sqlite3_column_text(st, 1);    /* NULL in a hand-edited database */
            int c = cat_index(p, name ? (const char *)name : "");
            if (c < 0) continue;    /* past RPT_MEM_CATS categories */
            if (p->n_mem_steps == 0 || p->mem_steps[p->n_mem_steps - 1] != step) {
                int64_t c0 = cap;
                int bad = grow(&p->mem_steps, p->n_mem_steps, &cap, sizeof(int64_t));
                for (int k = 0; k < p->n_mem_cats && !bad; k++) {
                    int64_t ck = c0;
                    bad = grow(&p->mem_bytes[k], p->n_mem_steps, &ck, sizeof(int64_t));
                }
                if (bad) {
                    sqlite3_finalize(st);
                    return oom(r);
                }
                p->mem_steps[p->n_mem_steps] = step;
                for (int k = 0; k < p->n_mem_cats; k++) p->mem_bytes[k][p->n_mem_steps] = -1;
                p->n_mem_steps++;
            }
            p->mem_bytes[c][p->n_mem_steps - 1] = sqlite3_column_int64(st, 2);
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE) return fail(r, "memory");
        for (int64_t i = 0; i < p->n_mem_steps; i++) {
            int64_t sum = 0;
            for (int k = 0; k < p->n_mem_cats; k++) sum += p->mem_bytes[k][i] > 0 ? p->mem_bytes[k][i] : 0;
            if (sum > p->mem_peak_step_total) {
                p->mem_peak_step_total = sum;
                p->mem_peak_step = p->mem_steps[i];
            }
        }
    }
    if (sqlite3_prepare_v2(r->db, "SELECT category, peak_bytes FROM memory_peak ORDER BY peak_bytes DESC, category", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(r, "memory_peak");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && p->n_peaks < RPT_MEM_CATS) {
        if (!(p->peak_cat[p->n_peaks] = dup_col(st, 0))) {
            sqlite3_finalize(st);
            return oom(r);
        }
        p->peak_bytes[p->n_peaks++] = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : fail(r, "memory_peak");
}

/* The store's own op reader: one row type and one query for every reader (the order of
 * mst_store_read_top_ops, so "top ops" agree everywhere). */
static int read_ops(reader *r, rpt_profile *p) {
    char e[256];
    int n = mst_store_read_ops(r->db, &p->ops, e, sizeof(e));
    if (n < 0) return fail(r, "op_stats");
    p->n_ops = n;
    for (int i = 0; i < n; i++) p->ops_total_ns += p->ops[i].total_ns;
    return 0;
}

/* Kernel BEGIN events carry the interned signature of their inputs (events.a, an id in names). */
static int read_sigs(reader *r, rpt_profile *p) {
    sqlite3_stmt *st;
    const char *sql = "SELECT kn.name, e.op, sn.name, count(*) AS c FROM events e JOIN names sn ON sn.id = e.a "
                      "JOIN names kn ON kn.id = e.name WHERE e.kind = 0 AND e.cat = 1 AND e.a > 0 "
                      "GROUP BY e.name, e.op, e.a ORDER BY kn.name, c DESC";
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) return fail(r, "events (kernel signatures)");
    int64_t cap = 0;
    int rc = 0, s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (p->n_sigs >= 1 << 20 || grow(&p->sigs, p->n_sigs, &cap, sizeof(*p->sigs)) != 0) { rc = oom(r); break; }
        rpt_op_sig *g = &p->sigs[p->n_sigs];
        g->name = dup_col(st, 0);
        g->op = sqlite3_column_int(st, 1);
        g->sig = dup_col(st, 2);
        g->calls = sqlite3_column_int64(st, 3);
        if (!g->name || !g->sig) {
            free(g->name);
            free(g->sig);
            rc = oom(r);
            break;
        }
        p->n_sigs++;
    }
    if (rc == 0 && s != SQLITE_DONE) rc = fail(r, "events (kernel signatures)");
    sqlite3_finalize(st);
    return rc;
}

static int read_samples(reader *r, rpt_profile *p) {
    sqlite3_stmt *st = NULL;
    int64_t cap = 0;
    if (sqlite3_prepare_v2(r->db, "SELECT stack, sum(count) FROM samples GROUP BY stack ORDER BY stack", -1, &st, NULL) != SQLITE_OK)
        return fail(r, "samples");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t c = sqlite3_column_int64(st, 1);
        if (c <= 0) continue;
        if (grow(&p->samples, p->n_samples, &cap, sizeof(rpt_sample)) != 0 || !(p->samples[p->n_samples].stack = dup_col(st, 0))) {
            sqlite3_finalize(st);
            return oom(r);
        }
        p->samples[p->n_samples++].count = c;
        p->samples_total += c;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return fail(r, "samples");
    p->sampler_dispatch_share = -1;
    if (sqlite3_prepare_v2(r->db, "SELECT dispatch_share, hz, samples FROM sampler WHERE id = 1", -1, &st, NULL) != SQLITE_OK)
        return fail(r, "sampler");
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        p->sampler_dispatch_share = sqlite3_column_double(st, 0);
        p->sampler_hz = sqlite3_column_double(st, 1);
        p->sampler_samples = sqlite3_column_int64(st, 2);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : fail(r, "sampler");
}

static int read_health(reader *r, rpt_profile *p) {
    sqlite3_stmt *st = NULL;
    int rc;
    p->overhead_share = -1;
    if (sqlite3_prepare_v2(r->db, "SELECT overhead_share, events_dropped FROM profiler_overhead WHERE id = 1", -1, &st, NULL) !=
        SQLITE_OK)
        return fail(r, "profiler_overhead");
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) != SQLITE_NULL) p->overhead_share = sqlite3_column_double(st, 0);
        p->events_dropped = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return fail(r, "profiler_overhead");
    /* the cost of one record and of its preparation in a steady step: the signature cache's misses
     * (a shape's first calls, 1-3 us each, nearly all in the first steps) left out (columns a
     * profile written before them lacks: then unknown, NAN) */
    p->record_ns = p->prep_ns_per_record = NAN;
    if (sqlite3_prepare_v2(r->db, "SELECT record_ns, prep_ns - sig_miss_ns, records FROM profiler_overhead WHERE id = 1", -1,
                           &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL &&
            sqlite3_column_type(st, 1) != SQLITE_NULL && sqlite3_column_int64(st, 2) > 0) {
            p->record_ns = sqlite3_column_double(st, 0);
            p->prep_ns_per_record = fmax((double)sqlite3_column_int64(st, 1), 0) / (double)sqlite3_column_int64(st, 2);
        }
    }
    sqlite3_finalize(st);
    if (sqlite3_prepare_v2(r->db, "SELECT count(*) FROM threads", -1, &st, NULL) != SQLITE_OK) return fail(r, "threads");
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) p->n_threads = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : fail(r, "threads");
}

static int read_trials(reader *r, rpt_profile *p) {
    sqlite3_stmt *st = NULL;
    int64_t cap = 0, n = 0;
    if (sqlite3_prepare_v2(r->db,
                           "SELECT change, status, reason, predicted_speedup, measured_speedup, ci_low, ci_high,"
                           " memory_delta_bytes, accuracy_delta, metrics_json FROM trials ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK)
        return fail(r, "trials");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (grow(&p->trials, n, &cap, sizeof(rpt_trial)) != 0) {
            sqlite3_finalize(st);
            return oom(r);
        }
        rpt_trial *t = &p->trials[n++];
        memset(t, 0, sizeof(*t));
        p->n_trials = (int)n;
        t->change = dup_col(st, 0);
        t->status = dup_col(st, 1);
        t->reason = dup_col(st, 2);
        if (!t->change || !t->status || !t->reason) {
            sqlite3_finalize(st);
            return oom(r);
        }
        t->predicted = opt_double(st, 3);
        t->measured = opt_double(st, 4);
        t->ci_low = opt_double(st, 5);
        t->ci_high = opt_double(st, 6);
        t->has_memory_delta = sqlite3_column_type(st, 7) != SQLITE_NULL;
        t->memory_delta = sqlite3_column_int64(st, 7);
        t->accuracy_delta = opt_double(st, 8);
        /* the advisor stores its finding (rule, evidence) beside the trial's runs */
        const unsigned char *mj = sqlite3_column_text(st, 9);
        cJSON *m = mj ? cJSON_Parse((const char *)mj) : NULL;
        const cJSON *rule = cJSON_GetObjectItemCaseSensitive(m, "rule"), *ev = cJSON_GetObjectItemCaseSensitive(m, "evidence");
        t->rule = strdup(cJSON_IsString(rule) ? rule->valuestring : "");
        t->evidence = strdup(cJSON_IsString(ev) ? ev->valuestring : "");
        cJSON_Delete(m);
        if (!t->rule || !t->evidence) {
            sqlite3_finalize(st);
            return oom(r);
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : fail(r, "trials");
}

int rpt_profile_load(rpt_profile *p, const char *path, char *err, size_t errn) {
    memset(p, 0, sizeof(*p));
    p->job_name = p->model_name = "";
    p->sampler_dispatch_share = p->overhead_share = -1;
    p->record_ns = p->prep_ns_per_record = NAN;
    p->mem_peak_step_total = -1;
    if (!(p->path = strdup(path))) {
        snprintf(err, errn, "profile '%s': out of memory", path);
        return -1;
    }
    reader r = {mst_store_open_db(path, err, errn), path, err, errn};
    if (!r.db) {
        rpt_profile_free(p);
        return -1;
    }
    int rc = -1;
    if (mst_store_read_breakdown(path, &p->bd, err, errn) != 0) goto out;
    if (read_meta(&r, p) != 0 || read_steps(&r, p) != 0 || read_comm(&r, p) != 0 || read_memory(&r, p) != 0 || read_ops(&r, p) != 0 ||
        read_samples(&r, p) != 0 || read_health(&r, p) != 0 || read_trials(&r, p) != 0)
        goto out;
    rc = 0;
out:
    sqlite3_close(r.db);
    if (rc != 0) rpt_profile_free(p);
    return rc;
}

void rpt_profile_free(rpt_profile *p) {
    for (int i = 0; i < p->n_meta; i++) {
        free(p->meta_key[i]);
        free(p->meta_value[i]);
    }
    free(p->meta_key);
    free(p->meta_value);
    cJSON_Delete(p->config);
    free(p->steps);
    for (int i = 0; i < p->n_mem_cats; i++) {
        free(p->mem_cat[i]);
        free(p->mem_bytes[i]);
    }
    free(p->mem_steps);
    for (int i = 0; i < p->n_peaks; i++) free(p->peak_cat[i]);
    free(p->ops);
    for (int i = 0; i < p->n_sigs; i++) {
        free(p->sigs[i].name);
        free(p->sigs[i].sig);
    }
    free(p->sigs);
    for (int64_t i = 0; i < p->n_samples; i++) free(p->samples[i].stack);
    free(p->samples);
    for (int i = 0; i < p->n_trials; i++) {
        free(p->trials[i].change);
        free(p->trials[i].status);
        free(p->trials[i].reason);
        free(p->trials[i].rule);
        free(p->trials[i].evidence);
    }
    free(p->trials);
    free(p->path);
    memset(p, 0, sizeof(*p));
    p->job_name = p->model_name = "";
}

int rpt_profile_load_sigs(rpt_profile *p, char *err, size_t errn) {
    if (p->sigs) return 0;
    reader r = {mst_store_open_db(p->path, err, errn), p->path, err, errn};
    if (!r.db) return -1;
    int rc = read_sigs(&r, p);
    sqlite3_close(r.db);
    return rc;
}

const char *rpt_profile_meta(const rpt_profile *p, const char *key) {
    for (int i = 0; i < p->n_meta; i++)
        if (strcmp(p->meta_key[i], key) == 0) return p->meta_value[i];
    return NULL;
}

mst_prof_cat rpt_profile_top_category(const rpt_profile *p) {
    int best = MST_CAT_KERNEL;
    for (int c = 0; c < MST_CAT_COUNT; c++)
        if (p->bd.share[c] > p->bd.share[best]) best = c;
    return (mst_prof_cat)best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double rpt_median(const double *v, int64_t n) {
    if (n <= 0) return 0;
    double *c = malloc((size_t)n * sizeof(double));
    if (!c) return NAN;
    memcpy(c, v, (size_t)n * sizeof(double));
    qsort(c, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}
