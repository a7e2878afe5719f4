/* trace_export.c — profile database -> Chrome trace JSON, built with cJSON.
 *
 * Ranges are re-paired from the stored BEGIN/END records with the same tracker attribution uses
 * (profiler/attribution.h), so the trace and the breakdown agree on what a range is; a range
 * left open at the end of a thread's records is drawn up to that thread's last record and
 * marked "unclosed". Steps are slices named ProfilerStep#N (PyTorch's convention, which HTA and the
 * TensorBoard profiler plugin segment by) on their own "steps" track. The whole document is built in memory: the trace span is short by design
 * (store.h's trace_steps), the per-step tracks add a few objects per step.
 */
#define _GNU_SOURCE
#include "profiler/trace_export.h"
#include "util/fsutil.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "profiler/attribution.h"
#include "profiler/events.h"
#include "profiler/store.h"

#define TRACE_PID 1

typedef struct {
    int64_t id;
    char *name;
} name_entry;

/* A forward kernel slice whose backward may follow: where its flow arrow starts. */
typedef struct {
    int64_t id, tid;
    double ts;
    bool linked;        /* its flow is drawn (once, to the first backward kernel) */
} flow_start;

typedef struct {
    const char *db_path;
    sqlite3 *db;
    cJSON *events;          /* the traceEvents array */
    name_entry *names;
    size_t n_names;
    uint64_t origin;
    flow_start *flows;      /* sorted by id: ids grow within a thread, threads come in order */
    size_t n_flows, cap_flows;
    char *err;
    size_t errn;
} exporter;

static int db_fail(exporter *x, const char *what) {
    snprintf(x->err, x->errn, "trace export from '%s': %s: %s", x->db_path, what, sqlite3_errmsg(x->db));
    return -1;
}

static int oom(exporter *x) {
    snprintf(x->err, x->errn, "trace export from '%s': out of memory", x->db_path);
    return -1;
}

static int cmp_name(const void *a, const void *b) {
    const name_entry *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static const char *name_of(const exporter *x, int64_t id) {
    name_entry key = {id, NULL};
    const name_entry *e = x->n_names ? bsearch(&key, x->names, x->n_names, sizeof(key), cmp_name) : NULL;
    return e ? e->name : "";
}

static double ts_us(const exporter *x, uint64_t t_ns) {
    return t_ns >= x->origin ? (double)(t_ns - x->origin) / 1000.0 : -(double)(x->origin - t_ns) / 1000.0;
}

/* A new event object appended to traceEvents: {"ph", "name", "pid", "tid"[, "ts"]}. */
static cJSON *new_event(exporter *x, const char *ph, const char *name, int64_t tid, int has_ts, double ts) {
    cJSON *e = cJSON_CreateObject();
    if (!e) return NULL;
    if (!cJSON_AddStringToObject(e, "ph", ph) || !cJSON_AddStringToObject(e, "name", name) ||
        !cJSON_AddNumberToObject(e, "pid", TRACE_PID) || !cJSON_AddNumberToObject(e, "tid", (double)tid) ||
        (has_ts && !cJSON_AddNumberToObject(e, "ts", ts)) || !cJSON_AddItemToArray(x->events, e)) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

static cJSON *add_event(exporter *x, const char *ph, const char *name, int64_t tid, double ts) {
    return new_event(x, ph, name, tid, 1, ts);
}

static int add_metadata(exporter *x, const char *what, int64_t tid, const char *key, const char *sval, double nval) {
    cJSON *e = new_event(x, "M", what, tid, 0, 0);
    cJSON *args = e ? cJSON_AddObjectToObject(e, "args") : NULL;
    if (!args) return oom(x);
    if (sval ? !cJSON_AddStringToObject(args, key, sval) : !cJSON_AddNumberToObject(args, key, nval)) return oom(x);
    return 0;
}

static int add_counter(exporter *x, const char *name, uint64_t t_ns, const char *key, double v) {
    cJSON *e = add_event(x, "C", name, MST_TRACE_STEPS_TID, ts_us(x, t_ns));
    cJSON *args = e ? cJSON_AddObjectToObject(e, "args") : NULL;
    if (!args || !cJSON_AddNumberToObject(args, key, v)) return oom(x);
    return 0;
}

static int load_names(exporter *x) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(x->db, "SELECT id, name FROM names ORDER BY id", -1, &st, NULL) != SQLITE_OK)
        return db_fail(x, "SELECT names");
    size_t cap = 0;
    int r, rc = 0;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (x->n_names == cap) {
            cap = cap ? 2 * cap : 256;
            name_entry *n = realloc(x->names, cap * sizeof(*n));
            if (!n) {
                rc = oom(x);
                break;
            }
            x->names = n;
        }
        const unsigned char *s = sqlite3_column_text(st, 1);
        char *copy = strdup(s ? (const char *)s : "");
        if (!copy) {
            rc = oom(x);
            break;
        }
        x->names[x->n_names].id = sqlite3_column_int64(st, 0);
        x->names[x->n_names++].name = copy;
    }
    if (rc == 0 && r != SQLITE_DONE) rc = db_fail(x, "SELECT names");
    sqlite3_finalize(st);
    return rc;
}

