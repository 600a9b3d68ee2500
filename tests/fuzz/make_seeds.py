#!/usr/bin/env python3
"""Writes the fuzzers' seed corpus (tests/fuzz/corpus/<harness>/): a few small valid inputs
of each kind, written from the formats' specifications (engine/checkpoint.cpp's header,
engine/safetensors.h, data/cifar.h), so the fuzzers start from the inside of each format.
The JPEG seeds (rgb32.jpg, gray9x11.jpg) were written once with stb_image_write (a 32x32
RGB and a 9x11 grey gradient); this script leaves them as they are.
  python3 tests/fuzz/make_seeds.py"""
import json
import os
import struct
import zlib

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(harness, name, data):
    with open(os.path.join(here, harness, name), "wb") as f:
        f.write(data)


def fnv1a64(b):
    h = 1469598103934665603
    for c in b:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def checkpoint(meta, tensors):
    """tensors: (name, dtype code, shape, bytes); dtype codes as engine/dtype.h orders them (F32 0 ... I64 6)."""
    s = lambda t: struct.pack("<I", len(t)) + t.encode()
    p = struct.pack("<I", len(meta)) + b"".join(s(k) + s(v) for k, v in sorted(meta.items()))
    p += struct.pack("<I", len(tensors))
    for name, code, shape, data in tensors:
        p += s(name) + struct.pack("<BB", code, len(shape)) + b"".join(struct.pack("<q", d) for d in shape)
        p += struct.pack("<Q", len(data)) + data
    return b"MPCNNCKP" + struct.pack("<IQ", 1, len(p)) + p + struct.pack("<Q", fnv1a64(p))


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def png(w, h, color_type=2):
    channels = {0: 1, 2: 3, 6: 4}[color_type]
    rows = b"".join(b"\x00" + bytes((x * 7 + y * 3 + c * 50) & 255 for x in range(w) for c in range(channels))
                    for y in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


f32 = lambda *v: struct.pack("<%df" % len(v), *v)
put("checkpoint", "small.ckpt", checkpoint({"model": "simplecnn", "step": "3", "scaler/scale": "0x1p+16"},
                                           [("param/conv1.weight", 0, [2, 2], f32(1, 2, 3, 4)),
                                            ("state/count", 6, [1], struct.pack("<q", 7))]))
put("checkpoint", "empty.ckpt", checkpoint({}, []))
put("safetensors", "small.safetensors", safetensors([("fc.weight", "F32", [2, 3], f32(*range(6))),
                                                     ("fc.bias", "F16", [2], b"\x00\x3c\x00\x40")],
                                                    {"model": "simplecnn", "classes": "a,b"}))
put("safetensors", "scalar.safetensors", safetensors([("x", "I64", [], struct.pack("<q", 1))]))
record = lambda label: bytes([label]) + bytes((i * 13 + label) & 255 for i in range(3072))
put("cifar_binary", "one.bin", record(3))
put("image", "rgb32.png", png(32, 32))
put("image", "gray7x5.png", png(7, 5, 0))
put("image", "rgba33.png", png(33, 33, 6))
put("trainer_args", "resnet.args", b"\0".join([b"--model", b"resnet9", b"--precision=bf16", b"--epochs", b"3",
                                                b"--checkpoint", b"a.ckpt", b"--checkpoint-every", b"5"]))
put("trainer_args", "amp.args", b"\0".join([b"--lr", b"0.01", b"--optimizer", b"sgd", b"--nesterov", b"--momentum",
                                             b"0.9", b"--detect-anomaly=strict", b"--fp32-layers", b"conv1,fc"]))
put("predict_args", "predict.args", b"\0".join([b"--weights", b"m.safetensors", b"--top-k=2", b"--resize",
                                                 b"--precision", b"fp16", b"img.png", b"dir/"]))
