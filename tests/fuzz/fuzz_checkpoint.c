/* fuzz_checkpoint.c — the checkpoint reader against a small model's entries. The CRC-32 at the
 * end of the file would refuse almost every mutation before the parser sees it, so an input whose
 * first byte is odd gets its checksum recomputed first (the "fix the checksum" mode); an even one
 * is loaded as it is. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "runtime/checkpoint.h"
#include "runtime/tensor.h"
#include "tests/fuzz/fuzz_common.h"

static mst_ctx *g_ctx;
static mst_ckpt_entry g_e[3];

static void setup(void) {
    if (g_ctx) return;
    g_ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    if (!g_ctx) abort();
    g_e[0] = (mst_ckpt_entry){"fc.weight", mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 2, (int64_t[]){3, 4})};
    g_e[1] = (mst_ckpt_entry){"fc.bias", mst_tensor_zeros(g_ctx, MST_DTYPE_F32, 1, (int64_t[]){3})};
    g_e[2] = (mst_ckpt_entry){"opt.steps", mst_tensor_zeros(g_ctx, MST_DTYPE_I32, 1, (int64_t[]){1})};
    if (!g_e[0].t || !g_e[1].t || !g_e[2].t) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    setup();
    uint8_t *buf = malloc(size);
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    size_t n = size - 1;
    if ((data[0] & 1) && n >= 4) {
        uint32_t crc = (uint32_t)crc32(0L, buf, (uInt)(n - 4));
        memcpy(buf + n - 4, &crc, 4);
    }
    char p[512];
    fuzz_write("checkpoint.bin", buf, n, p, sizeof(p));
    free(buf);
    mst_ckpt_meta *meta = malloc(sizeof(*meta));
    if (!meta) return 0;
    mst_checkpoint_load(g_ctx, p, meta, g_e, 3);
    free(meta);
    g_ctx->status = MST_OK;
    return 0;
}
