/* textbuf.h — report/'s output plumbing: a growable text buffer with the escapers each output
 * format needs (HTML/XML, GitHub Markdown table cells, gnuplot labels), atomic file replacement
 * and mkdir -p. report/ does not link runtime/, so it keeps its own copy of the temp-file +
 * fsync + rename pattern (runtime/fsutil.c).
 *
 *     rpt_buf b = {0};
 *     rpt_printf(&b, "<td>%.2f</td>", ms);
 *     rpt_html(&b, op_name);                  // & < > " ' escaped, control bytes replaced
 *     if (rpt_buf_write(&b, "out/index.html", err, errn) != 0) ...
 *     rpt_buf_free(&b);
 */
#ifndef MST_REPORT_TEXTBUF_H
#define MST_REPORT_TEXTBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *p;        /* NUL-terminated text, NULL until the first append */
    size_t n, cap;
    bool oom;       /* an append ran out of memory: the text is incomplete */
} rpt_buf;

void rpt_buf_free(rpt_buf *b);
void rpt_puts(rpt_buf *b, const char *s);
void rpt_putn(rpt_buf *b, const char *s, size_t n);
void rpt_printf(rpt_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Text for HTML and XML (text and attribute values): & < > " ' as entities; control bytes other
 * than tab and newline (not allowed in XML) as U+FFFD. */
void rpt_html(rpt_buf *b, const char *s);
/* A GitHub Markdown table cell: HTML-escaped, plus | \ ` * _ [ ] escaped; newlines as spaces. */
void rpt_md(rpt_buf *b, const char *s);

/* A name made safe for a tab-separated gnuplot data line or a quoted label: printable ASCII
 * only (no quotes, backslashes, tabs, newlines; other bytes become '?'), at most max_chars
 * (longer names end in ".."). out holds at least max_chars + 1 bytes. */
void rpt_gnuplot_label(const char *s, char *out, size_t max_chars);

/* The buffer's text (an out-of-memory buffer is an error, never a truncated file). */
int rpt_buf_write(const rpt_buf *b, const char *path, char *err, size_t errn);
/* The whole file, NUL-terminated, or NULL with a message naming the path. */
char *rpt_read_file(const char *path, size_t *len, char *err, size_t errn);
/* path joined to a file name; -1 when it does not fit. */
int rpt_join(char *out, size_t n, const char *dir, const char *name);

#endif
