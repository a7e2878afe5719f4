/* fsutil.h — (util/: below every module) writing files so that a crash never leaves a torn one,
 * reading whole files, and making output folders.
 *
 *     if (mst_write_atomic(path, data, len, err, sizeof(err)) != 0) fprintf(stderr, "%s\n", err);
 */
#ifndef MST_RUNTIME_FSUTIL_H
#define MST_RUNTIME_FSUTIL_H

#include <stddef.h>

/* Write data to a temp file beside path, fsync it, rename it over path and fsync the folder:
 * readers see the old file or the new one, never a mix. 0 on success, -1 with a message. */
int mst_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errn);
/* The whole file in a malloc'd buffer with a NUL after the last byte (*len, when len is not NULL,
 * excludes it); NULL with errno set (the open's error, EIO on a read error, ENOMEM). */
char *mst_read_file(const char *path, size_t *len);
/* mkdir -p; 0 on success (also when it exists), -1 with a message. */
int mst_mkdirs(const char *path, char *err, size_t errn);

#endif
