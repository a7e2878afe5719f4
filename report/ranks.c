/* ranks.c — the report's per-rank view of a data-parallel run (see ranks.h). */
#define _GNU_SOURCE
#include "report/ranks.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The number of ranks the run recorded: the profile's own dp.ranks (mstune profile writes it),
 * else rank 0's summary.json; 0 when neither names more than one, or p is not rank 0. */
static int recorded_ranks(const rpt_profile *p, const cJSON *summary, const char **source) {
    const char *r = rpt_profile_meta(p, "dp.rank"), *n = rpt_profile_meta(p, "dp.ranks");
    if (n) {
        *source = "run key dp.ranks";
        return r && atoi(r) == 0 && atoi(n) > 1 ? atoi(n) : 0;
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(summary, "distributed");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, "ranks");
    *source = "summary.json distributed.ranks";
    return cJSON_IsNumber(v) && v->valuedouble > 1 && v->valuedouble <= RPT_RANKS_MAX ? (int)v->valuedouble : 0;
}

/* The folder holding p's profile, as a name its siblings can be derived from ("." made absolute). */
static char *profile_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *d = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!d) return NULL;
    size_t len = strlen(d);
    while (len > 1 && d[len - 1] == '/') d[--len] = '\0';
    const char *base = strrchr(d, '/');
    base = base ? base + 1 : d;
    if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        char *abs = realpath(d, NULL);
        if (abs) {
            free(d);
            d = abs;
        }
    }
    return d;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The index of the nearest-rank pct-th percentile of n sorted values: ceil(pct * n / 100) - 1, in
 * integers (0.9 * 10 is 9.000000000000002 in doubles). */
static int64_t nearest_rank(int pct, int64_t n) {
    int64_t i = (pct * n + 99) / 100 - 1;
    return i < 0 ? 0 : i >= n ? n - 1 : i;
}

/* One rank's row from its profile. */
static void rank_stats(rpt_rank_row *row, const rpt_profile *q) {
    double *w = malloc((size_t)(q->n_steps ? q->n_steps : 1) * sizeof(double));
    double *x = malloc((size_t)(q->n_steps ? q->n_steps : 1) * sizeof(double));
    if (!w || !x) {
        free(w);
        free(x);
        snprintf(row->problem, sizeof(row->problem), "out of memory reading its steps");
        return;
    }
    int64_t k = 0, k_comm = 0;
    double wall = 0, wait = 0, hidden = 0, busy = 0, calls = 0, bytes = 0;
    for (int64_t i = 0; i < q->n_steps; i++) {
        const rpt_step *s = &q->steps[i];
        if (!s->used) continue;
        w[k++] = s->wall_ms;
        wall += s->wall_ms;
        if (!s->has_comm) continue;
        x[k_comm++] = s->comm_wait_ms;
        wait += s->comm_wait_ms;
        busy += s->comm_busy_ms;
        hidden += s->comm_busy_ms > s->comm_wait_ms ? s->comm_busy_ms - s->comm_wait_ms : 0;
        calls += (double)s->comm_calls;
        bytes += (double)s->comm_bytes;
    }
    if (k == 0) {
        snprintf(row->problem, sizeof(row->problem), "no profiled steps in it");
        free(w);
        free(x);
        return;
    }
    qsort(w, (size_t)k, sizeof(double), cmp_double);
    row->steps = k;
    row->step_ms_median = k % 2 ? w[k / 2] : (w[k / 2 - 1] + w[k / 2]) / 2;
    row->step_ms_mean = wall / (double)k;
    free(w);
    row->has_comm = k_comm > 0;
    if (k_comm > 0) {
        qsort(x, (size_t)k_comm, sizeof(double), cmp_double);
        row->exposed_p10_ms = x[nearest_rank(10, k_comm)];
        row->exposed_p90_ms = x[nearest_rank(90, k_comm)];
        row->exposed_ms = wait / (double)k_comm;
        row->hidden_ms = hidden / (double)k_comm;
        row->allreduce_ms = busy / (double)k_comm;
        row->calls = calls / (double)k_comm;
        row->bytes = bytes / (double)k_comm;
        row->gbps = busy > 0 ? bytes / (busy * 1e6) : 0;
    }
    free(x);
    row->ok = true;
}

