/* fsutil.c — atomic file replacement (temp + fsync + rename + fsync of the folder), whole-file
 * reads and mkdir -p. */
#define _GNU_SOURCE
#include "util/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int mst_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errn) {
    /* the temp file sits beside the target, so rename() stays on one file system */
    char tmp[4096];
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) : 0;
    const char *base = slash ? slash + 1 : path;
    if ((slash ? snprintf(tmp, sizeof(tmp), "%.*s/.%s.tmp-XXXXXX", dir_len, path, base)
               : snprintf(tmp, sizeof(tmp), ".%s.tmp-XXXXXX", base)) >= (int)sizeof(tmp)) {
        snprintf(err, errn, "cannot write '%s': path too long", path);
        return -1;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, errn, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    const char *what = NULL;
    if (fchmod(fd, 0644) != 0) what = "chmod";
    else if (write_all(fd, data, len) != 0) what = "write";
    else if (fsync(fd) != 0) what = "fsync";
    int saved = errno;
    if (close(fd) != 0 && !what) { what = "close"; saved = errno; }
    if (!what && rename(tmp, path) != 0) { what = "rename"; saved = errno; }
    if (what) {
        unlink(tmp);
        snprintf(err, errn, "cannot write '%s' (%s): %s", path, what, strerror(saved));
        return -1;
    }
    /* make the rename itself durable; best effort, some file systems refuse fsync on a folder */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (dir_len ? dir_len : 1) : 1, slash ? path : ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

int mst_mkdirs(const char *path, char *err, size_t errn) {
    char buf[4096];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
        snprintf(err, errn, "%s: path too long", path);
        return -1;
    }
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                snprintf(err, errn, "%s: cannot create folder: %s", buf, strerror(errno));
                return -1;
            }
            struct stat st;
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
                snprintf(err, errn, "%s: exists and is not a folder", buf);
                return -1;
            }
            *p = c;
            if (c == '\0') break;
        }
    }
    return 0;
}

char *mst_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 1 >= cap) {     /* room for one more byte and the NUL */
            cap = cap ? 2 * cap : 65536;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}
