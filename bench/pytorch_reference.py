#!/usr/bin/env python3
"""PyTorch side-by-side for the benchmark table: our three models and our trainer's recipe in
PyTorch eager FP32 / eager AMP (autocast + GradScaler) / torch.compile, on the same CIFAR-10 copy.

A tool for the GPU machine, never a dependency of the engine. Two data modes:
  dataloader  the classic loop as usually written: Dataset + DataLoader(num_workers=2,
              shuffle=True, pin_memory) with ToTensor/Normalize (torchvision when installed)
  gpu         the whole uint8 data set resident on the device; batches are built there by
              indexing, crop/flip and normalising (what our trainer does)
Reports images/s (training only, after a warm-up), epoch times, peak device memory
(torch.cuda.max_memory_allocated) and test accuracy; --json writes them for bench/compare.py,
--log writes JSON lines in our trainer's format for bench/plot_log.py.

  python3 bench/pytorch_reference.py --model resnet9 --precision amp-fp16 --data-mode gpu --json r.json
"""
import argparse
import ast
import hashlib
import io
import json
import math
import os
import platform
import struct
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor

try:
    import torch
    import torch.nn as nn
except ImportError:
    sys.exit("error: PyTorch is not installed (this reference needs it; the engine itself does not)")

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
IMAGE_EXTS = (".jpg", ".jpeg", ".png")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# numpy is optional: the .npy cache is read and written by hand when it is missing, so a
# GPU image with only PyTorch still runs (PYREF_NO_NUMPY=1 forces that path, for testing).
try:
    if os.environ.get("PYREF_NO_NUMPY"):
        raise ImportError
    import numpy as np
except ImportError:
    np = None


class InputError(Exception):
    """Bad input (missing data, unusable device, failed compile): one line, exit code 1."""


# ---------------------------------------------------------------------------------------------
# Models: the same structures as models/models.cpp, in PyTorch's NCHW and default init, with
# the names `trainer --export` writes (bench/pytorch_models.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_models import MODELS  # noqa: E402


# ---------------------------------------------------------------------------------------------
# .npy cache without numpy: version 1.0 files of uint8 only (all this script stores).

def npy_save(path, t):
    if np is not None:
        np.save(path, t.numpy())
        return
    header = "{'descr': '|u1', 'fortran_order': False, 'shape': %s, }" % (tuple(t.shape),)
    # Magic (6) + version (2) + length (2) + header, padded with spaces to a multiple of 64.
    pad = 64 - (10 + len(header) + 1) % 64
    header = (header + " " * (pad % 64) + "\n").encode("latin1")
    body = bytearray(t.numel())
    if t.numel():  # copy through a tensor view of the buffer (tensors lack the buffer protocol)
        torch.frombuffer(body, dtype=torch.uint8).copy_(t.reshape(-1))
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
        f.write(body)


def npy_load(path):
    if np is not None:
        return torch.from_numpy(np.load(path))
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] != b"\x93NUMPY\x01\x00":
        raise InputError(f"{path}: not a version-1.0 .npy file")
    (hlen,) = struct.unpack("<H", raw[8:10])
    meta = ast.literal_eval(raw[10:10 + hlen].decode("latin1"))
    if meta.get("descr") != "|u1" or meta.get("fortran_order"):
        raise InputError(f"{path}: expected a C-order uint8 array, found {meta}")
    shape = tuple(meta["shape"])
    data = torch.frombuffer(bytearray(raw[10 + hlen:]), dtype=torch.uint8)
    if data.numel() != math.prod(shape):
        raise InputError(f"{path}: truncated ({data.numel()} bytes for shape {shape})")
    return data.view(shape)


# ---------------------------------------------------------------------------------------------
# Data: the same image folders (or their .tar.gz) decoded once into uint8 NHWC, cached as .npy.

class Splits:
    def __init__(self, train_x, train_y, test_x, test_y, source):
        self.train_x, self.train_y, self.test_x, self.test_y, self.source = train_x, train_y, test_x, test_y, source


def _decoder():
    """Returns bytes -> uint8 HWC RGB tensor: PIL when installed, else torchvision.io."""
    try:
        from PIL import Image

        def decode(blob, name):
            with Image.open(io.BytesIO(blob)) as im:
                im = im.convert("RGB")
                if im.size != (32, 32):
                    raise InputError(f"image '{name}' is {im.size[0]}x{im.size[1]}, not 32x32")
                return torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(32, 32, 3)
        return decode
    except ImportError:
        pass
    try:
        from torchvision.io import ImageReadMode, decode_image

        def decode(blob, name):
            t = decode_image(torch.frombuffer(bytearray(blob), dtype=torch.uint8), mode=ImageReadMode.RGB)
            if tuple(t.shape) != (3, 32, 32):
                raise InputError(f"image '{name}' has shape {tuple(t.shape)}, not 3x32x32")
            return t.permute(1, 2, 0).contiguous()
        return decode
    except ImportError:
        raise InputError("no image decoder: install pillow (or torchvision), or pass --engine-cache FILE "
                         "(our trainer's decoded cache) or --synthetic N")


