/* flamegraph.c — folded stacks to a flame graph SVG (see flamegraph.h). Stacks are sorted frame
 * by frame so that equal prefixes are adjacent; the trie is then built by comparing each frame
 * with the last child only. Colours hash the frame name into flamegraph.pl's warm palette, so a
 * function keeps its colour from one report to the next. */
#define _GNU_SOURCE
#include "report/flamegraph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/textbuf.h"

#define WIDTH 1200.0
#define FRAME_H 16
#define PAD_TOP 44
#define PAD_BOTTOM 8
#define PAD_SIDE 10.0
#define CHAR_W 6.6      /* monospace 11 px, for fitting labels */

typedef struct {
    const char *name;
    size_t len;
    int64_t count;
    int32_t first_child, last_child, next;
    int depth;
} node;

typedef struct {
    node *v;
    int64_t n, cap;
} trie;

/* Frame-wise order: ';' sorts before every other byte, the end of the string before ';'. */
static int frame_cmp(const void *pa, const void *pb) {
    const unsigned char *a = (const unsigned char *)((const rpt_sample *)pa)->stack;
    const unsigned char *b = (const unsigned char *)((const rpt_sample *)pb)->stack;
    for (;; a++, b++) {
        int x = *a == '\0' ? 0 : *a == ';' ? 1 : *a + 2, y = *b == '\0' ? 0 : *b == ';' ? 1 : *b + 2;
        if (x != y) return x - y;
        if (x == 0) return 0;
    }
}

static int32_t add_node(trie *t, int32_t parent, const char *name, size_t len) {
    if (t->n == t->cap) {
        int64_t cap = t->cap ? t->cap * 2 : 1024;
        node *v = realloc(t->v, (size_t)cap * sizeof(node));
        if (!v) return -1;
        t->v = v;
        t->cap = cap;
    }
    int32_t id = (int32_t)t->n++;
    t->v[id] = (node){name, len, 0, -1, -1, -1, parent >= 0 ? t->v[parent].depth + 1 : 0};
    if (parent >= 0) {
        if (t->v[parent].last_child >= 0) t->v[t->v[parent].last_child].next = id;
        else t->v[parent].first_child = id;
        t->v[parent].last_child = id;
    }
    return id;
}

static void color(const char *s, size_t len, char out[8]) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    double v1 = (h & 0xff) / 255.0, v2 = ((h >> 8) & 0xff) / 255.0, v3 = ((h >> 16) & 0xff) / 255.0;
    snprintf(out, 8, "#%02x%02x%02x", 205 + (int)(50 * v3), (int)(230 * v1), (int)(55 * v2));
}

typedef struct {
    rpt_buf *b;
    const trie *t;
    double total, height;
    bool prune;
    rpt_flame_stats *stats;
} layout;

static void draw(layout *L, int32_t id, double x) {
    const node *nd = &L->t->v[id];
    double share = (double)nd->count / L->total;
    if (L->prune && id != 0 && share < RPT_FLAME_MIN_SHARE) {
        /* count this frame and everything under it as pruned */
        int64_t stack[256], sp = 0, left = 0;
        stack[sp++] = id;
        while (sp > 0) {
            int32_t k = (int32_t)stack[--sp];
            left++;
            for (int32_t c = L->t->v[k].first_child; c >= 0; c = L->t->v[c].next)
                if (sp < 256) stack[sp++] = c;
        }
        L->stats->frames_pruned += left;
        return;
    }
    double w = share * (WIDTH - 2 * PAD_SIDE);
    double y = L->height - PAD_BOTTOM - (nd->depth + 1) * FRAME_H;
    char fill[8];
    color(nd->name, nd->len, fill);
    rpt_buf *b = L->b;
    rpt_puts(b, "<g><title>");
    char name[4096];
    snprintf(name, sizeof(name), "%.*s", (int)(nd->len < 4000 ? nd->len : 4000), nd->name);
    rpt_html(b, name);
    rpt_printf(b, " (%lld samples, %.2f%%)</title><rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" rx=\"2\"/>",
               (long long)nd->count, 100 * share, x, y, w, FRAME_H - 1, fill);
    int fit = (int)((w - 6) / CHAR_W);
    if (fit >= 3) {
        rpt_printf(b, "<text x=\"%.2f\" y=\"%.0f\">", x + 3, y + FRAME_H - 4.5);
        if ((size_t)fit >= nd->len) {
            rpt_html(b, name);
        } else {
            int cut = fit - 2;
            while (cut > 0 && ((unsigned char)name[cut] & 0xC0) == 0x80) cut--;   /* not inside a UTF-8 sequence */
            name[cut] = '\0';
            rpt_html(b, name);
            rpt_puts(b, "..");
        }
        rpt_puts(b, "</text>");
    }
    rpt_puts(b, "</g>\n");
    if (id != 0) L->stats->frames++;
    double cx = x;
    for (int32_t c = nd->first_child; c >= 0; c = L->t->v[c].next) {
        draw(L, c, cx);
        cx += (double)L->t->v[c].count / L->total * (WIDTH - 2 * PAD_SIDE);
    }
}

