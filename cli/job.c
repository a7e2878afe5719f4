/* job.c — job files in and out: the YAML loader (libyaml's document API, so every node carries its
 * line and column), `--set` overrides, cross-key validation, the JSON config and the atomic YAML
 * writer. Per-key reading and checking lives in job_schema.c; both walk mst_job_keys.
 *
 * The loader walks the document against the schema rather than the other way round: each mapping
 * is checked key by key (unknown, duplicate, wrong shape) and leaves are handed to
 * mst_job_key_parse. Walking is bounded by the schema's depth, so aliases (even cyclic ones) and
 * deep nesting in a hostile file cannot make it loop or recurse deeply.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <yaml.h>

#include "cli/job.h"
#include "runtime/status.h"
#include "util/fsutil.h"

#define JOB_FILE_MAX (1u << 20)     /* a job file is a few hundred bytes; refuse anything past 1 MiB */
#define MSG_MAX 1024
#define MST_JOB_MAX_DEPTH 64       /* nesting levels of sequences and mappings (docs/job.md) */
#define SHOW_MAX 64                 /* longest user text quoted back in a message */


/* User text quoted in a message: printable ASCII, the rest as '?', cut at max bytes. */
static void show_max(char *dst, size_t n, const char *s, size_t len, size_t max) {
    size_t j = 0;
    for (size_t i = 0; i < len && j + 4 < n; i++) {
        if (i == max) {
            memcpy(dst + j, "...", 3);
            j += 3;
            break;
        }
        unsigned char c = (unsigned char)s[i];
        dst[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    dst[j] = '\0';
}

static void show(char *dst, size_t n, const char *s, size_t len) { show_max(dst, n, s, len, SHOW_MAX); }

/* ---- the schema seen as a tree: sections are dotted prefixes of the leaf paths ---- */

typedef enum { CHILD_NONE, CHILD_LEAF, CHILD_SECTION } child_kind;

/* Does `path` (plen bytes) name a leaf or a section? */
static child_kind classify(const char *path, size_t plen, const mst_job_key **leaf) {
    child_kind kind = CHILD_NONE;
    for (int i = 0; i < mst_job_key_count; i++) {
        const char *p = mst_job_keys[i].path;
        if (strncmp(p, path, plen) != 0) continue;
        if (p[plen] == '\0') {
            if (leaf) *leaf = &mst_job_keys[i];
            return CHILD_LEAF;
        }
        if (p[plen] == '.' && plen > 0) kind = CHILD_SECTION;
    }
    return kind;
}

/* The names one level below `prefix` ("" = the top), in table order: "dataset, path, ...". */
static void children(const char *prefix, char *buf, size_t n) {
    size_t plen = strlen(prefix), len = 0;
    buf[0] = '\0';
    for (int i = 0; i < mst_job_key_count; i++) {
        const char *p = mst_job_keys[i].path;
        if (plen && (strncmp(p, prefix, plen) != 0 || p[plen] != '.')) continue;
        const char *name = plen ? p + plen + 1 : p;
        size_t nlen = strcspn(name, ".");
        bool seen = false;  /* sections are contiguous, so the previous key is the only candidate */
        if (i > 0) {
            const char *q = mst_job_keys[i - 1].path;
            if ((!plen || (strncmp(q, prefix, plen) == 0 && q[plen] == '.'))) {
                const char *qname = plen ? q + plen + 1 : q;
                seen = strcspn(qname, ".") == nlen && strncmp(qname, name, nlen) == 0;
            }
        }
        if (seen) continue;
        int w = snprintf(buf + len, len < n ? n - len : 0, "%s%.*s", len ? ", " : "", (int)nlen, name);
        if (w > 0) len = len + (size_t)w < n ? len + (size_t)w : n;
    }
}

static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb) {
    size_t row[SHOW_MAX + 1];
    if (la > SHOW_MAX || lb > SHOW_MAX) return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* A close name among the section's children, else a leaf anywhere with that last name:
 * "batchsize" in data -> "batch_size"; "batch_size" at the top -> "data.batch_size". */
static bool suggest(const char *prefix, const char *key, size_t klen, char *out, size_t n) {
    size_t plen = strlen(prefix), best = SIZE_MAX, limit = klen <= 4 ? 1 : 2;
    out[0] = '\0';
    for (int i = 0; i < mst_job_key_count; i++) {
        const char *p = mst_job_keys[i].path;
        if (plen && (strncmp(p, prefix, plen) != 0 || p[plen] != '.')) continue;
        const char *name = plen ? p + plen + 1 : p;
        size_t nlen = strcspn(name, ".");
        size_t d = edit_distance(key, klen, name, nlen);
        if (d <= limit && d < best) {
            best = d;
            snprintf(out, n, "%.*s", (int)nlen, name);
        }
    }
    if (best != SIZE_MAX) return true;
    for (int i = 0; i < mst_job_key_count; i++) {
        const char *p = mst_job_keys[i].path, *last = strrchr(p, '.');
        last = last ? last + 1 : p;
        if (edit_distance(key, klen, last, strlen(last)) <= (klen <= 4 ? 0 : 1)) {
            snprintf(out, n, "%s", p);
            return true;
        }
    }
    return false;
}

static void unknown_key_msg(const char *prefix, const char *key, size_t klen, char *msg, size_t n) {
    char shown[SHOW_MAX + 8], valid[512], hint[160], near[128];
    show(shown, sizeof(shown), key, klen);
    children(prefix, valid, sizeof(valid));
    hint[0] = '\0';
    if (memchr(key, '.', klen)) snprintf(hint, sizeof(hint), " (in a job file, write dotted names as nested mappings)");
    else if (suggest(prefix, key, klen, near, sizeof(near))) snprintf(hint, sizeof(hint), " (did you mean '%s'?)", near);
    if (*prefix) snprintf(msg, n, "unknown key '%s' in %s%s; valid keys: %s", shown, prefix, hint, valid);
    else snprintf(msg, n, "unknown key '%s' at the top level%s; valid keys: %s", shown, hint, valid);
}

static void section_msg(const char *path, const char *got, char *msg, size_t n) {
    char valid[512];
    children(path, valid, sizeof(valid));
    snprintf(msg, n, "%s must be a mapping (keys: %s), not %s", path, valid, got);
}

static void leaf_shape_msg(const mst_job_key *k, const char *got, char *msg, size_t n) {
    char e[256];
    mst_job_key_expect(k, e, sizeof(e));
    snprintf(msg, n, "%s must be %s, not %s", k->path, e, got);
}

/* ---- loading ---- */

typedef struct {
    const char *src;            /* file name in messages */
    yaml_document_t *doc;
    mst_job *job;
    char *err;
    size_t errn;
} loader;

static int fail_at(loader *L, yaml_mark_t m, const char *msg) {
    mst_errf(L->err, L->errn, "%s:%zu:%zu: %s", L->src, m.line + 1, m.column + 1, msg);
    return -1;
}

static const char *node_shape(const yaml_node_t *n) {
    return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a sequence" : "a scalar";
}

/* A plain scalar that YAML reads as null: nothing, ~, null. */
static bool is_null(const yaml_node_t *n) {
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *s = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;
    return len == 0 || (len == 1 && s[0] == '~') ||
           (len == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4)));
}

