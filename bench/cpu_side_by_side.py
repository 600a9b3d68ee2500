#!/usr/bin/env python3
"""The CPU training step, ours vs PyTorch eager, side by side in one run: simplecnn, batch 256,
Adam, the same number of threads, FP32 and BF16 (PyTorch: autocast on the CPU), on a resident
random batch (both sides time the step alone: forward, loss, backward, optimizer). Rounds
alternate between the two systems so that a noisy machine hurts both alike; the median of each
side over all rounds is reported with the ratio.

  python3 bench/cpu_side_by_side.py [--build build] [--threads 2] [--rounds 3] [--steps 15] [--json out.json]
                                    [--profile [--top 12]]   (then where each one's step goes, per op)
PyTorch is needed for its side only (a venv is fine); the engine does not use it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ours(build, threads, steps):
    """images/s per precision from one bench_train run."""
    out = os.path.join(build, "cpu_side_by_side.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    r = subprocess.run([os.path.join(build, "bench_train"), "--device", "cpu", "--models", "simplecnn", "--batch", "256",
                        "--steps", str(steps), "--json", out], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: bench_train failed: {r.stderr.strip() or r.stdout.strip()}")
    with open(out) as f:
        rows = json.load(f)["results"]
    return {r["precision"]: r["images_per_s"] for r in rows}


def pytorch_step(torch, prec):
    """PyTorch's training step for one precision (a fresh seeded model) as a closure."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pytorch_models
    torch.manual_seed(0)
    net = pytorch_models.simplecnn()
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    x = torch.rand(256, 3, 32, 32) * 2 - 1
    y = torch.randint(0, 10, (256,))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    step()  # warm-up: optimizer state, allocator
    return step


def theirs(torch, threads, steps):
    torch.set_num_threads(threads)
    result = {}
    for prec in ("f32", "bf16"):
        step = pytorch_step(torch, prec)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        result[prec] = 256 / statistics.median(times)
    return result


def profiles(torch, build, threads, steps, top):
    """Per-op time of one step, ours (bench_train --profile: host wall time per kernel) and
    PyTorch's (torch.profiler: self CPU time per aten op), printed one after the other."""
    out = os.path.join(build, "cpu_side_by_side_profile.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    r = subprocess.run([os.path.join(build, "bench_train"), "--device", "cpu", "--models", "simplecnn", "--batch", "256",
                        "--steps", str(steps), "--precisions", "f32,bf16", "--profile", "--json", out], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: bench_train --profile failed: {r.stderr.strip() or r.stdout.strip()}")
    with open(out) as f:
        ours_rows = {row["precision"]: row for row in json.load(f)["results"]}
    torch.set_num_threads(threads)
    from torch.profiler import ProfilerActivity, profile
    for prec in ("f32", "bf16"):
        row = ours_rows[prec]
        print(f"\n{prec}: ours, ms per step by kernel (profiled step {row['profiled_step_ms']:.1f} ms)")
        shown = 0.0
        for k in row["kernels"][:top]:
            shown += k["ms_per_step"]
            print(f"  {k['name']:40} {k['ms_per_step']:8.2f}")
        print(f"  {'(everything else)':40} {row['profiled_step_ms'] - shown:8.2f}")
        step = pytorch_step(torch, prec)
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        wall = (time.perf_counter() - t0) * 1e3 / steps
        ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        print(f"{prec}: PyTorch, ms per step by aten op, self CPU time (profiled step {wall:.1f} ms)")
        shown = 0.0
        for e in ops[:top]:
            ms = e.self_cpu_time_total / 1e3 / steps
            shown += ms
            print(f"  {e.key:40} {ms:8.2f}")
        print(f"  {'(everything else)':40} {wall - shown:8.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--json", default=None)
    p.add_argument("--profile", action="store_true", help="then the per-op tables of both, FP32 and BF16")
    p.add_argument("--top", type=int, default=12, help="rows of each per-op table")
    a = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.exit("error: PyTorch is not installed (pip install torch, in a venv if you like); it is needed for its side only")
    if not os.path.isfile(os.path.join(a.build, "bench_train")):
        sys.exit(f"error: no {a.build}/bench_train (build first: bash tests/run.sh, or pass --build DIR)")
    runs = {"ours": [], "pytorch": []}
    for r in range(a.rounds):
        runs["ours"].append(ours(a.build, a.threads, a.steps))
        runs["pytorch"].append(theirs(torch, a.threads, a.steps))
        print(f"round {r + 1}: ours {runs['ours'][-1]}, PyTorch {runs['pytorch'][-1]}", file=sys.stderr)
    summary = {}
    print(f"simplecnn, batch 256, Adam, {a.threads} threads, median of {a.rounds} rounds x {a.steps} steps; "
          f"PyTorch {torch.__version__} eager")
    print(f"{'precision':10} {'ours img/s':>11} {'PyTorch img/s':>14} {'ours / PyTorch':>15}")
    for prec in ("f32", "bf16", "f16"):
        o = statistics.median(run[prec] for run in runs["ours"])
        t = statistics.median(run[prec] for run in runs["pytorch"]) if prec in runs["pytorch"][0] else None
        summary[prec] = {"ours": o, "pytorch": t, "ratio": o / t if t else None}
        print(f"{prec:10} {o:11.0f} {t if t else float('nan'):14.0f} {(o / t) if t else float('nan'):14.2f}x")
    f32 = summary["f32"]["ours"]
    print(f"ours, 16-bit vs FP32: bf16 {summary['bf16']['ours'] / f32:.2f}x, f16 {summary['f16']['ours'] / f32:.2f}x")
    if a.profile:
        profiles(torch, a.build, a.threads, a.steps, a.top)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"benchmark": "cpu_side_by_side", "threads": a.threads, "torch": torch.__version__,
                       "results": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
