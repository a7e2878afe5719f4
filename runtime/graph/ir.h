/* ir.h — graph mode's intermediate representation: values and nodes in program order.
 *
 * A value is a buffer with a dtype and a shape and a kind: a declared input (bound per run), a
 * persistent tensor (parameter or state, bound by reference: each run reads and writes the live
 * tensor), a constant (snapshot taken at trace time), an intermediate (placed in the arena by the
 * planner) or a view of another value (shares its storage). Nodes are op applications in the
 * order the trace met them; in-place updates are explicit (`mutates` bits, as in the op table),
 * so program order is the semantics: a node sees every update made by the nodes before it.
 * Passes rewrite nodes (marking removed ones dead, then compacting) and may turn a chain into a
 * fused node; `inplace` says an output reuses an input's buffer. Each value carries the memory
 * category eager mode gives its storage (`cat`: the tracer reads it off the shape-only tensor,
 * made under ctx->out_cat as an eager output would be), so the planner can count the arena as
 * eager counts tensors: gradients as gradients, parameters' half copies as parameters.
 *
 *     mst_graph *g = mst_graph_new("step");
 *     int x = mst_graph_add_value(g, MST_GV_INPUT, MST_DTYPE_F32, 2, (int64_t[]){8, 4});
 *     int y = mst_graph_add_value(g, MST_GV_INTERMEDIATE, MST_DTYPE_F32, 2, (int64_t[]){8, 4});
 *     mst_graph_add_node(g, MST_OP_RELU, NULL, 1, &x, 1, &y);
 *     mst_graph_add_output(g, y);
 *     mst_graph_dump(g, stdout);
 *     mst_graph_free(g);
 */
#ifndef MST_RUNTIME_GRAPH_IR_H
#define MST_RUNTIME_GRAPH_IR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/op.h"

typedef enum {
    MST_GV_INPUT,           /* declared input: in[input_index] of each run */
    MST_GV_PERSISTENT,      /* parameter or state: the live tensor, by reference */
    MST_GV_CONSTANT,        /* snapshot taken at trace time */
    MST_GV_INTERMEDIATE,    /* produced by a node, placed in the arena */
    MST_GV_VIEW,            /* shares view_of's storage (reshape) */
    MST_GV_KIND_COUNT
} mst_gvalue_kind;

typedef struct {
    mst_gvalue_kind kind;
    mst_dtype dtype;
    int ndim;
    int64_t shape[MST_MAX_DIMS];
    int view_of;            /* VIEW: the base value; -1 otherwise */
    int input_index;        /* INPUT: position in the run's in[] */
    mst_tensor *tensor;     /* PERSISTENT: the live tensor; CONSTANT: the snapshot (both retained) */
    mst_mem_cat cat;        /* INTERMEDIATE: the category eager allocates it under (MST_MEM_ACT by default) */
    uint8_t layout;         /* mst_layout: nChw16c where the layout pass (layout.c) put it */
    char name[40];
} mst_gvalue;

typedef enum {
    MST_GN_OP,              /* one op-table op */
    MST_GN_FUSED_ELEM,      /* members: a chain of elementwise ops run as one loop */
    MST_GN_FUSED_OPTIM,     /* members: every update of one optimizer, one range */
} mst_gnode_kind;

typedef struct mst_gnode mst_gnode;
struct mst_gnode {
    mst_gnode_kind kind;
    mst_op op;              /* OP; FUSED_OPTIM: the members' op; FUSED_ELEM: the last member's */
    mst_attrs attrs;
    int n_in, n_out;
    int *in, *out;          /* value ids */
    uint32_t mutates;       /* OP: bit i = in[i] updated in place; fused: see members */
    int inplace[MST_MAX_OP_OUTPUTS];    /* OP: out[k] writes over in[inplace[k]]'s buffer; -1: its own */
    bool relu_epilogue;     /* OP: a relu runs in place on out[0] right after (linear/conv/bn + relu) */
    int relu_value;         /* relu_epilogue: the relu's output value (aliases out[0]) */
    mst_gnode *members;     /* fused: the original nodes, in order */
    int n_members;
    int trace_index;        /* position in the trace (random seeds are drawn in this order) */
    bool dead;
};

typedef struct mst_graph {
    char name[64];
    mst_gvalue *values;
    int n_values, cap_values;
    mst_gnode *nodes;
    int n_nodes, cap_nodes;
    int *outputs;
    int n_outputs, cap_outputs;
    int n_inputs;
} mst_graph;

mst_graph *mst_graph_new(const char *name);
void mst_graph_free(mst_graph *g);
/* A deep copy (values retain their tensors again); NULL when out of memory. */
mst_graph *mst_graph_clone(const mst_graph *g);

int  mst_graph_add_value(mst_graph *g, mst_gvalue_kind kind, mst_dtype dtype, int ndim, const int64_t *shape);
/* An OP node; attrs NULL = zeros; mutates and inplace come from the op table. Returns its index. */
int  mst_graph_add_node(mst_graph *g, mst_op op, const mst_attrs *attrs, int n_in, const int *in, int n_out, const int *out);
void mst_graph_add_output(mst_graph *g, int v);
/* Drop dead nodes (keeping the order of the rest). */
void mst_graph_compact(mst_graph *g);
void mst_gnode_clear(mst_gnode *n);

/* The value whose storage v uses (follows views); v itself for non-views. */
int  mst_graph_root(const mst_graph *g, int v);
/* Does any live node update v's storage (v, its base or any view of it) in place? */
bool mst_graph_value_mutated(const mst_graph *g, int v);
/* Does node n (or one of its members) update value v's storage in place? */
bool mst_gnode_mutates_root(const mst_graph *g, const mst_gnode *n, int root);
/* Number of live nodes; of kernels they launch (views launch none; fused groups one). */
int  mst_graph_live_nodes(const mst_graph *g);
int  mst_graph_kernel_count(const mst_graph *g);
int64_t mst_gvalue_bytes(const mst_gvalue *v);
/* A hash of what the graph computes: its live nodes (kind, op, attributes, members, epilogue) and
 * the kinds, dtypes, shapes and layouts of the values they read and write (FNV-1a; names and
 * tensor addresses left out, so two processes tracing the same step get the same hash), chained
 * from h (util/hash.h: MST_FNV1A_OFFSET, or a hash of what else the key holds). */
uint64_t mst_graph_hash(const mst_graph *g, uint64_t h);

/* Text: one line per value and node. DOT: values as ellipses, nodes as boxes. */
void mst_graph_dump(const mst_graph *g, FILE *f);
void mst_graph_dump_dot(const mst_graph *g, FILE *f);
const char *mst_gvalue_kind_name(mst_gvalue_kind k);

#endif