static int load_section(loader *L, const yaml_node_t *node, const char *prefix);

/* A YAML node as JSON, for mapping-valued keys (model.args): plain scalars by YAML's own
 * resolution (null, booleans, numbers), quoted ones as strings. NULL when out of memory. */
static cJSON *node_json(const yaml_document_t *doc, const yaml_node_t *n, int depth) {
    if (!n || depth > 32) return NULL;
    if (n->type == YAML_MAPPING_NODE) {
        cJSON *o = cJSON_CreateObject();
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; o && p < n->data.mapping.pairs.top; p++) {
            const yaml_node_t *kn = yaml_document_get_node((yaml_document_t *)doc, p->key);
            cJSON *v = node_json(doc, yaml_document_get_node((yaml_document_t *)doc, p->value), depth + 1);
            if (!kn || kn->type != YAML_SCALAR_NODE || !v) { cJSON_Delete(v); cJSON_Delete(o); return NULL; }
            cJSON_AddItemToObject(o, (const char *)kn->data.scalar.value, v);
        }
        return o;
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        cJSON *a = cJSON_CreateArray();
        for (yaml_node_item_t *it = n->data.sequence.items.start; a && it < n->data.sequence.items.top; it++) {
            cJSON *v = node_json(doc, yaml_document_get_node((yaml_document_t *)doc, *it), depth + 1);
            if (!v) { cJSON_Delete(a); return NULL; }
            cJSON_AddItemToArray(a, v);
        }
        return a;
    }
    const char *t = (const char *)n->data.scalar.value;
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (is_null(n)) return cJSON_CreateNull();
        if (!strcmp(t, "true") || !strcmp(t, "True") || !strcmp(t, "yes")) return cJSON_CreateTrue();
        if (!strcmp(t, "false") || !strcmp(t, "False") || !strcmp(t, "no")) return cJSON_CreateFalse();
        char *end;
        errno = 0;
        double d = strtod(t, &end);
        if (*t && *end == '\0' && errno == 0 && isfinite(d) && strpbrk(t, "0123456789")) return cJSON_CreateNumber(d);
    }
    return cJSON_CreateString(t);
}

