"""What the mstune trainer calls to load a job's Python model (python/host.c).

The model file is imported as a fresh module (a new name per load, so an advisor trial gets its
own), its `build(info, **args)` is called with the dataset's facts and the job's model.args, and
what it returns must be an mstune.nn.Module. Errors are Python exceptions: the host prints their
traceback and names the file and line.
"""
import importlib.util
import itertools
import json
import os

from mstune import nn

_count = itertools.count()


class Info:
    """What the dataset tells a model builder: the sample shape (C, H, W), classes, vocabulary."""

    def __init__(self, in_shape, classes, vocab, tokens, paired):
        self.in_shape = tuple(in_shape)
        self.classes = classes
        self.vocab = vocab
        self.tokens = bool(tokens)
        self.paired = bool(paired)

    def __repr__(self):
        return "Info(in_shape=%s, classes=%d, vocab=%d, tokens=%s, paired=%s)" % (
            self.in_shape, self.classes, self.vocab, self.tokens, self.paired)


def load(path, args_json, in_shape, classes, vocab, tokens, paired):
    args = json.loads(args_json) if args_json else {}
    if not isinstance(args, dict):
        raise TypeError("model.args must be a mapping, got %s" % type(args).__name__)
    name = "mstune_model_%d_%s" % (next(_count), os.path.splitext(os.path.basename(path))[0].replace("-", "_"))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError("model.file %s: not a Python file that can be imported" % path)
    module = importlib.util.module_from_spec(spec)
    import sys
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        build = getattr(module, "build", None)
        if not callable(build):
            raise AttributeError("model.file %s defines no build(info, **args) function returning the model" % path)
        model = build(Info(in_shape, classes, vocab, tokens, paired), **args)
        if not isinstance(model, nn.Module):
            raise TypeError("build() in %s returned %s, expected an mstune.nn.Module" % (path, type(model).__name__))
    except BaseException:
        sys.modules.pop(name, None)
        raise
    own_loss = type(model).loss is not nn.Module.loss
    return (model, name, list(model.named_parameters()), list(model.named_buffers()), str(model.metric), own_loss)
