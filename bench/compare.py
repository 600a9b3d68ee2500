#!/usr/bin/env python3
"""Builds the benchmark table (markdown) from our trainer's --log JSON lines (their summary) and
bench/pytorch_reference.py --json results: ours vs PyTorch per model x precision, and each
system's FP16/BF16 vs its own FP32.

  python3 bench/compare.py ours-*.jsonl pytorch-*.json [--json table.json]
"""
import argparse
import json
import math
import os
import sys

MIB = 1024.0 * 1024.0
PRECISION_ORDER = {"fp32": 0, "fp16": 1, "bf16": 2}


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def ours_run(summary, path):
    peak, data = _num(summary.get("peak_bytes")), _num(summary.get("peak_data"))
    return {
        "system": "ours", "variant": "ours", "mode": "device", "file": path,
        "model": summary.get("model"), "precision": summary.get("precision"),
        "images_per_s": _num(summary.get("images_per_s")),
        "peak_bytes": peak, "data_bytes": data or 0.0,
        # Ours counts the resident data set in its peak; "model" memory leaves it out.
        "model_bytes": peak - (data or 0.0) if peak is not None else None,
        "test_accuracy": _num(summary.get("test_accuracy")),
        "steps": _num(summary.get("steps")), "skipped": _num(summary.get("skipped")),
    }


def pytorch_run(r, path):
    compiled = bool(r.get("compiled"))
    prec = str(r.get("precision", ""))
    peak, data = _num(r.get("peak_memory_bytes", r.get("peak_bytes"))), _num(r.get("data_bytes_on_device")) or 0.0
    mode = {"gpu": "device"}.get(r.get("mode"), r.get("mode", "?"))  # "device": data resident on it
    return {
        "system": "pytorch", "mode": mode, "file": path,
        # A run whose compile failed and fell back to eager is its own variant, not "eager".
        "variant": "pytorch compiled" if compiled else
                   "pytorch eager (compile failed)" if r.get("compile_requested") else "pytorch eager",
        "model": r.get("model"), "precision": prec[4:] if prec.startswith("amp-") else prec,
        "images_per_s": _num(r.get("images_per_s")),
        "peak_bytes": peak, "data_bytes": data, "model_bytes": peak - data if peak is not None else None,
        "test_accuracy": _num(r.get("test_accuracy")),
        "steps": _num(r.get("steps")), "skipped": _num(r.get("skipped_steps", r.get("skipped"))),
        "compile_requested": r.get("compile_requested"), "device_name": r.get("device_name"),
    }