static int load_leaf(loader *L, const mst_job_key *k, const yaml_node_t *v) {
    char msg[MSG_MAX];
    if ((k->flags & MST_JOB_JSON_OBJECT) && v->type == YAML_MAPPING_NODE) {
        cJSON *j = node_json(L->doc, v, 0);
        char *text = j ? cJSON_PrintUnformatted(j) : NULL;
        cJSON_Delete(j);
        if (!text) return fail_at(L, v->start_mark, "out of memory, or a mapping with non-scalar keys or nested too deep");
        int rc = mst_job_key_parse(L->job, k, text, strlen(text), msg, sizeof(msg));
        cJSON_free(text);
        return rc != 0 ? fail_at(L, v->start_mark, msg) : 0;
    }
    if (v->type != YAML_SCALAR_NODE) {
        leaf_shape_msg(k, node_shape(v), msg, sizeof(msg));
        return fail_at(L, v->start_mark, msg);
    }
    const char *text = is_null(v) ? "" : (const char *)v->data.scalar.value;
    size_t len = is_null(v) ? 0 : v->data.scalar.length;
    if (mst_job_key_parse(L->job, k, text, len, msg, sizeof(msg)) != 0) return fail_at(L, v->start_mark, msg);
    return 0;
}

static int load_section(loader *L, const yaml_node_t *node, const char *prefix) {
    char msg[MSG_MAX];
    if (is_null(node)) return 0;   /* "data:" with nothing under it keeps the defaults */
    if (node->type != YAML_MAPPING_NODE) {
        if (*prefix) section_msg(prefix, node_shape(node), msg, sizeof(msg));
        else {
            char valid[512];
            children("", valid, sizeof(valid));
            snprintf(msg, sizeof(msg), "a job file must be a mapping (keys: %s), not %s", valid, node_shape(node));
        }
        return fail_at(L, node->start_mark, msg);
    }
    /* Keys seen so far at this level; only valid, distinct names get here, so the schema bounds it. */
    const yaml_node_t *seen[64];
    int n_seen = 0;
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        const yaml_node_t *kn = yaml_document_get_node(L->doc, pair->key);
        const yaml_node_t *vn = yaml_document_get_node(L->doc, pair->value);
        if (!kn || !vn) return fail_at(L, node->start_mark, "malformed mapping");
        if (kn->type != YAML_SCALAR_NODE) {
            snprintf(msg, sizeof(msg), "keys must be plain names, not %s", node_shape(kn));
            return fail_at(L, kn->start_mark, msg);
        }
        const char *key = (const char *)kn->data.scalar.value;
        size_t klen = kn->data.scalar.length;
        char path[256];
        const mst_job_key *leaf = NULL;
        child_kind kind = CHILD_NONE;
        if (klen < 64 && !memchr(key, '.', klen) && !memchr(key, '\0', klen) && klen > 0) {
            snprintf(path, sizeof(path), "%s%s%.*s", prefix, *prefix ? "." : "", (int)klen, key);
            kind = classify(path, strlen(path), &leaf);
        }
        if (kind == CHILD_NONE) {
            unknown_key_msg(prefix, key, klen, msg, sizeof(msg));
            return fail_at(L, kn->start_mark, msg);
        }
        for (int i = 0; i < n_seen; i++) {
            if (seen[i]->data.scalar.length == klen && memcmp(seen[i]->data.scalar.value, key, klen) == 0) {
                char shown[SHOW_MAX + 8];
                show(shown, sizeof(shown), key, klen);
                snprintf(msg, sizeof(msg), "duplicate key '%s'%s%s (first at line %zu, column %zu)", shown,
                         *prefix ? " in " : " at the top level", prefix, seen[i]->start_mark.line + 1,
                         seen[i]->start_mark.column + 1);
                return fail_at(L, kn->start_mark, msg);
            }
        }
        if (n_seen < (int)(sizeof(seen) / sizeof(seen[0]))) seen[n_seen++] = kn;
        int rc = kind == CHILD_LEAF ? load_leaf(L, leaf, vn) : load_section(L, vn, path);
        if (rc != 0) return rc;
    }
    return 0;
}

