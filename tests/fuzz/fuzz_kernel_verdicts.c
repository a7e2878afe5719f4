/* fuzz_kernel_verdicts.c — the per-machine kernel verdict file (runtime/backend/kernel_choice.c,
 * read through util/append_reader.c): its lines as a process finds them, written by other
 * processes, cut off by a kill or edited by hand. Every "@M" in the input becomes this machine's
 * own field, so mutations reach the parsing of verdict ("v7") and step-thread ("s1") lines and
 * not only the machine comparison. The file is rewritten in place each run (same inode, any size),
 * so the reader sees it grow, shrink and change under its offset, as across processes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/kernel_choice.h"
#include "runtime/cpu_features.h"
#include "tests/fuzz/fuzz_common.h"

static char g_machine[512];
static char g_path[512];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(g_path, sizeof(g_path), "%s/kernel-choices.tsv", fuzz_dir());
    setenv("MSTUNE_KERNELS_CACHE", g_path, 1);
    mst_cpu_machine_id(g_machine, sizeof(g_machine));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const size_t mlen = strlen(g_machine);
    uint8_t *text = malloc(size * (mlen > 2 ? mlen : 2) / 2 + 1);
    if (!text) return 0;
    size_t n = 0;
    for (size_t i = 0; i < size; i++) {
        if (i + 1 < size && data[i] == '@' && data[i + 1] == 'M') {
            memcpy(text + n, g_machine, mlen);
            n += mlen, i++;
        } else {
            text[n++] = data[i];
        }
    }
    char p[512];
    fuzz_write("kernel-choices.tsv", text, n, p, sizeof(p));
    free(text);
    /* every line is parsed on the first lookup after a change; the keys the seeds use, and one
     * no line has */
    static const uint64_t keys[] = {0x6be6047e34ac7253ull, 0xd62d387b9662abf7ull, 0, UINT64_MAX};
    for (size_t k = 0; k < sizeof(keys) / sizeof(*keys); k++) {
        bool one = false, busy = false;
        (void)mst_plan_verdict_get(keys[k], &one, &busy);
    }
    return 0;
}
