/* checkpoint.c — the checkpoint file format and its atomic write.
 *
 * Layout (little-endian, as the machine writes it; the header records the byte order):
 *   "MSTCKPT\0"  u32 version  u32 endian-check (0x01020304)  u32 n_tensors  u32 step budget
 *   (the training step's thread budget, mst_ckpt_meta.step_threads: 0 when not decided, and in
 *   files written before it, where the word was reserved and zero)
 *   i64 epoch  i64 batch  i64 step  i64 optim_steps  u64 seed  u64 rng key/stream/counter
 *   (version 2) u32 config_len, config text (no NUL)
 *   n_tensors x { u16 name_len, name, u8 dtype, u8 ndim, i64 shape[ndim], data }
 *   u32 crc32 of everything before it
 * The whole file is read and verified before any tensor is touched.
 */
#include "runtime/checkpoint.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "util/fsutil.h"

static const char k_magic[8] = {'M', 'S', 'T', 'C', 'K', 'P', 'T', 0};

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int oom;
} buf;

static void put(buf *b, const void *data, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}
#define PUT(b, v) put(b, &(v), sizeof(v))

mst_status mst_checkpoint_save(mst_ctx *ctx, const char *path, const mst_ckpt_meta *meta, const mst_ckpt_entry *e, int n) {
    buf b = {0};
    uint32_t version = MST_CKPT_VERSION, endian = 0x01020304, count = (uint32_t)n, budget = (uint32_t)meta->step_threads;
    put(&b, k_magic, sizeof(k_magic));
    PUT(&b, version);
    PUT(&b, endian);
    PUT(&b, count);
    PUT(&b, budget);
    PUT(&b, meta->epoch);
    PUT(&b, meta->batch);
    PUT(&b, meta->step);
    PUT(&b, meta->optim_steps);
    PUT(&b, meta->seed);
    PUT(&b, meta->rng.key);
    PUT(&b, meta->rng.stream);
    PUT(&b, meta->rng.counter);
    size_t clen = strnlen(meta->config, sizeof(meta->config) - 1);
    uint32_t config_len = (uint32_t)clen;
    PUT(&b, config_len);
    put(&b, meta->config, clen);
    for (int i = 0; i < n; i++) {
        const mst_tensor *t = e[i].t;
        size_t len = strlen(e[i].name);
        if (len > 65535) { free(b.p); return mst_ctx_fail(ctx, MST_ERR_ARG, "checkpoint: tensor name too long"); }
        uint16_t name_len = (uint16_t)len;
        uint8_t dtype = (uint8_t)t->dtype, ndim = (uint8_t)t->ndim;
        PUT(&b, name_len);
        put(&b, e[i].name, len);
        PUT(&b, dtype);
        PUT(&b, ndim);
        put(&b, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        put(&b, mst_tensor_data(t), mst_tensor_nbytes(t));
    }
    uint32_t crc = (uint32_t)crc32(0L, b.p, (uInt)b.len);
    PUT(&b, crc);
    if (b.oom) { free(b.p); return mst_ctx_fail(ctx, MST_ERR_OOM, "checkpoint: out of memory serializing %d tensors", n); }
    char err[512];
    int rc = mst_write_atomic(path, b.p, b.len, err, sizeof(err));
    free(b.p);
    return rc == 0 ? MST_OK : mst_ctx_fail(ctx, MST_ERR_IO, "checkpoint: %s", err);
}

typedef struct {
    const unsigned char *p;
    size_t len, off;
} reader;

static int get(reader *r, void *out, size_t n) {
    if (r->off + n > r->len) return -1;
    memcpy(out, r->p + r->off, n);
    r->off += n;
    return 0;
}
#define GET(r, v) get(r, &(v), sizeof(v))

mst_status mst_checkpoint_load(mst_ctx *ctx, const char *path, mst_ckpt_meta *meta, const mst_ckpt_entry *e, int n) {
    size_t len = 0;
    unsigned char *data = (unsigned char *)mst_read_file(path, &len);
    if (!data) {
        int saved = errno;
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            return mst_ctx_fail(ctx, MST_ERR_ARG, "%s: is a directory, not a checkpoint file", path);
        return mst_ctx_fail(ctx, saved == ENOENT || saved == EACCES ? MST_ERR_ARG : MST_ERR_IO, "%s: cannot read checkpoint: %s", path,
                            strerror(saved));
    }
    mst_status s = MST_OK;
    const void **src = calloc((size_t)(n > 0 ? n : 1), sizeof(*src));
    if (!src) { free(data); return mst_ctx_fail(ctx, MST_ERR_OOM, "checkpoint: out of memory"); }
    reader r = {data, len, 0};
    char magic[8];
    uint32_t version, endian, count, budget, crc_stored;
    mst_ckpt_meta m;
    if (len < sizeof(k_magic) + 8 || GET(&r, magic) || memcmp(magic, k_magic, sizeof(magic)) != 0) {
        s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: not an mstune checkpoint (bad magic)", path);
        goto done;
    }
    memcpy(&crc_stored, data + len - 4, 4);
    if ((uint32_t)crc32(0L, data, (uInt)(len - 4)) != crc_stored) {
        s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: checksum mismatch: the file is corrupt or truncated", path);
        goto done;
    }
    r.len = len - 4;
    if (GET(&r, version) || GET(&r, endian) || GET(&r, count) || GET(&r, budget) || GET(&r, m.epoch) ||
        GET(&r, m.batch) || GET(&r, m.step) || GET(&r, m.optim_steps) || GET(&r, m.seed) || GET(&r, m.rng.key) ||
        GET(&r, m.rng.stream) || GET(&r, m.rng.counter)) {
        s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: truncated header", path);
        goto done;
    }
    memset(m.config, 0, sizeof(m.config));
    if (version == 2) {
        uint32_t config_len;
        if (GET(&r, config_len) || config_len >= sizeof(m.config) || get(&r, m.config, config_len)) {
            s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: truncated or oversized config record", path);
            goto done;
        }
        m.config[config_len] = '\0';
    }
    if ((version != 1 && version != MST_CKPT_VERSION) || endian != 0x01020304) {
        s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: format version %u (byte order %08x); this build reads version %d", path,
                         version, endian, MST_CKPT_VERSION);
        goto done;
    }
    if (budget > MST_CKPT_STEP_THREADS_ONE) {
        s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: step thread budget %u in the header, expected 0 (not decided), 1 (all threads) or 2 (one thread)",
                         path, budget);
        goto done;
    }
    m.step_threads = (int32_t)budget;
    if ((int64_t)count != n) {
        s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: holds %u tensors, the model and optimizer have %d: was it written by another job?",
                         path, count, n);
        goto done;
    }
    for (uint32_t k = 0; k < count; k++) {
        uint16_t name_len;
        char name[65536];
        uint8_t dtype, ndim;
        int64_t shape[MST_MAX_DIMS];
        if (GET(&r, name_len) || get(&r, name, name_len) || GET(&r, dtype) || GET(&r, ndim) || ndim > MST_MAX_DIMS ||
            get(&r, shape, sizeof(int64_t) * ndim)) {
            s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: tensor record %u is malformed", path, k);
            goto done;
        }
        name[name_len] = '\0';
        int i = 0;
        while (i < n && strcmp(e[i].name, name) != 0) i++;
        if (i == n) {
            s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: tensor '%s' is not part of this model/optimizer", path, name);
            goto done;
        }
        const mst_tensor *t = e[i].t;
        if (dtype != t->dtype || !mst_shape_equal(ndim, shape, t->ndim, t->shape)) {
            char a[96], b2[96];
            s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: tensor '%s' is %s%s in the file but %s here", path, name,
                             dtype < MST_DTYPE_COUNT ? mst_dtype_name((mst_dtype)dtype) : "?",
                             mst_shape_str(ndim, shape, a, sizeof(a)), mst_tensor_desc(t, b2, sizeof(b2)));
            goto done;
        }
        if (r.off + mst_tensor_nbytes(t) > r.len) {
            s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: tensor '%s' data is truncated", path, name);
            goto done;
        }
        src[i] = data + r.off;
        r.off += mst_tensor_nbytes(t);
    }
    for (int i = 0; i < n; i++)
        if (!src[i]) {
            s = mst_ctx_fail(ctx, MST_ERR_ARG, "%s: tensor '%s' is missing", path, e[i].name);
            goto done;
        }
    /* verified: now, and only now, overwrite */
    for (int i = 0; i < n; i++) memcpy(mst_tensor_data(e[i].t), src[i], mst_tensor_nbytes(e[i].t));
    *meta = m;
