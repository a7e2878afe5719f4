/* csv_export.c — see csv_export.h. Each file is one SELECT written through SQLite's own column
 * names and types: integers as integers, reals with 17 significant digits (they read back bit for
 * bit), NULL as an empty field, text quoted when it holds a comma, quote or line break. The whole
 * file is built in memory and replaced atomically: op and step tables are small. */
#define _GNU_SOURCE
#include "profiler/csv_export.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "profiler/store.h"
#include "util/fsutil.h"

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void putf(buf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0) put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled. */
static void put_field(buf *b, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        put(b, s, strlen(s));
        return;
    }
    put(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        put(b, p, 1);
        if (*p == '"') put(b, "\"", 1);
    }
    put(b, "\"", 1);
}

static int export_query(sqlite3 *db, const char *db_path, const char *sql, const char *path, char *err, size_t errn) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errn, "csv export from '%s': %s", db_path, sqlite3_errmsg(db));
        return -1;
    }
    buf b = {0};
    int cols = sqlite3_column_count(st);
    for (int c = 0; c < cols; c++) {
        if (c) put(&b, ",", 1);
        put_field(&b, sqlite3_column_name(st, c));
    }
    put(&b, "\r\n", 2);
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        for (int c = 0; c < cols; c++) {
            if (c) put(&b, ",", 1);
            switch (sqlite3_column_type(st, c)) {
            case SQLITE_INTEGER: putf(&b, "%lld", (long long)sqlite3_column_int64(st, c)); break;
            case SQLITE_FLOAT: putf(&b, "%.17g", sqlite3_column_double(st, c)); break;
            case SQLITE_NULL: break;
            default: {
                const unsigned char *t = sqlite3_column_text(st, c);
                put_field(&b, t ? (const char *)t : "");
            }
            }
        }
        put(&b, "\r\n", 2);
    }
    int rc = -1;
    if (r != SQLITE_DONE) snprintf(err, errn, "csv export from '%s': %s", db_path, sqlite3_errmsg(db));
    else if (b.oom) snprintf(err, errn, "csv export from '%s': out of memory", db_path);
    else rc = mst_write_atomic(path, b.s ? b.s : "", b.len, err, errn);
    sqlite3_finalize(st);
    free(b.s);
    return rc;
}

int mst_csv_export(const char *db_path, const char *out_dir, char *err, size_t errn) {
    static const struct {
        const char *file, *sql;
    } tables[] = {
        {"ops.csv", "SELECT * FROM op_stats ORDER BY total_ns DESC, name"},
        {"steps.csv", "SELECT * FROM steps ORDER BY step"},
    };
    sqlite3 *db = mst_store_open_db(db_path, err, errn);
    if (!db) return -1;
    int rc = mst_mkdirs(out_dir, err, errn);
    for (size_t i = 0; rc == 0 && i < sizeof(tables) / sizeof(tables[0]); i++) {
        char path[4096];
        if (snprintf(path, sizeof(path), "%s/%s", out_dir, tables[i].file) >= (int)sizeof(path)) {
            snprintf(err, errn, "output folder '%s': path too long", out_dir);
            rc = -1;
        } else {
            rc = export_query(db, db_path, tables[i].sql, path, err, errn);
        }
    }
    sqlite3_close(db);
    return rc;
}
