"""torch_compare.py — PyTorch's side of bench/torch_compare.sh: the same mlp and cnn as mstune's
zoo (workloads/mlp.c, workloads/cnn.c), the same shapes and thread count, one training step =
forward, cross-entropy, backward, SGD with momentum 0.9. Modes (TORCH_COMPARE_MODES, comma
separated, default eager,bf16): eager (f32), bf16 (torch.autocast("cpu", torch.bfloat16) around
forward and loss, as PyTorch documents CPU mixed precision) and torchscript (torch.jit.script of
the model; the step's backward and optimizer run as usual). Prints one line per row and mode:
model batch mode median_ms. Medians of TORCH_COMPARE_REPEATS (default 30) after warm-up, as
mstune's benches. The OpenMP wait policy is left at its default (the caller sets nothing)."""
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

WARMUP, REPEATS = 5, int(os.environ.get("TORCH_COMPARE_REPEATS", "30"))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], 784)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class ConvBN(nn.Module):
    def __init__(self, cin, cout, k, stride):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return self.bn(self.conv(x))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a, self.b = ConvBN(cin, cout, 3, stride), ConvBN(cout, cout, 3, 1)
        self.proj = ConvBN(cin, cout, 1, stride) if (stride != 1 or cin != cout) else nn.Identity()

    def forward(self, x):
        return F.relu(self.b(F.relu(self.a(x))) + self.proj(x))


class CNN(nn.Module):
    """workloads/cnn.c: stem conv3x3(1->32)-BN-ReLU-maxpool2, block(32,32,1), block(32,64,2), GAP, linear."""

    def __init__(self, width=32, blocks=2):
        super().__init__()
        self.stem = ConvBN(1, width, 3, 1)
        layers, c = [], width
        for i in range(blocks):
            cout, stride = (c, 1) if i == 0 else (2 * c, 2)
            layers.append(Block(c, cout, stride))
            c = cout
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.stem(x)), 2)
        h = self.blocks(h)
        return self.fc(h.mean(dim=(2, 3)))


def measure(model, batch, mode):
    torch.manual_seed(7)
    m = CNN() if model == "cnn" else MLP()
    if mode == "torchscript":
        m = torch.jit.script(m)
    bf16 = mode == "bf16"
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()

    for _ in range(WARMUP):
        step()
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    torch.set_num_threads(threads)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    for spec in sys.argv[2:] or ["mlp:32", "cnn:32"]:
        model, batch = spec.split(":")
        for mode in os.environ.get("TORCH_COMPARE_MODES", "eager,bf16").split(","):
            ms = measure(model, int(batch), mode)
            print(f"{model} {batch} {mode} {ms:.4f}", flush=True)


if __name__ == "__main__":
    main()
