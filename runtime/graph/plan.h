/* plan.h — static memory planning: every intermediate buffer of a graph gets an offset in the
 * arena region of its memory category, planned once per input signature.
 *
 * Buffers: an intermediate value together with its views, the outputs written in place over it
 * and a relu epilogue's output. A buffer belongs to the category its values are counted under in
 * eager mode (mst_gvalue.cat: activations, gradients, parameters' half copies), and each category
 * is packed into its own region, so the allocator's per-category counts stay true in graph mode
 * (one arena under "activations" used to hide gradients and half copies there). A buffer lives
 * from the first node defining it to the last node reading or updating it (graph outputs to the
 * end). Within a region, buffers are placed largest first, each in the smallest gap between
 * already placed buffers of that region whose lifetimes overlap its own (best fit), 64-byte
 * aligned. mst_graph_plan_check verifies by construction that no two simultaneously live buffers
 * of one region overlap (the guard rail STYLE.md asks for); buffers of different regions never
 * share memory.
 *
 *     mst_graph_plan p;
 *     mst_graph_plan_build(g, &p);         // p.offset[v] into region p.cat[v], -1 when not planned
 *     MST_ASSERT(mst_graph_plan_check(g, &p) == 0);
 *     p.region_bytes[MST_MEM_GRAD];        // the gradients' region
 *     mst_graph_plan_free(&p);
 */
#ifndef MST_RUNTIME_GRAPH_PLAN_H
#define MST_RUNTIME_GRAPH_PLAN_H

#include "runtime/graph/ir.h"

#define MST_GRAPH_ALIGN 64

typedef struct {
    int n_values;
    int64_t *offset;            /* per value: bytes into its buffer's region; -1 when not in the arena */
    int *buffer;                /* per value: its buffer id; -1 when not in the arena */
    int n_buffers;
    int64_t *buf_size, *buf_offset;
    int *buf_start, *buf_end;   /* lifetime, node indices (inclusive) */
    mst_mem_cat *buf_cat;       /* per buffer: the region it is packed in */
    int64_t region_bytes[MST_MEM_COUNT];    /* per category: its region's size (0: unused) */
    int64_t arena_bytes;        /* all regions together */
    int64_t intermediate_bytes; /* sum of the arena values' own sizes: memory without any sharing */
} mst_graph_plan;

void mst_graph_plan_build(const mst_graph *g, mst_graph_plan *p);
void mst_graph_plan_free(mst_graph_plan *p);
/* Number of pairs of buffers of one region live at once whose byte ranges overlap (0 for a valid
 * plan), also checking that every buffer fits in its region and is aligned. */
int  mst_graph_plan_check(const mst_graph *g, const mst_graph_plan *p);

#endif
