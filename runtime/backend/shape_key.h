/* shape_key.h — what identifies one op application for a cache: op, kernel dtype, every input's
 * shape and the integer attributes. The kernel choice (runtime/backend/kernel_choice.c) and the
 * oneDNN primitive cache (onednn_lib.c) both key on it, so one shape decides once and is built once.
 *
 *     mst_shape_key k; mst_shape_key_of(&k, c, dtype);
 *     void **slot = mst_shape_map_slot(&map, &k);   // *slot is NULL the first time
 */
#ifndef MST_RUNTIME_BACKEND_SHAPE_KEY_H
#define MST_RUNTIME_BACKEND_SHAPE_KEY_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/op.h"

enum { MST_SHAPE_KEY_INPUTS = 3 };

typedef struct {
    int32_t op, dtype, n_in;
    int32_t threads;            /* the team in the primitive cache; the thread budget in kernel verdicts */
    int32_t ndim[MST_SHAPE_KEY_INPUTS];
    int32_t pad2_;
    int64_t shape[MST_SHAPE_KEY_INPUTS][MST_MAX_DIMS];
    int64_t attr_i[MST_MAX_ATTR_I];
} mst_shape_key;

/* Fills every byte (padding included), so keys compare with memcmp. */
void     mst_shape_key_of(mst_shape_key *k, const mst_op_call *c, mst_dtype dtype);
/* The key's FNV-1a hash: the same in every process (the kernel verdict file keys on it). */
uint64_t mst_shape_key_hash(const mst_shape_key *k);

/* An open-addressing map from keys to pointers, grown at half load; owns the keys, not the values. */
typedef struct {
    mst_shape_key *keys;
    void **vals;
    uint64_t *hashes;          /* 0 = empty slot */
    size_t cap, len;
} mst_shape_map;

/* The value slot for k, inserted (NULL) when new; NULL when out of memory. */
void **mst_shape_map_slot(mst_shape_map *m, const mst_shape_key *k);
/* The value for k, or NULL when absent (never inserts). */
void  *mst_shape_map_get(const mst_shape_map *m, const mst_shape_key *k);
void   mst_shape_map_free(mst_shape_map *m);

#endif
