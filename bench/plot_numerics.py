#!/usr/bin/env python3
"""Draws the range report of a run (trainer --inspect-numerics N --log run.jsonl) as a heat map:
one row per layer (outputs) or parameter (gradients), one column per inspected step, the colour
the share of values in one bucket, by default the gradients' share that would flush to zero in
FP16 without the loss scale: where loss scaling earns its keep.

  python3 bench/plot_numerics.py run.jsonl -o numerics.png [--column flush_unscaled] [--kind gradient]
Columns: zeros subnormal flush flush_unscaled near_overflow (shares), inf nan (counts).
"""
import argparse
import json
import sys


def read(path, column, kind):
    rows, steps, cells = [], [], {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if '"event":"numerics"' not in line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    sys.exit(f"error: {path}:{n} is not JSON")
                if kind != "all" and (r["kind"] == "gradient") != (kind == "gradient"):
                    continue
                if r["layer"] not in rows:
                    rows.append(r["layer"])
                if r["step"] not in steps:
                    steps.append(r["step"])
                cells[(r["layer"], r["step"])] = r.get(column)
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e.strerror}")
    if not cells:
        sys.exit(f"error: {path} has no numerics lines of kind '{kind}' (run the trainer with --inspect-numerics N --log FILE)")
    return rows, steps, cells


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("log")
    p.add_argument("-o", "--output", default="numerics.png")
    p.add_argument("--column", default="flush_unscaled",
                   choices=["zeros", "subnormal", "flush", "flush_unscaled", "near_overflow", "inf", "nan"])
    p.add_argument("--kind", default="gradient", choices=["gradient", "activation", "all"])
    a = p.parse_args(argv)
    rows, steps, cells = read(a.log, a.column, a.kind)
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("error: matplotlib is not installed (pip install matplotlib); it is needed only for this plot")
    share = a.column not in ("inf", "nan")
    grid = [[(cells.get((r, s)) or 0.0) * (100.0 if share else 1.0) for s in steps] for r in rows]
    fig, ax = plt.subplots(figsize=(min(12.0, max(6.0, 0.3 * len(steps) + 3)), max(3.0, 0.3 * len(rows) + 1.5)))
    im = ax.imshow(grid, aspect="auto", cmap="magma_r", interpolation="nearest")
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ticks = list(range(0, len(steps), max(1, len(steps) // 12)))
    ax.set_xticks(ticks, [str(int(steps[i])) for i in ticks], fontsize=8)
    ax.set_xlabel("step")
    what = {"flush_unscaled": "would flush to zero in FP16 without the loss scale",
            "flush": "flush to zero in FP16 as stored", "subnormal": "FP16 subnormal",
            "near_overflow": "within 2x of FP16 overflow", "zeros": "exact zeros"}.get(a.column, a.column)
    ax.set_title(f"{a.kind}s: {what}", fontsize=10)
    fig.colorbar(im, ax=ax, label="% of values" if share else "count")
    fig.tight_layout()
    fig.savefig(a.output, dpi=120)
    print(f"wrote {a.output}: {len(rows)} rows x {len(steps)} steps")


if __name__ == "__main__":
    main()
