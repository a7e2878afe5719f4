/* langid_nb.c — the baseline the transformer must beat on language identification: a
 * multinomial naive Bayes over character trigrams, on exactly the job's split
 * (mst_source_langid_open with the same max_len and per_language).
 *
 * A word's tokens are read as [CLS] c1 .. cn and padded with an end marker, so the trigrams
 * include the word boundaries ("^^a", "^ab", ..., "yz$"). P(lang | word) is proportional to
 * P(lang) prod P(trigram | lang), the trigram probabilities Laplace-smoothed with alpha
 * (add-alpha over the V^3 possible trigrams). Alpha is chosen on a held-out tenth of the
 * training split (never on test), then the model is refit on the whole training split.
 *
 *     bench_langid_nb [--max-len 24] [--per-language 20000] [--dir /usr/share/dict] [--dump FILE]
 * Prints the test accuracy per language and overall. --dump also writes the split for the PyTorch
 * replica (bench/torch_langid.py): "MSTLID1\0", int32 n_train, n_test, max_len, vocab, then
 * train tokens (n_train, max_len), train labels, test tokens, test labels, all int32 little-endian.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/source.h"

typedef struct {
    int v;                      /* vocabulary, the end marker included */
    int64_t n_tri;              /* v^3 */
    double *count;              /* (classes, n_tri) */
    double total[MST_LANGID_CLASSES];
    double docs[MST_LANGID_CLASSES];
} nb;

/* The trigram ids of sample i: returns how many. */
static int trigrams(const mst_source *s, int64_t i, int len, int v, int64_t *out, int32_t *label) {
    int32_t t[1024 + 2];
    mst_source_get(s, i, (float *)(void *)t, label);
    int n = 1;
    while (n < len && t[n] != MST_TOKEN_PAD) n++;
    int32_t seq[1024 + 3];
    seq[0] = MST_TOKEN_CLS;     /* two start markers: "^^a" */
    memcpy(seq + 1, t, (size_t)n * sizeof(int32_t));
    seq[n + 1] = v - 1;         /* the end marker */
    int k = 0;
    for (int j = 0; j + 2 < n + 2; j++) out[k++] = ((int64_t)seq[j] * v + seq[j + 1]) * v + seq[j + 2];
    return k;
}

static void fit(nb *m, const mst_source *s, int len, int64_t from, int64_t to, int64_t skip_from, int64_t skip_to) {
    memset(m->count, 0, sizeof(double) * (size_t)(MST_LANGID_CLASSES * m->n_tri));
    memset(m->total, 0, sizeof(m->total));
    memset(m->docs, 0, sizeof(m->docs));
    int64_t tri[1100];
    for (int64_t i = from; i < to; i++) {
        if (i >= skip_from && i < skip_to) continue;
        int32_t y;
        int k = trigrams(s, i, len, m->v, tri, &y);
        for (int j = 0; j < k; j++) m->count[y * m->n_tri + tri[j]] += 1;
        m->total[y] += k;
        m->docs[y] += 1;
    }
}