static void svg_head(rpt_buf *b, double height, const char *title, const char *sub) {
    rpt_printf(b,
               "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n"
               "<style>text{font-family:monospace;font-size:11px;fill:#000}"
               " .t{font-family:sans-serif;font-size:16px} .s{font-family:sans-serif;font-size:11px;fill:#555}"
               " g:hover rect{stroke:#000;stroke-width:0.8}</style>\n",
               WIDTH, height, WIDTH, height);
    rpt_puts(b, "<text class=\"t\" x=\"600\" y=\"20\" text-anchor=\"middle\">");
    rpt_html(b, title);
    rpt_puts(b, "</text>\n<text class=\"s\" x=\"600\" y=\"36\" text-anchor=\"middle\">");
    rpt_html(b, sub);
    rpt_puts(b, "</text>\n");
}

int rpt_flamegraph_write(const char *path, const rpt_sample *samples, int64_t n, const char *title, rpt_flame_stats *stats,
                         char *err, size_t errn) {
    rpt_flame_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof(*stats));
    rpt_buf b = {0};
    char head[512];
    snprintf(head, sizeof(head), "Flame graph: %s", title && *title ? title : "profile");
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) total += samples[i].count > 0 ? samples[i].count : 0;
    if (total == 0) {
        svg_head(&b, 80, head, "No stack samples in this profile: the sampler was off (profile.sampler=false) or the run was too short.");
        rpt_puts(&b, "</svg>\n");
        int rc = rpt_buf_write(&b, path, err, errn);
        rpt_buf_free(&b);
        return rc;
    }
    rpt_sample *sorted = malloc((size_t)n * sizeof(rpt_sample));
    trie t = {0};
    int rc = -1;
    if (!sorted) goto oom;
    memcpy(sorted, samples, (size_t)n * sizeof(rpt_sample));
    qsort(sorted, (size_t)n, sizeof(rpt_sample), frame_cmp);
    if (add_node(&t, -1, "all", 3) < 0) goto oom;
    for (int64_t i = 0; i < n; i++) {
        if (sorted[i].count <= 0) continue;
        int32_t cur = 0;
        t.v[0].count += sorted[i].count;
        const char *s = sorted[i].stack;
        while (*s) {
            const char *end = strchr(s, ';');
            size_t len = end ? (size_t)(end - s) : strlen(s);
            int32_t last = t.v[cur].last_child;
            if (last >= 0 && t.v[last].len == len && memcmp(t.v[last].name, s, len) == 0) {
                cur = last;
            } else {
                int32_t id = add_node(&t, cur, s, len);
                if (id < 0) goto oom;
                cur = id;
            }
            t.v[cur].count += sorted[i].count;
            if (t.v[cur].depth > stats->depth) stats->depth = t.v[cur].depth;
            if (!end) break;
            s = end + 1;
        }
    }
    stats->samples = total;
    double height = PAD_TOP + PAD_BOTTOM + (double)(stats->depth + 1) * FRAME_H;
    char sub[256];
    snprintf(sub, sizeof(sub), "%lld samples; width = share of samples, bottom = outermost frame; hover a frame for its numbers",
             (long long)total);
    svg_head(&b, height, head, sub);
    layout L = {&b, &t, (double)total, height, t.n - 1 > RPT_FLAME_PRUNE_ABOVE, stats};
    draw(&L, 0, PAD_SIDE);
    rpt_puts(&b, "</svg>\n");
    rc = rpt_buf_write(&b, path, err, errn);
    goto out;
oom:
    snprintf(err, errn, "cannot write '%s': out of memory", path);
out:
    free(sorted);
    free(t.v);
    rpt_buf_free(&b);
    return rc;
}
