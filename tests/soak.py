#!/usr/bin/env python3
"""A steady state that stays steady: trains simplecnn for many steps on a small synthetic set
and reads the trainer's JSON log (one line every --log-every steps). After warm-up (the first
two epochs: every shape, the evaluation's included, has been seen once):
  - the allocator's counts do not move at all: tensors alive, their bytes, blocks taken from
    the system (a leak of one tensor per step, or a shape never cached, shows at once);
  - resident memory grows by less than --rss-slack MiB over the rest of the run.
These are deterministic and fail the test. Images/s is printed (first and last third of the
run) but fails nothing: this VM's host changes speed by 30% within a run, so a timed assertion
fails by chance. With --check-speed (bench/soak.sh, for a quiet machine) a drift fails too: the
last third's median below --speed-floor times BOTH yardsticks, the run's own first third and a
fresh trainer process run right after it (the same settings, 8 epochs), so only a slowdown that
grows with the steps (work or lists that pile up) counts.
Prints a small table either way; exits 1 when a check fails.
  python3 tests/soak.py TRAINER WORKDIR [--steps N] [--model M] [--precision P] [--check-speed] ..."""
import argparse
import json
import os
import statistics
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trainer")
    ap.add_argument("workdir")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--model", default="simplecnn")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--images", type=int, default=1600, help="synthetic training images (an epoch is images / batch steps)")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rss-slack", type=float, default=4.0, help="MiB resident memory may grow after warm-up")
    ap.add_argument("--check-speed", action="store_true",
                    help="also fail on a drift in images/s (bench/soak.sh; never in the test suite)")
    ap.add_argument("--speed-floor", type=float, default=0.85,
                    help="--check-speed: last third's median images/s over the first third's and over a fresh"
                         " process's (quiet 2-core runs: 0.96-0.98); a drift must be below both")
    a = ap.parse_args()

    os.makedirs(a.workdir, exist_ok=True)
    steps_per_epoch = a.images // a.batch_size

    def train(steps, name):
        """The step lines of a run of `steps` steps, or None when the trainer failed."""
        log = os.path.join(a.workdir, name + ".jsonl")
        if os.path.exists(log):
            os.remove(log)
        epochs = (steps + steps_per_epoch - 1) // steps_per_epoch
        cmd = [a.trainer, "--device", "cpu", "--synthetic", "--synthetic-size", str(a.images), "--model", a.model,
               "--precision", a.precision, "--batch-size", str(a.batch_size), "--epochs", str(epochs), "--max-steps",
               str(steps), "--log-every", str(a.log_every), "--threads", str(a.threads), "--augment", "--log", log]
        print("running:", " ".join(cmd), flush=True)
        run = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            print("FAILED: the trainer exited %d: %s" % (run.returncode, run.stderr.strip()[-500:]))
            return None
        return [l for l in map(json.loads, open(log)) if l.get("event") == "step"]

    steps = train(a.steps, "soak")
    fresh = train(8 * steps_per_epoch, "fresh") if a.check_speed else []
    if steps is None or fresh is None:
        return 1
    warm = [s for s in steps if s["step"] > 2 * steps_per_epoch]
    if len(warm) < 9:
        print("FAILED: only %d log lines after warm-up; run more --steps" % len(warm))
        return 1

    fails = []
    print("%-20s %14s %14s %14s" % ("after warm-up", "first", "last", "range"))
    for key in ("live_blocks", "live_bytes", "system_allocations"):
        values = [s[key] for s in warm]
        print("%-20s %14d %14d %14d" % (key, values[0], values[-1], max(values) - min(values)))
        if max(values) != min(values):
            fails.append("%s moved after warm-up: %d .. %d" % (key, min(values), max(values)))
    rss = [s["rss_bytes"] / 2**20 for s in warm]
    growth = max(rss[len(rss) // 2:]) - rss[0]
    print("%-20s %14.1f %14.1f %14.1f  MiB (growth over the run: %.2f)" % ("resident", rss[0], rss[-1],
                                                                           max(rss) - min(rss), growth))
    if growth > a.rss_slack:
        fails.append("resident memory grew %.2f MiB after warm-up (slack %.1f)" % (growth, a.rss_slack))
    third = len(warm) // 3
    first = statistics.median(s["images_per_s"] for s in warm[:third])
    last = statistics.median(s["images_per_s"] for s in warm[-third:])
    if not a.check_speed:
        print("%-20s %14.0f %14.0f %14s  (printed only: timing fails nothing here; bench/soak.sh checks it)" % (
            "images/s (median)", first, last, ""))
    else:
        ref = statistics.median(s["images_per_s"] for s in fresh if s["step"] > 2 * steps_per_epoch)
        print("%-20s %14.0f %14.0f %14s  (a fresh process right after: %.0f; last / first %.3f, last / fresh %.3f,"
              " floor %.2f)" % ("images/s (median)", first, last, "", ref, last / first, last / ref, a.speed_floor))
        if last < a.speed_floor * first and last < a.speed_floor * ref:
            fails.append("images/s drifted down: %.0f at the end, %.0f in the first third, %.0f in a fresh process" % (
                last, first, ref))
    print("%d steps, %d log lines after warm-up (%d steps an epoch)" % (steps[-1]["step"], len(warm), steps_per_epoch))
    for f in fails:
        print("FAILED:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
