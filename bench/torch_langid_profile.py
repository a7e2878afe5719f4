"""torch_langid_profile.py — where PyTorch eager spends the language-id transformer's training step
(bench/torch_langid.py's replica, the step of bench/torch_compare_workloads.py: batch 128 of 24 token
ids, cross-entropy, AdamW). Runs warm-up steps, then profiles each of --steps steps on its own with
torch.profiler and prints, per ATen op, the median over steps of its self time per step, its calls
per step and its share; plus the step's median wall and CPU time (process_time: all threads, so
spinning idle threads show up) and its minor page faults. Wall times under load are inflated by
preemption; CPU time much less. Runs with torch_langid.py's keep_freed_memory (glibc malloc
keeping freed memory) unless --default-malloc, which shows what the step costs without it.

    OMP_NUM_THREADS=1 python3 bench/torch_langid_profile.py [--threads 1] [--steps 10] [--top 15] \
        [--flush-denormal] [--default-malloc]
"""
import argparse
import collections
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_compare_workloads import CLASSES, LEN, VOCAB, batch  # noqa: E402
from torch_langid import Transformer, keep_freed_memory  # noqa: E402


def main():
    if "--default-malloc" not in sys.argv:
        keep_freed_memory()
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True) (FTZ/DAZ)")
    ap.add_argument("--default-malloc", action="store_true", help="glibc malloc as it comes (no keep_freed_memory)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(a.flush_denormal)
    torch.manual_seed(7)
    m = Transformer(VOCAB, LEN, 64, 4, 2, 256, CLASSES, 0.0)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01)
    m.train()
    x, y = batch("transformer", a.batch)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    wall, cpu, faults = [], [], []
    for _ in range(a.steps):
        t0, c0, f0 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        step()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    per_op = collections.defaultdict(list)
    calls = {}
    for _ in range(a.steps):
        with profile(activities=[ProfilerActivity.CPU]) as p:
            step()
        seen = set()
        for e in p.key_averages():
            if e.key.startswith("aten::"):
                per_op[e.key].append(e.self_cpu_time_total / 1e3)
                calls[e.key] = e.count
                seen.add(e.key)
        for k in per_op:
            if k not in seen:
                per_op[k].append(0.0)
    med = {k: statistics.median(v) for k, v in per_op.items()}
    total = sum(med.values())
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, flush denormals {a.flush_denormal}, "
          f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')}, batch {a.batch}, {a.steps} steps")
    print(f"# step: wall median {statistics.median(wall):.1f} ms (min {min(wall):.1f}), "
          f"CPU (all threads) median {statistics.median(cpu):.1f} ms, minor page faults median {statistics.median(faults):.0f}; "
          f"profiled ATen self time {total:.1f} ms")
    print("| ATen op | self ms per step (median) | share | calls per step |")
    print("|---|---|---|---|")
    for k, v in sorted(med.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"| {k} | {v:.2f} | {100 * v / total:.1f}% | {calls[k]} |")


if __name__ == "__main__":
    main()
