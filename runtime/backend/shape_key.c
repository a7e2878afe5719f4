/* shape_key.c — see shape_key.h. The key's own hash (the verdict file's, the same in every
 * process) is FNV-1a over its bytes; the maps hash it eight bytes at a time; linear probing. */
#include "runtime/backend/shape_key.h"

#include <stdlib.h>
#include <string.h>

#include "util/hash.h"

void mst_shape_key_of(mst_shape_key *k, const mst_op_call *c, mst_dtype dtype) {
    memset(k, 0, sizeof(*k));
    k->op = (int32_t)c->op;
    k->dtype = (int32_t)dtype;
    k->n_in = c->n_in;
    for (int i = 0; i < c->n_in && i < MST_SHAPE_KEY_INPUTS; i++) {
        k->ndim[i] = c->in[i]->ndim;
        for (int d = 0; d < c->in[i]->ndim; d++) k->shape[i][d] = c->in[i]->shape[d];
    }
    memcpy(k->attr_i, c->attrs.i, sizeof(k->attr_i));
}

uint64_t mst_shape_key_hash(const mst_shape_key *k) {
    uint64_t h = mst_fnv1a(MST_FNV1A_OFFSET, k, sizeof(*k));
    return h ? h : 1;
}

/* The maps' hash, never stored outside the process: every op call that has a kernel choice looks
 * its shape up twice (the verdict, then the oneDNN primitive), and FNV-1a's byte-at-a-time chain
 * over the 240-byte key took ~0.3 us a lookup (perf: mst_shape_key_hash 13.6% of an eager run of a
 * dispatch-bound mlp). Two independent multiply-xorshift lanes over the key's 64-bit words, then
 * MurmurHash3's 64-bit finaliser. */
_Static_assert(sizeof(mst_shape_key) % 16 == 0, "the map hash reads the key as pairs of 64-bit words");
static uint64_t map_hash(const mst_shape_key *k) {
    uint64_t w[sizeof(*k) / sizeof(uint64_t)];
    memcpy(w, k, sizeof(w));
    uint64_t a = 0x9e3779b97f4a7c15ull, b = 0xc2b2ae3d27d4eb4full;
    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i += 2) {
        a = (a ^ w[i]) * 0xff51afd7ed558ccdull;
        a ^= a >> 32;
        b = (b ^ w[i + 1]) * 0xc4ceb9fe1a85ec53ull;
        b ^= b >> 29;
    }
    uint64_t h = a ^ (b << 31 | b >> 33);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h ? h : 1;
}

static size_t find(const mst_shape_map *m, const mst_shape_key *k, uint64_t h) {
    size_t i = (size_t)h & (m->cap - 1);
    while (m->hashes[i] && !(m->hashes[i] == h && memcmp(&m->keys[i], k, sizeof(*k)) == 0)) i = (i + 1) & (m->cap - 1);
    return i;
}

static bool grow(mst_shape_map *m) {
    size_t cap = m->cap ? m->cap * 2 : 16;
    mst_shape_map n = {.keys = malloc(cap * sizeof(mst_shape_key)), .vals = calloc(cap, sizeof(void *)),
                       .hashes = calloc(cap, sizeof(uint64_t)), .cap = cap, .len = m->len};
    if (!n.keys || !n.vals || !n.hashes) {
        free(n.keys), free(n.vals), free(n.hashes);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->hashes[i]) continue;
        size_t j = find(&n, &m->keys[i], m->hashes[i]);
        n.keys[j] = m->keys[i], n.vals[j] = m->vals[i], n.hashes[j] = m->hashes[i];
    }
    free(m->keys), free(m->vals), free(m->hashes);
    *m = n;
    return true;
}

void **mst_shape_map_slot(mst_shape_map *m, const mst_shape_key *k) {
    if ((m->len + 1) * 2 > m->cap && !grow(m)) return NULL;
    uint64_t h = map_hash(k);
    size_t i = find(m, k, h);
    if (!m->hashes[i]) {
        m->hashes[i] = h;
        m->keys[i] = *k;
        m->vals[i] = NULL;
        m->len++;
    }
    return &m->vals[i];
}

void *mst_shape_map_get(const mst_shape_map *m, const mst_shape_key *k) {
    if (!m->cap) return NULL;
    size_t i = find(m, k, map_hash(k));
    return m->hashes[i] ? m->vals[i] : NULL;
}

void mst_shape_map_free(mst_shape_map *m) {
    free(m->keys), free(m->vals), free(m->hashes);
    memset(m, 0, sizeof(*m));
}
