/* wordlist.c — language identification from Debian's word lists (wamerican, wngerman, wfrench,
 * witalian, wspanish, wportuguese, wdutch, wswedish under /usr/share/dict): a word in, its
 * language out, character by character.
 *
 * How the words become samples, every step deterministic:
 *   1. Each list is decoded as UTF-8, or as ISO-8859-1 when it is not valid UTF-8 (Debian's
 *      `swedish` is Latin-1), lower-cased (ASCII and Latin-1 letters) and filtered to words of
 *      letters only: entries with an apostrophe, digit, hyphen or dot are dropped, so "'s"
 *      possessives (a third of wamerican) cannot give English away.
 *   2. Words that appear in more than one list after lower-casing ("hotel", "radio", "taxi")
 *      are DROPPED from every list: they have no single answer. Duplicates inside one list
 *      collapse to one.
 *   3. The split is a hash of the word: FNV-1a over its code points, test when a mix of the hash
 *      is 0 mod 10 (about 10%), train otherwise. A word is in the same split whatever lists or
 *      caps are used.
 *   4. Each language keeps at most `per_language` words per split (train; test gets a tenth),
 *      chosen in hash order, which is a uniform pseudo-random subset, so classes are balanced.
 *      Samples are stored in hash order too: any prefix (data.limit) mixes all languages.
 *   5. Tokens: 0 padding, 1 a leading [CLS], 2 unknown, then one id per code point seen in the
 *      training words of all lists (sorted, so the vocabulary is a pure function of the lists).
 *      A sample is (max_len) i32: [CLS], the first max_len - 1 characters, zeros; longer words
 *      are truncated (counted).
 * Trade-off: everything is decoded and tokenized at open (a run of one step takes 0.55-0.7 s for
 * the 1.9 M lines on the 2-core VM) and kept as i32 tokens, so a sample read is one memcpy and is
 * safe from any thread.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/source_impl.h"
#include "runtime/status.h"
#include "util/fsutil.h"

static const struct {
    const char *code, *file;
} k_languages[MST_LANGID_CLASSES] = {
    {"en", "american-english"}, {"de", "ngerman"}, {"fr", "french"}, {"it", "italian"},
    {"es", "spanish"},          {"pt", "portuguese"}, {"nl", "dutch"}, {"sv", "swedish"},
};

const char *mst_langid_language(int k) { return k >= 0 && k < MST_LANGID_CLASSES ? k_languages[k].code : "?"; }

typedef struct {
    uint64_t h;
    uint32_t off;       /* into the code point pool */
    uint16_t len;
    uint8_t lang;
} word;

typedef struct {
    uint32_t *cp;
    size_t n, cap;
    word *w;
    size_t nw, capw;
} pool;

static int pool_push_cp(pool *p, uint32_t c) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 1u << 20;
        uint32_t *q = realloc(p->cp, cap * sizeof(*q));
        if (!q) return -1;
        p->cp = q;
        p->cap = cap;
    }
    p->cp[p->n++] = c;
    return 0;
}

static int pool_push_word(pool *p, word w) {
    if (p->nw == p->capw) {
        size_t cap = p->capw ? p->capw * 2 : 1u << 18;
        word *q = realloc(p->w, cap * sizeof(*q));
        if (!q) return -1;
        p->w = q;
        p->capw = cap;
    }
    p->w[p->nw++] = w;
    return 0;
}

enum { k_max_code_point = 0x10FFFF };     /* the largest code point utf8_decode returns */

/* One UTF-8 sequence at s (n bytes left): its length, or 0 when invalid. */
static int utf8_decode(const unsigned char *s, size_t n, uint32_t *out) {
    if (s[0] < 0x80) { *out = s[0]; return 1; }
    int len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t c = s[0] & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        c = c << 6 | (s[k] & 0x3F);
    }
    if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000) || c > k_max_code_point) return 0;
    *out = c;
    return len;
}

static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t c;
        int k = utf8_decode(s + i, n - i, &c);
        if (!k) return false;
        i += (size_t)k;
    }
    return true;
}

/* ASCII and Latin-1 upper case to lower case; other code points unchanged. */
static uint32_t lower(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    return c;
}

/* Letters: a-z, Latin-1 letters (not the multiplication and division signs), anything above Latin-1. */
static bool is_letter(uint32_t c) { return (c >= 'a' && c <= 'z') || (c >= 0xDF && c != 0xF7); }

static uint64_t fnv1a(const uint32_t *cp, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cp[i];
        for (int b = 0; b < 4; b++) {
            h ^= (c >> (8 * b)) & 0xFF;
            h *= 1099511628211ull;
        }
    }
    return h;
}

/* splitmix64's finalizer: the split must not correlate with the hash order used for caps */
static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static bool is_test(uint64_t h) { return mix(h) % 10 == 0; }

