#!/usr/bin/env python3
"""INT8 inference, ours vs PyTorch, side by side on one trained checkpoint: our trainer exports
the FP32 weights and INT8 files calibrated by each method (minmax, percentile, entropy) on N
training images; PyTorch loads the same FP32 weights into bench/pytorch_models.py's model and
quantizes it with its x86 backend (torch.ao.quantization, FX graph mode, the default x86 qconfig
mapping) calibrated on the very same images (every size/N-th of the training set, our trainer's
decoded pixels). Prints top-1 on the CIFAR-10 test set and images/s (eval forward, resident
batch, the same threads) for all four models: ours FP32 and INT8, PyTorch FP32 and INT8.
Rounds alternate between the two systems; medians are reported.

  python3 bench/int8_side_by_side.py --build build --checkpoint ck.bin --data DIR [--cache cache]
      [--calibrate 512] [--threads 2] [--batch 64] [--rounds 5] [--json out.json]
DIR holds CIFAR-10's train/ and test/ image folders (predict reads the test folders; PyTorch the
trainer's decoded cache of the same files). PyTorch is needed for its side only (a venv is fine);
the engine does not use it.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
METHODS = ["minmax", "percentile", "entropy"]


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return p.stdout


def our_accuracy(build, weights, test_dir, threads):
    out = run([os.path.join(build, "predict"), "--device", "cpu", "--threads", str(threads), "--batch-size", "500",
               "--weights", weights, test_dir])
    m = re.search(r"^accuracy ([0-9.]+)%", out, re.M)
    if not m:
        sys.exit(f"error: no accuracy line from predict on {test_dir}")
    return float(m.group(1))


def our_speed(build, model, batch, threads):
    """images/s of our FP32 (unfolded and folded, the faster) and INT8 eval forward."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = run([os.path.join(build, "bench_train"), "--inference", "--models", model, "--batch", str(batch),
               "--steps", "5", "--rounds", "1", "--precisions", "f32,int8"], env)  # the caller alternates the rounds
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0] == model and f[1] in ("f32", "int8"):
            key = "fp32" if f[1] == "f32" else "int8"
            rows[key] = max(rows.get(key, 0.0), float(f[4]))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--checkpoint", required=True, help="a trainer checkpoint (--checkpoint of a training run)")
    p.add_argument("--data", required=True)
    p.add_argument("--cache", default="cache")
    p.add_argument("--calibrate", type=int, default=512)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--work", default="int8_side_by_side")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    try:
        import torch
        from torch.ao.quantization import get_default_qconfig_mapping
        from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    except ImportError as e:
        sys.exit(f"error: PyTorch with torch.ao.quantization is needed for its side ({e})")
    import warnings
    import pytorch_models
    from pytorch_eval import load_weights
    from pytorch_reference import load_engine_cache

    os.makedirs(a.work, exist_ok=True)
    trainer = os.path.join(a.build, "trainer")
    fp32_file = os.path.join(a.work, "fp32.safetensors")
    run([trainer, "--resume", a.checkpoint, "--export", fp32_file])
    int8_files = {}
    for m in METHODS:
        int8_files[m] = os.path.join(a.work, f"int8-{m}.safetensors")
        run([trainer, "--resume", a.checkpoint, "--export", int8_files[m], "--export-dtype", "int8", "--calibrate",
             str(a.calibrate), "--calibration-method", m, "--data", a.data, "--cache", a.cache, "--threads",
             str(a.threads)])
    test_dirs = [d for d in glob.glob(os.path.join(a.data, "**", "test"), recursive=True) if os.path.isdir(d)]
    caches = sorted(glob.glob(os.path.join(a.cache, "cifar10-*.u8")))
    if not test_dirs or not caches:
        sys.exit(f"error: need test/ image folders under {a.data} and our decoded cache in {a.cache}")
    test_dir = test_dirs[0]

    state, meta = load_weights(fp32_file)
    model_name = meta.get("model", "simplecnn")
    splits = load_engine_cache(caches[-1])
    torch.set_num_threads(a.threads)
    torch.backends.quantized.engine = "x86"
    # Our trainer's calibration set: every (size / n)-th training image (models/int8_net.h).
    n = min(a.calibrate, len(splits.train_y))
    stride = len(splits.train_y) // n
    calib = pytorch_models.to_input(splits.train_x[0: n * stride: stride].numpy())
    test_x, test_y = splits.test_x, splits.test_y

    fp32 = pytorch_models.MODELS[model_name](10)
    fp32.load_state_dict(state)
    fp32.eval()
    # torch.ao's deprecation notices, once per call, silenced here only: the API is the yardstick.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")
        prepared = prepare_fx(fp32, get_default_qconfig_mapping("x86"), example_inputs=(calib[:1],))
        for i in range(0, len(calib), 128):
            prepared(calib[i:i + 128])
        int8 = convert_fx(prepared)

    def accuracy(net):
        correct = 0
        with torch.no_grad():
            for i in range(0, len(test_y), 500):
                z = net(pytorch_models.to_input(test_x[i:i + 500].numpy()))
                correct += int((z.argmax(1) == test_y[i:i + 500]).sum())
        return 100.0 * correct / len(test_y)

    def speed(net, batch_x):
        with torch.no_grad():
            net(batch_x)
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                net(batch_x)
                times.append(time.perf_counter() - t0)
        return len(batch_x) / statistics.median(times)

    fp32.load_state_dict(state)  # prepare_fx copied it; the eager model is unchanged
    results = {"model": model_name, "threads": a.threads, "batch": a.batch, "calibration_images": n}
    results["accuracy"] = {"ours fp32": our_accuracy(a.build, fp32_file, test_dir, a.threads),
                           "pytorch fp32": accuracy(fp32), "pytorch int8": accuracy(int8)}
    for m in METHODS:
        results["accuracy"][f"ours int8 {m}"] = our_accuracy(a.build, int8_files[m], test_dir, a.threads)
    batch_x = pytorch_models.to_input(test_x[: a.batch].numpy())
    speeds = {"ours fp32": [], "ours int8": [], "pytorch fp32": [], "pytorch int8": []}
    for _ in range(a.rounds):  # alternating, so a noisy machine hurts both alike
        ours = our_speed(a.build, model_name, a.batch, a.threads)
        speeds["ours fp32"].append(ours["fp32"])
        speeds["ours int8"].append(ours["int8"])
        speeds["pytorch fp32"].append(speed(fp32, batch_x))
        speeds["pytorch int8"].append(speed(int8, batch_x))
    results["images_per_s"] = {k: statistics.median(v) for k, v in speeds.items()}

    print(f"{model_name}, batch {a.batch}, {a.threads} threads, {n} calibration images, torch {torch.__version__}")
    print(f"{'':24} {'top-1 %':>8} {'images/s':>10}")
    for k, v in results["accuracy"].items():
        s = results["images_per_s"].get(k, results["images_per_s"].get("ours int8") if k.startswith("ours int8") else None)
        print(f"{k:24} {v:8.2f} {s if s is None else round(s):>10}")
    ips = results["images_per_s"]
    print(f"ours INT8 / PyTorch INT8: {ips['ours int8'] / ips['pytorch int8']:.2f}x; "
          f"ours INT8 / ours FP32: {ips['ours int8'] / ips['ours fp32']:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
