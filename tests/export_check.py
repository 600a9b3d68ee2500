#!/usr/bin/env python3
"""Independent checks of `trainer --export` and `predict` (run by tests/export_predict.sh).

  make-data DIR            a small CIFAR-10-shaped image-folder data set of PNGs (stdlib only)
  check-names FILE MODEL DTYPE   the file parses with the `safetensors` package and holds
                           PyTorch's names and shapes for MODEL (simplecnn: the tutorial net's),
                           every floating tensor in DTYPE (float32, float16, bfloat16)
  check-numpy FILE JSONL   simplecnn's forward in float64 numpy, NCHW as PyTorch lays it out,
                           on the images `predict --json` classified: same logits within a
                           derived bound, same top class
  check-torch FILE MODEL JSONL   the same against bench/pytorch_models.py in PyTorch (FP32),
                           for any model; exit 77 (skipped) when PyTorch is not importable
"""
import json
import os
import random
import struct
import sys
import zlib

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
SKIP = 77
U = 2.0 ** -24  # FP32 unit roundoff


# ---- data -------------------------------------------------------------------------------------
OFFSETS = [(-16, -16, 0), (16, -16, 0), (-16, 16, 0), (16, 16, 0), (0, 0, -16), (0, 0, 16), (-16, 0, 16),
           (16, 0, -16), (0, -16, 16), (0, 16, -16)]  # one colour shift per class


def image_pixels(split, label, index):
    """32x32 RGB bytes, deterministic from (split, label, index)."""
    rng = random.Random(f"{split}/{label}/{index}")
    # A faint class colour under strong noise: learnable, but not to 100%, so accuracies compared
    # to the image are not trivially equal.
    base = [128 + d for d in OFFSETS[label]]
    return bytes(max(0, min(255, base[c] + rng.randint(-100, 100))) for _ in range(32 * 32) for c in range(3))