/* Decodes one list into the pool. */
static int read_list(pool *p, const char *dir, int lang, char *err, size_t errn) {
    char path[1100];
    snprintf(path, sizeof(path), "%s/%s", dir, k_languages[lang].file);
    size_t n = 0;
    unsigned char *buf = (unsigned char *)mst_read_file(path, &n);
    if (!buf) {
        mst_errf(err, errn, "%s: cannot read the %s word list (install Debian's word list packages: scripts/setup.sh)", path,
                 k_languages[lang].code);
        return -1;
    }
    bool utf8 = valid_utf8(buf, n);
    int64_t lineno = 0;
    for (size_t i = 0; i < n;) {
        size_t end = i;
        while (end < n && buf[end] != '\n') end++;
        lineno++;
        size_t off = p->n;
        bool ok = true;
        for (size_t j = i; j < end && ok;) {
            uint32_t c;
            int k = 1;
            if (utf8) k = utf8_decode(buf + j, end - j, &c);
            else c = buf[j];
            j += (size_t)k;
            if (c == '\r' && j == end) break;
            c = lower(c);
            if (!is_letter(c)) ok = false;
            else if (pool_push_cp(p, c) != 0) goto oom;
        }
        size_t len = p->n - off;
        if (ok && len > 0 && len < 65536) {
            if (pool_push_word(p, (word){fnv1a(p->cp + off, len), (uint32_t)off, (uint16_t)len, (uint8_t)lang}) != 0) goto oom;
        } else {
            p->n = off;
        }
        i = end + 1;
        if (p->n > UINT32_MAX / 2) {
            free(buf);
            mst_errf(err, errn, "%s:%lld: the word lists hold more characters than this reader indexes", path, (long long)lineno);
            return -1;
        }
    }
    free(buf);
    return 0;
oom:
    free(buf);
    mst_errf(err, errn, "%s: out of memory reading the word list", path);
    return -1;
}

/* The words' order: hash, length, code points, language; ctx is the code point pool */
static int cmp_word(const void *a, const void *b, void *ctx) {
    const uint32_t *cp = ctx;
    const word *x = a, *y = b;
    if (x->h != y->h) return x->h < y->h ? -1 : 1;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    int c = memcmp(cp + x->off, cp + y->off, x->len * sizeof(uint32_t));
    if (c) return c;
    return (int)x->lang - (int)y->lang;
}

/* w[0..n) in cmp_word's order: a stable LSD radix sort on the hash (four 16-bit digits), then the
 * runs of equal hashes (the same word in several lists, duplicates inside one, collisions) by
 * insertion with cmp_word. Stable like glibc's merge sort, so the order is the one qsort_r gave;
 * qsort_r's ~40 M comparisons of the 1.9 M words were 40% of a langid run's start. 0 or -1 (out of
 * memory). */
static int sort_words(word *w, size_t n, const uint32_t *cp) {
    word *tmp = malloc((n ? n : 1) * sizeof(*tmp));
    size_t *count = calloc(1u << 16, sizeof(*count));
    if (!tmp || !count) {
        free(tmp);
        free(count);
        return -1;
    }
    word *from = w, *to = tmp;
    for (int shift = 0; shift < 64; shift += 16) {
        memset(count, 0, (1u << 16) * sizeof(*count));
        for (size_t i = 0; i < n; i++) count[(from[i].h >> shift) & 0xFFFF]++;
        size_t at = 0;
        for (size_t d = 0; d < (1u << 16); d++) {
            size_t c = count[d];
            count[d] = at;
            at += c;
        }
        for (size_t i = 0; i < n; i++) to[count[(from[i].h >> shift) & 0xFFFF]++] = from[i];
        word *t = from;
        from = to;
        to = t;
    }
    /* four passes: the sorted words are back in w */
    free(tmp);
    free(count);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && w[j].h == w[i].h) j++;
        for (size_t k = i + 1; k < j; k++) {
            word v = w[k];
            size_t m = k;
            for (; m > i && cmp_word(&w[m - 1], &v, (void *)cp) > 0; m--) w[m] = w[m - 1];
            w[m] = v;
        }
        i = j;
    }
    return 0;
}

