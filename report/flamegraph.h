/* flamegraph.h — a flame graph SVG from folded stacks, drawn by our own code (after Brendan
 * Gregg's flamegraph.pl, http://www.brendangregg.com/flamegraphs.html): one rectangle per
 * distinct stack prefix, width proportional to its samples, roots at the bottom, children sorted
 * by name so equal prefixes merge. Every frame has a <title> tooltip (name, samples, share);
 * no script is needed to read it.
 *
 *     rpt_flame_stats fs;
 *     rpt_flamegraph_write("out/flame.svg", samples, n, "fashion_cnn", &fs, err, errn);
 *     // fs.frames rectangles besides the "all" root, fs.depth levels
 */
#ifndef MST_REPORT_FLAMEGRAPH_H
#define MST_REPORT_FLAMEGRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "report/profile_view.h"

/* Frames narrower than this share of all samples are merged into nothing (not drawn) once a
 * graph holds more than RPT_FLAME_PRUNE_ABOVE distinct frames; smaller graphs draw every frame. */
#define RPT_FLAME_PRUNE_ABOVE 20000
#define RPT_FLAME_MIN_SHARE 0.0005

typedef struct {
    int64_t frames;         /* distinct stack prefixes drawn (the "all" root not counted) */
    int64_t frames_pruned;  /* distinct prefixes left out as too narrow */
    int depth;              /* deepest stack */
    int64_t samples;
} rpt_flame_stats;

/* Write the SVG (replaced atomically). With no samples it is a small SVG that says so.
 * 0, or -1 with a message naming the path. */
int rpt_flamegraph_write(const char *path, const rpt_sample *samples, int64_t n, const char *title, rpt_flame_stats *stats,
                         char *err, size_t errn);

#endif
