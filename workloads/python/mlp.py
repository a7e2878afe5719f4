"""The zoo's mlp (workloads/mlp.c) in Python: flatten, linear-ReLU, linear-ReLU, linear, with
dropout after each hidden layer. The same ops in the same order and the same init draws, so its
losses equal the C model's bit for bit in eager and graph mode (tests/python/)."""
import math

from mstune import functional as F
from mstune import nn


class MLP(nn.Module):
    def __init__(self, in_features, hidden1, hidden2, classes, dropout=0.0, init_gain=1.0):
        super().__init__()
        self.in_features = in_features
        self.fc1 = nn.Linear(in_features, hidden1, gain=init_gain)
        self.fc2 = nn.Linear(hidden1, hidden2, gain=init_gain)
        self.fc3 = nn.Linear(hidden2, classes, gain=init_gain)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = F.reshape(x, (-1, self.in_features))
        h = self.drop(F.relu(self.fc1(h)))
        h = self.drop(F.relu(self.fc2(h)))
        return self.fc3(h)


def build(info, hidden1=256, hidden2=128, dropout=0.0, init_gain=1.0):
    c, h, w = info.in_shape
    return MLP(c * h * w, hidden1, hidden2, info.classes, dropout, init_gain)
