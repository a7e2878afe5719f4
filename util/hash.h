/* hash.h — FNV-1a over bytes, for cache keys that must be the same in every process (no seed, no
 * pointers): the kernel choice's shape keys, graph plans' hashes.
 *
 *     uint64_t h = mst_fnv1a(MST_FNV1A_OFFSET, &key, sizeof(key));
 *     h = mst_fnv1a(h, more, n);                  // chained
 */
#ifndef MST_UTIL_HASH_H
#define MST_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define MST_FNV1A_OFFSET 1469598103934665603ull

static inline uint64_t mst_fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

#endif
