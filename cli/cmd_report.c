/* cmd_report.c — `mstune report PROFILE.db [-o DIR]` renders a profile as a self-contained folder
 * (index.html, PNG charts, flame graph, summary.json, summary.md); `mstune compare A.db B.db
 * [-o DIR]` puts two profiles side by side. `mstune profile` renders its report itself. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "report/report.h"

/* The summary.json beside a profile, when there is one. */
static const char *summary_beside(const char *db, char *buf, size_t n) {
    const char *slash = strrchr(db, '/');
    snprintf(buf, n, "%.*ssummary.json", slash ? (int)(slash - db + 1) : 0, db);
    FILE *f = fopen(buf, "r");
    if (!f) return NULL;
    fclose(f);
    return buf;
}

static int parse_out(const char *cmd, int argc, char **argv, const char **pos, int n_pos, const char **out) {
    int k = 0;
    *out = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--out") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mstune %s: %s needs a folder\n", cmd, argv[i]);
                return MST_EXIT_INPUT;
            }
            *out = argv[++i];
        } else if (argv[i][0] == '-' || k == n_pos) {
            return -1;
        } else {
            pos[k++] = argv[i];
        }
    }
    return k == n_pos ? MST_EXIT_OK : -1;
}

int mst_cmd_report(int argc, char **argv) {
    const char *db, *out;
    int rc = parse_out("report", argc, argv, &db, 1, &out);
    if (rc != MST_EXIT_OK) {
        if (rc < 0) fprintf(stderr, "usage: mstune report PROFILE.db [-o DIR]   (DIR defaults to report/ beside the profile)\n");
        return MST_EXIT_INPUT;
    }
    char dir[1200], sbuf[1200], err[2048];
    if (!out) {
        const char *slash = strrchr(db, '/');
        snprintf(dir, sizeof(dir), "%.*sreport", slash ? (int)(slash - db + 1) : 0, db);
        out = dir;
    }
    if (mst_report_render(db, summary_beside(db, sbuf, sizeof(sbuf)), out, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune report: %s\n", err);
        return MST_EXIT_INPUT;
    }
    printf("wrote %s/index.html%s\n", out, mst_report_have_gnuplot() ? "" : " (no charts: gnuplot is not installed)");
    return MST_EXIT_OK;
}

int mst_cmd_compare(int argc, char **argv) {
    const char *dbs[2], *out;
    int rc = parse_out("compare", argc, argv, dbs, 2, &out);
    if (rc != MST_EXIT_OK) {
        if (rc < 0) fprintf(stderr, "usage: mstune compare A/profile.db B/profile.db [-o DIR]\n");
        return MST_EXIT_INPUT;
    }
    char err[2048];
    if (mst_compare_render(dbs[0], dbs[1], out, stdout, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune compare: %s\n", err);
        return MST_EXIT_INPUT;
    }
    if (out) printf("wrote %s/index.html\n", out);
    return MST_EXIT_OK;
}
