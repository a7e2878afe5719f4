"""The zoo's srnet (workloads/srnet.c) in Python: a small ESRGAN-style x2 super-resolution net.
Stem conv3x3, `blocks` BN-free residual blocks h += 0.2 conv3x3(ReLU(conv3x3(h))), a trunk conv3x3
plus the stem's output, upsampler conv3x3 (w -> 4w), pixel shuffle x2, ReLU, conv3x3 (w -> C),
plus the input upsampled x2 by nearest neighbour. L1 loss (or MSE), PSNR metric. Same ops, order,
parameter names and init draws as the C model, so both train bit for bit alike."""
from mstune import functional as F
from mstune import nn

RES_SCALE = 0.2


def conv3(cin, cout, gain):
    return nn.Conv2d(cin, cout, 3, stride=1, padding=1, bias=True, gain=gain)


class Block(nn.Module):
    def __init__(self, w, gain):
        super().__init__()
        self.conv1 = conv3(w, w, gain)
        self.conv2 = conv3(w, w, gain)

    def forward(self, h):
        return F.add(h, F.scale(self.conv2(F.relu(self.conv1(h))), RES_SCALE))


class SRNet(nn.Module):
    metric = "psnr"

    def __init__(self, in_c, width=32, blocks=4, loss="l1", init_gain=1.0):
        super().__init__()
        if loss not in ("l1", "mse"):
            raise ValueError("srnet: loss must be 'l1' or 'mse', got %r" % (loss,))
        self.mse = loss == "mse"
        self.stem = conv3(in_c, width, init_gain)
        self.n_blocks = blocks
        for i in range(blocks):      # C names: block1.conv1, block1.conv2, ...
            setattr(self, "block%d" % (i + 1), Block(width, init_gain))
        self.trunk = conv3(width, width, init_gain)
        self.upsample = conv3(width, 4 * width, init_gain)
        self.last = conv3(width, in_c, init_gain)

    def forward(self, x):
        fea = self.stem(x)
        h = fea
        for i in range(self.n_blocks):
            h = getattr(self, "block%d" % (i + 1))(h)
        h = F.add(fea, self.trunk(h))
        h = F.relu(F.pixel_shuffle(self.upsample(h), 2))
        y = self.last(h)
        near = F.pixel_shuffle(F.concat([x, x, x, x], axis=1), 2)     # nearest x2
        return F.add(y, near)

    def loss(self, out, target):
        return F.mse_loss(out, target) if self.mse else F.l1_loss(out, target)


def build(info, width=32, blocks=4, loss="l1", init_gain=1.0):
    if not info.paired:
        raise ValueError("srnet: needs low/high-resolution image pairs (data.dataset: fashion_sr)")
    return SRNet(info.in_shape[0], width, blocks, loss, init_gain)
