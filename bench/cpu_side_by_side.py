#!/usr/bin/env python3
"""The CPU training step, ours vs PyTorch eager, side by side in one run: simplecnn (batch 256),
resnet9 and resnet18 (batch 64), airbench94 on request (batch 1024, its recipe's), Adam, the same
number of threads, on a resident random batch (both sides time the step alone: forward, loss,
backward, optimizer). Ours in FP32 and BF16 (bench_train); PyTorch in FP32 and BF16 autocast,
each in NCHW and channels_last. Rounds alternate between the two systems so that a noisy machine
hurts both alike; the median of each over all rounds is reported, with ours against our FP32 and
against PyTorch's faster layout.

  python3 bench/cpu_side_by_side.py [--build build] [--models simplecnn,resnet9,resnet18] [--threads 2]
                                    [--rounds 3] [--steps 10] [--json out.json]
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
BATCH = {"simplecnn": 256, "resnet9": 64, "resnet18": 64, "airbench94": 1024}  # airbench94 at its recipe's batch
PYTORCH_CONFIGS = [("f32", "nchw"), ("f32", "channels_last"), ("bf16", "nchw"), ("bf16", "channels_last")]


def ours(build, model, threads, steps, profile_json=None):
    """images/s per precision (f32, bf16) from one bench_train run; with profile_json, its rows."""
    out = profile_json or os.path.join(build, "cpu_side_by_side.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    cmd = [os.path.join(build, "bench_train"), "--device", "cpu", "--models", model, "--batch", str(BATCH[model]),
           "--steps", str(steps), "--precisions", "f32,bf16", "--json", out]
    if profile_json:
        cmd.append("--profile")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: bench_train failed: {r.stderr.strip() or r.stdout.strip()}")
    with open(out) as f:
        rows = json.load(f)["results"]
    if profile_json:
        return {row["precision"]: row for row in rows}
    return {row["precision"]: row["images_per_s"] for row in rows}


def pytorch_step(torch, model, prec, layout):
    """PyTorch's training step for one configuration (a fresh seeded model) as a closure."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pytorch_models
    torch.manual_seed(0)
    batch = BATCH[model]
    net = getattr(pytorch_models, model)()
    x = torch.rand(batch, 3, 32, 32) * 2 - 1
    if layout == "channels_last":
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    step()  # warm-up: optimizer state, allocator, oneDNN's kernel choices
    step()
    return step


def theirs(torch, model, threads, steps):
    torch.set_num_threads(threads)
    result = {}
    for prec, layout in PYTORCH_CONFIGS:
        step = pytorch_step(torch, model, prec, layout)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        result[f"{prec} {layout}"] = BATCH[model] / statistics.median(times)
    return result


