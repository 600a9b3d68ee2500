#!/usr/bin/env python3
"""airbench94 side by side: our trainer's `--recipe airbench94` and a PyTorch twin of the same
recipe, written by us from the published description (docs/airbench.md), on the same CIFAR-10
copy (the very pixels: our trainer's decoded cache), seed by seed, in fp32, bf16 and fp16.

Each run appends one JSON line to --results (default build/airbench/results.jsonl): system,
precision, seed, TTA accuracy, accuracy without TTA, the time to the result (whitening,
training and the TTA evaluation) and the training time. Runs already in the file are skipped,
so a sweep that is stopped resumes where it left off; `--table` prints the per-seed table,
means, standard deviations and the gaps without running anything.

  python3 bench/airbench_side_by_side.py --seeds 1-5 --precisions bf16,fp32 [--systems ours,twin]
      [--build build] [--data DIR] [--threads 2] [--channels-last] [--epochs 9.9] [--table]
      [--results docs/airbench-runs.jsonl]   (the sweep's rows so far, kept with the tree)

The twin's fp16 is skipped on the CPU (--twin-fp16-anyway runs it): PyTorch's CPU fp16 took
78 s a step on an AMD EPYC without AVX512-FP16 (18x its fp32), and on a Xeon with AVX512-FP16
(AMX for BF16 only) had not finished its second step after 100 minutes; it waits for the GPU. Diagnostics of the twin, listed apart from the
recipe's rows: --twin-weights 16bit (airbench's own dtypes: 16-bit weights and inputs, batch-norm
in FP32, no master copy), 16bit-all (batch-norm 16-bit too) or fp16-autocast (FP16 weights and
inputs under the precision's autocast, as airbench's code would run under CPU bf16 autocast), and
--stop-after-epochs K (the full schedule, stopped after K epochs, the weights set to the lookahead
average and evaluated, with the share of weights a step left bit-identical). A row given
"time_shared": true by hand (its run shared the machine with other work) keeps its accuracy in
the table and drops out of the times.

Ablations of our recipe, one piece off at a time (--systems ours --ablate PIECE, rows listed
apart with their mean against the recipe's over the same seeds): no-whiten (the first layer
learned from its default init), no-dirac, no-lookahead, no-label-smoothing, random-flip (a coin
per image each epoch instead of alternating), no-translate, norm-lr-1 (batch-norm shifts at the
common lr), bias-all-epochs (the whitening bias never frozen). Test-time augmentation needs no
run of its own: every row has the accuracy without it.

The twin (train_twin) is the recipe in plain PyTorch: nn.Sequential from bench/pytorch_models.py,
SGD with two parameter groups, a hand-written triangle schedule and lookahead, the batch built
on the whole resident data set (alternating flips, reflect-padded random translation), and
test-time augmentation at the end; fp16 as AMP (autocast + GradScaler), bf16 as autocast.
PyTorch is needed for the twin only (a venv is fine); the engine does not use it.
"""
import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

# The recipe (models/trainer_args.cpp apply_recipe derives the same values the same way).
MOMENTUM, LR_PER_1024, DECAY_PER_1024, NORM_LR_SCALE = 0.85, 11.5, 0.0153, 64.0
BATCH, EPOCHS, LABEL_SMOOTHING, WHITEN_IMAGES, WHITEN_EPS = 1024, 9.9, 0.2, 5000, 5e-4
WHITEN_BIAS_EPOCHS, EMA_EVERY, EMA_RATE = 3, 5, 0.95
LR_START, LR_PEAK_AT, LR_END = 0.2, 0.23, 0.07

# --ablate: each piece of the recipe off, as our trainer's flags (docs/airbench.md).
ABLATIONS = {
    "no-whiten": ["--no-whiten"],
    "no-dirac": ["--no-dirac"],
    "no-lookahead": ["--no-ema"],
    "no-label-smoothing": ["--label-smoothing", "0"],
    "random-flip": ["--flip", "random"],
    "no-translate": ["--crop-pad", "0"],
    "norm-lr-1": ["--norm-lr-scale", "1"],
    "bias-all-epochs": ["--freeze-after", "0.bias=1000"],
}


def parse_seeds(s):
    out = []
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    if not out:
        sys.exit(f"error: --seeds expects numbers or ranges like 1-5,8, got '{s}'")
    return out


# ---- ours: the trainer's recipe ----------------------------------------------------------------------

