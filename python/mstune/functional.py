"""mstune.functional: the op table's ops with Python-friendly arguments (shapes as tuples, axes
as lists), each a thin call of one mstune.ops function, so it makes exactly the dispatcher
calls the C constructors in runtime/ops.h make."""
from mstune._C import next_seed, ops

_ops = ops


def _dims(shape):
    shape = tuple(shape)
    a = {"rank": len(shape)}
    for i, d in enumerate(shape):
        a["d%d" % i] = d
    return a


def add(a, b): return _ops.add(a, b)
def sub(a, b): return _ops.sub(a, b)
def mul(a, b): return _ops.mul(a, b)
def div(a, b): return _ops.div(a, b)
def scale(x, s): return _ops.scale(x, scale=s)
def relu(x): return _ops.relu(x)
def gelu(x): return _ops.gelu(x)
def tanh(x): return _ops.tanh(x)
def sigmoid(x): return _ops.sigmoid(x)
def copy(x): return _ops.copy(x)
def global_avgpool(x): return _ops.global_avgpool(x)
def embedding(indices, weight): return _ops.embedding(indices, weight)
def masked_softmax(scores, keep): return _ops.masked_softmax(scores, keep)
def l1_loss(pred, target): return _ops.l1_loss(pred, target)
def mse_loss(pred, target): return _ops.mse_loss(pred, target)


def matmul(a, b, trans_a=False, trans_b=False):
    return _ops.matmul(a, b, trans_a=trans_a, trans_b=trans_b)


def linear(x, weight, bias=None):
    return _ops.linear(x, weight, bias)


def conv2d(x, weight, bias=None, stride=1, padding=0):
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return _ops.conv2d(x, weight, bias, stride_h=sh, stride_w=sw, pad_h=ph, pad_w=pw)


def batch_norm(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    return _ops.batchnorm(x, weight, bias, running_mean, running_var, training=training, momentum=momentum, eps=eps)[0]


def layer_norm(x, weight, bias, eps=1e-5):
    return _ops.layernorm(x, weight, bias, eps=eps)[0]


def _pool_attrs(kernel, stride, padding):
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    stride = kernel if stride is None else stride
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return dict(k_h=kh, k_w=kw, stride_h=sh, stride_w=sw, pad_h=ph, pad_w=pw)


def max_pool2d(x, kernel, stride=None, padding=0):
    return _ops.maxpool2d(x, **_pool_attrs(kernel, stride, padding))[0]


def avg_pool2d(x, kernel, stride=None, padding=0):
    return _ops.avgpool2d(x, **_pool_attrs(kernel, stride, padding))


def softmax(x, axis=-1): return _ops.softmax(x, axis=axis)
def log_softmax(x, axis=-1): return _ops.log_softmax(x, axis=axis)


def cross_entropy(logits, labels):
    """Mean cross-entropy of logits (N, C) against i32 labels (N)."""
    return _ops.cross_entropy(logits, labels)[0]


def dropout(x, p, training):
    """Inverted dropout with a seed drawn from the context (as runtime/ops.h's mst_dropout)."""
    if not 0 <= p < 1:
        raise ValueError("dropout: p is %g, expected 0 <= p < 1" % p)
    if not training or p == 0:
        return x
    return _ops.dropout(x, seed=next_seed(), p=p)[0]


def reshape(x, shape):
    """The reshape op; one -1 is inferred (runtime/ops.h's mst_reshape does that)."""
    return x.reshape(tuple(shape))


def flatten(x, start=1):
    n = 1
    for d in x.shape[start:]:
        n *= d
    return reshape(x, tuple(x.shape[:start]) + (n,))


def permute(x, perm):
    if list(perm) == list(range(x.ndim)):
        return x
    return _ops.transpose(x, **{"p%d" % i: p for i, p in enumerate(perm)})


def transpose(x, dim0, dim1):
    perm = list(range(x.ndim))
    perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
    return permute(x, perm)


def concat(xs, axis=0): return _ops.concat(*xs, axis=axis)


def slice(x, axis, start, length):  # noqa: A001  (the op's name)
    return _ops.slice(x, axis=axis, start=start, length=length)


def _mask(axes, ndim):
    if axes is None:
        return (1 << ndim) - 1        # all dims (mst_sum's axes = 0)
    if isinstance(axes, int):
        axes = [axes]
    m = 0
    for a in axes:
        m |= 1 << (a % ndim)
    return m


def sum(x, axes=None, keepdim=False):  # noqa: A001
    return _ops.sum(x, axes=_mask(axes, x.ndim), keepdim=keepdim)


def mean(x, axes=None, keepdim=False):
    return _ops.mean(x, axes=_mask(axes, x.ndim), keepdim=keepdim)


def cast(x, dtype):
    from mstune._C import _dtype_index
    if x.dtype == dtype:
        return x
    return _ops.cast(x, to=_dtype_index(dtype))


def pixel_shuffle(x, r):
    n, c, h, w = x.shape
    y = reshape(x, (n, c // (r * r), r, r, h, w))
    y = permute(y, (0, 1, 4, 2, 5, 3))
    return reshape(y, (n, c // (r * r), h * r, w * r))
