#!/usr/bin/env python3
"""Plots training curves from our trainer's --log JSON-lines files (or pytorch_reference.py --log):
loss over steps, test accuracy over epochs and the loss scale over steps (log2), one line per run.

  python3 bench/plot_log.py run-fp32.jsonl run-fp16.jsonl -o curves.png
"""
import argparse
import json
import os
import sys


def read_log(path):
    """Returns (label, steps, epochs, summary) from one JSON-lines log."""
    steps, epochs, summary = [], [], None
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e.strerror}")
    try:  # a whole-file JSON document (e.g. pytorch_reference.py --json) is not a log
        whole = json.loads("".join(lines))
        if not (isinstance(whole, dict) and "event" in whole):
            sys.exit(f"error: {path} is a single JSON document, not a JSON-lines --log file")
    except json.JSONDecodeError:
        pass
    bad = 0
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            bad += 1  # e.g. the last line of a run that was killed mid-write
            continue
        kind = rec.get("event") if isinstance(rec, dict) else None
        if kind == "step":
            steps.append(rec)
        elif kind == "epoch":
            epochs.append(rec)
        elif kind == "summary":
            summary = rec
    if bad:
        print(f"warning: {path}: skipped {bad} unreadable line(s)", file=sys.stderr)
    if not steps and not epochs:
        sys.exit(f"error: {path} holds no step or epoch records (is it a trainer --log file?)")
    name = os.path.basename(path)
    for ext in (".jsonl", ".json", ".log"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    if summary and summary.get("model"):
        parts = [summary.get("system", ""), summary["model"], summary.get("precision", "")]
        label = " ".join(p for p in parts if p)
    else:
        label = name + ("" if summary else " (unfinished)")
    return label, name, steps, epochs, summary


def series(records, x, y):
    pts = [(r[x], r[y]) for r in records if isinstance(r.get(x), (int, float)) and isinstance(r.get(y), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def main(argv=None):
    p = argparse.ArgumentParser(description="Plot loss, test accuracy and loss scale from trainer --log files.")
    p.add_argument("logs", nargs="+", help="JSON-lines logs written by trainer --log FILE")
    p.add_argument("-o", "--output", default="curves.png", help="PNG to write [curves.png]")
    p.add_argument("--title", default=None, help="figure title [the runs' models]")
    p.add_argument("--dpi", type=int, default=120)
    a = p.parse_args(argv)

    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("error: matplotlib is not installed (pip install matplotlib); it is needed only for this plot")

    runs = [read_log(path) for path in a.logs]
    labels = [r[0] for r in runs]
    # Mixed with pytorch_reference.py logs (which name their system), name ours too.
    if any(s and s.get("system") for *_, s in runs):
        labels = [f"ours {lab}" if s and s.get("model") and not s.get("system") else lab
                  for lab, (*_, s) in zip(labels, runs)]
    # Two runs with the same model and precision would be indistinguishable: add the file name.
    labels = [f"{lab} [{r[1]}]" if labels.count(lab) > 1 else lab for lab, r in zip(labels, runs)]

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    ax_loss, ax_acc, ax_scale = axes
    for label, (_, _, steps, epochs, summary) in zip(labels, runs):
        acc = summary.get("test_accuracy") if summary else None
        full = f"{label} ({acc:.2f}%)" if isinstance(acc, (int, float)) else label
        x, y = series(steps, "step", "loss")
        (line,) = ax_loss.plot(x, y, marker=".", markersize=3, linewidth=1.2, label=full)
        color = line.get_color()
        x, y = series(epochs, "epoch", "test_accuracy")
        ax_acc.plot(x, y, marker="o", markersize=4, linewidth=1.5, color=color, label=full)
        x, y = series(steps, "step", "scale")
        # Loss scales are powers of two: draw them as steps, so growth and back-off show as jumps.
        ax_scale.step(x, y, where="post", linewidth=1.5, color=color, label=full)
        skipped = [r for r in steps if r.get("skipped")]
        if skipped:
            ax_scale.annotate(f"{int(skipped[-1]['skipped'])} skipped", (x[-1], y[-1]), fontsize=8, color=color,
                              textcoords="offset points", xytext=(-60, 6))

    ax_loss.set(title="training loss", xlabel="step", ylabel="loss (logged steps)")
    ax_acc.set(title="test accuracy", xlabel="epoch", ylabel="accuracy (%)")
    ax_scale.set(title="loss scale", xlabel="step", ylabel="scale (log2 axis)")
    ax_scale.set_yscale("log", base=2)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    ax_acc.xaxis.get_major_locator().set_params(integer=True)
    handles, legend_labels = ax_loss.get_legend_handles_labels()
    fig.legend(handles, legend_labels, loc="lower center", ncol=min(4, len(runs)), frameon=False)
    models = sorted({s["model"] for *_, s in runs if s and s.get("model")})
    fig.suptitle(a.title or ("training curves: " + ", ".join(models) if models else "training curves"))
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    try:
        fig.savefig(a.output, dpi=a.dpi)
    except OSError as e:
        sys.exit(f"error: cannot write {a.output}: {e.strerror}")
    print(f"wrote {a.output} ({len(runs)} run{'s' if len(runs) > 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
