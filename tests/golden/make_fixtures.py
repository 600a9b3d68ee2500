#!/usr/bin/env python3
# Writes tests/data/golden/<case>.txt: fixed inputs and PyTorch's float64 outputs and gradients
# for conv2d (dense, grouped, depthwise), linear, max-pool, batch-norm, cross-entropy, SiLU,
# sigmoid, the squeeze-and-excitation channel gate and SGD/Adam/AdamW steps, in the
# engine's layout (activations NHWC, conv filters KRSC). Only this script needs torch; the
# fixtures it writes are committed and read by tests/test_golden.cpp.
#
#   python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch
#   /tmp/torchenv/bin/python tests/golden/make_fixtures.py
#
# Inputs come from Python's own seeded generator (not torch's), so they do not change with the
# torch version; gradients are of L = sum(out * gout) with a fixed random gout, so no gradient
# is a trivial all-ones reduction.
import os
import random
import sys

import torch
import torch.nn.functional as F

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "golden")
SEED = 20240601
DT = torch.float64


class Case:
    def __init__(self, name, about):
        self.name, self.about, self.lines = name, about, []

    def put(self, name, t, dtype="f64"):
        # t: a torch tensor already in the engine's layout, or a Python scalar.
        if isinstance(t, torch.Tensor):
            dims = list(t.shape)
            vals = t.detach().contiguous().reshape(-1).tolist()
        else:
            dims, vals = [], [t]
        fmt = (lambda v: str(int(v))) if dtype == "i32" else (lambda v: repr(float(v)))
        head = " ".join([name, dtype] + [str(d) for d in dims])
        self.lines.append(head + " : " + " ".join(fmt(v) for v in vals))

    def write(self):
        path = os.path.join(OUT_DIR, self.name + ".txt")
        with open(path, "w") as f:
            f.write(f"# {self.name}: {self.about}\n")
            f.write(f"# Written by tests/golden/make_fixtures.py (torch {torch.__version__}, float64, CPU); "
                    "do not edit. Layout: NHWC / KRSC; gradients of L = sum(out * gout).\n")
            f.write("# Each line: name dtype dims... : values (row-major; no dims = one scalar).\n")
            for line in self.lines:
                f.write(line + "\n")
        return path


rng = random.Random(SEED)


def rand(*shape, lo=-1.0, hi=1.0):
    n = 1
    for d in shape:
        n *= d
    return torch.tensor([rng.uniform(lo, hi) for _ in range(n)], dtype=DT).reshape(shape)


def nhwc_to_nchw(t):
    return t.permute(0, 3, 1, 2).contiguous()


def nchw_to_nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


# OIHW and KRSC are the same permutation as NCHW and NHWC.
krsc_to_oihw, oihw_to_krsc = nhwc_to_nchw, nchw_to_nhwc


def leaf(t):
    return t.clone().requires_grad_(True)


