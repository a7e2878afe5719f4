/* fuzz_idx.c — the IDX reader (Fashion-MNIST's format). The first byte picks which of the four
 * files of the "test" split the rest of the input replaces (uncompressed); the other three are
 * small valid files, so mutations reach the cross-file checks (counts that must agree). */
#include <stdint.h>
#include <string.h>

#include "runtime/data/source.h"
#include "tests/fuzz/fuzz_common.h"

static const char *const k_names[2] = {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

static void write_valid(void) {
    char p[512];
    uint8_t img[16 + 4 * 2 * 2] = {0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 2};
    uint8_t lab[8 + 4] = {0, 0, 8, 1, 0, 0, 0, 4, 1, 2, 3, 9};
    fuzz_write(k_names[0], img, sizeof(img), p, sizeof(p));
    fuzz_write(k_names[1], lab, sizeof(lab), p, sizeof(p));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char p[512], err[1024];
    write_valid();
    fuzz_write(k_names[data[0] & 1], data + 1, size - 1, p, sizeof(p));
    mst_source *s = mst_source_idx_open(fuzz_dir(), "test", err, sizeof(err));
    if (s) {
        int64_t shape[3];
        mst_source_shape(s, shape);
        mst_source_free(s);
    }
    return 0;
}