/* libyaml's own description of a syntax error, at its position. */
static int syntax_error(loader *L, const yaml_parser_t *p, const char *text, size_t len) {
    if (p->error == YAML_MEMORY_ERROR) {
        mst_errf(L->err, L->errn, "%s: out of memory while parsing", L->src);
        return -1;
    }
    yaml_mark_t at = p->problem_mark;
    if (p->error == YAML_READER_ERROR) {
        /* reader errors carry a byte offset, not a mark */
        size_t off = p->problem_offset < len ? p->problem_offset : len;
        at.line = 0;
        at.column = 0;
        for (size_t i = 0; i < off; i++) {
            if (text[i] == '\n') at.line++, at.column = 0;
            else at.column++;
        }
    }
    char msg[MSG_MAX];
    const char *problem = p->problem ? p->problem : "malformed YAML";
    if (p->context && p->error != YAML_READER_ERROR)
        snprintf(msg, sizeof(msg), "YAML syntax error: %s (%s at line %zu, column %zu)", problem, p->context,
                 p->context_mark.line + 1, p->context_mark.column + 1);
    else snprintf(msg, sizeof(msg), "YAML syntax error: %s", problem);
    return fail_at(L, at, msg);
}

/* A job is a few levels deep; a hostile file nesting 200k sequences made libyaml's document
 * loader take minutes (its work grows with the square of the depth). One linear pass over the
 * parser's events bounds the depth before the document is built. 1 too deep (message set), 0
 * fine or a syntax error (left for the loader to report with its own words). */
static int check_depth(loader *L, const char *text, size_t len) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return 0;
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int depth = 0, rc = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) break;
        yaml_event_type_t t = ev.type;
        yaml_mark_t at = ev.start_mark;
        yaml_event_delete(&ev);
        if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
            if (++depth > MST_JOB_MAX_DEPTH) {
                char msg[MSG_MAX];
                snprintf(msg, sizeof(msg), "nesting deeper than %d levels (a job file needs 3)", MST_JOB_MAX_DEPTH);
                fail_at(L, at, msg);
                rc = 1;
                break;
            }
        } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
            depth--;
        } else if (t == YAML_STREAM_END_EVENT) {
            break;
        }
    }
    yaml_parser_delete(&p);
    return rc;
}