static bool same_word(const pool *p, const word *x, const word *y) {
    return x->h == y->h && x->len == y->len && memcmp(p->cp + x->off, p->cp + y->off, x->len * sizeof(uint32_t)) == 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int32_t token_of(const uint32_t *vocab, int n_vocab, uint32_t c) {
    const uint32_t *f = bsearch(&c, vocab, (size_t)n_vocab, sizeof(*vocab), cmp_u32);
    return f ? (int32_t)(f - vocab) + MST_TOKEN_FIRST_CHAR : MST_TOKEN_UNK;
}

static mst_source *make_split(const pool *p, const word *kept, size_t n_kept, bool test, int64_t cap, int max_len,
                              const uint32_t *vocab, int n_vocab) {
    int64_t count[MST_LANGID_CLASSES] = {0}, n = 0;
    for (size_t i = 0; i < n_kept; i++)
        if (is_test(kept[i].h) == test && count[kept[i].lang] < cap) count[kept[i].lang]++, n++;
    mst_source *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->kind = MST_SOURCE_TOKENS;
    s->n = n;
    s->c = s->h = 1;
    s->w = max_len;
    s->rank = 1;
    s->n_classes = MST_LANGID_CLASSES;
    s->vocab = n_vocab + MST_TOKEN_FIRST_CHAR;
    s->tokens = calloc((size_t)(n ? n : 1) * (size_t)max_len, sizeof(int32_t));
    s->labels = malloc((size_t)(n ? n : 1));
    if (!s->tokens || !s->labels) {
        mst_source_free(s);
        return NULL;
    }
    memset(count, 0, sizeof(count));
    int64_t k = 0;
    for (size_t i = 0; i < n_kept; i++) {
        const word *w = &kept[i];
        if (is_test(w->h) != test || count[w->lang] >= cap) continue;
        count[w->lang]++;
        int32_t *t = s->tokens + k * max_len;
        t[0] = MST_TOKEN_CLS;
        int len = w->len < max_len - 1 ? w->len : max_len - 1;
        if (w->len > max_len - 1) s->truncated++;
        for (int j = 0; j < len; j++) t[1 + j] = token_of(vocab, n_vocab, p->cp[w->off + j]);
        s->labels[k++] = w->lang;
    }
    return s;
}

int mst_source_langid_open(const char *dir, int max_len, int64_t per_language, mst_source **train, mst_source **test,
                           char *err, size_t errn) {
    *train = *test = NULL;
    if (max_len < 2 || max_len > 1024) {
        mst_errf(err, errn, "language id: max_len = %d, expected 2..1024 ([CLS] and at least one character)", max_len);
        return -1;
    }
    if (per_language < 1) {
        mst_errf(err, errn, "language id: per_language = %lld, expected >= 1", (long long)per_language);
        return -1;
    }
    pool p = {0};
    word *kept = NULL;
    uint32_t *vocab = NULL;
    int rc = -1;
    for (int l = 0; l < MST_LANGID_CLASSES; l++)
        if (read_list(&p, dir, l, err, errn) != 0) goto out;
    if (sort_words(p.w, p.nw, p.cp) != 0) goto oom;
    kept = malloc((p.nw ? p.nw : 1) * sizeof(*kept));
    if (!kept) goto oom;
    size_t n_kept = 0, n_shared = 0;
    for (size_t i = 0; i < p.nw;) {
        size_t j = i + 1;
        bool shared = false;
        while (j < p.nw && same_word(&p, &p.w[i], &p.w[j])) shared |= p.w[j++].lang != p.w[i].lang;
        if (!shared) kept[n_kept++] = p.w[i];
        else n_shared++;
        i = j;
    }
    /* the vocabulary: distinct code points of the training words, ascending (a bitmap over the code
     * points, which the decoders cap at U+10FFFF: sorting the ~17 M characters of the full lists
     * took ~2 s of every run's start) */
    size_t n_words64 = (k_max_code_point + 1) / 64 + 1;
    uint64_t *seen = calloc(n_words64, sizeof(*seen));
    if (!seen) goto oom;
    enum { k_ahead = 16 };     /* kept is in word order, so each word's characters are a cache miss */
    for (size_t i = 0; i < n_kept; i++) {
        if (i + k_ahead < n_kept) __builtin_prefetch(p.cp + kept[i + k_ahead].off);
        if (!is_test(kept[i].h))
            for (int j = 0; j < kept[i].len; j++) {
                uint32_t c = p.cp[kept[i].off + j];
                seen[c / 64] |= 1ull << (c % 64);
            }
    }
    size_t n_vocab = 0;
    for (size_t k = 0; k < n_words64; k++) n_vocab += (size_t)__builtin_popcountll(seen[k]);
    vocab = malloc((n_vocab ? n_vocab : 1) * sizeof(*vocab));
    if (!vocab) {
        free(seen);
        goto oom;
    }
    n_vocab = 0;
    for (size_t k = 0; k < n_words64; k++)
        for (uint64_t b = seen[k]; b; b &= b - 1) vocab[n_vocab++] = (uint32_t)(k * 64 + (size_t)__builtin_ctzll(b));
    free(seen);
    int64_t test_cap = per_language / 9 > 0 ? per_language / 9 : 1;     /* 10% of the words: a ninth of train */
    *train = make_split(&p, kept, n_kept, false, per_language, max_len, vocab, (int)n_vocab);
    *test = make_split(&p, kept, n_kept, true, test_cap, max_len, vocab, (int)n_vocab);
    if (!*train || !*test) goto oom;
    (*train)->dropped_shared = (*test)->dropped_shared = (int64_t)n_shared;
    rc = 0;
    goto out;
oom:
    mst_errf(err, errn, "language id: out of memory building the dataset from %s", dir);
out:
    if (rc != 0) {
        mst_source_free(*train);
        mst_source_free(*test);
        *train = *test = NULL;
    }
    free(vocab);
    free(kept);
    free(p.cp);
    free(p.w);
    return rc;
}
