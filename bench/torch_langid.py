"""torch_langid.py — a PyTorch replica of mstune's language-id transformer (workloads/transformer.c)
and its recipe (workloads/jobs/langid_transformer.yaml), trained on exactly mstune's split, which
bench_langid_nb --dump writes. Same architecture (token + learned position embeddings, pre-norm
blocks of masked multi-head self-attention and an exact-GELU MLP, dropout, [CLS] pooling, final
layer norm, linear), same init (nn.Linear's default U(+-1/sqrt(fan_in)), embeddings U(+-0.02 sqrt 3)),
AdamW with linear warmup then cosine to 0, per-epoch shuffle (PyTorch's generator, so the order
differs from mstune's), batch and threads as given. Prints the test accuracy after each epoch
and the median training step time. Runs with glibc malloc told to keep freed memory
(keep_freed_memory below: without it PyTorch's step re-faults its activations every step).

    build/bench_langid_nb --dump /tmp/langid.bin
    python3 bench/torch_langid.py /tmp/langid.bin --d-model 64 --heads 4 --layers 2 --dropout 0 \
        --epochs 6 --batch 128 --lr 3e-3 --warmup 500 --threads 1
"""
import argparse
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# glibc malloc settings for PyTorch on CPU: keep freed blocks instead of returning them to the kernel.
# By default every activation of a few MB is mmap'ed and munmap'ed again (or the heap top trimmed),
# so each training step page-faults tens of MB back in: about 6000 minor faults and a third of the
# transformer's step (docs/benchmarks.md). PyTorch's CPU tuning guide recommends an allocator
# that keeps memory (jemalloc, tcmalloc); glibc's own tunables do the same with nothing to install.
# mmap_threshold 32 MiB is the largest glibc allows on 64-bit; the trim threshold 4 GiB.
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296"


def keep_freed_memory():
    """Re-executes this script with MALLOC_TUNABLES added to GLIBC_TUNABLES unless the variable
    already sets an mmap threshold (glibc reads it only at start-up). Call first in main()."""
    cur = os.environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.mmap_threshold" in cur:
        return
    os.environ["GLIBC_TUNABLES"] = f"{cur}:{MALLOC_TUNABLES}" if cur else MALLOC_TUNABLES
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable] + sys.argv)


def load(path):
    raw = np.fromfile(path, dtype=np.uint8)
    if raw[:8].tobytes() != b"MSTLID1\0":
        sys.exit(f"{path}: not a bench_langid_nb --dump file")
    n_tr, n_te, length, vocab = np.frombuffer(raw[8:24].tobytes(), dtype="<i4")
    v = np.frombuffer(raw[24:].tobytes(), dtype="<i4")
    o = 0
    parts = []
    for n in (n_tr, n_te):
        x = v[o:o + n * length].reshape(n, length)
        o += n * length
        y = v[o:o + n]
        o += n
        parts.append((torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))))
    return parts, int(length), int(vocab)


class Block(nn.Module):
    def __init__(self, d, heads, ff, p):
        super().__init__()
        self.h, self.p = heads, p
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x, pad):
        n, length, d = x.shape
        dh = d // self.h
        qkv = self.qkv(self.ln1(x)).reshape(n, length, 3, self.h, dh).permute(2, 0, 3, 1, 4)
        s = qkv[0] @ qkv[1].transpose(-1, -2) / math.sqrt(dh)             # (N, H, L, L)
        a = F.dropout(s.masked_fill(pad[:, None, None, :], float("-inf")).softmax(-1), self.p, self.training)
        o = (a @ qkv[2]).permute(0, 2, 1, 3).reshape(n, length, d)
        x = x + F.dropout(self.out(o), self.p, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, self.training)


class Transformer(nn.Module):
    def __init__(self, vocab, length, d, heads, layers, ff, classes, p):
        super().__init__()
        b = 0.02 * math.sqrt(3)
        self.tok = nn.Parameter(torch.empty(vocab, d).uniform_(-b, b))
        self.pos = nn.Parameter(torch.empty(length, d).uniform_(-b, b))
        self.blocks = nn.ModuleList(Block(d, heads, ff, p) for _ in range(layers))
        self.lnf, self.head, self.p = nn.LayerNorm(d), nn.Linear(d, classes), p

    def forward(self, ids):
        pad = ids == 0
        h = F.dropout(self.tok[ids] + self.pos, self.p, self.training)
        for blk in self.blocks:
            h = blk(h, pad)
        return self.head(self.lnf(h[:, 0]))


def main():
    keep_freed_memory()
    ap = argparse.ArgumentParser()
    ap.add_argument("split")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ff", type=int, default=0)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--limit", type=int, default=0, help="first N training words (0 = all), as data.limit")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    ((xtr, ytr), (xte, yte)), length, vocab = load(a.split)
    if a.limit > 0:
        xtr, ytr = xtr[:a.limit], ytr[:a.limit]
    model = Transformer(vocab, length, a.d_model, a.heads, a.layers, a.ff or 4 * a.d_model, 8, a.dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.weight_decay)
    per_epoch = (len(xtr) + a.batch - 1) // a.batch
    total = per_epoch * a.epochs

    def lr_at(step):        # runtime/lr_schedule.c: warmup (step + 1) / warmup, then cosine to 0
        if step < a.warmup:
            return a.lr * (step + 1) / a.warmup
        t, T = step - a.warmup, total - a.warmup
        return 0.0 if T <= 0 or t >= T else 0.5 * a.lr * (1 + math.cos(math.pi * t / T))

    print(f"pytorch {torch.__version__}, {a.threads} threads: {len(xtr)} train / {len(xte)} test words, "
          f"{sum(p.numel() for p in model.parameters())} parameters")
    step, times = 0, []
    for epoch in range(a.epochs):
        model.train()
        perm = torch.randperm(len(xtr))
        for b in range(per_epoch):
            idx = perm[b * a.batch:(b + 1) * a.batch]
            t0 = time.perf_counter()
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if b > 0:
                times.append((time.perf_counter() - t0) * 1e3)
            step += 1
        model.eval()
        with torch.no_grad():
            correct = sum((model(xte[i:i + 1024]).argmax(1) == yte[i:i + 1024]).sum().item() for i in range(0, len(xte), 1024))
        print(f"epoch {epoch + 1}: train loss {loss.item():.4f}, test accuracy {100 * correct / len(xte):.2f}%", flush=True)
    print(f"median step {statistics.median(times):.2f} ms (batch {a.batch})")


if __name__ == "__main__":
    main()
