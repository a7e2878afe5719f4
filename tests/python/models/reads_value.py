"""A model that branches on a tensor's value: fine in eager mode, an error naming this file and
line in graph mode, since a trace records ops, not values (tests/python/test_jobs.py)."""
from mstune import functional as F
from mstune import nn


class ReadsValue(nn.Module):
    def __init__(self, n_in, classes):
        super().__init__()
        self.fc = nn.Linear(n_in, classes)

    def forward(self, x):
        h = self.fc(F.flatten(x))
        if F.mean(h).item() > 1e9:      # the host read graph mode cannot trace
            h = F.scale(h, 0.5)
        return h


def build(info):
    c, h, w = info.in_shape
    return ReadsValue(c * h * w, info.classes)
