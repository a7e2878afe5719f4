"""bench_python_dispatch — the per-op cost of an eager call from Python: a 1-element add, with and
without autograd recording, in mstune (each call crosses from the interpreter into mst_dispatch)
and, when /usr/bin/python3 has it, PyTorch in the same process and run.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_python_dispatch.py [--iters N] [--repeats R]

The autograd rows drop the recorded graph every 1000 ops (mstune: clear_tape; PyTorch frees it
as the results die), inside the timed loop. Prints the median of R repeats in ns per op. Never
part of make test's pass/fail: timing is the lead's to rerun on a quiet machine."""
import argparse
import platform
import statistics
import time

import mstune

CHUNK = 1000


def per_op_ns(fn, iters, repeats):
    fn(CHUNK)                   # warm up: pools, caches
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(iters)
        samples.append((time.perf_counter_ns() - t0) / iters)
    return statistics.median(samples)


def mstune_add(grad):
    a = mstune.tensor([1.0], requires_grad=grad)
    b = mstune.tensor([2.0], requires_grad=grad)
    add = mstune.ops.add

    def run(n):
        for _ in range(n // CHUNK):
            for _ in range(CHUNK):
                add(a, b)
            if grad:
                mstune.clear_tape()
    return run


def torch_add(torch, grad):
    a = torch.ones(1, requires_grad=grad)
    b = torch.ones(1, requires_grad=grad)
    add = torch.add

    def run(n):
        for _ in range(n // CHUNK):
            for _ in range(CHUNK):
                add(a, b)
    return run


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    iters = max(CHUNK, args.iters // CHUNK * CHUNK)
    rows = []
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    for grad in (False, True):
        m = per_op_ns(mstune_add(grad), iters, args.repeats)
        t = per_op_ns(torch_add(torch, grad), iters, args.repeats) if torch else None
        rows.append(("autograd" if grad else "no autograd", m, t))
    print("# 1-element add from Python, ns per op (median of %d x %d ops)" % (args.repeats, iters))
    print("# CPU: %s; Python %s; PyTorch %s" % (cpu_model(), platform.python_version(), torch.__version__ if torch else "absent"))
    print("%-12s %12s %12s %8s" % ("case", "mstune", "pytorch", "ratio"))
    for name, m, t in rows:
        if t:
            print("%-12s %12.0f %12.0f %8.2f" % (name, m, t, m / t))
        else:
            print("%-12s %12.0f %12s %8s" % (name, m, "-", "-"))


if __name__ == "__main__":
    main()