def profiles(torch, build, model, threads, steps, top):
    """Per-op time of one step, ours (bench_train --profile: host wall time per kernel) and
    PyTorch's in its faster layout for BF16 (torch.profiler: self CPU time per aten op)."""
    ours_rows = ours(build, model, threads, steps, os.path.join(build, "cpu_side_by_side_profile.json"))
    torch.set_num_threads(threads)
    from torch.profiler import ProfilerActivity, profile
    for prec in ("f32", "bf16"):
        row = ours_rows[prec]
        print(f"\n{model} {prec}: ours, ms per step by kernel (profiled step {row['profiled_step_ms']:.1f} ms)")
        shown = 0.0
        for k in row["kernels"][:top]:
            shown += k["ms_per_step"]
            print(f"  {k['name']:40} {k['ms_per_step']:8.2f}")
        print(f"  {'(everything else)':40} {row['profiled_step_ms'] - shown:8.2f}")
        step = pytorch_step(torch, model, prec, "channels_last")
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        wall = (time.perf_counter() - t0) * 1e3 / steps
        ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        print(f"{model} {prec}: PyTorch channels_last, ms per step by aten op, self CPU time "
              f"(profiled step {wall:.1f} ms)")
        shown = 0.0
        for e in ops[:top]:
            ms = e.self_cpu_time_total / 1e3 / steps
            shown += ms
            print(f"  {e.key:40} {ms:8.2f}")
        print(f"  {'(everything else)':40} {wall - shown:8.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--models", default="simplecnn,resnet9,resnet18")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--json", default=None)
    p.add_argument("--profile", action="store_true", help="then the per-op tables of both, FP32 and BF16")
    p.add_argument("--top", type=int, default=12, help="rows of each per-op table")
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    for m in models:
        if m not in BATCH:
            sys.exit(f"error: unknown model '{m}' (choose from {', '.join(BATCH)})")
    if a.rounds < 1 or a.steps < 1 or a.threads < 1:
        sys.exit("error: --rounds, --steps and --threads must be at least 1")
    try:
        import torch
    except ImportError:
        sys.exit("error: PyTorch is not installed (pip install torch, in a venv if you like); it is needed for its side only")
    if not os.path.isfile(os.path.join(a.build, "bench_train")):
        sys.exit(f"error: no {a.build}/bench_train (build first: bash tests/run.sh, or pass --build DIR)")
    # The ISA line of trainer --version: which matrix unit our side used.
    version = subprocess.run([os.path.join(a.build, "trainer"), "--version"], capture_output=True, text=True)
    isa = next((line for line in version.stdout.splitlines() if line.startswith("CPU ISA")), "CPU ISA: unknown")
    summary = {}
    for model in models:
        runs = {"ours": [], "pytorch": []}
        for r in range(a.rounds):
            runs["ours"].append(ours(a.build, model, a.threads, a.steps))
            runs["pytorch"].append(theirs(torch, model, a.threads, a.steps))
            print(f"{model} round {r + 1}: ours {runs['ours'][-1]}, PyTorch {runs['pytorch'][-1]}", file=sys.stderr)
        med = {k: statistics.median(run[k] for run in runs["ours"]) for k in ("f32", "bf16")}
        med_t = {k: statistics.median(run[k] for run in runs["pytorch"]) for k in runs["pytorch"][0]}
        summary[model] = {"batch": BATCH[model], "ours": med, "pytorch": med_t}
    print(f"\nTraining step, Adam, {a.threads} threads, images/s, median of {a.rounds} rounds x {a.steps} steps; "
          f"PyTorch {torch.__version__} eager")
    print(f"ours: {isa}")
    print(f"{'model':10} {'batch':>5} {'ours f32':>9} {'ours bf16':>10} {'bf16/f32':>9} {'PT f32':>7} {'PT f32 CL':>10} "
          f"{'PT bf16':>8} {'PT bf16 CL':>11} {'ours bf16 / PT bf16 best':>25}")
    for model, s in summary.items():
        o, t = s["ours"], s["pytorch"]
        best = max(t["bf16 nchw"], t["bf16 channels_last"])
        s["ratios"] = {"ours_bf16_over_f32": o["bf16"] / o["f32"], "ours_bf16_over_pytorch_bf16_best": o["bf16"] / best,
                       "ours_f32_over_pytorch_f32_best": o["f32"] / max(t["f32 nchw"], t["f32 channels_last"])}
        print(f"{model:10} {s['batch']:5d} {o['f32']:9.0f} {o['bf16']:10.0f} {o['bf16'] / o['f32']:8.2f}x "
              f"{t['f32 nchw']:7.0f} {t['f32 channels_last']:10.0f} {t['bf16 nchw']:8.0f} {t['bf16 channels_last']:11.0f} "
              f"{o['bf16'] / best:24.2f}x")
    if a.profile:
        for model in models:
            profiles(torch, a.build, model, a.threads, a.steps, a.top)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"benchmark": "cpu_side_by_side", "threads": a.threads, "torch": torch.__version__,
                       "isa": isa, "results": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
