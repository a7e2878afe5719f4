"""mstune.nn: modules in the PyTorch/MindSpore shape, over mstune's ops.

A Module registers the Parameters, buffers and sub-Modules assigned to its attributes (in
assignment order: that is the order the trainer, the checkpoint and the optimizer see), has a
training flag (train()/eval()), and calls forward() when called. The model contract of a job:

    class Net(nn.Module):
        metric = "accuracy"             # or "psnr": what evaluation reports
        def forward(self, x): ...       # the batch's input -> the output
        def loss(self, out, target):    # optional; default: cross-entropy against i32 labels
            ...

Parameter init follows PyTorch's defaults (U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and
biases, norm weight 1 and bias 0), drawn from the runtime's seeded generator in creation order,
which is what makes a Python model bit-identical to the same C model of the zoo.
"""
import math

import mstune._C as _C
from mstune import functional as F


class Parameter:
    """Marks a shape for a Module parameter: Parameter(shape, bound=b) or Parameter(shape, value=v).
    Assigning one to a Module attribute creates the tensor, named after the attribute path."""

    def __init__(self, shape, bound=None, value=None):
        self.shape, self.bound, self.value = tuple(shape), bound, value


class Buffer(Parameter):
    """Persistent state that is not trained (batch-norm running statistics)."""


class Module:
    metric = "accuracy"

    def __init__(self):
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_prefix", "")

    def __setattr__(self, name, value):
        if "_params" not in self.__dict__:
            raise RuntimeError("%s.__init__ must call super().__init__() before assigning attributes" % type(self).__name__)
        if isinstance(value, Parameter):
            full = self._prefix + name
            t = _C.param(value.shape, full, bound=value.bound, value=value.value, buffer=isinstance(value, Buffer))
            (self._buffers if isinstance(value, Buffer) else self._params)[name] = t
            value = t
        elif isinstance(value, Module):
            self._modules[name] = value
            value._set_prefix(self._prefix + name + ".")
        object.__setattr__(self, name, value)

    def _set_prefix(self, prefix):
        object.__setattr__(self, "_prefix", prefix)
        for n, t in list(self._params.items()) + list(self._buffers.items()):
            t.name = prefix + n
        for n, m in self._modules.items():
            m._set_prefix(prefix + n + ".")

    def add_module(self, name, module):
        setattr(self, name, module)

    def named_parameters(self, prefix=""):
        for n, t in self._params.items():
            yield prefix + n, t
        for n, m in self._modules.items():
            yield from m.named_parameters(prefix + n + ".")

    def parameters(self):
        return [t for _, t in self.named_parameters()]

    def named_buffers(self, prefix=""):
        for n, t in self._buffers.items():
            yield prefix + n, t
        for n, m in self._modules.items():
            yield from m.named_buffers(prefix + n + ".")

    def modules(self):
        yield self
        for m in self._modules.values():
            yield from m.modules()

    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self):
        for t in self.parameters():
            t.grad = None

    def forward(self, *args):
        raise NotImplementedError("%s does not define forward()" % type(self).__name__)

    def loss(self, out, target):
        return F.cross_entropy(out, target)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def __repr__(self):
        inner = ", ".join("%s=%s" % (n, type(m).__name__) for n, m in self._modules.items())
        return "%s(%s)" % (type(self).__name__, inner)


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, gain=1.0):
        super().__init__()
        b = gain / math.sqrt(in_features)
        self.weight = Parameter((out_features, in_features), bound=b)
        self.bias = Parameter((out_features,), bound=b) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Conv2d(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True, gain=1.0):
        super().__init__()
        k = kernel_size
        b = gain / math.sqrt(in_channels * k * k)
        self.stride, self.padding = stride, padding
        self.weight = Parameter((out_channels, in_channels, k, k), bound=b)
        self.bias = Parameter((out_channels,), bound=b) if bias else None

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding)


class BatchNorm2d(Module):
    def __init__(self, num_features, momentum=0.1, eps=1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = Parameter((num_features,), value=1.0)
        self.bias = Parameter((num_features,), value=0.0)
        self.running_mean = Buffer((num_features,), value=0.0)
        self.running_var = Buffer((num_features,), value=1.0)

    def forward(self, x):
        return F.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var, self.training,
                            self.momentum, self.eps)


BatchNorm1d = BatchNorm2d


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = Parameter((normalized_shape,), value=1.0)
        self.bias = Parameter((normalized_shape,), value=0.0)

    def forward(self, x):
        return F.layer_norm(x, self.weight, self.bias, self.eps)


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, bound=None):
        super().__init__()
        self.weight = Parameter((num_embeddings, embedding_dim), bound=1.0 if bound is None else bound)

    def forward(self, indices):
        return F.embedding(indices, self.weight)


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


class ReLU(Module):
    def forward(self, x): return F.relu(x)


class GELU(Module):
    def forward(self, x): return F.gelu(x)


class Tanh(Module):
    def forward(self, x): return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x): return F.sigmoid(x)


class Identity(Module):
    def forward(self, x): return x


class Flatten(Module):
    def forward(self, x): return F.flatten(x, 1)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.k, self.s, self.p = kernel_size, stride, padding

    def forward(self, x): return F.max_pool2d(x, self.k, self.s, self.p)


class AvgPool2d(MaxPool2d):
    def forward(self, x): return F.avg_pool2d(x, self.k, self.s, self.p)


class GlobalAvgPool(Module):
    def forward(self, x): return F.global_avgpool(x)


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(Module):
    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, m):
        setattr(self, str(len(self._modules)), m)

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __iter__(self):
        return iter(self._modules.values())

    def __len__(self):
        return len(self._modules)


class MultiheadAttention(Module):
    """Self-attention over x (N, L, D) with `heads` heads; keep (N, L) i32 marks the keys to attend
    to (non-zero; token ids with 0 = padding serve directly), None attends to all. Projections q, k,
    v and out are separate Linear layers; scores are scaled by 1/sqrt(D/heads)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, gain=1.0):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError("MultiheadAttention: embed_dim %d is not a multiple of num_heads %d" % (embed_dim, num_heads))
        self.d, self.h, self.p = embed_dim, num_heads, dropout
        self.q = Linear(embed_dim, embed_dim, gain=gain)
        self.k = Linear(embed_dim, embed_dim, gain=gain)
        self.v = Linear(embed_dim, embed_dim, gain=gain)
        self.out = Linear(embed_dim, embed_dim, gain=gain)

    def _split(self, t, n, L):
        return F.permute(F.reshape(t, (n, L, self.h, self.d // self.h)), (0, 2, 1, 3))   # (N, H, L, Dh)

    def forward(self, x, keep=None):
        n, L, d = x.shape
        hd = d // self.h
        q = F.reshape(self._split(self.q(x), n, L), (n * self.h, L, hd))
        k = F.reshape(self._split(self.k(x), n, L), (n * self.h, L, hd))
        v = F.reshape(self._split(self.v(x), n, L), (n * self.h, L, hd))
        s = F.scale(F.matmul(q, k, trans_b=True), 1.0 / math.sqrt(hd))                # (N H, L, L)
        s = F.reshape(s, (n, self.h, L, L))
        if keep is None:
            a = F.softmax(s, -1)
        else:
            a = F.masked_softmax(s, keep)
        a = F.dropout(a, self.p, self.training)
        o = F.matmul(F.reshape(a, (n * self.h, L, L)), v)                               # (N H, L, Dh)
        o = F.reshape(F.permute(F.reshape(o, (n, self.h, L, hd)), (0, 2, 1, 3)), (n, L, d))
        return self.out(o)
