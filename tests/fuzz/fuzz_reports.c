/* fuzz_reports.c — the readers of what runs wrote: the gate's config (JSON text), a run's
 * summary.json as the gate and the advisor read it, the gate's history file, and a profile
 * database (SQLite) as the report reads it. The first byte picks the reader. */
#include <stdint.h>
#include <string.h>

#include "report/gate.h"
#include "report/profile_view.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char p[512], err[2048];
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    switch (data[0] & 3) {
    case 0: {
        char *text = malloc(n + 1);
        if (!text) return 0;
        memcpy(text, d, n);
        text[n] = '\0';
        mst_gate_config c;
        mst_gate_config_parse(&c, text, "fuzz.json", err, sizeof(err));
        free(text);
        break;
    }
    case 1: {
        fuzz_write("summary.json", d, n, p, sizeof(p));
        mst_gate_run r;
        mst_gate_run_load(&r, fuzz_dir());
        mst_gate_run_free(&r);
        break;
    }
    case 2: {
        fuzz_write("history.json", d, n, p, sizeof(p));
        mst_gate_history h;
        if (mst_gate_history_load(&h, p, err, sizeof(err)) == 0) mst_gate_history_free(&h);
        break;
    }
    default: {
        fuzz_write("profile.db", d, n, p, sizeof(p));
        rpt_profile prof;
        if (rpt_profile_load(&prof, p, err, sizeof(err)) == 0) rpt_profile_free(&prof);
        break;
    }
    }
    return 0;
}
