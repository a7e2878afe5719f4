/* idx.c — the IDX reader (LeCun's MNIST format, also used by Fashion-MNIST).
 *
 * Format: big-endian u32 magic (0x00000803 = unsigned-byte, 3 dims for images; 0x00000801 = 1
 * dim for labels), one big-endian u32 per dimension, then the bytes. Files are read through zlib's
 * gzopen/gzread, which also passes uncompressed files through, so `.gz` and plain names share one
 * path. Trade-off: the whole split is read into memory up front (u8, 47 MB for 60000 x 28 x 28)
 * and validated completely — counts, truncation, trailing bytes, the gzip CRC, label range — so a
 * bad file fails at open with its path in the message, never halfway through training. The buffer
 * grows as bytes arrive rather than trusting the header's size, so a corrupt header declaring
 * terabytes cannot trigger a huge allocation. One gap is zlib's: a .gz cut inside its 8-byte
 * trailer, after all the data, reads as complete when gzread had already hit end of file, so the
 * CRC goes unchecked (the bytes are all there; only their checksum is missing).
 * Reference: http://yann.lecun.com/exdb/mnist/
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "runtime/data/source_impl.h"
#include "runtime/status.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAX_PIXELS_PER_IMAGE (1u << 24)
#define READ_CHUNK ((size_t)1 << 26)        /* initial buffer, and the most gzread is asked for at once */


typedef struct {
    gzFile f;
    char path[PATH_MAX];
} idx_file;

