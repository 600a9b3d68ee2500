#!/usr/bin/env python3
"""Our trained weights in PyTorch: loads a `trainer --export` safetensors file into
bench/pytorch_models.py's model with load_state_dict (no renaming) and evaluates it on the
very test pixels our trainer evaluates (its decoded cache, stb_image's decode), so PyTorch's
test accuracy can be compared with ours to the image. With --predictions (the output of
`predict --json` over the same test folders), it also counts the images whose top class differs.

  python3 bench/pytorch_eval.py --weights model.safetensors --engine-cache cache/cifar10-*.u8 \\
      [--predictions ours.jsonl] [--device cpu|cuda] [--precision fp32|fp16|bf16]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
except ImportError:
    sys.exit("error: PyTorch is not installed (this check needs it; the engine itself does not)")
import pytorch_models  # noqa: E402
from pytorch_reference import InputError, load_engine_cache  # noqa: E402


def load_weights(path):
    try:
        import safetensors.torch
        from safetensors import safe_open
        with safe_open(path, "pt") as f:
            meta = f.metadata() or {}
        return safetensors.torch.load_file(path), meta
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        from export_check import read_safetensors_torch
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            meta = json.loads(f.read(n)).get("__metadata__", {})
        return read_safetensors_torch(path), meta


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--weights", required=True)
    p.add_argument("--model", default=None, help="default: the file's own (metadata), else simplecnn")
    p.add_argument("--engine-cache", required=True, help="our trainer's decoded cache (cache/cifar10-*.u8)")
    p.add_argument("--predictions", default=None, help="predict --json output over the test folders")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    p.add_argument("--batch-size", type=int, default=500)
    a = p.parse_args(argv)
    try:
        state, meta = load_weights(a.weights)
        model = a.model or meta.get("model", "simplecnn")
        classes = meta["classes"].split(",") if meta.get("classes") else None
        net = pytorch_models.MODELS[model](len(classes) if classes else 10)
        net.load_state_dict(state)
        net.eval().to(a.device)
        splits = load_engine_cache(a.engine_cache)
    except (InputError, OSError, RuntimeError, KeyError, ValueError) as e:
        sys.exit(f"error: {e}")
    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[a.precision]
    # FP32 means FP32: no TF32 Tensor Core rounding of convolution and matmul inputs on the GPU.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tops = []
    with torch.no_grad(), torch.autocast(a.device.split(":")[0], dtype=dtype, enabled=dtype is not None):
        for b in range(0, len(splits.test_y), a.batch_size):
            x = pytorch_models.to_input(splits.test_x[b:b + a.batch_size]).to(a.device)
            tops.append(net(x).float().argmax(1).cpu())
    top = torch.cat(tops)
    correct = int((top == splits.test_y).sum())
    n = len(top)
    print(f"PyTorch {torch.__version__} {model} ({a.precision}, {a.device}) from {a.weights}: "
          f"test accuracy {100.0 * correct / n:.2f}% ({correct} of {n})")
    if a.predictions:
        with open(a.predictions) as f:
            ours = [json.loads(line) for line in f if line.strip()]
        if len(ours) != n:
            sys.exit(f"error: {a.predictions} has {len(ours)} predictions, the test set {n} images")
        names = classes or []
        ours_top = [names.index(r["top"][0]["class"]) for r in ours]
        differ = sum(int(o != int(t)) for o, t in zip(ours_top, top))
        ours_correct = sum(int(o == int(y)) for o, y in zip(ours_top, splits.test_y))
        print(f"ours (predict --json): {ours_correct} of {n} correct; top class differs on {differ} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
