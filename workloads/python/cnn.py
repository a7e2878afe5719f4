"""The zoo's cnn (workloads/cnn.c) in Python: a small ResNet. Stem conv3x3-BN-ReLU-maxpool 2x2,
residual blocks (conv3x3(stride s)-BN-ReLU-conv3x3-BN plus the input, through a 1x1 conv-BN
projection when the shape changes, then ReLU; each block after the first doubles channels and
halves H and W), global average pool, linear. Same ops, order and init draws as the C model."""
import math

from mstune import functional as F
from mstune import nn


class ConvBN(nn.Module):
    def __init__(self, cin, cout, k, stride, gain):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False, gain=gain)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return self.bn(self.conv(x))


class Block(nn.Module):
    def __init__(self, cin, cout, stride, gain):
        super().__init__()
        self.a = ConvBN(cin, cout, 3, stride, gain)
        self.b = ConvBN(cout, cout, 3, 1, gain)
        self.proj = ConvBN(cin, cout, 1, stride, gain) if stride != 1 or cout != cin else None

    def forward(self, x):
        y = self.b(F.relu(self.a(x)))
        skip = self.proj(x) if self.proj is not None else x
        return F.relu(y + skip)


class CNN(nn.Module):
    def __init__(self, in_c, classes, width=32, blocks=2, init_gain=1.0):
        super().__init__()
        self.stem = ConvBN(in_c, width, 3, 1, init_gain)
        c = width
        self.blocks = nn.ModuleList()
        for i in range(blocks):
            stride, cout = (1, c) if i == 0 else (2, c * 2)
            self.blocks.append(Block(c, cout, stride, init_gain))
            c = cout
        self.fc = nn.Linear(c, classes, gain=init_gain)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.stem(x)), 2, 2)
        for b in self.blocks:
            h = b(h)
        return self.fc(F.global_avgpool(h))


def build(info, width=32, blocks=2, init_gain=1.0):
    return CNN(info.in_shape[0], info.classes, width, blocks, init_gain)