def _decode_all(items, what):
    """items: [(label, name, bytes)] in order -> (uint8 [N,32,32,3], int64 [N])."""
    decode = _decoder()
    t0 = time.time()
    # Decoding releases the GIL for most of its work; threads are enough.
    with ThreadPoolExecutor(max_workers=max(1, min(16, os.cpu_count() or 1))) as pool:
        images = list(pool.map(lambda it: decode(it[2], it[1]), items, chunksize=256))
    x = torch.stack(images) if images else torch.empty(0, 32, 32, 3, dtype=torch.uint8)
    y = torch.tensor([it[0] for it in items], dtype=torch.int64)
    print(f"[data] decoded {len(items)} {what} images in {time.time() - t0:.1f} s", file=sys.stderr)
    return x, y


def _folder_files(split_dir):
    files = []
    for label, cls in enumerate(CLASSES):
        d = os.path.join(split_dir, cls)
        if not os.path.isdir(d):
            raise InputError(f"missing class folder '{d}' (expected one folder per CIFAR-10 class: {' '.join(CLASSES)})")
        names = sorted(e.name for e in os.scandir(d) if e.is_file() and e.name.lower().endswith(IMAGE_EXTS))
        if not names:
            raise InputError(f"class folder '{d}' has no .jpg/.jpeg/.png images")
        files += [(label, os.path.join(d, n)) for n in names]  # files sorted by name within a class
    return files


def _read_folder(split_dir, what):
    items = []
    for label, path in _folder_files(split_dir):
        with open(path, "rb") as f:
            items.append((label, path, f.read()))
    return _decode_all(items, what)


def _read_tar(path):
    """train/<class>/* and test/<class>/* anywhere below the archive's top, read without unpacking."""
    found = {"train": {c: [] for c in CLASSES}, "test": {c: [] for c in CLASSES}}
    try:
        with tarfile.open(path, "r:*") as tar:
            for m in tar:
                parts = m.name.split("/")
                if not m.isfile() or len(parts) < 3 or not parts[-1].lower().endswith(IMAGE_EXTS):
                    continue
                split, cls = parts[-3], parts[-2]
                if split in found and cls in found[split]:
                    found[split][cls].append((parts[-1], tar.extractfile(m).read()))
    except (tarfile.TarError, OSError, EOFError) as e:
        raise InputError(f"cannot read archive '{path}': {e}")
    out = []
    for split in ("train", "test"):
        items = []
        for label, cls in enumerate(CLASSES):
            files = sorted(found[split][cls])
            if not files:
                raise InputError(f"archive '{path}' has no {split}/{cls}/ images")
            items += [(label, f"{path}:{split}/{cls}/{n}", b) for n, b in files]
        out += list(_decode_all(items, split))
    return out


def _locate(root):
    """('tar', path) | ('folders', dir) | None, looking where our trainer looks (root, root/cifar10-jpeg)."""
    if os.path.isfile(root) and (root.endswith(".tar.gz") or root.endswith(".tgz") or root.endswith(".tar")):
        return "tar", root
    for d in (root, os.path.join(root, "cifar10-jpeg")):
        if os.path.isdir(os.path.join(d, "train")) and os.path.isdir(os.path.join(d, "test")):
            return "folders", d
    return None


