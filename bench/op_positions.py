#!/usr/bin/env python3
"""op_positions.py — a profile's kernels by their position in the step: the median time of the
k-th kernel range of the main thread over the traced steps of a profile.db (mstune profile with
profile.op_every=1 and profile.trace_steps covering the steps), with its op name and the achieved
GFLOP/s and GB/s from the range's own FLOP and byte counts. Where the op table sums one op over
every shape, this tells the stem's batch norm from the last block's. Timing only.

    build/mstune profile workloads/jobs/fashion_cnn.yaml --set runtime.mode=graph --set train.steps=120 \\
        --set profile.skip=40 --set profile.op_every=1 --set train.eval=false -o /tmp/p
    python3 bench/op_positions.py /tmp/p/profile.db
"""
import collections
import sqlite3
import statistics
import sys


def main():
    if len(sys.argv) != 2:
        print("usage: op_positions.py PROFILE_DB", file=sys.stderr)
        return 2
    try:
        db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
        names = dict(db.execute("SELECT id, name FROM names"))
        main_tid = db.execute("SELECT tid FROM threads WHERE name = 'main'").fetchone()
    except sqlite3.Error as e:
        print(f"op_positions: {sys.argv[1]}: {e} (expected a profile.db from mstune profile)", file=sys.stderr)
        return 2
    if not main_tid:
        print(f"op_positions: {sys.argv[1]}: no main thread in the threads table", file=sys.stderr)
        return 2
    # kinds (docs/profile-schema.md): 0 begin, 1 end, 4 step_begin; category 1 kernel
    rows = db.execute("SELECT t_ns, kind, cat, name, a, b FROM events WHERE tid = ? ORDER BY rowid", main_tid)
    times, info, stack, pos = collections.defaultdict(list), {}, [], 0
    for t, kind, cat, name, a, b in rows:
        if kind == 4:
            pos, stack = 0, []
        if cat != 1:
            continue
        if kind == 0:
            stack.append((t, name))
        elif kind == 1 and stack:
            t0, name0 = stack.pop()
            pos += 1
            times[pos].append(t - t0)
            info[pos] = (names.get(name0, str(name0)), a, b)     # an end's a, b: the range's FLOPs, bytes
    total = 0.0
    print(f"{'pos':>3} {'median us':>10} {'GFLOP/s':>8} {'GB/s':>7}  op")
    for p in sorted(times):
        med = statistics.median(times[p])
        total += med
        op, flops, nbytes = info[p]
        print(f"{p:3d} {med / 1e3:10.1f} {flops / med if med else 0:8.1f} {nbytes / med if med else 0:7.1f}  {op}")
    print(f"sum of the medians: {total / 1e6:.3f} ms over {len(times)} kernel positions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
