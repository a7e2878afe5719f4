"""A model whose output has the wrong number of classes: the loss op's own message names both shapes."""
from mstune import functional as F
from mstune import nn


class WrongShape(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.fc = nn.Linear(n_in, 3)

    def forward(self, x):
        return F.reshape(self.fc(F.flatten(x)), (-1,))


def build(info):
    c, h, w = info.in_shape
    return WrongShape(c * h * w)
