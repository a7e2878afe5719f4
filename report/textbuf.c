/* textbuf.c — growable text, escapers and atomic file writes for the report (see textbuf.h).
 * Appends never fail loudly: they set `oom` and the writer refuses to write an incomplete file,
 * which keeps the rendering code free of per-line error checks. */
#define _GNU_SOURCE
#include "report/textbuf.h"
#include "util/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void rpt_buf_free(rpt_buf *b) {
    free(b->p);
    *b = (rpt_buf){0};
}

static bool reserve(rpt_buf *b, size_t extra) {
    if (b->oom) return false;
    if (b->n + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void rpt_putn(rpt_buf *b, const char *s, size_t n) {
    if (!reserve(b, n)) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void rpt_puts(rpt_buf *b, const char *s) { rpt_putn(b, s, strlen(s)); }

void rpt_printf(rpt_buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (len < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)len < sizeof(small)) {
        rpt_putn(b, small, (size_t)len);
        return;
    }
    if (!reserve(b, (size_t)len)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)len + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)len;
}

static const char *html_entity(unsigned char c) {
    switch (c) {
    case '&': return "&amp;";
    case '<': return "&lt;";
    case '>': return "&gt;";
    case '"': return "&quot;";
    case '\'': return "&#39;";
    default: return (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f ? "\xEF\xBF\xBD" : NULL;
    }
}

/* Length of the valid UTF-8 sequence at s, 0 when s does not start one (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF). */
static size_t utf8_len(const unsigned char *s) {
    if (s[0] < 0x80) return 1;
    size_t n = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3 : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) || (s[0] == 0xF0 && s[1] < 0x90) ||
        (s[0] == 0xF4 && s[1] > 0x8F))
        return 0;
    return n;
}

void rpt_html(rpt_buf *b, const char *s) {
    if (!s) return;
    const char *run = s;
    while (*s) {
        const unsigned char *u = (const unsigned char *)s;
        const char *e = html_entity(*u);
        size_t len = utf8_len(u);
        if (!e && len > 0) {
            s += len;
            continue;
        }
        rpt_putn(b, run, (size_t)(s - run));
        rpt_puts(b, e ? e : "\xEF\xBF\xBD");   /* invalid UTF-8 byte: U+FFFD keeps the XML well-formed */
        s++;
        run = s;
    }
    rpt_putn(b, run, (size_t)(s - run));
}

void rpt_md(rpt_buf *b, const char *s) {
    if (!s) return;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *e = html_entity(c);
        if (c == '\n' || c == '\r' || c == '\t') rpt_puts(b, " ");
        else if (e) rpt_puts(b, e);
        else if (strchr("|\\`*_[]", c)) {
            char esc[3] = {'\\', (char)c, 0};
            rpt_puts(b, esc);
        } else
            rpt_putn(b, s, 1);
    }
}

void rpt_gnuplot_label(const char *s, char *out, size_t max_chars) {
    size_t n = 0, len = s ? strlen(s) : 0;
    for (size_t i = 0; i < len && n < max_chars; i++) {
        unsigned char c = (unsigned char)s[i];
        out[n++] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\'' && c != '\\') ? (char)c : '?';
    }
    if (len > max_chars && max_chars >= 2) out[max_chars - 2] = out[max_chars - 1] = '.';
    out[n] = '\0';
}

int rpt_buf_write(const rpt_buf *b, const char *path, char *err, size_t errn) {
    if (b->oom) {
        snprintf(err, errn, "cannot write '%s': out of memory", path);
        return -1;
    }
    return mst_write_atomic(path, b->p ? b->p : "", b->n, err, errn);
}


char *rpt_read_file(const char *path, size_t *len, char *err, size_t errn) {
    char *text = mst_read_file(path, len);
    if (!text) snprintf(err, errn, "cannot read '%s': %s", path, strerror(errno));
    return text;
}

int rpt_join(char *out, size_t n, const char *dir, const char *name) {
    size_t dl = strlen(dir);
    int w = dl && dir[dl - 1] == '/' ? snprintf(out, n, "%s%s", dir, name) : snprintf(out, n, "%s/%s", dir, name);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}
