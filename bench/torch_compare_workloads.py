"""torch_compare_workloads.py — PyTorch's side of bench/torch_compare_workloads.sh: the language-id
transformer (the replica in bench/torch_langid.py) and the super-resolution net (workloads/srnet.c)
on the shapes of their shipped jobs and the batch mstune's bench_workloads builds (token ids with
[CLS] first, 3..20 characters, zero padding; 14x14 inputs, 28x28 targets). One training step =
forward, the model's loss (cross-entropy; L1), backward, the job's optimizer (AdamW 3e-3; Adam
1e-3). PyTorch eager, the thread count given, glibc malloc keeping freed memory (torch_langid.py's
keep_freed_memory). Prints "model batch eager median_ms" per row.

    OMP_NUM_THREADS=2 python3 bench/torch_compare_workloads.py [--quick] THREADS transformer:128 srnet:32
"""
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_langid import Transformer, keep_freed_memory  # noqa: E402  the replica the accuracy comparison uses

LEN, VOCAB, CLASSES, SIDE = 24, 56, 8, 14


class SRNet(nn.Module):
    """workloads/srnet.c: conv stem, residual blocks h += 0.2 conv(ReLU(conv(h))), trunk conv plus
    the long skip, conv(w -> 4w) + pixel shuffle x2 + ReLU, conv(w -> 1), plus the nearest-upsampled input."""

    def __init__(self, width=32, blocks=4):
        super().__init__()
        c = lambda i, o: nn.Conv2d(i, o, 3, 1, 1)  # noqa: E731
        self.stem, self.trunk, self.up, self.last = c(1, width), c(width, width), c(width, 4 * width), c(width, 1)
        self.blocks = nn.ModuleList(nn.ModuleList([c(width, width), c(width, width)]) for _ in range(blocks))

    def forward(self, x):
        fea = h = self.stem(x)
        for a, b in self.blocks:
            h = h + 0.2 * b(F.relu(a(h)))
        h = fea + self.trunk(h)
        h = F.relu(F.pixel_shuffle(self.up(h), 2))
        return self.last(h) + F.pixel_shuffle(torch.cat([x, x, x, x], 1), 2)


def batch(model, n):
    g = torch.Generator().manual_seed(7)
    if model == "transformer":
        x = torch.zeros(n, LEN, dtype=torch.int64)
        x[:, 0] = 1
        for i in range(n):
            k = int(torch.randint(3, 21, (1,), generator=g))
            x[i, 1:k + 1] = torch.randint(3, VOCAB, (k,), generator=g)
        return x, torch.arange(n) % CLASSES
    return torch.rand(n, 1, SIDE, SIDE, generator=g), torch.rand(n, 1, 2 * SIDE, 2 * SIDE, generator=g)


def measure(model, n, warmup, repeats):
    torch.manual_seed(7)
    if model == "transformer":
        m = Transformer(VOCAB, LEN, 64, 4, 2, 256, CLASSES, 0.0)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01)
        loss_fn = F.cross_entropy
    else:
        m = SRNet()
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        loss_fn = F.l1_loss
    m.train()
    x, y = batch(model, n)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(m(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    keep_freed_memory()
    args = sys.argv[1:]
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    threads = int(args[0]) if args else 2
    torch.set_num_threads(threads)
    warmup, repeats = (2, 5) if quick else (3, 15)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, {warmup} warm-up + {repeats} timed steps (median), "
          f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')}", flush=True)
    for spec in args[1:] or ["transformer:128", "srnet:32"]:
        model, n = spec.split(":")
        if model not in ("transformer", "srnet"):
            sys.exit(f"torch_compare_workloads: '{spec}': expected transformer:BATCH or srnet:BATCH")
        print(f"{model} {n} eager {measure(model, int(n), warmup, repeats):.4f}", flush=True)


if __name__ == "__main__":
    main()