def run_ours(a, precision, seed, log):
    cmd = [os.path.join(a.build, "trainer"), "--recipe", "airbench94", "--device", "cpu", "--precision", precision,
           "--seed", str(seed), "--threads", str(a.threads), "--log", log, "--cache", a.cache, "--epochs", str(a.epochs)]
    cmd += ABLATIONS.get(a.ablate, [])
    if a.data:
        cmd += ["--data", a.data]
    if os.path.exists(log):
        os.remove(log)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: our trainer failed (seed {seed}, {precision}):\n{r.stderr.strip()[-2000:]}")
    tta = summary = None
    with open(log) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "tta":
                tta = e
            elif e.get("event") == "summary":
                summary = e
    if tta is None:
        sys.exit(f"error: no TTA line in {log}")
    return {"tta_accuracy": tta["tta_accuracy"], "accuracy": tta["accuracy"], "seconds": tta["seconds"],
            "train_seconds": tta["train_seconds"], "skipped": summary.get("skipped", 0) if summary else None}


def engine_cache(a):
    """Our trainer's decoded cache: made by a short run of ours when there is none yet."""
    found = sorted(glob.glob(os.path.join(a.cache, "cifar10-*.u8")))
    if not found:
        cmd = [os.path.join(a.build, "trainer"), "--device", "cpu", "--max-steps", "1", "--cache", a.cache]
        if a.data:
            cmd += ["--data", a.data]
        subprocess.run(cmd, check=True, capture_output=True)
        found = sorted(glob.glob(os.path.join(a.cache, "cifar10-*.u8")))
    if not found:
        sys.exit(f"error: no CIFAR-10 cache in {a.cache} (is the data there? --data DIR)")
    return found[-1]


# ---- the twin ----------------------------------------------------------------------------------------

