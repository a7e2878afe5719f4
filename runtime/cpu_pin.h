/* cpu_pin.h — the calling thread bound to one CPU for a while, and let go again.
 *
 * Why: the kernel team's workers sleep between regions (a short spin, then a futex). On the
 * project's 2-vCPU VM, whose CPUs share no cache level the kernel knows of, a woken thread was
 * often placed on its waker's CPU, and the two threads of a region then took turns on one CPU
 * until the load balancer moved one. A process that started that way ran oneDNN's batch-16
 * linear of the mlp at ~180 us instead of 40 for every call the kernel choice timed, so the
 * serial builtin kernel won that verdict, and the verdict file kept it for every later run
 * (docs/benchmarks.md). The kernel choice therefore binds the caller and each team member to a
 * CPU of their own while it times candidates (runtime/backend/kernel_choice.c), and lets them
 * go after: threads the caller starts later do not inherit a binding. A data loader whose workers
 * and consumer fit the CPUs binds each of them for its life for the same reason
 * (runtime/data/loader.c).
 *
 *     int cpu = mst_cpu_pin_self(0);   // the process's first allowed CPU, -1: not bound
 *     ...
 *     mst_cpu_unpin_self();            // every CPU the process may use again
 *
 * MSTUNE_PIN_THREADS=0 turns binding off (A/B runs).
 */
#ifndef MST_RUNTIME_CPU_PIN_H
#define MST_RUNTIME_CPU_PIN_H

/* Bind the calling thread to CPU number (index mod n) of the n CPUs the process could use when
 * first asked. Nothing when n < 2 or MSTUNE_PIN_THREADS=0. The CPU bound, or -1. */
int mst_cpu_pin_self(int index);
/* The calling thread may run on every CPU the process could use when first asked again. */
void mst_cpu_unpin_self(void);
/* How many CPUs the process could use when first asked; 0 when binding is off (MSTUNE_PIN_THREADS=0)
 * or the set could not be read. */
int mst_cpu_pin_count(void);
/* The CPU mst_cpu_pin_self last bound the calling thread to, or -1 (never bound, or let go since). */
int mst_cpu_pinned_self(void);
/* The index (for mst_cpu_pin_self) of the CPU the calling thread runs on now; 0 when it is not one
 * of the process's CPUs or cannot be told. */
int mst_cpu_pin_index_here(void);

#endif
