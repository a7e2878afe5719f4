/* checked.h — numbers from outside (files, the command line) converted and combined without
 * undefined behaviour: a double is range-checked before it becomes an integer (a cast of 4e44 or
 * NaN to int64_t is UB in C), and size arithmetic reports overflow instead of wrapping.
 *
 *     int64_t steps;
 *     if (!mst_f64_to_i64(json->valuedouble, 0, INT64_MAX / 2, &steps)) ...refuse...;
 *     int64_t n = mst_f64_to_i64_or(v, 0, 1 << 20, -1);     // -1 when out of range or NaN
 *     size_t bytes;
 *     if (!mst_size_mul(count, elem, &bytes)) ...too large...;
 */
#ifndef MST_UTIL_CHECKED_H
#define MST_UTIL_CHECKED_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True and *out = x when x is finite, integral-or-not, and within [lo, hi] (x is truncated
 * toward zero, as a cast would); false for NaN, infinities and anything outside. */
static inline bool mst_f64_to_i64(double x, int64_t lo, int64_t hi, int64_t *out) {
    if (!isfinite(x)) return false;
    /* compare in double first: 2^63 itself is exact, and every int64 bound maps below it */
    if (x < -9223372036854775808.0 || x >= 9223372036854775808.0) return false;
    int64_t v = (int64_t)x;
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* x as an integer in [lo, hi], or fallback when it is not (NaN, infinite, out of range). */
static inline int64_t mst_f64_to_i64_or(double x, int64_t lo, int64_t hi, int64_t fallback) {
    int64_t v;
    return mst_f64_to_i64(x, lo, hi, &v) ? v : fallback;
}

static inline int mst_f64_to_int_or(double x, int lo, int hi, int fallback) {
    return (int)mst_f64_to_i64_or(x, lo, hi, fallback);
}

/* *out = a * b (or a + b); false, *out untouched, on overflow or a negative operand. */
static inline bool mst_i64_mul(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static inline bool mst_i64_add(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static inline bool mst_size_mul(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static inline bool mst_size_add(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

#endif