done:
    free(src);
    free(data);
    return s;
}

/* The value of `key` in a config text, or NULL; *vlen its length. */
static const char *config_value(const char *text, const char *key, size_t klen, size_t *vlen) {
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > klen && line[klen] == '=' && memcmp(line, key, klen) == 0) {
            *vlen = len - klen - 1;
            return line + klen + 1;
        }
        line += len + (end ? 1 : 0);
    }
    return NULL;
}

/* Every key of a against b; appends the differing ones to out in a's order. */
static int diff_one_way(const char *a, const char *b, bool a_saved, char *out, size_t n, size_t *used, int found) {
    for (const char *line = a; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *eq = memchr(line, '=', len);
        if (eq) {
            size_t klen = (size_t)(eq - line), alen = len - klen - 1, blen = 0;
            const char *bv = config_value(b, line, klen, &blen);
            bool differ = !bv || blen != alen || memcmp(bv, eq + 1, alen) != 0;
            if (differ && (a_saved || !bv)) {
                const char *sv = a_saved ? eq + 1 : "unset", *nv = a_saved ? (bv ? bv : "unset") : eq + 1;
                size_t svl = a_saved ? alen : 5, nvl = a_saved ? (bv ? blen : 5) : alen;
                int w = snprintf(out + *used, *used < n ? n - *used : 0, "%s%.*s (%.*s in the checkpoint, %.*s now)",
                                 found ? ", " : "", (int)klen, line, (int)svl, sv, (int)nvl, nv);
                if (w > 0) *used = *used + (size_t)w < n ? *used + (size_t)w : n;
                found++;
            }
        }
        line += len + (end ? 1 : 0);
    }
    return found;
}

int mst_ckpt_config_diff(const char *saved, const char *now, char *out, size_t n) {
    size_t used = 0;
    if (n) out[0] = '\0';
    int found = diff_one_way(saved, now, true, out, n, &used, 0);
    return diff_one_way(now, saved, false, out, n, &used, found);
}
