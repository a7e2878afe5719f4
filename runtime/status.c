/* status.c — status names and the error-buffer formatter used where no context exists yet
 * (job files, data sources, loaders). */
#include <stdarg.h>

#include "runtime/status.h"

static const char *const k_status_names[MST_STATUS_COUNT] = {
    [MST_OK] = "ok", [MST_ERR_SHAPE] = "shape error", [MST_ERR_DTYPE] = "dtype error",
    [MST_ERR_OOM] = "out of memory", [MST_ERR_ARG] = "bad argument",
    [MST_ERR_UNSUPPORTED] = "unsupported", [MST_ERR_IO] = "i/o error", [MST_ERR_INTERNAL] = "internal error",
    [MST_ERR_NONFINITE] = "non-finite loss",
};
_Static_assert(MST_STATUS_COUNT == 9, "a new status needs a name");

const char *mst_status_name(mst_status s) { return (unsigned)s < MST_STATUS_COUNT ? k_status_names[s] : "?"; }

void mst_errf(char *err, size_t errn, const char *fmt, ...) {
    if (!err || errn == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errn, fmt, ap);
    va_end(ap);
}
