"""torch_ddp.py — PyTorch DDP (gloo) on the same mlp and cnn as mstune's zoo (models from
torch_compare.py), global batch 64: 2 processes x 1 thread (batch 32 each) against 1 process x 2
threads (batch 64). Per row: model layout median_step_ms, and for DDP the median time of a bare
gloo all-reduce of the model's gradient bytes (what DDP's backward must hide or wait for).
Run by bench/dp_compare.sh; prints one line per row: model layout step_ms allreduce_ms."""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_compare import CNN, MLP  # noqa: E402

WARMUP, REPEATS, GLOBAL = 5, 40, 64


def step_times(m, opt, x, y):
    ts = []
    for i in range(WARMUP + REPEATS):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(x), y).backward()
        opt.step()
        if i >= WARMUP:
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def worker(rank, world, model, port, q):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(7)
    m = CNN() if model == "cnn" else MLP()
    ddp = torch.nn.parallel.DistributedDataParallel(m)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.rand(GLOBAL // world, 1, 28, 28), torch.randint(0, 10, (GLOBAL // world,))
    ms = step_times(ddp, opt, x, y)
    n = sum(p.numel() for p in m.parameters())
    buf, ar = torch.zeros(n), []
    for i in range(WARMUP + REPEATS):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        if i >= WARMUP:
            ar.append(time.perf_counter() - t0)
    if rank == 0:
        q.put((ms, statistics.median(ar) * 1e3))
    dist.destroy_process_group()


def main():
    models = sys.argv[1:] or ["mlp", "cnn"]
    for i, model in enumerate(models):
        q = mp.get_context("spawn").SimpleQueue()
        mp.spawn(worker, args=(2, model, 29500 + i, q), nprocs=2, join=True)
        ms, ar = q.get()
        print(f"{model} ddp2x1 {ms:.3f} {ar:.3f}")
        torch.set_num_threads(2)
        torch.manual_seed(7)
        m = CNN() if model == "cnn" else MLP()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.rand(GLOBAL, 1, 28, 28), torch.randint(0, 10, (GLOBAL,))
        print(f"{model} single1x2 {step_times(m, opt, x, y):.3f} -")


if __name__ == "__main__":
    main()