/* Defaults, the name given, then the text; job is written only on success. */
static int load_text(mst_job *job, const char *name, const char *source, const char *text, size_t len, char *err,
                     size_t errn) {
    mst_job tmp;
    mst_job_defaults(&tmp);
    memset(tmp.name, 0, sizeof(tmp.name));
    snprintf(tmp.name, sizeof(tmp.name), "%s", name);
    yaml_parser_t parser;
    yaml_document_t doc, extra;
    loader L = {source, &doc, &tmp, err, errn};
    int rc = -1;
    bool have_doc = false;
    if (!yaml_parser_initialize(&parser)) {
        mst_errf(err, errn, "%s: out of memory while parsing", source);
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (check_depth(&L, text, len)) goto done;
    if (!yaml_parser_load(&parser, &doc)) {
        syntax_error(&L, &parser, text, len);
        goto done;
    }
    have_doc = true;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    /* a second document is a mistake (a stray '---'); its syntax errors count too */
    if (root) {
        if (!yaml_parser_load(&parser, &extra)) {
            syntax_error(&L, &parser, text, len);
            goto done;
        }
        bool second = yaml_document_get_root_node(&extra) != NULL;
        yaml_mark_t at = extra.start_mark;
        yaml_document_delete(&extra);
        if (second) {
            fail_at(&L, at, "a job file holds one YAML document; a second one starts here");
            goto done;
        }
    }
    if (!root || is_null(root)) {
        char valid[512], msg[MSG_MAX];
        children("", valid, sizeof(valid));
        snprintf(msg, sizeof(msg), "empty job file; expected a mapping of settings (keys: %s)", valid);
        yaml_mark_t start = {0, 0, 0};
        fail_at(&L, root ? root->start_mark : start, msg);
        goto done;
    }
    if (load_section(&L, root, "") != 0) goto done;
    *job = tmp;
    rc = 0;
done:
    if (have_doc) yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

int mst_job_load_string(mst_job *job, const char *source, const char *text, size_t len, char *err, size_t errn) {
    return load_text(job, "job", source, text, len, err, errn);
}

/* The file name without folder and extension, with characters outside the name set as '_'. */
static void name_from_path(const char *path, char *name, size_t n) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t len = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    if (len >= n) len = n - 1;
    for (size_t i = 0; i < len; i++) {
        char c = base[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                  (c == '.' && i > 0);
        name[i] = ok ? c : '_';
    }
    name[len] = '\0';
    if (len == 0) snprintf(name, n, "job");
}

int mst_job_load(mst_job *job, const char *path, char *err, size_t errn) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        mst_errf(err, errn, "cannot open job file '%s': %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        mst_errf(err, errn, "cannot read job file '%s': %s", path, strerror(EISDIR));
        return -1;
    }
    char *text = malloc(JOB_FILE_MAX + 1);
    if (!text) {
        fclose(f);
        mst_errf(err, errn, "%s: out of memory", path);
        return -1;
    }
    size_t len = fread(text, 1, JOB_FILE_MAX + 1, f);
    int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    int rc = -1;
    if (read_errno) mst_errf(err, errn, "cannot read job file '%s': %s", path, strerror(read_errno));
    else if (len > JOB_FILE_MAX) mst_errf(err, errn, "%s: job file is larger than 1 MiB", path);
    else {
        char name[MST_JOB_NAME_MAX];
        name_from_path(path, name, sizeof(name));
        rc = load_text(job, name, path, text, len, err, errn);
    }
    free(text);
    /* model.file is relative to the job file's folder: a job and its model travel together */
    const char *slash = strrchr(path, '/');
    if (rc == 0 && job->model.file[0] && job->model.file[0] != '/' && slash) {
        char full[MST_JOB_PATH_MAX];
        int n = snprintf(full, sizeof(full), "%.*s/%s", (int)(slash - path), path, job->model.file);
        if (n < 0 || n >= (int)sizeof(full)) {
            mst_errf(err, errn, "%s: model.file '%s' relative to the job file's folder is longer than %d bytes", path,
                     job->model.file, MST_JOB_PATH_MAX - 1);
            return -1;
        }
        memset(job->model.file, 0, sizeof(job->model.file));
        memcpy(job->model.file, full, (size_t)n);
    }
    return rc;
}

/* ---- --set ---- */

static void trim(const char **s, size_t *len) {
    while (*len && (**s == ' ' || **s == '\t')) (*s)++, (*len)--;
    while (*len && ((*s)[*len - 1] == ' ' || (*s)[*len - 1] == '\t')) (*len)--;
}

int mst_job_set(mst_job *job, const char *assignment, char *err, size_t errn) {
    char shown[4 * SHOW_MAX + 8], msg[MSG_MAX];
    show_max(shown, sizeof(shown), assignment, strlen(assignment), 4 * SHOW_MAX);
    const char *eq = strchr(assignment, '=');
    if (!eq) {
        mst_errf(err, errn, "--set %s: expected key.path=value", shown);
        return -1;
    }
    const char *key = assignment, *value = eq + 1;
    size_t klen = (size_t)(eq - assignment), vlen = strlen(value);
    trim(&key, &klen);
    trim(&value, &vlen);
    if (klen == 0) {
        mst_errf(err, errn, "--set %s: expected key.path=value", shown);
        return -1;
    }
    /* walk the dotted path one name at a time, as the loader walks nested mappings */
    char path[256] = "";
    size_t pos = 0;
    for (;;) {
        const char *name = key + pos;
        const char *dot = memchr(name, '.', klen - pos);
        size_t nlen = dot ? (size_t)(dot - name) : klen - pos;
        const mst_job_key *leaf = NULL;
        child_kind kind = CHILD_NONE;
        size_t plen = strlen(path);
        if (nlen > 0 && nlen < 64 && plen + 1 + nlen < sizeof(path)) {
            char full[sizeof(path)];
            memcpy(full, path, plen);
            size_t flen = plen;
            if (plen) full[flen++] = '.';
            memcpy(full + flen, name, nlen);
            flen += nlen;
            full[flen] = '\0';
            kind = classify(full, flen, &leaf);
            if (kind != CHILD_NONE) memcpy(path, full, flen + 1);
        }
        if (kind == CHILD_NONE) unknown_key_msg(path, name, nlen, msg, sizeof(msg));
        else if (kind == CHILD_LEAF && dot) leaf_shape_msg(leaf, "a mapping", msg, sizeof(msg));
        else if (kind == CHILD_SECTION && !dot) section_msg(path, "a scalar", msg, sizeof(msg));
        else if (kind == CHILD_LEAF) {
            if (mst_job_key_parse(job, leaf, value, vlen, msg, sizeof(msg)) == 0) return 0;
        } else {
            pos += nlen + 1;
            continue;
        }
        mst_errf(err, errn, "--set %s: %s", shown, msg);
        return -1;
    }
}

int mst_job_get(const mst_job *job, const char *path, char *buf, size_t n, char *err, size_t errn) {
    const mst_job_key *k = mst_job_key_find(path);
    if (!k) {
        char shown[SHOW_MAX + 8];
        show(shown, sizeof(shown), path, strlen(path));
        mst_errf(err, errn, "no job setting '%s'; `mstune list keys` lists them", shown);
        return -1;
    }
    mst_job_key_format(job, k, buf, n);
    return 0;
}

/* ---- validation ---- */

mst_job_scale mst_job_loss_scale(const mst_job *job) {
    if (job->amp.loss_scale.type != MST_JOB_SCALE_AUTO) return job->amp.loss_scale.type;
    return job->amp.level == MST_JOB_AMP_O2 ? MST_JOB_SCALE_DYNAMIC : MST_JOB_SCALE_NONE;
}

int mst_job_validate(const mst_job *job, char *err, size_t errn) {
    for (int i = 0; i < mst_job_key_count; i++)
        if (mst_job_key_check(job, &mst_job_keys[i], err, errn) != 0) return -1;

    if (job->optimizer.schedule == MST_JOB_SCHED_COSINE && job->train.steps == 0 && job->train.epochs == 0) {
        mst_errf(err, errn, "optimizer.schedule cosine needs the run length: set train.steps or train.epochs > 0");
        return -1;
    }
    if (job->train.steps == 0 && job->train.epochs == 0) {
        mst_errf(err, errn, "train.epochs and train.steps are both 0: nothing to train");
        return -1;
    }
    if (job->profile.wait > 0 && job->profile.active == 0) {
        mst_errf(err, errn, "profile.wait (%d) needs profile.active > 0: the steps recorded after each %d off", job->profile.wait,
                 job->profile.wait);
        return -1;
    }
    /* a cosine warmup as long as train.steps is clamped by the trainer (and it says so): a short
     * run of a job written for a long one works as it is */
    if (job->optimizer.schedule == MST_JOB_SCHED_COSINE && job->optimizer.min_lr > job->optimizer.lr) {
        mst_errf(err, errn, "optimizer.min_lr (%g) must not exceed optimizer.lr (%g) with the cosine schedule", job->optimizer.min_lr,
                job->optimizer.lr);
        return -1;
    }
    if (job->optimizer.nesterov && (job->optimizer.name != MST_JOB_OPTIM_SGD || job->optimizer.momentum == 0)) {
        mst_errf(err, errn, "optimizer.nesterov needs optimizer.name sgd with optimizer.momentum > 0");
        return -1;
    }
    if (job->data.dataset == MST_JOB_DATASET_SYNTHETIC) {
        long long per_sample = (long long)job->data.synthetic.channels * job->data.synthetic.height;
        if (per_sample <= INT32_MAX) per_sample *= job->data.synthetic.width;
        if (per_sample > INT32_MAX) {
            mst_errf(err, errn,
                    "data.synthetic.channels * height * width is %lld values per sample; at most 2147483647",
                    per_sample);
            return -1;
        }
    }
    double need = mst_job_memory_estimate(job);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    double phys = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (phys > 0 && need > phys) {
        mst_errf(err, errn,
                 "the job needs at least %.1f GiB (estimated from model.*, data.batch_size and the sample shape: "
                 "parameters, gradients, optimizer state and one batch's activations) but this machine has %.1f GiB of memory",
                 need / (1u << 30), phys / (1u << 30));
        return -1;
    }
    if (job->data.drop_remainder) {
        int available = job->data.dataset == MST_JOB_DATASET_SYNTHETIC ? job->data.synthetic.samples : 0;
        if (job->data.limit > 0 && (available == 0 || job->data.limit < available)) available = job->data.limit;
        if (available > 0 && available < job->data.batch_size) {
            mst_errf(err, errn,
                    "data.drop_remainder with data.batch_size %d leaves no batch: only %d training samples (%s)",
                    job->data.batch_size, available, job->data.limit > 0 ? "data.limit" : "data.synthetic.samples");
            return -1;
        }
    }
    return 0;
}

/* ---- JSON ---- */

int mst_job_to_json(const mst_job *job, cJSON **out) {
    *out = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root) return -1;
    for (int i = 0; i < mst_job_key_count; i++) {
        const mst_job_key *k = &mst_job_keys[i];
        const char *field = (const char *)job + k->offset;
        cJSON *obj = root;
        const char *name = k->path, *dot;
        while ((dot = strchr(name, '.'))) {
            char section[64];
            snprintf(section, sizeof(section), "%.*s", (int)(dot - name), name);
            cJSON *sub = cJSON_GetObjectItemCaseSensitive(obj, section);
            if (!sub) sub = cJSON_AddObjectToObject(obj, section);
            if (!sub) goto oom;
            obj = sub;
            name = dot + 1;
        }
        cJSON *item = NULL;
        char text[MST_JOB_PATH_MAX];
        switch (k->type) {
        case MST_JOB_INT: item = cJSON_AddNumberToObject(obj, name, *(const int *)field); break;
        case MST_JOB_FLOAT: item = cJSON_AddNumberToObject(obj, name, *(const double *)field); break;
        case MST_JOB_BOOL: item = cJSON_AddBoolToObject(obj, name, *(const bool *)field); break;
        default:
            mst_job_key_format(job, k, text, sizeof(text));
            item = cJSON_AddStringToObject(obj, name, text);
            break;
        }
        if (!item) goto oom;
    }
    *out = root;
    return 0;
oom:
    cJSON_Delete(root);
    return -1;
}

