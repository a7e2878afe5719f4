/* status.h — recoverable error codes. User errors return one of these and leave a message in the
 * context (mst_ctx_error) naming the op, the shapes and what was expected; abort() is reserved for
 * broken invariants (MST_ASSERT). */
#ifndef MST_RUNTIME_STATUS_H
#define MST_RUNTIME_STATUS_H

#include <stdio.h>
#include <stdlib.h>

typedef enum {
    MST_OK = 0,
    MST_ERR_SHAPE,          /* shapes do not fit the op */
    MST_ERR_DTYPE,          /* dtype not accepted or no kernel for it */
    MST_ERR_OOM,            /* allocation failed (or was injected to fail) */
    MST_ERR_ARG,            /* bad argument: NULL, out of range, wrong arity */
    MST_ERR_UNSUPPORTED,    /* valid request this build or device cannot serve */
    MST_ERR_IO,             /* file or system call failed */
    MST_ERR_INTERNAL,       /* a rule produced something inconsistent */
    MST_ERR_NONFINITE,      /* training produced a NaN or infinite loss */
    MST_STATUS_COUNT
} mst_status;

const char *mst_status_name(mst_status s);

/* printf into a caller's error buffer; a NULL or empty buffer is fine (the message is dropped). */
void mst_errf(char *err, size_t errn, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Invariant checks stay on in release builds. */
#define MST_ASSERT(cond)                                                              \
    do {                                                                              \
        if (__builtin_expect(!(cond), 0)) {                                           \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                  \
        }                                                                             \
    } while (0)

#endif
