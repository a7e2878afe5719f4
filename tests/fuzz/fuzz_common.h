/* fuzz_common.h — what the libFuzzer harnesses share: a private scratch folder and writing the
 * input to a file in it (the readers under test take paths). */
#ifndef MST_FUZZ_COMMON_H
#define MST_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_fuzz_dir[256];

static inline const char *fuzz_dir(void) {
    if (!g_fuzz_dir[0]) {
        snprintf(g_fuzz_dir, sizeof(g_fuzz_dir), "/tmp/mstune_fuzz_%ld_XXXXXX", (long)getpid());
        if (!mkdtemp(g_fuzz_dir)) abort();
    }
    return g_fuzz_dir;
}

/* dir/name holding exactly data[0..n); the path in buf. */
static inline const char *fuzz_write(const char *name, const uint8_t *data, size_t n, char *buf, size_t bn) {
    snprintf(buf, bn, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(buf, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    if (fclose(f) != 0) abort();
    return buf;
}

#endif