/* ---- YAML output ---- */

typedef struct {
    char *p;
    size_t len, cap;
} text_buf;

static int write_handler(void *data, unsigned char *buffer, size_t size) {
    text_buf *b = data;
    if (b->len + size > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + size) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return 0;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, buffer, size);
    b->len += size;
    return 1;
}

static int emit_scalar(yaml_emitter_t *e, const char *text, yaml_scalar_style_t style) {
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)text, (int)strlen(text), 1, 1, style)) return 0;
    return yaml_emitter_emit(e, &ev);
}

typedef enum { EV_STREAM, EV_DOC, EV_MAP, EV_MAP_END, EV_DOC_END, EV_STREAM_END } event_kind;

static int emit_simple(yaml_emitter_t *e, event_kind kind) {
    yaml_event_t ev;
    int ok = 0;
    switch (kind) {
    case EV_STREAM: ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING); break;
    case EV_DOC: ok = yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1); break;
    case EV_MAP: ok = yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE); break;
    case EV_MAP_END: ok = yaml_mapping_end_event_initialize(&ev); break;
    case EV_DOC_END: ok = yaml_document_end_event_initialize(&ev, 1); break;
    case EV_STREAM_END: ok = yaml_stream_end_event_initialize(&ev); break;
    }
    return ok && yaml_emitter_emit(e, &ev);
}

