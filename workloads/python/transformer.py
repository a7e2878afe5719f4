"""The zoo's transformer text classifier (workloads/transformer.c) in Python: token + learned
position embeddings, pre-norm blocks of masked multi-head self-attention (one qkv projection)
and a GELU MLP, dropout, LayerNorm of the [CLS] position, linear head. The same ops in the same
order and the same init draws as the C model, so the losses are equal bit for bit; at a small
size (the langid_python_* jobs) its eager step is dominated by per-op dispatch, which graph mode
removes."""
import math

from mstune import functional as F
from mstune import nn

EMB = 0.02 * math.sqrt(3.0)


class Block(nn.Module):
    def __init__(self, d, heads, ff, dropout, gain):
        super().__init__()
        self.d, self.h, self.p = d, heads, dropout
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, gain=gain)
        self.out = nn.Linear(d, d, gain=gain)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ff, gain=gain)
        self.fc2 = nn.Linear(ff, d, gain=gain)

    def attention(self, x, ids):
        n, L, d = x.shape
        h, dh = self.h, d // self.h
        qkv = F.permute(F.reshape(self.qkv(x), (n, L, 3, h, dh)), (2, 0, 3, 1, 4))     # (3, N, H, L, dh)
        q = F.reshape(F.slice(qkv, 0, 0, 1), (n * h, L, dh))
        k = F.reshape(F.slice(qkv, 0, 1, 1), (n * h, L, dh))
        v = F.reshape(F.slice(qkv, 0, 2, 1), (n * h, L, dh))
        s = F.scale(F.matmul(q, k, trans_b=True), 1.0 / math.sqrt(dh))                  # (N H, L, L)
        a = F.masked_softmax(F.reshape(s, (n, h, L, L)), ids)
        a = F.dropout(a, self.p, self.training)
        o = F.matmul(F.reshape(a, (n * h, L, L)), v)                                    # (N H, L, dh)
        o = F.permute(F.reshape(o, (n, h, L, dh)), (0, 2, 1, 3))                        # (N, L, H, dh)
        return self.out(F.reshape(o, (n, L, d)))

    def forward(self, h, ids):
        a = self.attention(self.ln1(h), ids)
        h = h + F.dropout(a, self.p, self.training)
        f = self.fc2(F.gelu(self.fc1(self.ln2(h))))
        return h + F.dropout(f, self.p, self.training)


class Transformer(nn.Module):
    def __init__(self, vocab, length, classes, d_model=64, heads=4, layers=2, ff=0, dropout=0.0, init_gain=1.0):
        super().__init__()
        self.d, self.length, self.p = d_model, length, dropout
        ff = ff if ff > 0 else 4 * d_model
        self.token = nn.Embedding(vocab, d_model, bound=EMB)
        self.position = nn.Parameter((length, d_model), bound=EMB)
        self.blocks = nn.ModuleList(Block(d_model, heads, ff, dropout, init_gain) for _ in range(layers))
        self.ln_final = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes, gain=init_gain)

    def forward(self, ids):
        n = ids.shape[0]
        h = F.dropout(self.token(ids) + self.position, self.p, self.training)          # (N, L, D)
        for b in self.blocks:
            h = b(h, ids)
        cls = F.reshape(F.slice(h, 1, 0, 1), (n, self.d))                               # (N, D)
        return self.head(self.ln_final(cls))


def build(info, d_model=64, heads=4, layers=2, ff=0, dropout=0.0, init_gain=1.0):
    if not info.tokens:
        raise ValueError("transformer.py needs token ids as input (data.dataset: langid), got images %s" % (info.in_shape,))
    if d_model % heads:
        raise ValueError("d_model (%d) must be a multiple of heads (%d)" % (d_model, heads))
    return Transformer(info.vocab, info.in_shape[2], info.classes, d_model, heads, layers, ff, dropout, init_gain)