static int dump(const char *path, const mst_source *tr, const mst_source *te, int len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int32_t head[4] = {(int32_t)mst_source_len(tr), (int32_t)mst_source_len(te), len, mst_source_vocab(tr)};
    int ok = fwrite("MSTLID1", 1, 8, f) == 8 && fwrite(head, sizeof(head), 1, f) == 1;
    int32_t t[1024], y;
    for (int split = 0; split < 2 && ok; split++) {
        const mst_source *s = split ? te : tr;
        for (int64_t i = 0; i < mst_source_len(s) && ok; i++) {
            mst_source_get(s, i, (float *)(void *)t, &y);
            ok = fwrite(t, sizeof(int32_t), (size_t)len, f) == (size_t)len;
        }
        for (int64_t i = 0; i < mst_source_len(s) && ok; i++) {
            mst_source_get(s, i, NULL, &y);
            ok = fwrite(&y, sizeof(y), 1, f) == 1;
        }
    }
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int predict(const nb *m, const int64_t *tri, int k, double alpha) {
    double docs = 0;
    for (int c = 0; c < MST_LANGID_CLASSES; c++) docs += m->docs[c];
    int best = 0;
    double best_lp = -INFINITY;
    for (int c = 0; c < MST_LANGID_CLASSES; c++) {
        if (m->docs[c] == 0) continue;
        double lp = log(m->docs[c] / docs), denom = log(m->total[c] + alpha * (double)m->n_tri);
        for (int j = 0; j < k; j++) lp += log(m->count[c * m->n_tri + tri[j]] + alpha) - denom;
        if (lp > best_lp) { best_lp = lp; best = c; }
    }
    return best;
}

static double accuracy(const nb *m, const mst_source *s, int len, int64_t from, int64_t to, double alpha, int64_t *per_ok,
                       int64_t *per_n) {
    int64_t tri[1100], ok = 0;
    for (int64_t i = from; i < to; i++) {
        int32_t y;
        int k = trigrams(s, i, len, m->v, tri, &y);
        int p = predict(m, tri, k, alpha);
        ok += p == y;
        if (per_ok) { per_ok[y] += p == y; per_n[y]++; }
    }
    return to > from ? (double)ok / (double)(to - from) : 0;
}

int main(int argc, char **argv) {
    int max_len = 24;
    long per_language = 20000;
    const char *dir = MST_DICT_DIR, *dump_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-len") && i + 1 < argc) max_len = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--per-language") && i + 1 < argc) per_language = atol(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump_path = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--max-len N] [--per-language N] [--dir DIR] [--dump FILE]\n", argv[0]);
            return 2;
        }
    }
    mst_source *tr, *te;
    char err[512];
    if (mst_source_langid_open(dir, max_len, per_language, &tr, &te, err, sizeof(err)) != 0) {
        fprintf(stderr, "bench_langid_nb: %s\n", err);
        return 2;
    }
    if (dump_path && dump(dump_path, tr, te, max_len) != 0) {
        fprintf(stderr, "bench_langid_nb: %s: cannot write the split\n", dump_path);
        return 2;
    }
    nb m = {.v = mst_source_vocab(tr) + 1};
    m.n_tri = (int64_t)m.v * m.v * m.v;
    m.count = calloc((size_t)(MST_LANGID_CLASSES * m.n_tri), sizeof(double));
    if (!m.count) {
        fprintf(stderr, "bench_langid_nb: out of memory for %lld trigram counts\n", (long long)(MST_LANGID_CLASSES * m.n_tri));
        return 2;
    }
    /* alpha on a held-out tenth of train (samples are in hash order: any range is a random subset) */
    const int64_t n = mst_source_len(tr), hold = n / 10;
    fit(&m, tr, max_len, 0, n, 0, hold);
    const double alphas[] = {0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0};
    double best_alpha = 1, best_acc = -1;
    printf("alpha   held-out accuracy\n");
    for (size_t a = 0; a < sizeof(alphas) / sizeof(alphas[0]); a++) {
        double acc = accuracy(&m, tr, max_len, 0, hold, alphas[a], NULL, NULL);
        printf("%-7g %.2f%%\n", alphas[a], 100 * acc);
        if (acc > best_acc) { best_acc = acc; best_alpha = alphas[a]; }
    }
    fit(&m, tr, max_len, 0, n, 0, 0);
    int64_t per_ok[MST_LANGID_CLASSES] = {0}, per_n[MST_LANGID_CLASSES] = {0};
    double acc = accuracy(&m, te, max_len, 0, mst_source_len(te), best_alpha, per_ok, per_n);
    printf("\nnaive Bayes, character trigrams, alpha %g: %lld train / %lld test words, max_len %d, per_language %ld\n",
           best_alpha, (long long)n, (long long)mst_source_len(te), max_len, per_language);
    printf("language  test accuracy\n");
    for (int c = 0; c < MST_LANGID_CLASSES; c++)
        printf("%-9s %.2f%% (%lld words)\n", mst_langid_language(c), per_n[c] ? 100.0 * per_ok[c] / per_n[c] : 0,
               (long long)per_n[c]);
    printf("all       %.2f%%\n", 100 * acc);
    free(m.count);
    mst_source_free(tr);
    mst_source_free(te);
    return 0;
}
