"""mstune: tensors, every op of the runtime's op table, autograd and an nn package.

    import mstune
    from mstune import nn, functional as F
    x = mstune.randn((4, 8))
    lin = nn.Linear(8, 2)
    loss = F.cross_entropy(lin(x), mstune.tensor([0, 1, 1, 0], dtype="i32"))
    loss.backward()                 # lin.weight.grad now holds dloss/dweight

The same model code runs inside the mstune trainer (a job's `model: {name: python, file: ...}`),
eagerly with each op crossing from Python into C, or traced once by graph mode.
"""
from mstune._C import (Error, clear_tape, Tensor, TraceError, full, is_bound, is_grad_enabled, is_tracing, manual_seed,
                       memory_in_use, next_seed, op_names, ops, param, rand, randn, set_grad_enabled, set_threads,
                       tensor, zeros)


class no_grad:
    """Context manager (and decorator) that stops tape recording, as torch.no_grad."""

    def __enter__(self):
        self._was = set_grad_enabled(False)
        return self

    def __exit__(self, *exc):
        set_grad_enabled(self._was)
        return False

    def __call__(self, fn):
        def wrapped(*a, **k):
            with no_grad():
                return fn(*a, **k)
        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        wrapped.__doc__ = getattr(fn, "__doc__", None)
        return wrapped


def ones(shape, dtype="f32", requires_grad=False):
    return full(shape, 1.0, dtype=dtype, requires_grad=requires_grad)


from mstune import functional, nn  # noqa: E402  (they use the names above)

__all__ = ["Tensor", "Error", "TraceError", "tensor", "zeros", "ones", "full", "randn", "rand", "param", "ops",
           "no_grad", "set_grad_enabled", "is_grad_enabled", "manual_seed", "next_seed", "set_threads", "functional",
           "nn", "op_names", "clear_tape", "is_bound", "is_tracing", "memory_in_use"]