def load(path):
    """Every run in one file: a trainer JSON-lines log, or pytorch_reference.py JSON (object or list)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e.strerror}")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if whole is not None and not (isinstance(whole, dict) and "event" in whole):
        items = whole if isinstance(whole, list) else [whole]
        runs = [pytorch_run(r, path) for r in items if isinstance(r, dict) and r.get("framework") == "pytorch"]
        if not runs:
            sys.exit(f"error: {path}: JSON without pytorch_reference.py results (no \"framework\": \"pytorch\")")
        return runs
    runs = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a partly written last line
        if isinstance(rec, dict) and rec.get("event") == "summary":
            system = str(rec.get("system", ""))
            if system.startswith("pytorch"):  # pytorch_reference.py --log: fewer fields than its --json
                r = dict(rec, framework="pytorch", compiled=system.endswith("compiled"))
                runs.append(pytorch_run(r, path))
            else:
                runs.append(ours_run(rec, path))
    if not runs:
        print(f"warning: {path}: no summary line (run unfinished?); ignored", file=sys.stderr)
    return runs


def fmt(v, spec=".0f", none="—"):
    return none if v is None else format(v, spec)


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def mib(v):
    return None if v is None else v / MIB


def variant_key(r):
    return (r["system"] != "ours", r["variant"] != "pytorch eager", r["variant"], r["mode"] != "dataloader", r["file"])


def build(runs):
    # One run per (system variant, data mode, model, precision): the last one given wins.
    chosen = {}
    for r in runs:
        if not r["model"] or not r["precision"]:
            print(f"warning: {r['file']}: run without model/precision; ignored", file=sys.stderr)
            continue
        key = (r["variant"], r["mode"], r["model"], r["precision"])
        if key in chosen:
            print(f"warning: {key} given twice ({chosen[key]['file']}, {r['file']}); using {r['file']}", file=sys.stderr)
        chosen[key] = r
    runs = list(chosen.values())
    groups = {}
    for r in runs:
        groups.setdefault((r["model"], r["precision"]), []).append(r)

    side = []
    for (model, prec) in sorted(groups, key=lambda k: (k[0], PRECISION_ORDER.get(k[1], 9), k[1])):
        rows = sorted(groups[(model, prec)], key=variant_key)
        ours = next((r for r in rows if r["system"] == "ours"), None)
        for r in rows:
            side.append({
                "model": model, "precision": prec, "system": r["variant"], "mode": r["mode"],
                "images_per_s": r["images_per_s"],
                "ours_speed_ratio": ratio(ours["images_per_s"], r["images_per_s"]) if ours and r is not ours else None,
                "peak_bytes": r["peak_bytes"], "model_bytes": r["model_bytes"],
                "ours_memory_ratio": ratio(ours["model_bytes"], r["model_bytes"]) if ours and r is not ours else None,
                "test_accuracy": r["test_accuracy"], "steps": r["steps"], "skipped": r["skipped"],
                "steps_differ": bool(ours and r is not ours and ours["steps"] != r["steps"]),
                "file": r["file"],
            })

    vs32 = []
    by_variant = {}
    for r in runs:
        by_variant.setdefault((r["variant"], r["mode"], r["model"]), {})[r["precision"]] = r
    for (variant, mode, model), precs in sorted(by_variant.items(), key=lambda kv: (kv[0][2], variant_key(next(iter(kv[1].values()))))):
        base = precs.get("fp32")
        if base is None:
            continue
        for prec in sorted(p for p in precs if p != "fp32"):
            r = precs[prec]
            vs32.append({
                "model": model, "system": variant, "mode": mode, "precision": prec,
                "speedup": ratio(r["images_per_s"], base["images_per_s"]),
                "memory_ratio": ratio(r["model_bytes"], base["model_bytes"]),
                "accuracy_diff": (r["test_accuracy"] - base["test_accuracy"])
                if r["test_accuracy"] is not None and base["test_accuracy"] is not None else None,
                "test_accuracy": r["test_accuracy"], "test_accuracy_fp32": base["test_accuracy"],
                "steps_differ": r["steps"] != base["steps"],
            })
    return side, vs32


def markdown(side, vs32):
    out = ["### Ours vs PyTorch (same model, recipe and data copy)", "",
           "speed and memory ratios are ours ÷ that row: speed > 1 means ours is faster, memory < 1 means ours "
           "needs less; memory ratios leave out the data set resident on the device (ours and PyTorch's gpu mode "
           "keep it there, the DataLoader does not).", "",
           "| model | precision | system | data on | images/s | speed ours÷this | peak MiB | excl. data MiB "
           "| memory ours÷this | test acc. % | steps |",
           "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    notes = set()
    for r in side:
        system = r["system"]
        if system.endswith("(compile failed)"):
            notes.add("(compile failed): torch.compile was requested but failed; the run fell back to eager.")
        steps = fmt(r["steps"])
        if r["steps_differ"]:
            steps += " ≠"
            notes.add("≠: a different number of steps than ours; compare with care.")
        out.append(f"| {r['model']} | {r['precision']} | {system} | {r['mode']} | {fmt(r['images_per_s'])} "
                   f"| {fmt(r['ours_speed_ratio'], '.2f')} | {fmt(mib(r['peak_bytes']), '.1f')} "
                   f"| {fmt(mib(r['model_bytes']), '.1f')} | {fmt(r['ours_memory_ratio'], '.2f')} "
                   f"| {fmt(r['test_accuracy'], '.2f')} | {steps} |")
    out += [""] + [f"{n}" for n in sorted(notes)] + ([""] if notes else [])
    out += ["### Reduced precision vs FP32 (each system against its own FP32 run)", "",
            "| model | system | data on | precision | speed-up | memory ratio (excl. data) | test acc. % | Δ acc. vs FP32 (pp) |",
            "|---|---|---|---|--:|--:|--:|--:|"]
    for r in vs32:
        out.append(f"| {r['model']} | {r['system']} | {r['mode']} | {r['precision']} | {fmt(r['speedup'], '.2f')}× "
                   f"| {fmt(r['memory_ratio'], '.2f')} | {fmt(r['test_accuracy'], '.2f')} "
                   f"| {fmt(r['accuracy_diff'], '+.2f')}{' ≠' if r['steps_differ'] else ''} |")
    if not vs32:
        out.append("| (no system has both an FP32 run and a reduced-precision run) | | | | | | | |")
    elif any(r["steps_differ"] for r in vs32):
        out += ["", "≠: the two runs trained a different number of steps; compare with care."]
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description="Comparison table from trainer --log files and pytorch_reference.py --json files.")
    p.add_argument("files", nargs="+", help="trainer --log JSONL files and/or pytorch_reference.py JSON files")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the table as JSON")
    a = p.parse_args(argv)
    runs = [r for path in a.files for r in load(path)]
    if not runs:
        sys.exit("error: no finished runs in the files given")
    side, vs32 = build(runs)
    sys.stdout.write(markdown(side, vs32))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"side_by_side": side, "precision_vs_fp32": vs32,
                       "files": [os.path.abspath(x) for x in a.files]}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
