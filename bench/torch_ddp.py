"""torch_ddp.py — PyTorch DDP (gloo) on the same mlp and cnn as mstune's zoo (models from
torch_compare.py), global batch 64: 2 processes x 1 thread (batch 32 each) against 1 process x 2
threads (batch 64). Per DDP row, medians over the timed steps of rank 0:
  step_ms      a plain DDP step (zero_grad, forward, loss, backward, SGD step; DDP's own C++
               all-reduce hook, default buckets)
  exposed_ms   DDP's exposed communication, the definition mstune uses (the time the main thread
               waits for communication): the same step with a comm hook that is DDP's default
               (all-reduce, divide by the world size) plus two timestamps, the return of the last
               bucket's launch on the main thread (backward has no compute left after it) and the
               completion of the last bucket's all-reduce (recorded in the future's callback);
               exposed = max(0, completion - last launch). The hook is Python, so this pass is
               timed apart from step_ms.
  nosync_ms    the step minus the same step under ddp.no_sync() (no all-reduce at all): every
               cost communication adds to the step, a cross-check (an upper bound: it also
               counts the bucket copies and the gloo thread's competition for the cores).
  allreduce_ms a bare gloo all-reduce of the model's gradient bytes.
Run by bench/dp_compare.sh; prints one line per row:
  model layout step_ms allreduce_ms exposed_ms nosync_ms   ("-" where it does not apply)."""
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


class WaitClock:
    """DDP's default comm hook (all-reduce, then divide by the world size) that timestamps the
    last bucket's launch (main thread) and the last all-reduce completion (gloo's thread)."""

    def __init__(self, world):
        self.world, self.launched, self.done = world, 0.0, 0.0

    def hook(self, _state, bucket):
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

        def finish(f):
            self.done = max(self.done, time.perf_counter())
            return f.value()[0].div_(self.world)

        out = fut.then(finish)
        self.launched = time.perf_counter()     # the last call is the last bucket: backward's compute is over
        return out

    def exposed_ms(self, m, opt, x, y):
        ts = []
        for i in range(WARMUP + REPEATS):
            self.launched = self.done = 0.0
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(m(x), y).backward()
            opt.step()
            if i >= WARMUP:
                ts.append(max(0.0, self.done - self.launched))
        return statistics.median(ts) * 1e3


def nosync_ms(ddp, opt, x, y):
    ts = []
    for i in range(WARMUP + REPEATS):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with ddp.no_sync():
            F.cross_entropy(ddp(x), y).backward()
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
    quiet = nosync_ms(ddp, opt, x, y)
    torch.manual_seed(7)
    m2 = CNN() if model == "cnn" else MLP()
    ddp2 = torch.nn.parallel.DistributedDataParallel(m2)
    clock = WaitClock(world)
    ddp2.register_comm_hook(None, clock.hook)
    exposed = clock.exposed_ms(ddp2, torch.optim.SGD(ddp2.parameters(), lr=0.01, momentum=0.9), x, y)
    n = sum(p.numel() for p in m.parameters())
    buf, ar = torch.zeros(n), []
    for i in range(WARMUP + REPEATS):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        if i >= WARMUP:
            ar.append(time.perf_counter() - t0)
    if rank == 0:
        q.put((ms, statistics.median(ar) * 1e3, exposed, ms - quiet))
    dist.destroy_process_group()


def main():
    models = sys.argv[1:] or ["mlp", "cnn"]
    for i, model in enumerate(models):
        q = mp.get_context("spawn").SimpleQueue()
        mp.spawn(worker, args=(2, model, 29500 + i, q), nprocs=2, join=True)
        ms, ar, exposed, nosync = q.get()
        print(f"{model} ddp2x1 {ms:.3f} {ar:.3f} {exposed:.3f} {nosync:.3f}", flush=True)
        torch.set_num_threads(2)
        torch.manual_seed(7)
        m = CNN() if model == "cnn" else MLP()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.rand(GLOBAL, 1, 28, 28), torch.randint(0, 10, (GLOBAL,))
        print(f"{model} single1x2 {step_times(m, opt, x, y):.3f} - - -", flush=True)


if __name__ == "__main__":
    main()