static int query_origin(exporter *x) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(x->db,
                           "SELECT min(t) FROM (SELECT min(t_ns) AS t FROM events UNION ALL"
                           " SELECT min(t_begin_ns) FROM steps)",
                           -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return db_fail(x, "SELECT origin");
    }
    x->origin = sqlite3_column_type(st, 0) == SQLITE_NULL ? 0 : (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return 0;
}

static int export_threads(exporter *x, cJSON *other) {
    if (add_metadata(x, "process_name", 0, "name", "mstune", 0) != 0 ||
        add_metadata(x, "thread_name", MST_TRACE_STEPS_TID, "name", "steps", 0) != 0 ||
        add_metadata(x, "thread_sort_index", MST_TRACE_STEPS_TID, "sort_index", NULL, -1) != 0)
        return -1;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(x->db, "SELECT tid, name, is_main FROM threads ORDER BY is_main DESC, tid", -1, &st, NULL) != SQLITE_OK)
        return db_fail(x, "SELECT threads");
    int r, rc = 0, order = 0;
    while (rc == 0 && (r = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t tid = sqlite3_column_int64(st, 0);
        const unsigned char *name = sqlite3_column_text(st, 1);
        char fallback[48];
        snprintf(fallback, sizeof(fallback), "%s %lld", sqlite3_column_int(st, 2) ? "main" : "thread", (long long)tid);
        rc = add_metadata(x, "thread_name", tid, "name", name && name[0] ? (const char *)name : fallback, 0);
        if (rc == 0) rc = add_metadata(x, "thread_sort_index", tid, "sort_index", NULL, ++order);
    }
    if (rc == 0 && r != SQLITE_DONE) rc = db_fail(x, "SELECT threads");
    sqlite3_finalize(st);
    if (rc != 0) return rc;
    /* run metadata goes to otherData */
    if (sqlite3_prepare_v2(x->db, "SELECT key, value FROM run ORDER BY key", -1, &st, NULL) != SQLITE_OK)
        return db_fail(x, "SELECT run");
    while (rc == 0 && (r = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *k = sqlite3_column_text(st, 0), *v = sqlite3_column_text(st, 1);
        if (k && !cJSON_AddStringToObject(other, (const char *)k, v ? (const char *)v : "")) rc = oom(x);
    }
    if (rc == 0 && r != SQLITE_DONE) rc = db_fail(x, "SELECT run");
    sqlite3_finalize(st);
    return rc;
}

static int export_steps(exporter *x) {
    static const char sql[] =
        "SELECT step, t_begin_ns, t_end_ns, warmup, loss, lr, loss_scale, overflow, dispatch_ns, kernel_ns, comm_ns,"
        " data_ns, compile_ns, memcpy_ns, other_ns, hidden_dispatch_ns, hidden_kernel_ns, hidden_comm_ns,"
        " hidden_data_ns, hidden_compile_ns, hidden_memcpy_ns, hidden_other_ns FROM steps ORDER BY t_begin_ns";
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(x->db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(x, "SELECT steps");
    int r, rc = 0;
    while (rc == 0 && (r = sqlite3_step(st)) == SQLITE_ROW) {
        const int64_t step = sqlite3_column_int64(st, 0);
        const uint64_t tb = (uint64_t)sqlite3_column_int64(st, 1), te = (uint64_t)sqlite3_column_int64(st, 2);
        char name[48];      /* PyTorch's name: HTA and the TensorBoard profiler plugin segment steps by it */
        snprintf(name, sizeof(name), "ProfilerStep#%lld", (long long)step);
        cJSON *e = add_event(x, "X", name, MST_TRACE_STEPS_TID, ts_us(x, tb));
        cJSON *args = e ? cJSON_CreateObject() : NULL;
        if (!args) {
            rc = oom(x);
            break;
        }
        cJSON_AddItemToObject(e, "args", args);
        int ok = cJSON_AddStringToObject(e, "cat", "step") && cJSON_AddNumberToObject(e, "dur", (double)(te - tb) / 1000.0) &&
                 cJSON_AddNumberToObject(args, "step", (double)step) &&
                 cJSON_AddBoolToObject(args, "warmup", sqlite3_column_int(st, 3));
        for (int c = 0; ok && c < MST_CAT_COUNT; c++) {
            char key[40];
            snprintf(key, sizeof(key), "%s_ms", mst_prof_cat_name((mst_prof_cat)c));
            ok = cJSON_AddNumberToObject(args, key, (double)sqlite3_column_int64(st, 8 + c) / 1e6) != NULL;
            if (ok && sqlite3_column_type(st, 15 + c) != SQLITE_NULL) {
                snprintf(key, sizeof(key), "hidden_%s_ms", mst_prof_cat_name((mst_prof_cat)c));
                ok = cJSON_AddNumberToObject(args, key, (double)sqlite3_column_int64(st, 15 + c) / 1e6) != NULL;
            }
        }
        if (!ok) {
            rc = oom(x);
            break;
        }
        static const char *const series[] = {"loss", "lr", "loss_scale", "overflow"};
        for (int k = 0; k < 4 && rc == 0; k++)
            if (sqlite3_column_type(st, 4 + k) != SQLITE_NULL)
                rc = add_counter(x, series[k], te, series[k], sqlite3_column_double(st, 4 + k));
    }
    if (rc == 0 && r != SQLITE_DONE) rc = db_fail(x, "SELECT steps");
    sqlite3_finalize(st);
    return rc;
}

/* Memory per category, one counter event per step (the step's maximum, drawn from its start). */
static int export_memory(exporter *x) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(x->db,
                           "SELECT m.step, s.t_begin_ns, m.category, m.max_bytes FROM memory m JOIN steps s ON s.step = m.step"
                           " ORDER BY m.step, m.category",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(x, "SELECT memory");
    int r, rc = 0;
    int64_t cur = INT64_MIN;
    cJSON *args = NULL;
    while (rc == 0 && (r = sqlite3_step(st)) == SQLITE_ROW) {
        const int64_t step = sqlite3_column_int64(st, 0);
        if (step != cur || !args) {
            cJSON *e = add_event(x, "C", "memory (bytes)", MST_TRACE_STEPS_TID, ts_us(x, (uint64_t)sqlite3_column_int64(st, 1)));
            if (!e || !(args = cJSON_AddObjectToObject(e, "args"))) {
                rc = oom(x);
                break;
            }
            cur = step;
        }
        const unsigned char *cat = sqlite3_column_text(st, 2);
        if (!cJSON_AddNumberToObject(args, cat ? (const char *)cat : "?", (double)sqlite3_column_int64(st, 3))) rc = oom(x);
    }
    if (rc == 0 && r != SQLITE_DONE) rc = db_fail(x, "SELECT memory");
    sqlite3_finalize(st);
    return rc;
}

/* "Input Dims" and "Input type" (PyTorch's arg names, which HTA and the TensorBoard plugin read)
 * from a signature "[[64,784],[128,784]]|f32,f32". */
static int add_signature(exporter *x, cJSON *args, int64_t sig) {
    const char *text = sig > 0 ? name_of(x, sig) : "";
    const char *bar = strchr(text, '|');
    if (!bar) return 0;
    cJSON *dims = cJSON_ParseWithLength(text, (size_t)(bar - text));
    if (!cJSON_IsArray(dims)) {
        cJSON_Delete(dims);
        return 0;
    }
    cJSON *types = cJSON_CreateArray();
    for (const char *p = bar + 1; types && *p;) {
        if (*p == '|') break;   /* the attribute fields follow the dtypes */
        size_t len = strcspn(p, ",|");
        char t[32];
        snprintf(t, sizeof(t), "%.*s", (int)(len < sizeof(t) ? len : sizeof(t) - 1), p);
        cJSON_AddItemToArray(types, cJSON_CreateString(t));
        p += len + (p[len] == ',');
    }
    if (!types || !cJSON_AddItemToObject(args, "Input Dims", dims)) {
        cJSON_Delete(dims);
        cJSON_Delete(types);
        return oom(x);
    }
    if (!cJSON_AddItemToObject(args, "Input type", types)) {
        cJSON_Delete(types);
        return oom(x);
    }
    return 0;
}

static flow_start *find_flow(exporter *x, int64_t id, int64_t tid) {
    size_t lo = 0, hi = x->n_flows;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const flow_start *f = &x->flows[mid];
        if (f->tid < tid || (f->tid == tid && f->id < id)) lo = mid + 1;
        else hi = mid;
    }
    return lo < x->n_flows && x->flows[lo].id == id && x->flows[lo].tid == tid ? &x->flows[lo] : NULL;
}

static int add_flow_event(exporter *x, const char *ph, int64_t id, int64_t tid, double ts) {
    cJSON *e = add_event(x, ph, "fwdbwd", tid, ts);
    if (!e || !cJSON_AddStringToObject(e, "cat", "fwdbwd") || !cJSON_AddNumberToObject(e, "id", (double)id) ||
        (ph[0] == 'f' && !cJSON_AddStringToObject(e, "bp", "e")))
        return oom(x);
    return 0;
}

/* Forward-to-backward flow (as PyTorch's profiler draws it): an arrow from a forward kernel
 * slice to the first kernel its backward ran; both ends inside the traced steps. */
static int link_flow(exporter *x, int64_t tid, const mst_attr_range *rg) {
    if (rg->cat != MST_CAT_KERNEL || rg->begin_b == 0) return 0;
    if (rg->begin_b > 0) {      /* ids of one thread arrive in increasing order */
        if (x->n_flows == x->cap_flows) {
            size_t cap = x->cap_flows ? 2 * x->cap_flows : 1024;
            flow_start *f = realloc(x->flows, cap * sizeof(*f));
            if (!f) return oom(x);
            x->flows = f;
            x->cap_flows = cap;
        }
        if (x->n_flows && (x->flows[x->n_flows - 1].tid > tid ||
                           (x->flows[x->n_flows - 1].tid == tid && x->flows[x->n_flows - 1].id >= rg->begin_b)))
            return 0;       /* out of order: not linked */
        x->flows[x->n_flows++] = (flow_start){rg->begin_b, tid, ts_us(x, rg->t0), false};
        return 0;
    }
    flow_start *f = find_flow(x, -rg->begin_b, tid);
    if (!f || f->linked) return 0;
    f->linked = true;
    double ts = ts_us(x, rg->t0);
    if (ts < f->ts) return 0;
    return add_flow_event(x, "s", f->id, tid, f->ts) != 0 || add_flow_event(x, "f", f->id, tid, ts) != 0 ? -1 : 0;
}

static int emit_range(exporter *x, int64_t tid, const mst_attr_range *rg, int unclosed) {
    cJSON *e = add_event(x, "X", name_of(x, rg->name), tid, ts_us(x, rg->t0));
    if (!e || !cJSON_AddStringToObject(e, "cat", mst_prof_cat_name((mst_prof_cat)rg->cat)) ||
        !cJSON_AddNumberToObject(e, "dur", (double)(rg->t1 - rg->t0) / 1000.0))
        return oom(x);
    if (link_flow(x, tid, rg) != 0) return -1;
    if (rg->op < 0 && !rg->flops && !rg->bytes && !unclosed) return 0;
    cJSON *args = cJSON_AddObjectToObject(e, "args");
    if (!args) return oom(x);
    if (rg->op >= 0 && !cJSON_AddNumberToObject(args, "op", rg->op)) return oom(x);
    if (rg->cat == MST_CAT_KERNEL && rg->begin_a > 0 && add_signature(x, args, rg->begin_a) != 0) return -1;
    if (rg->cat == MST_CAT_KERNEL && rg->begin_b > 0 && !cJSON_AddNumberToObject(args, "Sequence number", (double)rg->begin_b))
        return oom(x);
    if (rg->cat == MST_CAT_KERNEL && rg->begin_b < 0 && !cJSON_AddNumberToObject(args, "Fwd sequence number", (double)-rg->begin_b))
        return oom(x);
    if (rg->flops && !cJSON_AddNumberToObject(args, "flops", (double)rg->flops)) return oom(x);
    if (rg->bytes && !cJSON_AddNumberToObject(args, "bytes", (double)rg->bytes)) return oom(x);
    if (unclosed && !cJSON_AddBoolToObject(args, "unclosed", 1)) return oom(x);
    return 0;
}

static int flush_open(exporter *x, int64_t tid, mst_attr_tracker *tr) {
    for (int k = 0; k < tr->depth; k++) {
        const mst_attr_frame *f = &tr->stack[k];
        mst_attr_range rg = {f->t_begin, tr->last_t, 0, 0, f->name, f->op, f->cat, f->a, f->b};
        if (emit_range(x, tid, &rg, 1) != 0) return -1;
    }
    memset(tr, 0, sizeof(*tr));
    return 0;
}

static int export_events(exporter *x) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(x->db, "SELECT tid, t_ns, kind, cat, name, op, a, b FROM events ORDER BY tid, rowid", -1, &st,
                           NULL) != SQLITE_OK)
        return db_fail(x, "SELECT events");
    mst_attr_tracker *tr = calloc(1, sizeof(*tr));
    if (!tr) {
        sqlite3_finalize(st);
        return oom(x);
    }
    int r, rc = 0;
    int64_t cur_tid = -1;
    while (rc == 0 && (r = sqlite3_step(st)) == SQLITE_ROW) {
        const int64_t tid = sqlite3_column_int64(st, 0);
        if (tid != cur_tid) {
            if (cur_tid >= 0 && flush_open(x, cur_tid, tr) != 0) {
                rc = -1;
                break;
            }
            cur_tid = tid;
        }
        mst_prof_event ev = {
            .t_ns = (uint64_t)sqlite3_column_int64(st, 1),
            .kind = (uint8_t)sqlite3_column_int(st, 2),
            .cat = (uint8_t)sqlite3_column_int(st, 3),
            .name = (uint32_t)sqlite3_column_int64(st, 4),
            .op = (int16_t)sqlite3_column_int(st, 5),
            .a = sqlite3_column_int64(st, 6),
            .b = sqlite3_column_int64(st, 7),
        };
        mst_attr_range rg;
        if (mst_attr_track(tr, &ev, &rg)) {
            rc = emit_range(x, tid, &rg, 0);
        } else if (ev.kind == MST_EV_COUNTER) {
            cJSON *e = add_event(x, "C", name_of(x, ev.name), tid, ts_us(x, ev.t_ns));
            cJSON *args = e ? cJSON_AddObjectToObject(e, "args") : NULL;
            if (!args || !cJSON_AddNumberToObject(args, "value", (double)ev.a)) rc = oom(x);
        } else if (ev.kind == MST_EV_INSTANT) {
            cJSON *e = add_event(x, "i", name_of(x, ev.name), tid, ts_us(x, ev.t_ns));
            cJSON *args = e ? cJSON_AddObjectToObject(e, "args") : NULL;
            if (!args || !cJSON_AddStringToObject(e, "s", "t") || !cJSON_AddNumberToObject(args, "a", (double)ev.a) ||
                !cJSON_AddNumberToObject(args, "b", (double)ev.b))
                rc = oom(x);
        } else if (ev.kind == MST_EV_VALUE) {
            /* loss, lr, loss_scale and overflow come from the steps table, once per step */
            const char *series = name_of(x, ev.name);
            if (strcmp(series, "loss") && strcmp(series, "lr") && strcmp(series, "loss_scale") && strcmp(series, "overflow")) {
                double v;
                memcpy(&v, &ev.a, sizeof(v));
                cJSON *e = add_event(x, "C", series, tid, ts_us(x, ev.t_ns));
                cJSON *args = e ? cJSON_AddObjectToObject(e, "args") : NULL;
                if (!args || !cJSON_AddNumberToObject(args, series, v)) rc = oom(x);
            }
        }
    }
    if (rc == 0 && r != SQLITE_DONE) rc = db_fail(x, "SELECT events");
    if (rc == 0 && cur_tid >= 0) rc = flush_open(x, cur_tid, tr);
    free(tr);
    sqlite3_finalize(st);
    return rc;
}

