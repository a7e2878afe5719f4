"""A model whose forward raises on its third call: the trainer must print this traceback, name
this file and line, exit 2 and leave what it wrote before intact (tests/python/test_jobs.py)."""
from mstune import functional as F
from mstune import nn


class Raises(nn.Module):
    def __init__(self, n_in, classes):
        super().__init__()
        self.fc = nn.Linear(n_in, classes)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 3:
            raise ValueError("deliberate failure in forward, call %d" % self.calls)
        return self.fc(F.flatten(x))


def build(info):
    c, h, w = info.in_shape
    return Raises(c * h * w, info.classes)
