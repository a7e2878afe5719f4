/* append_reader.c — see append_reader.h. The file is append-only by contract (kernel_choice.c
 * writes each line with one O_APPEND write), so a grown file with the same device and inode is the
 * old one plus new lines, and only those are read, through one fixed buffer: reading the whole
 * file into fresh memory cost more than the scans it replaced (page faults: ~2 ms for 158 KB on
 * the development VM). */
#include "util/append_reader.h"

#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void give_line(char *s, mst_append_line_fn line, void *user) {
    char *field[MST_APPEND_READER_FIELDS];
    int n = 0;
    for (char *p = s;; p++) {
        if (n == MST_APPEND_READER_FIELDS - 1) {
            field[n++] = p;
            break;
        }
        char *tab = strchr(p, '\t');
        if (tab) *tab = '\0';
        if (*p) field[n++] = p;         /* empty fields are skipped, as strtok does */
        if (!tab) break;
        p = tab;
    }
    if (n > 0) line(user, field, n);
}

void mst_append_reader_sync(mst_append_reader *r, const char *path, mst_append_reset_fn reset, mst_append_line_fn line,
                            void *user) {
    struct stat st;
    const bool gone = stat(path, &st) != 0;
    if (gone || (uint64_t)st.st_dev != r->dev || (uint64_t)st.st_ino != r->ino || (uint64_t)st.st_size < r->offset) {
        if (r->offset || r->dev || r->ino) {
            r->restarts++;
            reset(user);
        }
        r->offset = 0, r->dev = gone ? 0 : (uint64_t)st.st_dev, r->ino = gone ? 0 : (uint64_t)st.st_ino;
        if (gone) return;
    }
    if ((uint64_t)st.st_size == r->offset) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[16384 + 1];
    size_t have = 0;            /* bytes in buf from file offset r->offset */
    bool skipping = false;      /* inside a line too long to keep */
    for (;;) {
        ssize_t got = pread(fd, buf + have, sizeof(buf) - 1 - have, (off_t)(r->offset + have));
        if (got <= 0) break;
        have += (size_t)got;
        size_t at = 0;
        for (char *nl; (nl = memchr(buf + at, '\n', have - at));) {
            *nl = '\0';
            if (!skipping && (size_t)(nl - (buf + at)) < MST_APPEND_READER_LINE) give_line(buf + at, line, user);
            skipping = false;
            at = (size_t)(nl - buf) + 1;
        }
        r->offset += at;
        memmove(buf, buf + at, have - at);
        have -= at;
        if (have == sizeof(buf) - 1) {      /* a line longer than the buffer: skipped up to its newline (a
                                               tail left at the end of the file reads as a line of no known tag) */
            r->offset += have;
            have = 0;
            skipping = true;
        }
    }
    close(fd);
}