/* Rank k's profile: read it and check it is rank k of this run. */
static void load_sibling(rpt_rank_row *row, const rpt_profile *p, int n) {
    struct stat sb;
    if (stat(row->path, &sb) != 0) {
        snprintf(row->problem, sizeof(row->problem), "missing: %s", strerror(errno));
        return;
    }
    rpt_profile q;
    char e[512];
    if (rpt_profile_load(&q, row->path, e, sizeof(e)) != 0) {
        snprintf(row->problem, sizeof(row->problem), "unreadable: %s", e);
        return;
    }
    const char *r = rpt_profile_meta(&q, "dp.rank"), *nr = rpt_profile_meta(&q, "dp.ranks");
    const char *c0 = rpt_profile_meta(p, "config"), *ck = rpt_profile_meta(&q, "config");
    if ((r || rpt_profile_meta(p, "dp.ranks")) && (!r || !nr || atoi(r) != row->rank || atoi(nr) != n))
        snprintf(row->problem, sizeof(row->problem), "not rank %d of %d: it records %s%s of %s%s", row->rank, n, r ? "rank " : "no rank",
                 r ? r : "", nr ? nr : "no count of ranks", nr ? " ranks" : "");
    else if (!c0 != !ck || (c0 && strcmp(c0, ck) != 0))
        snprintf(row->problem, sizeof(row->problem), "of another run: its job config differs from rank 0's");
    else
        rank_stats(row, &q);
    rpt_profile_free(&q);
}

int rpt_ranks_load(rpt_ranks *rk, const rpt_profile *p, const cJSON *summary, char *err, size_t errn) {
    memset(rk, 0, sizeof(*rk));
    rk->slowest = -1;
    int n = recorded_ranks(p, summary, &rk->source);
    if (n <= 1) return 0;
    char *dir = profile_dir(p->path);
    rk->rows = calloc((size_t)n, sizeof(rpt_rank_row));
    if (!dir || !rk->rows) goto oom;
    rk->n = n;
    for (int k = 0; k < n; k++) {
        rpt_rank_row *row = &rk->rows[k];
        row->rank = k;
        if (k == 0) row->path = strdup(p->path);
        else if (asprintf(&row->path, "%s.rank%d/profile.db", dir, k) < 0) row->path = NULL;
        if (!row->path) goto oom;
        if (k == 0) rank_stats(row, p);
        else load_sibling(row, p, n);
    }
    free(dir);
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    for (int k = 0; k < n; k++) {
        const rpt_rank_row *row = &rk->rows[k];
        if (!row->ok) continue;
        rk->n_ok++;
        sum += row->step_ms_median;
        if (row->step_ms_median > hi) hi = row->step_ms_median, rk->slowest = k;
        if (row->step_ms_median < lo) lo = row->step_ms_median;
    }
    if (rk->n_ok < 2) {
        rk->slowest = -1;
        return 0;
    }
    double mean = sum / rk->n_ok;
    rk->imbalance = mean > 0 ? (hi - lo) / mean : 0;
    rk->flagged = rk->imbalance > RPT_RANK_IMBALANCE_FLAG;
    return 0;
oom:
    free(dir);
    rpt_ranks_free(rk);
    snprintf(err, errn, "report for '%s': out of memory reading the ranks' profiles", p->path);
    return -1;
}

void rpt_ranks_free(rpt_ranks *rk) {
    for (int k = 0; rk->rows && k < rk->n; k++) free(rk->rows[k].path);
    free(rk->rows);
    memset(rk, 0, sizeof(*rk));
    rk->slowest = -1;
}
