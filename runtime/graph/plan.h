/* plan.h — static memory planning: every intermediate buffer of a graph gets an offset in ONE
 * arena, planned once per input signature, and the bytes live per memory category at each node.
 *
 * Buffers: an intermediate value together with its views, the outputs written in place over it
 * and a relu epilogue's output. A buffer lives from the first node defining it to the last node
 * reading or updating it (graph outputs to the end). Buffers are placed largest first, each in
 * the smallest gap between already placed buffers whose lifetimes overlap its own (best fit),
 * 64-byte aligned, whatever their categories. mst_graph_plan_check verifies by construction that
 * no two simultaneously live buffers overlap (the guard rail STYLE.md asks for).
 *
 * The arena is reserved memory (alloc.h); what is counted per category follows the live values:
 * each buffer is counted under the category eager allocates its first value under (mst_gvalue.cat:
 * activations, gradients, parameters' half copies) from its first node to its last. born/died
 * give, per node, the bytes the executor accounts before and after running it, and live_peak
 * each category's most bytes live at once.
 *
 *     mst_graph_plan p;
 *     mst_graph_plan_build(g, &p);         // p.offset[v] for each arena value, -1 otherwise
 *     MST_ASSERT(mst_graph_plan_check(g, &p) == 0);
 *     p.live_peak[MST_MEM_GRAD];           // the most gradient bytes live at once
 *     mst_graph_plan_free(&p);
 */
#ifndef MST_RUNTIME_GRAPH_PLAN_H
#define MST_RUNTIME_GRAPH_PLAN_H

#include "runtime/graph/ir.h"

#define MST_GRAPH_ALIGN 64

typedef struct {
    int n_values;
    int64_t *offset;            /* per value: bytes into the arena; -1 when not in the arena */
    int *buffer;                /* per value: its buffer id; -1 when not in the arena */
    int n_buffers;
    int64_t *buf_size, *buf_offset;
    int *buf_start, *buf_end;   /* lifetime, node indices (inclusive) */
    mst_mem_cat *buf_cat;       /* per buffer: the category its bytes are counted under */
    int64_t arena_bytes;
    /* [i * MST_MEM_COUNT + c], i in 0..n_nodes: bytes of category c that become live before node i
     * runs / die after it (row n_nodes: the graph outputs, after the run) */
    int64_t *born, *died;
    int64_t live_peak[MST_MEM_COUNT];   /* per category: the most bytes live at once */
    int64_t intermediate_bytes; /* sum of the arena values' own sizes: memory without any sharing */
} mst_graph_plan;

void mst_graph_plan_build(const mst_graph *g, mst_graph_plan *p);
void mst_graph_plan_free(mst_graph_plan *p);
/* Number of pairs of buffers live at once whose byte ranges overlap (0 for a valid plan), also
 * checking that every buffer fits in the arena and is aligned. */
int  mst_graph_plan_check(const mst_graph *g, const mst_graph_plan *p);

#endif
