/* append_reader.h — reads an append-only, tab-separated file on from where it last stopped. The
 * per-machine verdict file (runtime/backend/kernel_choice.h) only grows: a verdict is never
 * rewritten, a newer line overrides. It was read whole at every first call of a shape and every
 * graph compile: 0.3-0.45 ms a read at 750 lines on the development VM, ~3 ms of a small MLP's
 * 10 ms training loop, in eager's first step and graph mode's compile alike (docs/benchmarks.md),
 * and growing with the file. A reader hands its caller only the lines appended since its last
 * call (one stat() when there are none), and starts over — telling the caller to drop what it
 * kept — when the file was replaced or shrank, so the caller's records always equal what a full
 * read would give. A line without its newline yet (a writer mid-line) waits for the next call;
 * a line longer than MST_APPEND_READER_LINE is skipped. Not thread-safe: the caller holds its lock.
 *
 *     static mst_append_reader r;
 *     mst_append_reader_sync(&r, path, drop_all, keep_line, user);   // keep_line(user, field, n)
 */
#ifndef MST_UTIL_APPEND_READER_H
#define MST_UTIL_APPEND_READER_H

#include <stdint.h>

enum { MST_APPEND_READER_LINE = 1024, MST_APPEND_READER_FIELDS = 16 };

typedef struct {
    uint64_t offset;            /* bytes read, whole lines */
    uint64_t dev, ino;          /* the file read */
    uint64_t restarts;          /* reads from the start after the first (tests) */
} mst_append_reader;

/* A line's fields (cut at tabs, at most MST_APPEND_READER_FIELDS; the rest stays in the last). */
typedef void (*mst_append_line_fn)(void *user, char **field, int n_fields);
/* Everything given so far is void: the file was replaced, shrank or is gone. */
typedef void (*mst_append_reset_fn)(void *user);

/* Hands line() every whole line appended since the last call, in file order; reset() first when
 * the file is not the one read before (or gone). */
void mst_append_reader_sync(mst_append_reader *r, const char *path, mst_append_reset_fn reset, mst_append_line_fn line,
                            void *user);

#endif