def _fingerprint(kind, path):
    h = hashlib.sha256(f"pyref-cifar10-v1|{kind}|{os.path.abspath(path)}".encode())
    if kind == "tar":
        st = os.stat(path)
        h.update(f"|{st.st_size}|{st.st_mtime_ns}".encode())
    else:
        for split in ("train", "test"):
            for label, f in _folder_files(os.path.join(path, split)):
                st = os.stat(f)
                h.update(f"|{label}|{os.path.basename(f)}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def load_cifar10(root, cache_dir):
    loc = _locate(root)
    if loc is None:
        raise InputError(f"no CIFAR-10 image folders (train/ + test/) or .tar.gz archive at '{root}' "
                         "(pass --data DIR|ARCHIVE, --engine-cache FILE or --synthetic N)")
    kind, path = loc
    names = ("train_x", "train_y", "test_x", "test_y")
    cache = os.path.join(cache_dir, "pytorch-cifar10-" + _fingerprint(kind, path)) if cache_dir else None
    if cache and all(os.path.isfile(os.path.join(cache, n + ".npy")) for n in names):
        try:
            t = [npy_load(os.path.join(cache, n + ".npy")) for n in names]
            if t[0].shape[1:] == (32, 32, 3) and t[0].shape[0] == t[1].shape[0] and t[2].shape[0] == t[3].shape[0]:
                return Splits(t[0], t[1].long(), t[2], t[3].long(), f"{kind} {path} (cache {cache})")
            print(f"[data] cache {cache} has unexpected shapes; decoding again", file=sys.stderr)
        except (InputError, OSError, ValueError) as e:
            print(f"[data] cache {cache} unusable ({e}); decoding again", file=sys.stderr)
    if kind == "tar":
        tx, ty, vx, vy = _read_tar(path)
    else:
        tx, ty = _read_folder(os.path.join(path, "train"), "train")
        vx, vy = _read_folder(os.path.join(path, "test"), "test")
    if cache:
        try:  # into a temporary folder, then renamed: a reader never sees half a cache
            tmp = f"{cache}.tmp-{os.getpid()}"
            os.makedirs(tmp, exist_ok=True)
            for n, t in zip(names, (tx, ty.to(torch.uint8), vx, vy.to(torch.uint8))):
                npy_save(os.path.join(tmp, n + ".npy"), t)
            os.replace(tmp, cache)
            print(f"[data] wrote cache {cache}", file=sys.stderr)
        except OSError as e:
            print(f"warning: could not write the cache {cache}: {e} (continuing without it)", file=sys.stderr)
    return Splits(tx, ty, vx, vy, f"{kind} {path}")


def load_engine_cache(path):
    """Our trainer's decoded-folder cache (data/cifar.cpp, format version 1): 48-byte header
    {magic 'CIFARU8\\n', u32 version, u32 header bytes, u64 fingerprint, i64 n_train, i64 n_test,
    u64 checksum}, then train labels, test labels (1 byte each), train images, test images
    (NHWC uint8). The very pixels our trainer trains on (stb_image's decode); checksum not verified."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError(f"cannot read engine cache '{path}': {e}")
    if len(raw) < 48 or raw[:8] != b"CIFARU8\n":
        raise InputError(f"'{path}' is not our trainer's CIFAR-10 cache")
    version, hbytes, _fp, n_train, n_test, _ck = struct.unpack("<IIQqqQ", raw[8:48])
    if version != 1 or hbytes != 48:
        raise InputError(f"'{path}': cache version {version} (this script reads version 1)")
    if len(raw) != 48 + (n_train + n_test) * (1 + 3072):
        raise InputError(f"'{path}': size does not match its header (truncated?)")
    buf = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    o = 48
    ty = buf[o:o + n_train].long(); o += n_train
    vy = buf[o:o + n_test].long(); o += n_test
    tx = buf[o:o + n_train * 3072].view(n_train, 32, 32, 3); o += n_train * 3072
    vx = buf[o:o + n_test * 3072].view(n_test, 32, 32, 3)
    if int(ty.max()) > 9 or int(vy.max()) > 9:
        raise InputError(f"'{path}': bad label")
    return Splits(tx, ty, vx, vy, f"engine cache {path}")


def synthetic(n_train, seed=1234):
    """Learnable-ish stand-in: each class is a fixed coarse random colour pattern; a sample is its
    class's pattern plus a weaker pattern of another class (so classes overlap and it takes a few
    epochs to learn), random brightness and heavy noise."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.rand(10, 3, 4, 4, generator=g) * 2 - 1
    templates = nn.functional.interpolate(templates, size=(32, 32), mode="bilinear", align_corners=False)

    def draw(n):
        y = torch.arange(n) % 10
        other = torch.randint(0, 10, (n,), generator=g)
        x = templates[y] * (10 + 20 * torch.rand(n, 1, 1, 1, generator=g))
        x = x + templates[other] * (20 * torch.rand(n, 1, 1, 1, generator=g))
        x = x + 128 + 60 * (torch.rand(n, 1, 1, 1, generator=g) - 0.5) + 70 * torch.randn(n, 3, 32, 32, generator=g)
        return x.clamp(0, 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous(), y

    tx, ty = draw(n_train)
    vx, vy = draw(max(10, n_train // 5))
    return Splits(tx, ty, vx, vy, f"synthetic ({n_train} train images, seed {seed})")


def balanced_subset(x, y, n):
    """The first n images taken round-robin over the classes, each class in its order (data::subset)."""
    by_class = [torch.nonzero(y == c).flatten().tolist() for c in range(10)]
    order, r = [], 0
    n = min(n, len(y))
    while len(order) < n:
        for cls in by_class:
            if r < len(cls) and len(order) < n:
                order.append(cls[r])
        r += 1
    idx = torch.tensor(order, dtype=torch.long)
    return x[idx].contiguous(), y[idx].contiguous()


# ---------------------------------------------------------------------------------------------
# Batches. Normalisation (x/255 - 0.5)/0.5 maps [0,255] to [-1,1] like our trainer; crops are
# taken from the image zero-padded by 4 (raw 0, i.e. -1 after normalising), as ours and
# torchvision's RandomCrop(32, padding=4) do.

def gpu_batch(images_u8, idx, draws, augment, channels_last):
    """images_u8: [N,32,32,3] uint8 on the device; draws: (dy, dx, flip) per image or None."""
    x = images_u8[idx]
    if augment:
        b = x.shape[0]
        dy, dx, flip = (d[idx] for d in draws)
        padded = nn.functional.pad(x, (0, 0, 4, 4, 4, 4))  # [B,40,40,3], zeros around
        ar = torch.arange(32, device=x.device)
        rows = dy[:, None] + ar                               # [B,32]
        cols = dx[:, None] + ar
        cols = torch.where(flip[:, None], cols.flip(1), cols)  # crop, then flip the crop
        x = padded[torch.arange(b, device=x.device)[:, None, None], rows[:, :, None], cols[:, None, :]]
    x = x.permute(0, 3, 1, 2).float().div_(255).sub_(0.5).div_(0.5)
    return x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


class CifarDataset(torch.utils.data.Dataset):
    """The classic per-item Dataset: one uint8 HWC image -> transform -> CHW float tensor."""

    def __init__(self, x, y, augment):
        self.x, self.y, self.augment = x, y, augment
        self.tv = None
        try:  # the usual torchvision pipeline on PIL images, as torchvision.datasets.CIFAR10 runs it
            if np is None:
                raise ImportError
            import torchvision.transforms as T
            from PIL import Image
            self.Image = Image
            aug = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()] if augment else []
            self.tv = T.Compose(aug + [T.ToTensor(), T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
            self.xn = x.numpy()
        except ImportError:
            pass

    @property
    def transforms_name(self):
        return "torchvision" if self.tv is not None else "builtin (torchvision not installed)"

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        if self.tv is not None:
            return self.tv(self.Image.fromarray(self.xn[i])), int(self.y[i])
        # ToTensor + Normalize equivalents (and RandomCrop/RandomHorizontalFlip) on tensors.
        img = self.x[i].permute(2, 0, 1).float().div(255)
        if self.augment:
            img = nn.functional.pad(img, (4, 4, 4, 4))
            dy, dx = torch.randint(0, 9, (2,)).tolist()
            img = img[:, dy:dy + 32, dx:dx + 32]
            if torch.rand(()) < 0.5:
                img = img.flip(2)
        return img.sub(0.5).div(0.5), int(self.y[i])


# ---------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="PyTorch reference for the benchmark table (eager FP32, eager AMP, torch.compile).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="simplecnn")
    p.add_argument("--precision", default="fp32", choices=["fp32", "amp-fp16", "amp-bf16", "fp16", "bf16"],
                   help="fp16/bf16 are aliases of amp-fp16/amp-bf16")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--compile-fallback", action="store_true", help="if compiling fails, run eager instead of exiting")
    p.add_argument("--compile-mode", default=None, help="torch.compile mode (default, reduce-overhead, max-autotune...)")
    p.add_argument("--data-mode", choices=["dataloader", "gpu"], default="gpu")
    p.add_argument("--data", default=None,
                   help="CIFAR-10 image folders (train/ + test/, or DIR/cifar10-jpeg) or their .tar.gz "
                        "[data/cifar10, then ../shared/data/cifar10-jpeg.tar.gz]")
    p.add_argument("--engine-cache", default=None, help="read our trainer's decoded cache (cache/cifar10-*.u8) instead")
    p.add_argument("--cache", default=os.path.join(ROOT, "cache"), help="where decoded images are cached ('' : none)")
    p.add_argument("--synthetic", type=int, default=0, metavar="N", help="random learnable data, N train images")
    p.add_argument("--subset", type=int, default=0, help="train on the first N images (class-balanced)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--optimizer", choices=["adam", "sgd", "adamw"], default="adam")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--nesterov", action="store_true")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--fused", action="store_true", help="fused optimizer kernels (PyTorch's default is foreach)")
    p.add_argument("--lr-schedule", choices=["constant", "onecycle"], default="constant")
    p.add_argument("--warmup", type=float, default=0.2, help="one-cycle warm-up fraction")
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--augment", action="store_true", help="random crop (pad 4) + horizontal flip")
    p.add_argument("--init-scale", type=float, default=65536.0, help="GradScaler init_scale (fp16)")
    p.add_argument("--growth-interval", type=int, default=2000, help="GradScaler growth_interval (fp16)")
    p.add_argument("--seed", type=int, default=0, help="initialisation, data order, augmentation, dropout")
    p.add_argument("--device", default=None, help="cuda | cuda:N | cpu [cuda when available]")
    p.add_argument("--max-steps", type=int, default=0, help="stop after N optimizer steps in total")
    p.add_argument("--timing-warmup", type=int, default=20, help="first N steps excluded from images/s")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (dataloader mode)")
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format (as our engine)")
    p.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    p.add_argument("--tf32", choices=["default", "on", "off"], default="default",
                   help="TF32 for FP32 convs/matmuls; default keeps PyTorch's (cuDNN convs on, matmuls off)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--json", default=None, metavar="FILE", help="write the results as one JSON object")
    p.add_argument("--log", default=None, metavar="FILE", help="JSON lines like our trainer's --log")
    a = p.parse_args(argv)
    a.precision = {"fp16": "amp-fp16", "bf16": "amp-bf16"}.get(a.precision, a.precision)
    for name in ("epochs", "batch_size", "log_every"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("subset", "max_steps", "synthetic", "timing_warmup", "workers", "threads"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if a.lr <= 0 or not 0 <= a.label_smoothing < 1 or not 0 <= a.warmup < 1 or a.weight_decay < 0:
        p.error("need --lr > 0, 0 <= --label-smoothing < 1, 0 <= --warmup < 1, --weight-decay >= 0")
    if a.nesterov and a.optimizer != "sgd":
        p.error("--nesterov applies to --optimizer sgd only")
    return a


class JsonLog:
    """Our trainer's --log format: one object per line with "event": step | epoch | summary."""

    def __init__(self, path):
        self.f = open(path, "w") if path else None

    def write(self, event, **fields):
        if self.f:
            clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in fields.items()}
            self.f.write(json.dumps({"event": event, **clean}) + "\n")
            self.f.flush()


def pick_device(arg):
    try:
        dev = torch.device(arg or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError as e:
        raise InputError(f"bad --device '{arg}': {e}")
    if dev.type not in ("cuda", "cpu"):
        raise InputError(f"--device must be cuda[:N] or cpu, got '{arg}'")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError("--device cuda, but PyTorch sees no CUDA device")
        if dev.index is None:  # torch.cuda.set_device needs an index
            dev = torch.device("cuda", torch.cuda.current_device())
        if dev.index >= torch.cuda.device_count():
            raise InputError(f"--device {arg}: only {torch.cuda.device_count()} CUDA device(s)")
    return dev


def run(a):
    dev = pick_device(a.device)
    cuda = dev.type == "cuda"
    if a.threads:
        torch.set_num_threads(a.threads)
    if cuda:
        torch.cuda.set_device(dev)
        torch.backends.cudnn.benchmark = a.cudnn_benchmark
        if a.tf32 != "default":
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.tf32 == "on"
    amp_dtype = {"fp32": None, "amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}[a.precision]
    torch.manual_seed(a.seed)  # initialisation and dropout

    # ---- data
    if a.synthetic:
        splits = synthetic(a.synthetic)
    elif a.engine_cache:
        splits = load_engine_cache(a.engine_cache)
    else:
        root = a.data
        if root is None:
            cands = [os.path.join(ROOT, "data", "cifar10")] + [
                os.path.join(ROOT, up, "shared", "data", "cifar10-jpeg.tar.gz") for up in ("..", ".")]
            root = next((c for c in cands if _locate(c)), cands[0])
        splits = load_cifar10(root, a.cache)
    train_x, train_y = splits.train_x, splits.train_y
    if a.subset:
        train_x, train_y = balanced_subset(train_x, train_y, a.subset)
    n_train, n_test = len(train_y), len(splits.test_y)
    if n_train == 0:
        raise InputError("the training set is empty")

    data_bytes = 0
    if a.data_mode == "gpu":  # whole set resident on the device as uint8 (+ int64 labels), like ours
        train_xd, train_yd = train_x.to(dev), train_y.to(dev)
        test_xd, test_yd = splits.test_x.to(dev), splits.test_y.to(dev)
        data_bytes = sum(t.numel() * t.element_size() for t in (train_xd, train_yd, test_xd, test_yd))
        transforms_name = "on-device indexing + crop/flip + normalise"
    else:
        train_ds = CifarDataset(train_x, train_y, a.augment)
        test_ds = CifarDataset(splits.test_x, splits.test_y, False)
        loader_gen = torch.Generator().manual_seed(a.seed)  # shuffle order and worker seeds
        train_loader = torch.utils.data.DataLoader(train_ds, batch_size=a.batch_size, shuffle=True,
                                                   num_workers=a.workers, pin_memory=cuda, generator=loader_gen)
        test_loader = torch.utils.data.DataLoader(test_ds, batch_size=a.batch_size, shuffle=False,
                                                  num_workers=a.workers, pin_memory=cuda)
        transforms_name = train_ds.transforms_name

    # ---- model, loss, optimizer, scaler
    model = MODELS[a.model](10).to(dev)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    n_params = sum(p.numel() for p in model.parameters())
    criterion = nn.CrossEntropyLoss(label_smoothing=a.label_smoothing)
    extra = {"fused": True} if a.fused else {}
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, nesterov=a.nesterov,
                              weight_decay=a.weight_decay, **extra)
    elif a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                               weight_decay=a.weight_decay, **extra)
    else:  # AdamW's own default decay is 0.01; ours is the flag's value
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=a.weight_decay, **extra)
    def make_scaler():  # GradScaler's defaults, as ours; torch.amp.GradScaler is PyTorch >= 2.3
        kw = dict(init_scale=a.init_scale, growth_factor=2.0, backoff_factor=0.5,
                  growth_interval=a.growth_interval, enabled=a.precision == "amp-fp16")
        if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
            return torch.amp.GradScaler(dev.type, **kw)
        return torch.cuda.amp.GradScaler(**kw)

    scaler = make_scaler()
    # Counts optimizer steps that really ran (GradScaler skips them on inf/NaN) at no extra sync.
    # Fused optimizers take the inf flag themselves and are always called: for them compare the
    # scale before and after update() on the device instead (GradScaler's private _scale).
    ran = [0]
    opt.register_step_post_hook(lambda *_: ran.__setitem__(0, ran[0] + 1))
    fused_skips = torch.zeros((), dtype=torch.int64, device=dev) if a.fused and a.precision == "amp-fp16" else None

    def skipped_steps(step):
        return int(fused_skips) if fused_skips is not None else step - ran[0]

    steps_per_epoch = (n_train + a.batch_size - 1) // a.batch_size
    total_steps = min(a.max_steps, steps_per_epoch * a.epochs) if a.max_steps else steps_per_epoch * a.epochs
    schedule_steps = steps_per_epoch * a.epochs  # the trainer's schedules span --epochs, whatever --max-steps

    def lr_at(step):  # the trainer's formula: linear warm-up, then linear decay
        if a.lr_schedule == "constant":
            return a.lr
        t = step / max(1, schedule_steps)
        return a.lr * t / a.warmup if t < a.warmup else a.lr * max(0.0, (1 - t) / (1 - a.warmup))

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    # ---- torch.compile: compiled lazily on first call, so probe it with forward+backward on dummy
    # batches and restore the weights, statistics and RNG after: failures surface here, and the
    # compile time stays out of the timed steps. dynamic=False: one static graph per batch shape
    # (full and last partial batch, both compiled here) instead of a dynamic-shape recompile
    # in the middle of the first epoch.
    net, compiled, compile_error, compile_seconds = model, False, None, None
    if a.compile:
        try:
            net = torch.compile(model, mode=a.compile_mode, dynamic=False)
            snap = {k: v.clone() for k, v in model.state_dict().items()}
            rng = torch.get_rng_state()
            cuda_rng = torch.cuda.get_rng_state(dev) if cuda else None
            t0 = time.perf_counter()
            try:
                sizes = {min(a.batch_size, n_train), n_train % a.batch_size} - {0}
                for size in sorted(sizes, reverse=True):
                    xb = torch.randn(size, 3, 32, 32, device=dev)
                    if a.channels_last:
                        xb = xb.contiguous(memory_format=torch.channels_last)
                    yb = torch.randint(0, 10, (size,), device=dev)
                    with torch.autocast(dev.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                        loss = criterion(net(xb), yb)
                    scaler.scale(loss).backward()
                sync()
            finally:
                model.load_state_dict(snap)
                model.zero_grad(set_to_none=True)
                torch.set_rng_state(rng)
                if cuda:
                    torch.cuda.set_rng_state(cuda_rng, dev)
            compile_seconds = time.perf_counter() - t0
            compiled = True
        except Exception as e:  # noqa: BLE001 - any backend failure means "compile unusable"
            # Dynamo appends generic advice lines ("Set TORCHDYNAMO_VERBOSE=1 ..."): keep the cause.
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            cause = [ln for ln in lines if not any(k in ln for k in ("TORCHDYNAMO_VERBOSE", "TORCH_LOGS", "developer context"))]
            compile_error = f"{type(e).__name__}: {(cause or lines or [''])[0]}"[:400]
            hint = " (on the CPU, inductor needs a working C++ compiler)" if not cuda else ""
            print(f"error: torch.compile failed: {compile_error}{hint}", file=sys.stderr)
            if not a.compile_fallback:
                raise InputError("torch.compile is unusable here; rerun with --compile-fallback to run eager instead")
            print("warning: --compile-fallback: running eager", file=sys.stderr)
            net = model
        scaler = make_scaler()  # the probe's scale() call created the scaler's state: start afresh

    def evaluate(autocast_dtype):
        net.eval()
        correct, loss_sum, n = 0, 0.0, 0
        with torch.no_grad(), torch.autocast(dev.type, dtype=autocast_dtype or torch.float32,
                                             enabled=autocast_dtype is not None):
            if a.data_mode == "gpu":
                batches = ((test_xd[i:i + a.batch_size], test_yd[i:i + a.batch_size]) for i in range(0, n_test, a.batch_size))
            else:
                batches = test_loader
            for xb, yb in batches:
                if a.data_mode == "gpu":
                    xb = gpu_batch(xb, slice(None), None, False, a.channels_last)
                else:
                    xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
                    if a.channels_last:
                        xb = xb.contiguous(memory_format=torch.channels_last)
                out = net(xb)
                loss_sum += nn.functional.cross_entropy(out.float(), yb, reduction="sum")
                correct += (out.argmax(1) == yb).sum()
                n += len(yb)
        net.train()
        return float(loss_sum) / max(1, n), 100.0 * int(correct) / max(1, n)

    dev_name = torch.cuda.get_device_name(dev) if cuda else (platform.processor() or platform.machine() or "cpu")
    print(f"pytorch {torch.__version__}, model {a.model} ({n_params} parameters), precision {a.precision}, "
          f"{'compiled' if compiled else 'eager'}, data mode {a.data_mode} ({transforms_name}), device {dev} ({dev_name})")
    print(f"data: {splits.source}; train {n_train} images, test {n_test} images, batch {a.batch_size}, "
          f"{steps_per_epoch} steps per epoch, optimizer {a.optimizer} lr {a.lr}")
    sys.stdout.flush()
    jlog = JsonLog(a.log)

    # ---- training
    order_gen = torch.Generator().manual_seed(a.seed)        # gpu mode: epoch order
    aug_gen = torch.Generator().manual_seed(a.seed + 0xA06)  # gpu mode: crop/flip draws
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    step, epoch_seconds, train_seconds = 0, [], 0.0
    timed_images, timed_seconds = 0, 0.0
    warm = a.timing_warmup if total_steps > a.timing_warmup else 0  # too short a run: time it all
    test_loss, test_acc = float("nan"), float("nan")
    epoch = 0
    while epoch < a.epochs and step < total_steps:
        if a.data_mode == "gpu":
            order = torch.randperm(n_train, generator=order_gen).to(dev)
            draws = None
            if a.augment:
                draws = (torch.randint(0, 9, (n_train,), generator=aug_gen).to(dev),
                         torch.randint(0, 9, (n_train,), generator=aug_gen).to(dev),
                         (torch.rand(n_train, generator=aug_gen) < 0.5).to(dev))
            batches = ((order[i * a.batch_size:(i + 1) * a.batch_size], None) for i in range(steps_per_epoch))
        else:
            batches = train_loader
        sync()
        t0 = time.perf_counter()
        t_epoch_warm, images_after_warm, epoch_images = None, 0, 0
        loss_sum, loss_count = 0.0, 0
        if step >= warm:
            t_epoch_warm = t0
        for i, (images, labels) in enumerate(batches):
            if step >= total_steps:
                break
            if a.data_mode == "gpu":
                idx = images
                images = gpu_batch(train_xd, idx, draws, a.augment, a.channels_last)
                labels = train_yd[idx]
            else:
                images = images.to(dev, non_blocking=True)
                labels = labels.to(dev, non_blocking=True)
                if a.channels_last:
                    images = images.contiguous(memory_format=torch.channels_last)
            if a.lr_schedule != "constant":
                for g in opt.param_groups:
                    g["lr"] = lr_at(step)
            # The classic AMP loop, exactly (FP32: autocast and the scaler disabled, same code).
            opt.zero_grad()
            with torch.autocast(dev.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                outputs = net(images)
                loss = criterion(outputs, labels)
            scaler.scale(loss).backward()
            scaler.step(opt)
            if fused_skips is not None:
                prev_scale = scaler._scale.clone()
            scaler.update()
            if fused_skips is not None:
                fused_skips += (scaler._scale < prev_scale).long().sum()
            step += 1
            epoch_images += len(labels)
            if t_epoch_warm is not None:
                images_after_warm += len(labels)
            if step == warm:  # warm-up over: the timed part starts after this step
                sync()
                t_epoch_warm = time.perf_counter()
            if (i + 1) % a.log_every == 0 or i == steps_per_epoch - 1 or step == total_steps:
                l = loss.item()  # a host sync: only when printed, as ours
                loss_sum, loss_count = loss_sum + l, loss_count + 1
                skipped = skipped_steps(step)
                print(f"Epoch [{epoch + 1}/{a.epochs}], Step [{i + 1}/{steps_per_epoch}], Loss: {l:.4f}, "
                      f"Scale: {scaler.get_scale():g}, Skipped: {skipped}")
                sys.stdout.flush()
                jlog.write("step", step=step, epoch=epoch + 1, loss=l, scale=scaler.get_scale(),
                           skipped=skipped, lr=opt.param_groups[0]["lr"])
        sync()
        t1 = time.perf_counter()
        secs = t1 - t0
        epoch_seconds.append(secs)
        train_seconds += secs
        if t_epoch_warm is not None:
            timed_seconds += t1 - t_epoch_warm
            timed_images += images_after_warm
        test_loss, test_acc = evaluate(amp_dtype)
        print(f"Epoch {epoch + 1}/{a.epochs} done: test loss {test_loss:.4f}, test accuracy {test_acc:.2f}%, "
              f"{epoch_images / secs:.0f} images/s, epoch time {secs:.1f} s")
        sys.stdout.flush()
        jlog.write("epoch", epoch=epoch + 1, step=step, test_loss=test_loss, test_accuracy=test_acc,
                   images_per_s=epoch_images / secs, epoch_seconds=secs,
                   train_loss=loss_sum / loss_count if loss_count else float("nan"))
        epoch += 1

    # ---- summary
    fp32_loss, fp32_acc = evaluate(None) if amp_dtype is not None else (test_loss, test_acc)
    peak = torch.cuda.max_memory_allocated(dev) if cuda else None
    peak_reserved = torch.cuda.max_memory_reserved(dev) if cuda else None
    ips = timed_images / timed_seconds if timed_seconds > 0 else None
    skipped = skipped_steps(step)
    print(f"\nSummary: pytorch {'compiled' if compiled else 'eager'}, {a.model}, {a.precision}, {a.data_mode} data, "
          f"{step} steps ({skipped} skipped for overflow), final loss scale {scaler.get_scale():g}")
    print(f"  test accuracy {test_acc:.2f}% ({a.precision} inference), {fp32_acc:.2f}% (FP32 inference)")
    print(f"  training time {train_seconds:.1f} s; {ips or 0:.0f} images/s over {timed_images} images after "
          f"{warm} warm-up steps")
    if cuda:
        print(f"  peak {dev} memory (max_memory_allocated): {peak / 2**20:.1f} MiB (reserved {peak_reserved / 2**20:.1f} MiB;"
              f" data on device {data_bytes / 2**20:.1f} MiB)")
    result = {
        "framework": "pytorch", "model": a.model, "precision": a.precision, "mode": a.data_mode,
        "compiled": compiled, "compile_requested": a.compile, "compile_error": compile_error,
        "compile_mode": a.compile_mode, "compile_seconds": compile_seconds,
        "images_per_s": ips, "epoch_seconds": epoch_seconds, "train_seconds": train_seconds,
        "timing_warmup_steps": warm, "timed_images": timed_images, "timed_seconds": timed_seconds,
        "peak_memory_bytes": peak, "peak_reserved_bytes": peak_reserved, "data_bytes_on_device": data_bytes,
        "test_accuracy": test_acc, "test_loss": test_loss, "test_accuracy_fp32_inference": fp32_acc,
        "steps": step, "skipped_steps": skipped, "final_scale": scaler.get_scale(), "epochs": epoch,
        "train_images": n_train, "test_images": n_test, "parameters": n_params, "data_source": splits.source,
        "transforms": transforms_name, "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda, "cudnn_version": torch.backends.cudnn.version() if cuda else None,
        "device": str(dev), "device_name": dev_name,
        "tf32": {"cudnn": torch.backends.cudnn.allow_tf32, "matmul": torch.backends.cuda.matmul.allow_tf32} if cuda else None,
        "cudnn_benchmark": torch.backends.cudnn.benchmark if cuda else None,
        "config": vars(a),
    }
    jlog.write("summary", system="pytorch-compiled" if compiled else "pytorch-eager", model=a.model,
               precision=a.precision, mode=a.data_mode, test_accuracy=test_acc,
               test_accuracy_fp32_inference=fp32_acc, train_seconds=train_seconds, images_per_s=ips,
               steps=step, skipped=skipped, peak_bytes=peak)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(a)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except torch.cuda.OutOfMemoryError as e:
        print(f"error: out of device memory: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
