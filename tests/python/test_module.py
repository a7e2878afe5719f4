"""The mstune extension module in a plain python3 (PYTHONPATH=build/python): tensors, the op
table's functions, autograd against finite differences, no_grad, errors, and memory release."""
import math
import unittest

import mstune
from mstune import functional as F
from mstune import nn


class TestTensor(unittest.TestCase):
    def test_roundtrip(self):
        t = mstune.tensor([[1, 2, 3], [4, 5, 6]])
        self.assertEqual(t.shape, (2, 3))
        self.assertEqual(t.dtype, "f32")
        self.assertEqual(t.tolist(), [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        i = mstune.tensor([3, -1], dtype="i32")
        self.assertEqual(i.tolist(), [3, -1])
        self.assertEqual(mstune.tensor([2.5]).item(), 2.5)
        with self.assertRaises(ValueError):
            t.item()
        with self.assertRaises(ValueError):
            mstune.tensor([[1, 2], [3]])

    def test_operators(self):
        a = mstune.tensor([1.0, 2.0, 3.0])
        self.assertEqual((a + a).tolist(), [2.0, 4.0, 6.0])
        self.assertEqual((a * 2 - 1).tolist(), [1.0, 3.0, 5.0])
        self.assertEqual((1 - a).tolist(), [0.0, -1.0, -2.0])
        self.assertEqual((a / 2).tolist(), [0.5, 1.0, 1.5])
        self.assertEqual((-a).tolist(), [-1.0, -2.0, -3.0])
        m = mstune.tensor([[1.0, 2.0], [3.0, 4.0]])
        self.assertEqual((m @ m).tolist(), [[7.0, 10.0], [15.0, 22.0]])
        self.assertEqual(m.reshape(4).shape, (4,))
        self.assertEqual(m.reshape(-1, 1).shape, (4, 1))

    def test_ops_cover_the_table(self):
        names = mstune.op_names()
        self.assertGreater(len(names), 40)
        for n in names:
            self.assertTrue(callable(getattr(mstune.ops, n)), n)
        self.assertIn("stride_h", mstune.ops.conv2d.__doc__)

    def test_op_errors(self):
        w = mstune.randn((3, 8))
        with self.assertRaises(mstune.Error) as e:
            F.linear(mstune.randn((2, 5)), w)
        self.assertIn("linear", str(e.exception))
        self.assertIn("(2, 5)", str(e.exception))
        with self.assertRaises(TypeError):
            mstune.ops.add(w, w, nonsense=1)
        with self.assertRaises(TypeError):
            mstune.ops.add(w, 3)
        # an error leaves the context usable
        self.assertEqual((mstune.tensor([1.0]) + 1).tolist(), [2.0])


class TestAutograd(unittest.TestCase):
    def test_linear_gradient_matches_finite_differences(self):
        mstune.manual_seed(7)
        lin = nn.Linear(4, 3)
        x = mstune.randn((5, 4))
        y = mstune.tensor([0, 1, 2, 1, 0], dtype="i32")

        def loss_value():
            with mstune.no_grad():
                return F.cross_entropy(lin(x), y).item()

        loss = F.cross_entropy(lin(x), y)
        loss.backward()
        g = lin.weight.grad.tolist()
        base = lin.weight.tolist()
        eps = 1e-2
        for r in range(3):
            for c in range(4):
                def at(v):
                    t = [row[:] for row in base]
                    t[r][c] = v
                    # write through a parameter-shaped op: w' = w + delta (kept off the tape)
                    return t
                # central difference through a fresh Linear holding the perturbed weight
                vals = []
                for d in (eps, -eps):
                    w = mstune.tensor(at(base[r][c] + d))
                    with mstune.no_grad():
                        vals.append(F.cross_entropy(F.linear(x, w, lin.bias), y).item())
                fd = (vals[0] - vals[1]) / (2 * eps)
                self.assertAlmostEqual(g[r][c], fd, delta=2e-3, msg="dW[%d][%d]" % (r, c))
        self.assertIsNotNone(lin.bias.grad)
        lin.zero_grad()
        self.assertIsNone(lin.weight.grad)
        self.assertTrue(math.isfinite(loss_value()))

    def test_no_grad(self):
        w = mstune.randn((2, 2), requires_grad=True)
        with mstune.no_grad():
            self.assertFalse(mstune.is_grad_enabled())
            y = w * w
        self.assertTrue(mstune.is_grad_enabled())
        self.assertFalse(y.requires_grad)
        self.assertTrue((w * w).requires_grad)
        with self.assertRaises(mstune.Error):
            F.sum(y).backward()

    def test_memory_is_released(self):
        lin = nn.Linear(16, 16)
        x = mstune.randn((8, 16))
        with mstune.no_grad():
            for _ in range(10):
                F.relu(lin(x))
            before = mstune.memory_in_use()
            for _ in range(500):
                F.relu(lin(x))
            self.assertLessEqual(mstune.memory_in_use(), before)
        for _ in range(20):
            F.sum(F.relu(lin(x))).backward()
        before = mstune.memory_in_use()
        for _ in range(200):
            lin.zero_grad()
            F.sum(F.relu(lin(x))).backward()
        self.assertLessEqual(mstune.memory_in_use(), before)


class TestNN(unittest.TestCase):
    def test_module_registration(self):
        net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.GlobalAvgPool(), nn.Linear(4, 2))
        names = [n for n, _ in net.named_parameters()]
        self.assertEqual(names, ["0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias"])
        self.assertEqual([n for n, _ in net.named_buffers()], ["1.running_mean", "1.running_var"])
        self.assertEqual(net[0].weight.name, "0.weight")
        out = net(mstune.randn((2, 1, 6, 6)))
        self.assertEqual(out.shape, (2, 2))
        net.eval()
        self.assertFalse(net[1].training)

    def test_attention_and_norms(self):
        mha = nn.MultiheadAttention(8, 2)
        ln = nn.LayerNorm(8)
        emb = nn.Embedding(10, 8)
        ids = mstune.tensor([[1, 2, 0], [3, 0, 0]], dtype="i32")
        h = ln(emb(ids))
        y = mha(h, keep=ids)
        self.assertEqual(y.shape, (2, 3, 8))
        F.sum(y).backward()
        self.assertIsNotNone(mha.q.weight.grad)
        self.assertEqual(nn.Dropout(0.5).eval()(h).shape, h.shape)

    def test_trace_error_outside_tracing_is_absent(self):
        self.assertFalse(mstune.is_tracing())
        self.assertFalse(mstune.is_bound())


if __name__ == "__main__":
    unittest.main()