/* Opens `<dir>/<name>.gz`, else `<dir>/<name>`. */
static int idx_file_open(idx_file *file, const char *dir, const char *name, char *err, size_t errn) {
    char gz_path[PATH_MAX], raw_path[PATH_MAX];
    int a = snprintf(gz_path, sizeof gz_path, "%s/%s.gz", dir, name);
    int b = snprintf(raw_path, sizeof raw_path, "%s/%s", dir, name);
    if (a < 0 || (size_t)a >= sizeof gz_path || b < 0 || (size_t)b >= sizeof raw_path) {
        mst_errf(err, errn, "%s/%s.gz: path too long", dir, name);
        return -1;
    }
    const char *path = access(gz_path, F_OK) == 0 ? gz_path : (access(raw_path, F_OK) == 0 ? raw_path : NULL);
    if (!path) {
        mst_errf(err, errn,
                "%s: no such file (nor the uncompressed %s); the default directory " MST_FASHION_MNIST_DIR
                " comes from Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist)",
                gz_path, raw_path);
        return -1;
    }
    snprintf(file->path, sizeof file->path, "%s", path);
    errno = 0;
    file->f = gzopen(path, "rb");
    if (!file->f) {
        mst_errf(err, errn, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
        return -1;
    }
    return 0;
}

static void idx_file_close(idx_file *file) {
    if (file->f) gzclose_r(file->f);
    file->f = NULL;
}

/* zlib's messages start with "<path>: ", which our messages already do. */
static const char *zlib_message(gzFile f, const char *path) {
    int code;
    const char *msg = gzerror(f, &code);
    if (code == Z_OK || !msg || !*msg) return NULL;
    size_t n = strlen(path);
    return strncmp(msg, path, n) == 0 && strncmp(msg + n, ": ", 2) == 0 ? msg + n + 2 : msg;
}

/* Reads up to n bytes and returns how many arrived: fewer at the end of the data or on a zlib
 * or I/O error, which *zmsg then describes (NULL when there was none). */
static size_t read_some(idx_file *file, void *buf, size_t n, const char **zmsg) {
    size_t got = 0;
    *zmsg = NULL;
    while (got < n) {
        size_t want = n - got < READ_CHUNK ? n - got : READ_CHUNK;
        int r = gzread(file->f, (char *)buf + got, (unsigned)want);
        if (r <= 0) {
            *zmsg = zlib_message(file->f, file->path);
            if (r < 0 && !*zmsg) *zmsg = "read error";
            break;
        }
        got += (size_t)r;
    }
    return got;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Magic plus `ndims` dimensions into dims[]. */
static int read_header(idx_file *file, uint32_t magic, const char *magic_desc, int ndims, uint32_t *dims,
                       char *err, size_t errn) {
    uint8_t hdr[16];
    const size_t want = 4 + 4 * (size_t)ndims;
    const char *zmsg;
    size_t got = read_some(file, hdr, want, &zmsg);
    if (got >= 4 && be32(hdr) != magic) {
        mst_errf(err, errn, "%s: bad magic 0x%08x, expected 0x%08x (%s)", file->path, be32(hdr), magic, magic_desc);
        return -1;
    }
    if (got < want) {
        mst_errf(err, errn, "%s: truncated header: expected %zu bytes, got %zu (%s)", file->path, want, got,
                zmsg ? zmsg : "end of file");
        return -1;
    }
    for (int i = 0; i < ndims; i++) dims[i] = be32(hdr + 4 + 4 * i);
    return 0;
}

/* Exactly `declared` bytes of `what`, then nothing: one more read must hit the end of the stream,
 * which is also where zlib checks the gzip CRC. */
static uint8_t *read_body(idx_file *file, uint64_t declared, const char *what, char *err, size_t errn) {
    if (declared > (uint64_t)SIZE_MAX / 2) {
        mst_errf(err, errn, "%s: declares %llu bytes of %s, more than this machine can address", file->path,
                (unsigned long long)declared, what);
        return NULL;
    }
    size_t cap = declared < READ_CHUNK ? (size_t)declared : READ_CHUNK;
    uint8_t *buf = malloc(cap ? cap : 1);
    size_t got = 0;
    const char *zmsg = NULL;
    if (!buf) goto oom;
    while (got < declared) {
        if (got == cap) {
            size_t next = cap * 2 < declared ? cap * 2 : (size_t)declared;
            uint8_t *grown = realloc(buf, next);
            if (!grown) goto oom;
            buf = grown;
            cap = next;
        }
        size_t r = read_some(file, buf + got, cap - got, &zmsg);
        got += r;
        if (r == 0 || zmsg) break;
    }
    /* a cut gzip stream reads as a clean end with zlib's "unexpected end of file": truncation too */
    if (got < declared && (!zmsg || strstr(zmsg, "unexpected end of file"))) {
        mst_errf(err, errn, "%s: truncated: expected %llu bytes of %s, got %zu (%s)", file->path,
                (unsigned long long)declared, what, got, zmsg ? zmsg : "end of file");
        goto fail;
    }
    if (got < declared) {
        mst_errf(err, errn, "%s: corrupt or unreadable after %zu of %llu bytes of %s: %s", file->path, got,
                (unsigned long long)declared, what, zmsg);
        goto fail;
    }
    uint8_t extra;
    if (read_some(file, &extra, 1, &zmsg) > 0) {
        mst_errf(err, errn, "%s: trailing bytes after the declared %llu bytes of %s", file->path,
                (unsigned long long)declared, what);
        goto fail;
    }
    if (zmsg) {
        /* the end of a gzip stream is where zlib checks its CRC and length */
        if (strstr(zmsg, "unexpected end of file"))
            mst_errf(err, errn, "%s: truncated: the gzip stream ends before its CRC trailer", file->path);
        else
            mst_errf(err, errn, "%s: corrupt after all %llu bytes of %s: %s", file->path, (unsigned long long)declared,
                    what, zmsg);
        goto fail;
    }
    return buf;
oom:
    mst_errf(err, errn, "%s: out of memory reading %llu bytes of %s", file->path, (unsigned long long)declared, what);
fail:
    free(buf);
    return NULL;
}

mst_source *mst_source_idx_open(const char *dir, const char *split, char *err, size_t errn) {
    if (err && errn) err[0] = '\0';
    if (!dir || !split) {
        mst_errf(err, errn, "IDX source: %s is NULL", dir ? "split" : "dir");
        return NULL;
    }
    const char *prefix = strcmp(split, "train") == 0 ? "train" : (strcmp(split, "test") == 0 ? "t10k" : NULL);
    if (!prefix) {
        mst_errf(err, errn, "%s: unknown split \"%s\", expected \"train\" or \"test\"", dir, split);
        return NULL;
    }
    char images_name[64], labels_name[64];
    snprintf(images_name, sizeof images_name, "%s-images-idx3-ubyte", prefix);
    snprintf(labels_name, sizeof labels_name, "%s-labels-idx1-ubyte", prefix);

    idx_file images = {0}, labels = {0};
    mst_source *src = NULL;
    uint8_t *pixels = NULL, *label_bytes = NULL;
    uint32_t idims[3], ldims[1];

    if (idx_file_open(&images, dir, images_name, err, errn) != 0) goto fail;
    if (idx_file_open(&labels, dir, labels_name, err, errn) != 0) goto fail;
    if (read_header(&images, IDX_MAGIC_IMAGES, "IDX3 unsigned-byte images", 3, idims, err, errn) != 0) goto fail;
    if (read_header(&labels, IDX_MAGIC_LABELS, "IDX1 unsigned-byte labels", 1, ldims, err, errn) != 0) goto fail;

    const uint32_t n = idims[0], rows = idims[1], cols = idims[2];
    if (n == 0 || n > INT32_MAX) {
        mst_errf(err, errn, "%s: declares %u images, expected 1 to %d", images.path, n, INT32_MAX);
        goto fail;
    }
    if (rows == 0 || cols == 0 || (uint64_t)rows * cols > IDX_MAX_PIXELS_PER_IMAGE) {
        mst_errf(err, errn, "%s: bad image size %ux%u, expected 1 to %u pixels per image", images.path, rows, cols,
                IDX_MAX_PIXELS_PER_IMAGE);
        goto fail;
    }
    if (ldims[0] != n) {
        mst_errf(err, errn, "%s: declares %u labels but %s declares %u images", labels.path, ldims[0], images.path, n);
        goto fail;
    }

    pixels = read_body(&images, (uint64_t)n * rows * cols, "pixels", err, errn);
    if (!pixels) goto fail;
    label_bytes = read_body(&labels, n, "labels", err, errn);
    if (!label_bytes) goto fail;
    for (uint32_t i = 0; i < n; i++) {
        if (label_bytes[i] >= MST_IDX_CLASSES) {
            mst_errf(err, errn, "%s: label %u at index %u is out of range, expected 0 to %d", labels.path,
                    label_bytes[i], i, MST_IDX_CLASSES - 1);
            goto fail;
        }
    }

    src = calloc(1, sizeof(*src));
    if (!src) {
        mst_errf(err, errn, "%s: out of memory", images.path);
        goto fail;
    }
    src->kind = MST_SOURCE_IDX;
    src->n = n;
    src->c = 1;
    src->h = (int)rows;
    src->w = (int)cols;
    src->n_classes = MST_IDX_CLASSES;
    src->pixels = pixels;
    src->labels = label_bytes;
    idx_file_close(&images);
    idx_file_close(&labels);
    return src;

fail:
    free(pixels);
    free(label_bytes);
    idx_file_close(&images);
    idx_file_close(&labels);
    return NULL;
}
