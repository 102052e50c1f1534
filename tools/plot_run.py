#!/usr/bin/python3
"""Training curves and a confusion matrix of a cnn-train run, as PNG files in its run directory.

Usage: /usr/bin/python3 tools/plot_run.py RUN_DIR [--report REPORT.json] [--out DIR]

Needs Debian's python3-matplotlib (run it with /usr/bin/python3, not another python3 on the PATH).
Writes DIR (default RUN_DIR)/curves.png: loss, accuracy (with val macro-F1 when the epoch lines carry
`val_macro_f1`) and learning rate per epoch, from RUN_DIR/metrics.jsonl; and DIR/confusion.png from
REPORT.json (the report `cnn-eval RUN_DIR --json REPORT.json` writes) or, without --report, from
the `test` line of metrics.jsonl when that line carries a `confusion` matrix. Exit 0 on success,
1 when the run cannot be read, 2 on a usage error.
Trap: a resumed run repeats no epoch in metrics.jsonl, but a run restarted into the same directory
may: the last line of each epoch number wins.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


class RunError(Exception):
    pass


def read_metrics(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise RunError(f"cannot read '{path}': {e.strerror}")
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise RunError(f"{path}:{number}: not a JSON object: {e.msg}")
        if isinstance(obj, dict):
            lines.append(obj)
    return path, lines


def run_title(run_dir):
    """"<model name> (<run dir>)" from config.yaml's top-level `name:`, else the run dir's name."""
    base = os.path.basename(os.path.normpath(run_dir))
    try:
        with open(os.path.join(run_dir, "config.yaml"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("name:"):
                    return f"{line[5:].strip()} ({base})"
    except OSError:
        pass
    return base


def epoch_series(lines):
    """{epoch: line} of the epoch lines, the last line of an epoch number winning."""
    epochs = {}
    for obj in lines:
        if obj.get("event") == "epoch" and isinstance(obj.get("epoch"), int):
            epochs[obj["epoch"]] = obj
    return [epochs[e] for e in sorted(epochs)]


def column(epochs, key):
    xs, ys = [], []
    for obj in epochs:
        value = obj.get(key)
        if isinstance(value, (int, float)):
            xs.append(obj["epoch"])
            ys.append(float(value))
    return xs, ys


def plot_curves(epochs, title, path):
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [
        ("loss", [("train_loss", "train"), ("val_loss", "val")]),
        ("accuracy", [("train_acc", "train"), ("val_acc", "val"), ("val_macro_f1", "val macro-F1")]),
        ("learning rate", [("lr", "lr")]),
    ]
    for ax, (name, keys) in zip(axes, panels):
        for key, label in keys:
            xs, ys = column(epochs, key)
            if xs:
                ax.plot(xs, ys, marker="o", markersize=3, label=label)
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        if name != "learning rate":
            ax.legend()
    axes[2].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def confusion_source(report_path, lines):
    """(matrix, class names, description) or None when the run has no confusion matrix."""
    if report_path:
        try:
            with open(report_path, encoding="utf-8") as f:
                report = json.load(f)
        except OSError as e:
            raise RunError(f"cannot read '{report_path}': {e.strerror}")
        except json.JSONDecodeError as e:
            raise RunError(f"'{report_path}' is not JSON: {e.msg}")
        where = report_path
    else:
        tests = [obj for obj in lines if obj.get("event") == "test" and "confusion" in obj]
        if not tests:
            return None
        report, where = tests[-1], "the test line of metrics.jsonl"
    matrix = report.get("confusion")
    if not (isinstance(matrix, list) and matrix and all(isinstance(r, list) and len(r) == len(matrix) for r in matrix)):
        raise RunError(f"{where}: 'confusion' is not a square matrix")
    names = [c.get("name", str(i)) for i, c in enumerate(report.get("per_class", []))]
    if len(names) != len(matrix):
        names = report.get("classes") if len(report.get("classes", [])) == len(matrix) else None
    names = names or [f"class{i}" for i in range(len(matrix))]
    split = report.get("split", "test")
    return matrix, names, f"{split} split, {sum(map(sum, matrix))} images"


def plot_confusion(matrix, names, title, path):
    k = len(matrix)
    rows = [sum(r) or 1 for r in matrix]
    recall = [[v / rows[i] for v in r] for i, r in enumerate(matrix)]  # colour: fraction of the true class
    size = max(4.5, 0.55 * k + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(recall, cmap="Blues", vmin=0, vmax=1)
    for i in range(k):
        for j in range(k):
            ax.text(j, i, str(matrix[i][j]), ha="center", va="center", fontsize=8,
                    color="white" if recall[i][j] > 0.5 else "black")
    ax.set_xticks(range(k))
    ax.set_yticks(range(k))
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_yticklabels(names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true class")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="fraction of the true class")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="a cnn-train run directory (holds metrics.jsonl)")
    parser.add_argument("--report", help="a cnn-eval --json report for the confusion matrix")
    parser.add_argument("--out", help="where the PNG files go (default: the run directory)")
    args = parser.parse_args(argv)
    out = args.out or args.run_dir
    try:
        metrics_path, lines = read_metrics(args.run_dir)
        epochs = epoch_series(lines)
        if not epochs:
            raise RunError(f"'{metrics_path}' has no epoch lines: nothing to plot")
        os.makedirs(out, exist_ok=True)
        name = run_title(args.run_dir)
        curves = os.path.join(out, "curves.png")
        plot_curves(epochs, f"{name}: {len(epochs)} epoch(s)", curves)
        print(f"wrote {curves}")
        source = confusion_source(args.report, lines)
        if source is None:
            print(f"no confusion matrix: metrics.jsonl's test line has none; run "
                  f"`cnn-eval {args.run_dir} --json REPORT.json` and pass --report REPORT.json")
        else:
            matrix, names, what = source
            confusion = os.path.join(out, "confusion.png")
            plot_confusion(matrix, names, f"{name}: confusion matrix ({what})", confusion)
            print(f"wrote {confusion}")
    except RunError as e:
        print(f"plot_run.py: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"plot_run.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
