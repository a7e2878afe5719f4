/* csv_export.h — a profile's op statistics and steps as CSV (RFC 4180), the tables nsys stats and
 * TensorBoard's op view offer, for spreadsheets and pandas.
 *
 *     char err[512];
 *     if (mst_csv_export("run/profile.db", "run/csv", err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
 *
 * Writes DIR/ops.csv (the op_stats table, largest total kernel time first) and DIR/steps.csv (the
 * steps table in step order), one column per table column of docs/profile-schema.md with the same
 * names and units (ns), each file atomically. */
#ifndef MST_PROFILER_CSV_EXPORT_H
#define MST_PROFILER_CSV_EXPORT_H

#include <stddef.h>

/* 0, or -1 with a message naming the path. The folder is created when missing. */
int mst_csv_export(const char *db_path, const char *out_dir, char *err, size_t errn);

#endif