/* Length of `s` (len bytes) up to its last '.', 0 when it has none. */
static size_t parent_len(const char *s, size_t len) {
    while (len > 0 && s[len - 1] != '.') len--;
    return len ? len - 1 : 0;
}

/* Every key, nested by section, in table order (sections are contiguous in the table). */
static int emit_job(yaml_emitter_t *e, const mst_job *job) {
    if (!emit_simple(e, EV_STREAM) || !emit_simple(e, EV_DOC) || !emit_simple(e, EV_MAP)) return 0;
    char open[256] = "";    /* the innermost open section, "" = the top; open_len bytes of it */
    size_t open_len = 0;
    for (int i = 0; i < mst_job_key_count; i++) {
        const mst_job_key *k = &mst_job_keys[i];
        size_t sec_len = parent_len(k->path, strlen(k->path));
        /* close sections until the open one contains this key */
        while (open_len > 0 && !(open_len <= sec_len && strncmp(open, k->path, open_len) == 0 &&
                                 (open_len == sec_len || k->path[open_len] == '.'))) {
            if (!emit_simple(e, EV_MAP_END)) return 0;
            open_len = parent_len(open, open_len);
        }
        /* open the sections between it and this key's own */
        while (open_len < sec_len) {
            size_t start = open_len ? open_len + 1 : 0, stop = start;
            while (stop < sec_len && k->path[stop] != '.') stop++;
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)(stop - start), k->path + start);
            if (!emit_scalar(e, name, YAML_PLAIN_SCALAR_STYLE) || !emit_simple(e, EV_MAP)) return 0;
            open_len = stop;
        }
        snprintf(open, sizeof(open), "%.*s", (int)sec_len, k->path);
        char value[MST_JOB_PATH_MAX];
        mst_job_key_format(job, k, value, sizeof(value));
        if (!emit_scalar(e, sec_len ? k->path + sec_len + 1 : k->path, YAML_PLAIN_SCALAR_STYLE) ||
            !emit_scalar(e, value, k->type == MST_JOB_STRING ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_PLAIN_SCALAR_STYLE))
            return 0;
    }
    for (; open_len > 0; open_len = parent_len(open, open_len))
        if (!emit_simple(e, EV_MAP_END)) return 0;
    return emit_simple(e, EV_MAP_END) && emit_simple(e, EV_DOC_END) && emit_simple(e, EV_STREAM_END) &&
           yaml_emitter_flush(e);
}