/* What HTA reads to place a trace in a job (PyTorch writes it for every rank): one process. */
static bool add_distributed_info(cJSON *root) {
    cJSON *d = cJSON_AddObjectToObject(root, "distributedInfo");
    return d && cJSON_AddStringToObject(d, "backend", "none") && cJSON_AddNumberToObject(d, "rank", 0) &&
           cJSON_AddNumberToObject(d, "world_size", 1);
}

int mst_trace_export(const char *db_path, const char *json_path, char *err, size_t errn) {
    exporter x = {.db_path = db_path, .err = err, .errn = errn};
    cJSON *root = NULL;
    char *text = NULL;
    int rc = -1;
    if (!(x.db = mst_store_open_db(db_path, err, errn))) return -1;
    cJSON *other;
    if (!(root = cJSON_CreateObject()) || !(x.events = cJSON_AddArrayToObject(root, "traceEvents")) ||
        !cJSON_AddStringToObject(root, "displayTimeUnit", "ms") || !(other = cJSON_AddObjectToObject(root, "otherData")) ||
        !add_distributed_info(root)) {
        oom(&x);
        goto out;
    }
    if (load_names(&x) != 0 || query_origin(&x) != 0 || export_threads(&x, other) != 0 || export_steps(&x) != 0 ||
        export_memory(&x) != 0 || export_events(&x) != 0)
        goto out;
    if (!(text = cJSON_PrintUnformatted(root))) {
        oom(&x);
        goto out;
    }
    rc = mst_write_atomic(json_path, text, strlen(text), err, errn);
out:
    cJSON_free(text);
    cJSON_Delete(root);
    for (size_t i = 0; i < x.n_names; i++) free(x.names[i].name);
    free(x.names);
    free(x.flows);
    sqlite3_close(x.db);
    return rc;
}