def write_png(path, rgb, w=32, h=32):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + rgb[y * w * 3:(y + 1) * w * 3] for y in range(h))  # filter 0 per row
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def make_data(root, train_per_class=30, test_per_class=10):
    # Outside the class folders, for predict --resize: a test image and its 2x enlargement
    # (each pixel a 2x2 block), which bilinear halving with half-pixel centres maps back exactly.
    small = image_pixels("test", 3, 0)
    big = bytes(small[((y // 2) * 32 + x // 2) * 3 + c] for y in range(64) for x in range(64) for c in range(3))
    os.makedirs(root, exist_ok=True)
    write_png(os.path.join(root, "small.png"), small)
    write_png(os.path.join(root, "big.png"), big, 64, 64)
    for split, n in (("train", train_per_class), ("test", test_per_class)):
        for label, name in enumerate(CLASSES):
            os.makedirs(os.path.join(root, split, name), exist_ok=True)
            for i in range(n):
                write_png(os.path.join(root, split, name, f"{i:04d}.png"), image_pixels(split, label, i))


def pixels_of(path):
    """The pixels make-data wrote to .../<split>/<class>/<index>.png."""
    parts = os.path.normpath(path).split(os.sep)
    return image_pixels(parts[-3], CLASSES.index(parts[-2]), int(parts[-1].split(".")[0]))


# ---- checks -----------------------------------------------------------------------------------
EXPECTED = {  # PyTorch's CIFAR-10 tutorial net with our widths: name -> shape
    "simplecnn": {"conv1.weight": (16, 3, 3, 3), "conv1.bias": (16,), "conv2.weight": (32, 16, 3, 3),
                  "conv2.bias": (32,), "fc1.weight": (256, 2048), "fc1.bias": (256,), "fc2.weight": (10, 256),
                  "fc2.bias": (10,)},
}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


BATCH_NORMS = {"resnet9": 8, "resnet18": 20}  # conv+BN units in models/models.cpp, counted by hand


def check_names(path, model, dtype):
    try:
        from safetensors.numpy import load_file
        from safetensors import safe_open
    except ImportError:
        print("SKIPPED: the safetensors package is not installed (pip install safetensors numpy)")
        sys.exit(SKIP)
    tensors = load_file(path)
    with safe_open(path, "np") as f:
        meta = f.metadata()
    if meta.get("model") != model or meta.get("format") != "pt":
        fail(f"metadata {meta}")
    if model in EXPECTED:
        got = {k: tuple(v.shape) for k, v in tensors.items()}
        if got != EXPECTED[model]:
            fail(f"names/shapes {got} != {EXPECTED[model]}")
    else:  # the ResNets: every batch-norm has PyTorch's five entries, convs are 4-D OIHW
        bns = [k[:-len(".running_var")] for k in tensors if k.endswith(".running_var")]
        if len(bns) != BATCH_NORMS[model]:
            fail(f"{len(bns)} batch-norms, {model} has {BATCH_NORMS[model]}")
        convs = [k for k, v in tensors.items() if len(v.shape) == 4]
        if len(convs) != BATCH_NORMS[model] or any(tensors[c].shape[2:] not in ((3, 3), (1, 1)) for c in convs):
            fail(f"conv weights {[(c, tensors[c].shape) for c in convs]}")
        for b in bns:
            for s in ("weight", "bias", "running_mean", "num_batches_tracked"):
                if f"{b}.{s}" not in tensors:
                    fail(f"{b}.{s} missing")
            if tensors[f"{b}.num_batches_tracked"].shape != () or tensors[f"{b}.num_batches_tracked"].dtype.name != "int64":
                fail("num_batches_tracked is not an int64 scalar")
        if tensors["0.0.weight"].shape != (64, 3, 3, 3):
            fail(f"stem conv {tensors['0.0.weight'].shape}")
    for k, v in tensors.items():
        if not k.endswith("num_batches_tracked") and v.dtype.name != dtype:
            fail(f"{k} has dtype {v.dtype}, expected {dtype}")
    print(f"ok: {path} parses with safetensors; {len(tensors)} tensors with PyTorch's names and shapes")


def read_predictions(jsonl):
    with open(jsonl) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        fail(f"{jsonl} holds no predictions")
    return rows


def compare(name, ours, ref, bound):
    """Per image: every logit within its bound, and the same top class unless the reference's
    top two are closer than the bound allows to tell apart."""
    import numpy as np
    ours, ref, bound = np.asarray(ours), np.asarray(ref), np.asarray(bound)
    err = np.abs(ours - ref)
    if not (err <= bound).all():
        i = np.unravel_index(np.argmax(err - bound), err.shape)
        fail(f"{name}: logit {i} differs by {err[i]:.3g}, bound {bound[i]:.3g}")
    agree = 0
    for o, r, b in zip(ours, ref, bound):
        top2 = np.sort(r)[-2:]
        if o.argmax() == r.argmax():
            agree += 1
        elif top2[1] - top2[0] > 2 * b.max():
            fail(f"{name}: top class {o.argmax()} vs {r.argmax()} with a clear margin")
    print(f"ok: {name}: {len(ours)} images, max |logit difference| {err.max():.3g} "
          f"(max bound {bound.max():.3g}), same top class on {agree}/{len(ours)}")


def check_numpy(path, jsonl):
    try:
        import numpy as np
        from safetensors.numpy import load_file
    except ImportError:
        print("SKIPPED: numpy or the safetensors package is not installed (pip install safetensors numpy)")
        sys.exit(SKIP)
    w = {k: v.astype(np.float64) for k, v in load_file(path).items()}
    rows = read_predictions(jsonl)
    x = np.stack([np.frombuffer(pixels_of(r["image"]), np.uint8).reshape(32, 32, 3) for r in rows])
    x = (x.transpose(0, 3, 1, 2).astype(np.float64) / 255.0 - 0.5) / 0.5  # NCHW, the trainer's normalisation

    def conv3x3(x, weight, bias):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((x.shape[0], weight.shape[0], x.shape[2], x.shape[3]))
        for kh in range(3):
            for kw in range(3):
                out += np.einsum("nchw,oc->nohw", xp[:, :, kh:kh + x.shape[2], kw:kw + x.shape[3]], weight[:, :, kh, kw])
        return out + bias[None, :, None, None]

    def pool(x):
        n, c, h, ww = x.shape
        return x.reshape(n, c, h // 2, 2, ww // 2, 2).max(axis=(3, 5))

    def forward(x, p):
        x = pool(np.maximum(conv3x3(x, p["conv1.weight"], p["conv1.bias"]), 0))
        x = pool(np.maximum(conv3x3(x, p["conv2.weight"], p["conv2.bias"]), 0))
        x = x.reshape(x.shape[0], -1)  # x.view(-1, 32*8*8): NCHW order
        x = np.maximum(x @ p["fc1.weight"].T + p["fc1.bias"], 0)
        return x @ p["fc2.weight"].T + p["fc2.bias"]

    # FP32 rounding bound, first order: each layer of reduction length n adds at most
    # (n + 1) * u times its output computed on |weights| and |inputs| (the +1: the bias add),
    # and the error it receives grows by at most |W| (ReLU and max-pool do not grow it); so
    # |ours - exact| <= u * (sum of (n + 1) + 8 for the input's normalisation) * forward(|x|, |W|).
    # 1.01 covers the second-order terms.
    gamma = U * ((27 + 1) + (144 + 1) + (2048 + 1) + (256 + 1) + 8) * 1.01
    bound = gamma * forward(np.abs(x), {k: np.abs(v) for k, v in w.items()})
    compare("numpy float64 forward (NCHW, PyTorch layout)", [r["logits"] for r in rows], forward(x, w), bound)


def read_safetensors_torch(path):
    """The format by hand: u64 LE header length, JSON header, raw little-endian data."""
    import torch
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
              "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        t = torch.frombuffer(data[b:end], dtype=dtypes[e["dtype"]]) if end > b else torch.empty(0, dtype=dtypes[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def check_torch(path, model, jsonl):
    try:
        import torch
    except ImportError:
        print("SKIPPED: PyTorch is not importable here; this check runs where it is (the GPU machine has it)")
        sys.exit(SKIP)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
    import pytorch_models
    try:
        import safetensors.torch
        state = safetensors.torch.load_file(path)
    except ImportError:  # a PyTorch install without the package: read the format directly
        state = read_safetensors_torch(path)
    net = pytorch_models.MODELS[model]()
    net.load_state_dict(state)  # strict: every name and shape must match
    net.eval()
    rows = read_predictions(jsonl)
    x = torch.stack([torch.frombuffer(bytearray(pixels_of(r["image"])), dtype=torch.uint8).reshape(32, 32, 3)
                     for r in rows])
    net.double()
    # First-order FP32 rounding bound, per image and logit: each op l that rounds adds a local
    # error e_l (|e_l| <= (n_l + 1) u (|W||input| + |b|) for a conv or linear layer of reduction
    # length n_l; 6 u (|x s| + |mean s| + |beta|) for an eval batch-norm with s = gamma/sqrt(var+eps);
    # HW u mean|x| for the global average; u |sum| for a residual add; 4 u |x| for the input's
    # normalisation), and it reaches the logits through the network's Jacobian:
    # |ours - exact| <= sum_l |d logits / d out_l| . e_l. ReLU and max-pool round nothing.
    F = torch.nn.functional
    outs, errs = [], []

    def hook(m, inp, out):
        x = inp[0].abs()
        with torch.no_grad():
            if isinstance(m, torch.nn.Conv2d):
                e = (m.weight[0].numel() + 1) * U * F.conv2d(x, m.weight.abs(), None if m.bias is None else m.bias.abs(),
                                                            m.stride, m.padding)
            elif isinstance(m, torch.nn.Linear):
                e = (m.weight.shape[1] + 1) * U * F.linear(x, m.weight.abs(), None if m.bias is None else m.bias.abs())
            elif isinstance(m, torch.nn.BatchNorm2d):
                s = (m.weight / torch.sqrt(m.running_var + m.eps))[None, :, None, None]
                e = 6 * U * (x * s.abs() + (m.running_mean[None, :, None, None] * s).abs() + m.bias.abs()[None, :, None, None])
            elif isinstance(m, pytorch_models.GlobalAvgPool):
                e = x.shape[2] * x.shape[3] * U * x.mean((2, 3))
            else:  # Residual
                e = U * out.abs()
        outs.append(out)
        errs.append(e)

    for m in net.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear, torch.nn.BatchNorm2d, pytorch_models.GlobalAvgPool,
                          pytorch_models.Residual)):
            m.register_forward_hook(hook)
    x0 = pytorch_models.to_input(x).double().requires_grad_(True)
    ref = net(x0)
    bound = torch.zeros_like(ref)
    for k in range(ref.shape[1]):
        grads = torch.autograd.grad(ref[:, k].sum(), [x0] + outs, retain_graph=True)  # images are independent
        total = (grads[0].abs() * 4 * U * x0.abs()).flatten(1).sum(1)
        for g, e in zip(grads[1:], errs):
            total += (g.abs() * e).flatten(1).sum(1)
        bound[:, k] = total * 1.01  # 1.01: the second-order terms
    ref, bound = ref.detach(), bound.detach()
    compare(f"PyTorch {torch.__version__} {model} (bench/pytorch_models.py, float64)", [r["logits"] for r in rows],
            ref.numpy(), bound.numpy())


def main(argv):
    if len(argv) >= 2 and argv[0] == "make-data":
        make_data(argv[1])
    elif len(argv) == 4 and argv[0] == "check-names":
        check_names(argv[1], argv[2], argv[3])
    elif len(argv) == 3 and argv[0] == "check-numpy":
        check_numpy(argv[1], argv[2])
    elif len(argv) == 4 and argv[0] == "check-torch":
        check_torch(argv[1], argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