def train_twin(a, precision, seed, splits):
    import torch
    import torch.nn.functional as F
    import pytorch_models

    torch.manual_seed(seed)
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(seed)
    mean = torch.tensor(pytorch_models.CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(pytorch_models.CIFAR10_STD).view(1, 3, 1, 1)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format

    net = pytorch_models.airbench94().to(memory_format=fmt)
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    # --twin-weights 16bit: airbench's own dtype handling. Every module but batch-norm holds its
    # weights in the 16-bit dtype, SGD updates them in place (no FP32 master copy), the inputs are
    # 16-bit and the lookahead average keeps each tensor's dtype. 16bit-all: batch-norm's shift and
    # statistics in the 16-bit dtype too (a suspect of the bf16 stall). fp16-autocast: airbench's code
    # as it stands (FP16 weights and inputs) under the precision's autocast. Otherwise FP32 weights
    # and autocast.
    pure16 = a.twin_weights != "fp32" and autocast_dtype is not None
    weight_dtype = torch.float16 if a.twin_weights == "fp16-autocast" else autocast_dtype
    if pure16:
        net = net.to(weight_dtype)
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d) and a.twin_weights != "16bit-all":
                m.float()
    input_dtype = weight_dtype if pure16 else torch.float32

    def normalise(u8_nchw):
        return ((u8_nchw.float() / 255.0 - mean) / std).to(input_dtype).contiguous(memory_format=fmt)

    train_u8 = splits.train_x.permute(0, 3, 1, 2).contiguous()  # NCHW uint8; batches normalised as built
    train_y = splits.train_y
    test_x, test_y = normalise(splits.test_x.permute(0, 3, 1, 2)), splits.test_y
    n = train_u8.shape[0]
    steps_per_epoch = n // BATCH
    total = math.ceil(a.epochs * steps_per_epoch)

    t0 = time.perf_counter()
    # The whitening layer: the covariance of all 2x2 patches of WHITEN_IMAGES random images.
    with torch.no_grad():
        pick = torch.randperm(n, generator=gen)[:WHITEN_IMAGES]
        x = normalise(train_u8[pick]).double()  # (via the input dtype, as the net will see it)
        patches = x.unfold(2, 2, 1).unfold(3, 2, 1)  # [b, c, 31, 31, 2, 2]
        patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, 12)  # (c, row, column): OIHW's order
        cov = patches.T @ patches / patches.shape[0]
        values, vectors = torch.linalg.eigh(cov)
        filt = (vectors.T / torch.sqrt(values + WHITEN_EPS)[:, None]).reshape(12, 3, 2, 2)
        net[0].weight.copy_(torch.cat([filt, -filt]).float())
    setup_seconds = time.perf_counter() - t0

    lr = LR_PER_1024 / (1024 * (1 + 1 / (1 - MOMENTUM)))
    wd = DECAY_PER_1024 * 1024 / LR_PER_1024
    norm_biases = [p for name, p in net.named_parameters() if p.requires_grad and isinstance(
        dict(net.named_modules())[name.rsplit(".", 1)[0]], torch.nn.BatchNorm2d)]
    others = [p for p in net.parameters() if p.requires_grad and all(p is not q for q in norm_biases)]
    opt = torch.optim.SGD([{"params": norm_biases, "lr": lr * NORM_LR_SCALE, "weight_decay": wd / NORM_LR_SCALE},
                           {"params": others, "lr": lr, "weight_decay": wd}], momentum=MOMENTUM, nesterov=True)
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
    peak = int(LR_PEAK_AT * total)

    def lr_factor(step):
        if step < peak:
            return LR_START + (1 - LR_START) * step / peak
        return 1 + (LR_END - 1) * (step - peak) / max(1, total - peak)

    # Lookahead: FP32 copies of every float tensor of the state (weights and BN statistics);
    # in each tensor's own dtype under --twin-weights 16bit, as airbench keeps it.
    average = {k: v.detach().clone() if pure16 else v.detach().clone().float()
               for k, v in net.state_dict().items() if v.is_floating_point()}

    def lookahead(decay):
        with torch.no_grad():
            state = net.state_dict()
            for k, avg in average.items():
                avg.lerp_(state[k].to(avg.dtype), 1 - decay)
                state[k].copy_(avg)

    # No scaler for 16-bit weights: airbench has none, and GradScaler refuses to unscale FP16 gradients.
    scaler = torch.amp.GradScaler("cpu", init_scale=a.twin_init_scale) if precision == "fp16" and not pure16 else None
    use_autocast = autocast_dtype is not None and (not pure16 or a.twin_weights == "fp16-autocast")
    flip_base = torch.rand(n, generator=gen) < 0.5
    # Reflect-padded once (as uint8: padding commutes with the per-channel normalisation).
    padded = F.pad(train_u8.float(), (2, 2, 2, 2), mode="reflect").to(torch.uint8)
    whiten_bias_steps = math.ceil(WHITEN_BIAS_EPOCHS * steps_per_epoch)
    step, train_seconds = 0, 0.0
    unchanged = [0, 0]  # weights (not batch-norm shifts) a step left bit-identical, of all weights stepped
    net.train()
    for epoch in range(a.stop_after_epochs or math.ceil(a.epochs)):  # main keeps K below the schedule
        e0 = time.perf_counter()
        # Translation by -2..2 pixels per image, then the alternating flip.
        shifts = torch.randint(0, 5, (n, 2), generator=gen)
        images = torch.empty_like(train_u8)
        for dy in range(5):
            for dx in range(5):
                sel = (shifts[:, 0] == dy) & (shifts[:, 1] == dx)
                images[sel] = padded[sel, :, dy:dy + 32, dx:dx + 32]
        flip = flip_base ^ (epoch % 2 == 1)
        images[flip] = images[flip].flip(-1)
        order = torch.randperm(n, generator=gen)
        for i in range(steps_per_epoch):
            if step >= total:
                break
            idx = order[i * BATCH:(i + 1) * BATCH]
            net[0].bias.requires_grad_(step < whiten_bias_steps)
            for g in opt.param_groups:
                g["lr"] = g["initial_lr"] * lr_factor(step)
            with torch.autocast("cpu", dtype=autocast_dtype, enabled=use_autocast):
                loss = F.cross_entropy(net(normalise(images[idx])), train_y[idx], label_smoothing=LABEL_SMOOTHING,
                                       reduction="sum")
            opt.zero_grad(set_to_none=True)
            before = [p.detach().clone() for p in others] if a.stop_after_epochs is not None else None
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            if before is not None:  # diagnostic: how many weights did this step leave bit-identical?
                unchanged[0] += sum(int((p.detach() == b).sum()) for p, b in zip(others, before))
                unchanged[1] += sum(b.numel() for b in before)
            step += 1
            if step % EMA_EVERY == 0:
                lookahead(EMA_RATE ** EMA_EVERY * (step / total) ** 3)
            if step == total:
                lookahead(1.0)  # the weights set to the average
        train_seconds += time.perf_counter() - e0
    if a.stop_after_epochs is not None:
        lookahead(1.0)  # a diagnostic run stopped early: the weights set to the average, as at the end

    # Test-time augmentation: 0.5 x mean(image, mirror) + 0.5 x mean over two translated views.
    e0 = time.perf_counter()
    net.eval()
    correct = correct_plain = 0
    with torch.no_grad(), torch.autocast("cpu", dtype=autocast_dtype, enabled=use_autocast):
        for b in range(0, test_x.shape[0], 2000):
            x = test_x[b:b + 2000]

            def mirror_mean(v, own=None):
                return 0.5 * ((net(v).float() if own is None else own) + net(v.flip(-1)).float())

            plain = net(x).float()
            p = F.pad(x, (1, 1, 1, 1), mode="reflect")
            logits = 0.5 * mirror_mean(x, plain) + 0.25 * (mirror_mean(p[:, :, 0:32, 0:32]) +
                                                           mirror_mean(p[:, :, 2:34, 2:34]))
            correct += (logits.argmax(1) == test_y[b:b + 2000]).sum().item()
            correct_plain += (plain.argmax(1) == test_y[b:b + 2000]).sum().item()
    eval_seconds = time.perf_counter() - e0
    m = test_x.shape[0]
    return {"tta_accuracy": 100.0 * correct / m, "accuracy": 100.0 * correct_plain / m,
            "seconds": setup_seconds + train_seconds + eval_seconds, "train_seconds": train_seconds,
            "skipped": None, "unchanged_fraction": unchanged[0] / unchanged[1] if unchanged[1] else None}