int mst_job_write_yaml(const mst_job *job, const char *path, char *err, size_t errn) {
    char msg[MSG_MAX];
    for (int i = 0; i < mst_job_key_count; i++) {
        if (mst_job_key_check(job, &mst_job_keys[i], msg, sizeof(msg)) != 0) {
            mst_errf(err, errn, "not writing '%s': %s", path, msg);
            return -1;
        }
    }
    /* render in memory, then replace the file atomically */
    text_buf b = {0};
    char head[MST_JOB_NAME_MAX + 96];
    int hl = snprintf(head, sizeof(head), "# %s: every mstune job setting with its effective value (docs/job.md)\n", job->name);
    yaml_emitter_t emitter;
    int ok = write_handler(&b, (unsigned char *)head, (size_t)hl) && yaml_emitter_initialize(&emitter);
    if (ok) {
        yaml_emitter_set_output(&emitter, write_handler, &b);
        yaml_emitter_set_unicode(&emitter, 1);
        yaml_emitter_set_width(&emitter, -1);
        yaml_emitter_set_indent(&emitter, 2);
        ok = emit_job(&emitter, job);
        yaml_emitter_delete(&emitter);
    }
    if (!ok) {
        free(b.p);
        mst_errf(err, errn, "cannot write '%s': out of memory rendering YAML", path);
        return -1;
    }
    int rc = mst_write_atomic(path, b.p, b.len, err, errn);
    free(b.p);
    return rc;
}
