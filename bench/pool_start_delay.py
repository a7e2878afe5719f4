#!/usr/bin/env python3
"""pool_start_delay.py — how late a parallel region's second thread starts, from a profile's trace.

Every chunk a kernel pool thread other than the caller runs is a `pool.task` range on that thread
(runtime/threadpool.c), inside the caller's kernel range of the op that opened the region. Per
profiled step this prints the regions, the sum of their start delays (pool.task start minus the
op's start: the wake of a sleeping thread, or a spinning one's reaction) and the sum of op time
beyond the worker's share (op duration minus pool.task duration), with the median step time.

    build/mstune profile workloads/jobs/fashion_cnn.yaml --set runtime.mode=graph \\
        --set train.steps=40 --set train.eval=false --set profile.sampler=false -o /tmp/p
    python3 bench/pool_start_delay.py /tmp/p/trace.json
    MSTUNE_POOL_TEAM=own build/mstune profile ...     # the pool's own workers, to compare
"""
import bisect
import json
import statistics
import sys


def main(path):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    ranges = [e for e in events if e.get("ph") == "X"]
    steps = [e for e in ranges if e["name"].startswith("ProfilerStep")]
    tasks = [e for e in ranges if e["name"] == "pool.task"]
    if not steps:
        sys.exit(f"{path}: no ProfilerStep ranges (not an mstune trace?)")
    # the training thread: the one the step ranges' kernels run on (the most kernel ranges)
    counts = {}
    for e in ranges:
        if e.get("cat") == "kernel" and e["name"] != "pool.task":
            counts[e["tid"]] = counts.get(e["tid"], 0) + 1
    main_tid = max(counts, key=counts.get)
    ops = sorted((e for e in ranges if e["tid"] == main_tid and e.get("cat") == "kernel"), key=lambda e: e["ts"])
    starts = [e["ts"] for e in ops]
    delay = beyond = 0.0
    n = 0
    for t in tasks:
        i = bisect.bisect_right(starts, t["ts"]) - 1
        if i < 0 or t["tid"] == main_tid:
            continue
        op = ops[i]
        delay += t["ts"] - op["ts"]
        beyond += op["dur"] - t["dur"]
        n += 1
    k = len(steps)
    step_ms = statistics.median(e["dur"] for e in steps) / 1e3
    print(f"{k} steps: {n / k:.1f} regions a step; start delays {delay / k:.0f} us a step; "
          f"op time beyond the worker's share {beyond / k:.0f} us a step; median step {step_ms:.2f} ms")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench/pool_start_delay.py TRACE.json")
    main(sys.argv[1])