def cpu_info():
    """The CPU's model name and its flags."""
    name, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name == "unknown":
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, flags


def cpu_model():
    """The CPU's model name and its matrix units, for the record: times compare within one CPU only."""
    name, flags = cpu_info()
    units = [u for u in ("amx_bf16", "avx512_bf16", "avx512_fp16") if u in flags]
    return name + (" (" + ", ".join(units) + ")" if units else "")


def commit_of(build):
    """The commit the trainer was built at: <build>/COMMIT when a sweep runs a copied binary,
    else the checkout's HEAD."""
    path = os.path.join(build, "COMMIT")
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip()
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


# ---- the table ---------------------------------------------------------------------------------------

def load_results(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    return rows


def key(r):
    return (r["system"], r["precision"], r["seed"], r.get("epochs", EPOCHS), r.get("channels_last", False),
            r.get("weights", "fp32"), r.get("stop_after_epochs"), r.get("ablation"))


def variant(r):
    """How a row's run differs from the recipe's default, for the table ('' when it does not)."""
    parts = []
    if r.get("weights", "fp32") != "fp32" and r["precision"] != "fp32":
        parts.append(f"{r['weights']} weights")
    if r.get("stop_after_epochs") is not None:
        k = r["stop_after_epochs"]
        parts.append(f"stopped after {k} epoch{'s' if k != 1 else ''}")
    if r.get("epochs", EPOCHS) != EPOCHS:
        parts.append(f"{r['epochs']:g}-epoch schedule")
    if r.get("ablation"):
        parts.append(f"ablation {r['ablation']}")
    return ", ".join(parts)


def system_of(r):
    """A row's system as the table lists it: the twin by its layout, since NCHW and channels_last
    run other kernels (and take other times), so their rows are never averaged together."""
    if r["system"] != "twin":
        return r["system"]
    return "twin-cl" if r.get("channels_last") else "twin-nchw"


def median_time(rs):
    """The median time to the result of the runs that had the machine to themselves ('-' if none)."""
    t = [r["seconds"] for r in rs if not r.get("time_shared")]
    return f"{statistics.median(t):.0f}" if t else "-"


def gap(a_rows, b_rows):
    """Mean TTA accuracy of a_rows minus b_rows, and 3 standard errors of that difference."""
    accs = [[r["tta_accuracy"] for r in x] for x in (a_rows, b_rows)]
    sd = [statistics.stdev(x) if len(x) > 1 else float("nan") for x in accs]
    se = math.sqrt(sd[0] ** 2 / len(accs[0]) + sd[1] ** 2 / len(accs[1]))
    return statistics.mean(accs[0]) - statistics.mean(accs[1]), 3 * se


def table(rows):
    by, variants = {}, {}
    for r in rows:
        if variant(r):  # diagnostic runs listed apart, never averaged with the recipe's
            variants.setdefault((system_of(r), r["precision"], variant(r)), []).append(r)
        else:
            by.setdefault((system_of(r), r["precision"]), []).append(r)
    print(f"{'system':9} {'prec':5} {'seeds':>5} {'TTA mean':>9} {'SD':>6} {'no-TTA':>7} {'time s':>8}  per seed (TTA %)")
    for (system, prec), rs in sorted(by.items()):
        rs.sort(key=lambda r: r["seed"])
        acc = [r["tta_accuracy"] for r in rs]
        sd = statistics.stdev(acc) if len(acc) > 1 else float("nan")
        print(f"{system:9} {prec:5} {len(rs):5d} {statistics.mean(acc):9.2f} {sd:6.2f} "
              f"{statistics.mean(r['accuracy'] for r in rs):7.2f} {median_time(rs):>8}  "
              + " ".join(f"{r['seed']}:{r['tta_accuracy']:.2f}" for r in rs))
    for (system, prec, what), rs in sorted(variants.items()):
        rs.sort(key=lambda r: r["seed"])
        print(f"{system} {prec} ({what}): " + ", ".join(
            f"seed {r['seed']}: {r['tta_accuracy']:.2f}% TTA, {r['accuracy']:.2f}% plain"
            + (f", {100 * r['unchanged_fraction']:.1f}% of weights unchanged a step" if r.get("unchanged_fraction") is not None else "")
            for r in rs))
        if rs[0].get("ablation"):  # against the recipe's runs of the same seeds
            recipe = {r["seed"]: r for r in by.get((system, prec), [])}
            paired = [r for r in rs if r["seed"] in recipe]
            if paired:
                off = statistics.mean(r["tta_accuracy"] for r in paired)
                on = statistics.mean(recipe[r["seed"]]["tta_accuracy"] for r in paired)
                print(f"    {len(paired)} seed{'s' if len(paired) != 1 else ''}: {off:.2f} without the piece, "
                      f"{on:.2f} with it: the piece buys {on - off:+.2f} points")
    fp32 = by.get(("ours", "fp32"))
    for prec in ("fp16", "bf16"):
        o = by.get(("ours", prec))
        if o and fp32:
            d, se3 = gap(o, fp32)
            print(f"ours {prec} - ours fp32 = {d:+.2f} points (3 standard errors {se3:.2f})")
    for prec, twin in sorted({(p, s) for s, p in by if s.startswith("twin")}):
        o, t = by.get(("ours", prec)), by.get((twin, prec))
        if o and t:
            d, se3 = gap(o, t)
            print(f"{prec}: ours - {twin} = {d:+.2f} points (3 standard errors {se3:.2f})")
            # Times only within one CPU (a sweep may span sessions on different machines).
            common = sorted(({r.get("cpu") for r in o} & {r.get("cpu") for r in t}) - {None})
            if not common:
                print("    time to the result: no CPU ran both (rows without a CPU are not compared)")
            for cpu in common:
                # A row marked "time_shared" ran beside other work: its accuracy counts, its time does not.
                so_ = [r["seconds"] for r in o if r.get("cpu") == cpu and not r.get("time_shared")]
                st_ = [r["seconds"] for r in t if r.get("cpu") == cpu and not r.get("time_shared")]
                if not so_ or not st_:
                    print(f"    time to the result on {cpu}: no run of one side had the machine to itself")
                    continue
                print(f"    time to the result on {cpu}: {twin} / ours = "
                      f"{statistics.median(st_) / statistics.median(so_):.2f}x ({len(so_)} and {len(st_)} runs)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--precisions", default="fp16,bf16,fp32")
    ap.add_argument("--systems", default="ours,twin")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", default="", help="CIFAR-10 folders (our trainer's --data)")
    ap.add_argument("--cache", default=os.path.join(ROOT, "build", "airbench", "cache"))
    ap.add_argument("--results", default=os.path.join(ROOT, "build", "airbench", "results.jsonl"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=float, default=EPOCHS)
    ap.add_argument("--channels-last", action="store_true", help="the twin in channels_last")
    ap.add_argument("--twin-init-scale", type=float, default=2048.0, help="the twin's fp16 GradScaler start")
    ap.add_argument("--twin-weights", choices=("fp32", "16bit", "16bit-all", "fp16-autocast"), default="fp32",
                    help="fp32: FP32 weights under autocast (the default); 16bit: airbench's own handling, "
                         "weights and inputs in the 16-bit dtype, batch-norm in FP32, no master copy; "
                         "16bit-all: batch-norm in the 16-bit dtype as well; fp16-autocast: FP16 weights and "
                         "inputs (airbench's code as it stands) under the precision's autocast. At fp32 every "
                         "choice is the recipe's FP32 twin")
    ap.add_argument("--stop-after-epochs", type=int, default=None,
                    help="diagnostic: the twin stops after K epochs of the full schedule, its weights set to "
                         "the lookahead average (as at the recipe's end), and is evaluated (rows listed apart)")
    ap.add_argument("--twin-fp16-anyway", action="store_true",
                    help="run the twin's fp16 on the CPU anyway (a step of PyTorch's CPU fp16 took 18x its "
                         "fp32's on an AMD EPYC, and more than half an hour on a Xeon with AVX512-FP16)")
    ap.add_argument("--ablate", choices=sorted(ABLATIONS), default=None,
                    help="our recipe with this piece off (--systems ours; rows listed apart)")
    ap.add_argument("--log-dir", default=os.path.join(ROOT, "build", "airbench"), help="our trainer's JSON logs")
    ap.add_argument("--table", action="store_true", help="print the table of --results and exit")
    a = ap.parse_args()
    if a.table:
        table(load_results(a.results))
        return
    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    os.makedirs(a.log_dir, exist_ok=True)
    if a.stop_after_epochs is not None and not 1 <= a.stop_after_epochs < math.ceil(a.epochs):
        sys.exit(f"error: --stop-after-epochs expects 1 to {math.ceil(a.epochs) - 1} epochs (fewer than the "
                 f"schedule's {math.ceil(a.epochs)}), got {a.stop_after_epochs}")
    systems = [s for s in a.systems.split(",") if s]
    for s in systems:
        if s not in ("ours", "twin"):
            sys.exit(f"error: --systems expects ours and/or twin, got '{s}'")
    precisions = [p for p in a.precisions.split(",") if p]
    for p in precisions:
        if p not in ("fp32", "bf16", "fp16"):
            sys.exit(f"error: --precisions expects fp32, bf16, fp16, got '{p}'")
    if "ours" in systems and (a.stop_after_epochs is not None or a.twin_weights != "fp32"):
        sys.exit("error: --stop-after-epochs and --twin-weights are the twin's diagnostics (--systems twin)")
    if a.ablate and systems != ["ours"]:
        sys.exit("error: --ablate switches off a piece of our recipe (--systems ours)")
    fp16_ok = a.twin_fp16_anyway
    splits = None
    done = {key(r) for r in load_results(a.results)}
    for seed in parse_seeds(a.seeds):
        for prec in precisions:
            for system in systems:
                twin = system == "twin"
                run = {"system": system, "precision": prec, "seed": seed, "epochs": a.epochs,
                       "channels_last": a.channels_last if twin else False,
                       "weights": a.twin_weights if twin and prec != "fp32" else "fp32",
                       "stop_after_epochs": a.stop_after_epochs if twin else None,
                       "ablation": None if twin else a.ablate}
                if key(run) in done:
                    continue
                if twin and prec == "fp16" and not fp16_ok:
                    # Measured at batch 1024: 78 s a step against 4.3 s in fp32 on an AMD EPYC (AVX512-BF16),
                    # two steps unfinished after 100 minutes on a Xeon with AVX512-FP16 and AMX-BF16.
                    print(f"twin fp16 seed {seed}: skipped, PyTorch's CPU fp16 takes ten hours or more a run "
                          "on the CPUs measured (--twin-fp16-anyway runs it)", flush=True)
                    continue
                print(f"[{time.strftime('%H:%M:%S')}] {system} {prec} seed {seed} ...", flush=True)
                if system == "ours":
                    tag = (f"-{a.epochs:g}ep" if a.epochs != EPOCHS else "") + (f"-{a.ablate}" if a.ablate else "")
                    log = os.path.join(a.log_dir, f"ours-{prec}-{seed}{tag}.jsonl")
                    r = run_ours(a, prec, seed, log)
                else:
                    if splits is None:
                        import pytorch_reference
                        splits = pytorch_reference.load_engine_cache(engine_cache(a))
                    r = train_twin(a, prec, seed, splits)
                r.update(run)
                r.update({"threads": a.threads, "commit": commit_of(a.build), "cpu": cpu_model()})
                if twin:
                    import torch
                    r["torch"] = torch.__version__
                with open(a.results, "a") as f:
                    f.write(json.dumps(r) + "\n")
                print(f"    TTA {r['tta_accuracy']:.2f}% (no TTA {r['accuracy']:.2f}%) in {r['seconds']:.0f} s", flush=True)
    table(load_results(a.results))


if __name__ == "__main__":
    main()