def conv_case(name, n, h, w, c, k, r, stride, pad, bias, groups=1):
    x_ours, w_ours = rand(n, h, w, c), rand(k, r, r, c // groups)
    b = rand(k) if bias else None
    x, wt = leaf(nhwc_to_nchw(x_ours)), leaf(krsc_to_oihw(w_ours))
    bt = leaf(b) if bias else None
    y = F.conv2d(x, wt, bt, stride=stride, padding=pad, groups=groups)
    gout_ours = rand(*nchw_to_nhwc(y).shape)
    (y * nhwc_to_nchw(gout_ours)).sum().backward()
    cs = Case(name, f"conv2d {r}x{r} stride {stride} pad {pad}" + (" with bias" if bias else " no bias") +
              (f", {groups} groups" if groups > 1 else ""))
    cs.put("stride", stride, "i32")
    cs.put("pad", pad, "i32")
    if groups > 1:
        cs.put("groups", groups, "i32")
    cs.put("x", x_ours)
    cs.put("w", w_ours)
    if bias:
        cs.put("b", b)
    cs.put("gout", gout_ours)
    cs.put("out", nchw_to_nhwc(y))
    cs.put("gx", nchw_to_nhwc(x.grad))
    cs.put("gw", oihw_to_krsc(wt.grad))
    if bias:
        cs.put("gb", bt.grad)
    return cs


def linear_case():
    x, w, b = leaf(rand(4, 7)), leaf(rand(5, 7)), leaf(rand(5))
    y = F.linear(x, w, b)  # w is [out, in] in both libraries
    gout = rand(*y.shape)
    (y * gout).sum().backward()
    cs = Case("linear_bias", "linear x[4,7] w[5,7] b[5]")
    for nm, t in [("x", x), ("w", w), ("b", b), ("gout", gout), ("out", y), ("gx", x.grad), ("gw", w.grad),
                  ("gb", b.grad)]:
        cs.put(nm, t)
    return cs


def pool_case(name, n, h, w, c, k, stride, pad):
    x_ours = rand(n, h, w, c)
    # Distinct values: no window has a tie, so "first maximum" vs PyTorch's choice never matters.
    assert len(set(x_ours.reshape(-1).tolist())) == x_ours.numel()
    x = leaf(nhwc_to_nchw(x_ours))
    y = F.max_pool2d(x, k, stride, pad)
    gout_ours = rand(*nchw_to_nhwc(y).shape)
    (y * nhwc_to_nchw(gout_ours)).sum().backward()
    cs = Case(name, f"max_pool2d kernel {k} stride {stride} pad {pad}")
    cs.put("kernel", k, "i32")
    cs.put("stride", stride, "i32")
    cs.put("pad", pad, "i32")
    cs.put("x", x_ours)
    cs.put("gout", gout_ours)
    cs.put("out", nchw_to_nhwc(y))
    cs.put("gx", nchw_to_nhwc(x.grad))
    return cs


def bn_case(name, shape, training):
    c = shape[-1]
    x_ours = rand(*shape, lo=-2.0, hi=2.0)
    gamma, beta = leaf(rand(c, lo=0.5, hi=1.5)), leaf(rand(c))
    rm_in, rv_in = rand(c, lo=-0.5, hi=0.5), rand(c, lo=0.5, hi=2.0)
    x = leaf(nhwc_to_nchw(x_ours) if len(shape) == 4 else x_ours)
    rm, rv = rm_in.clone(), rv_in.clone()
    y = F.batch_norm(x, rm, rv, gamma, beta, training=training, momentum=0.1, eps=1e-5)
    y_ours = nchw_to_nhwc(y) if len(shape) == 4 else y
    gout_ours = rand(*y_ours.shape)
    gout = nhwc_to_nchw(gout_ours) if len(shape) == 4 else gout_ours
    (y * gout).sum().backward()
    gx = nchw_to_nhwc(x.grad) if len(shape) == 4 else x.grad
    cs = Case(name, f"batch_norm {'training' if training else 'eval'} x{list(shape)}, momentum 0.1, eps 1e-5")
    cs.put("training", int(training), "i32")
    cs.put("momentum", 0.1)
    cs.put("eps", 1e-5)
    for nm, t in [("x", x_ours), ("gamma", gamma), ("beta", beta), ("running_mean", rm_in), ("running_var", rv_in),
                  ("gout", gout_ours), ("out", y_ours), ("gx", gx), ("ggamma", gamma.grad), ("gbeta", beta.grad),
                  ("running_mean_out", rm), ("running_var_out", rv)]:
        cs.put(nm, t)
    return cs


def ce_case(name, smoothing, reduction="mean"):
    # reduction "sum" is airbench's loss: summed over the batch, not averaged.
    logits = leaf(rand(6, 5, lo=-3.0, hi=3.0))
    labels = torch.tensor([rng.randrange(5) for _ in range(6)], dtype=torch.int64)
    loss = F.cross_entropy(logits, labels, label_smoothing=smoothing, reduction=reduction)
    gout = rand(1)
    (loss * gout[0]).backward()
    about = "mean" if reduction == "mean" else "summed over the batch"
    cs = Case(name, f"cross_entropy (log-softmax + NLL, {about}) label_smoothing {smoothing}")
    cs.put("smoothing", smoothing)
    cs.put("logits", logits)
    cs.put("labels", labels, "i32")
    cs.put("gout", gout)
    cs.put("loss", loss.detach().reshape(1))
    cs.put("glogits", logits.grad)
    return cs


def optim_case(name, about, make_opt, state_keys):
    # Two parameters (a weight and a bias), two steps with different gradients, so momentum
    # and Adam's bias correction are exercised past the first step.
    shapes = {"w": (4, 6), "b": (4,)}
    ps = {k: torch.nn.Parameter(rand(*s)) for k, s in shapes.items()}
    opt = make_opt(list(ps.values()))
    cs = Case(name, about)
    for k, p in ps.items():
        cs.put(f"{k}_in", p.detach().clone())
    for step in (1, 2):
        for k, p in ps.items():
            p.grad = rand(*shapes[k])
            cs.put(f"{k}_grad{step}", p.grad)
        opt.step()
        for k, p in ps.items():
            cs.put(f"{k}_step{step}", p.detach().clone())
            for sk in state_keys:
                cs.put(f"{k}_{sk}{step}", opt.state[p][sk])
    return cs


def unary_case(name, fn, about):
    x = leaf(rand(3, 4, 5, lo=-8.0, hi=8.0))  # both tails and the middle
    y = fn(x)
    gout = rand(*y.shape)
    (y * gout).sum().backward()
    cs = Case(name, about)
    for nm, t in [("x", x), ("gout", gout), ("out", y), ("gx", x.grad)]:
        cs.put(nm, t)
    return cs


def gate_case():
    x_ours, g = leaf(rand(2, 3, 4, 5)), leaf(rand(2, 5))
    y = x_ours * g[:, None, None, :]  # NHWC times [N, C]: squeeze-and-excitation's rescale
    gout = rand(*y.shape)
    (y * gout).sum().backward()
    cs = Case("channel_gate", "x[2,3,4,5] (NHWC) * gate[2,5] broadcast over H and W")
    for nm, t in [("x", x_ours), ("g", g), ("gout", gout), ("out", y), ("gx", x_ours.grad), ("gg", g.grad)]:
        cs.put(nm, t)
    return cs


def signed_columns(vectors):
    # Each eigenvector with its largest-magnitude component positive (engine/linalg.h's sign).
    out = vectors.clone()
    for j in range(out.shape[1]):
        if out[out[:, j].abs().argmax(), j] < 0:
            out[:, j] = -out[:, j]
    return out


def eigh_case():
    # A symmetric positive definite 12x12 (a patch covariance's size) with spread eigenvalues.
    b = rand(12, 12)
    a = b @ b.T / 12 + 0.01 * torch.eye(12, dtype=DT)
    values, vectors = torch.linalg.eigh(a)
    cs = Case("eigh_12x12", "torch.linalg.eigh of a symmetric 12x12: ascending eigenvalues, eigenvectors as "
                            "columns, each with its largest-magnitude component positive")
    cs.put("a", a)
    cs.put("values", values)
    cs.put("vectors", signed_columns(vectors))
    return cs


def whitening_case():
    # airbench's whitening layer from 4 uint8 images [6,5,3] (NHWC), normalised with CIFAR-10's
    # mean and std as the engine rounds them (float32: scale = 1/(255 std), shift = -mean/std),
    # 2x2 patches flattened row, column, channel (KRSC, our filter layout).
    images = torch.tensor([[rng.randrange(256) for _ in range(6 * 5 * 3)] for _ in range(4)], dtype=DT)
    images = images.reshape(4, 6, 5, 3)
    mean = torch.tensor([0.4914, 0.4822, 0.4465], dtype=torch.float32)
    std = torch.tensor([0.2470, 0.2435, 0.2616], dtype=torch.float32)
    scale = (1.0 / (255.0 * std)).to(DT)  # float32 arithmetic, as the engine's float
    shift = (-mean / std).to(DT)
    x = images * scale + shift
    k, eps = 2, 5e-4
    patches = x.unfold(1, k, 1).unfold(2, k, 1)           # [n, oh, ow, c, kh, kw]
    patches = patches.permute(0, 1, 2, 4, 5, 3).reshape(-1, k * k * 3)  # (row, column, channel)
    cov = patches.T @ patches / patches.shape[0]
    values, vectors = torch.linalg.eigh(cov)
    vectors = signed_columns(vectors)
    f = vectors.T / torch.sqrt(values + eps)[:, None]
    filters = torch.cat([f, -f]).reshape(24, k, k, 3)
    cs = Case("whitening_2x2", "airbench whitening: 2x2 patch covariance of 4 normalised images [6,5,3], its eigh, "
                               "filters V / sqrt(L + 5e-4) and their negatives (KRSC)")
    cs.put("images", images, "i32")
    cs.put("scale", scale)
    cs.put("shift", shift)
    cs.put("eps", eps)
    cs.put("covariance", cov)
    cs.put("values", values)
    cs.put("filters", filters)
    return cs


def main():
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)
    cases = [
        conv_case("conv_3x3_s1_p1_bias", 2, 4, 4, 3, 4, 3, 1, 1, True),
        conv_case("conv_3x3_s2_p1_nobias", 1, 6, 7, 3, 4, 3, 2, 1, False),
        conv_case("conv_5x5_s1_p2_bias", 1, 5, 5, 2, 3, 5, 1, 2, True),
        conv_case("conv_1x1_s2_nobias", 2, 5, 5, 4, 3, 1, 2, 0, False),
        linear_case(),
        pool_case("maxpool_k2_s2", 2, 4, 6, 3, 2, 2, 0),
        pool_case("maxpool_k3_s2_p1", 1, 7, 6, 3, 3, 2, 1),
        bn_case("batchnorm_train_nhwc", (3, 3, 2, 4), True),
        bn_case("batchnorm_eval_nhwc", (3, 3, 2, 4), False),
        bn_case("batchnorm_train_2d", (6, 5), True),
        ce_case("cross_entropy_ls0", 0.0),
        ce_case("cross_entropy_ls0.1", 0.1),
        optim_case("sgd_momentum", "SGD lr 0.1 momentum 0.9 dampening 0 weight_decay 5e-4, not Nesterov; two steps",
                   lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0, weight_decay=5e-4, nesterov=False),
                   ["momentum_buffer"]),
        optim_case("adam", "Adam lr 1e-3 betas (0.9, 0.999) eps 1e-8 weight_decay 0; two steps",
                   lambda p: torch.optim.Adam(p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0),
                   ["exp_avg", "exp_avg_sq"]),
        optim_case("adamw", "AdamW lr 1e-3 betas (0.9, 0.999) eps 1e-8 weight_decay 1e-2; two steps",
                   lambda p: torch.optim.AdamW(p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2),
                   ["exp_avg", "exp_avg_sq"]),
        # Appended after the original cases, so those draw the same inputs as before.
        conv_case("conv_depthwise_3x3_s1_p1_bias", 2, 5, 5, 4, 4, 3, 1, 1, True, groups=4),
        conv_case("conv_depthwise_5x5_s2_p2_nobias", 1, 7, 6, 3, 3, 5, 2, 2, False, groups=3),
        conv_case("conv_groups2_3x3_s1_p1_bias", 2, 4, 4, 6, 4, 3, 1, 1, True, groups=2),
        unary_case("silu", F.silu, "SiLU x * sigmoid(x) on [3,4,5] in [-8, 8]"),
        unary_case("sigmoid", torch.sigmoid, "sigmoid on [3,4,5] in [-8, 8]"),
        gate_case(),
        ce_case("cross_entropy_sum_ls0.2", 0.2, "sum"),
        eigh_case(),
        whitening_case(),
    ]
    total = 0
    for cs in cases:
        path = cs.write()
        total += os.path.getsize(path)
        print(f"{os.path.getsize(path):7d}  {os.path.relpath(path)}")
    print(f"{total:7d}  total, torch {torch.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
