#!/usr/bin/env python3
"""Plot convolution benchmark CSVs as PNG figures.

Input: a CSV file with a header row and these columns (other columns are ignored):

  layer      the shape's name. A plain name (e.g. "L1") is a base shape. A sweep point is
             "<sweep>/<param>=<value>" as in bench/sweeps/README.md, e.g. "L1_batch/N=64" or
             "L1_input/H=W=64" (tied keys joined by '='); the value must be a number.
  impl       the implementation that was timed (e.g. "cuda-implicit-gemm", "cudnn-winograd").
  direction  forward, backward_data or backward_filter (any text is accepted).
  ms         time in milliseconds (a number; a row with an empty or non-numeric ms is skipped
             with a warning).
  tflops     achieved TFLOP/s (a number, or empty).

Output, in --out (default: the CSV's folder):

  <stem>_<direction>_shapes.png     time by implementation per base shape: grouped bars, one
                                    figure per direction (only when the CSV has base shapes).
  <stem>_<direction>_<sweep>.png    for each sweep: time (or TFLOP/s with --metric tflops)
                                    against the swept value, one line per implementation.

The CSVs come from `cnn-bench conv ... --csv FILE` (bench/sweeps/README.md).
Needs matplotlib for plotting; parsing alone (--check) does not.
"""
import argparse
import csv
import math
import os
import sys
from collections import OrderedDict

REQUIRED = ("layer", "impl", "direction", "ms", "tflops")


def _number(text):
    """float(text), or None for empty / non-numeric / non-finite text."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def split_layer(layer):
    """'L1_batch/N=64' -> ('L1_batch', 'N', 64.0); 'L1_input/H=W=64' -> ('L1_input', 'H=W', 64.0);
    'L1' -> (None, None, None).

    A name with '/' but no numeric '<param>=<value>' part is treated as a plain shape."""
    if "/" not in layer:
        return None, None, None
    sweep, _, point = layer.rpartition("/")
    param, eq, value = point.rpartition("=")
    v = _number(value)
    if not eq or not param or v is None or not sweep:
        return None, None, None
    return sweep, param, v


def csv_records(path, required):
    """(line number, {column: stripped text}) of each data row of a CSV; raises ValueError when a
    column of `required` is missing."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in required if c not in header]
        if missing:
            raise ValueError("%s: missing column(s) %s (found: %s)"
                             % (path, ", ".join(missing), ", ".join(header) or "none"))
        for lineno, raw in enumerate(reader, start=2):
            yield lineno, {(k or "").strip(): (v or "").strip() for k, v in raw.items() if k is not None}


def read_rows(path):
    """Reads the CSV; returns a list of dicts with layer, impl, direction, ms, tflops and, for
    sweep points, sweep, param, value. Raises ValueError for a missing column."""
    rows = []
    for lineno, r in csv_records(path, REQUIRED):
        ms = _number(r["ms"])
        if ms is None:
            print("plot_bench: warning: %s:%d: no usable ms value (%r), row skipped"
                  % (path, lineno, r["ms"]), file=sys.stderr)
            continue
        sweep, param, value = split_layer(r["layer"])
        rows.append({"layer": r["layer"], "impl": r["impl"], "direction": r["direction"],
                     "ms": ms, "tflops": _number(r["tflops"]),
                     "sweep": sweep, "param": param, "value": value})
    return rows


def group(rows):
    """Returns (shapes, sweeps):
    shapes[direction][layer][impl] = ms               (base shapes, in file order)
    sweeps[direction][sweep] = {'param': p, 'impls': {impl: [(value, ms, tflops), ...]}}
    Repeated rows for the same point keep the last one."""
    shapes = OrderedDict()
    sweeps = OrderedDict()
    for r in rows:
        d = r["direction"]
        if r["sweep"] is None:
            shapes.setdefault(d, OrderedDict()).setdefault(r["layer"], OrderedDict())[r["impl"]] = r["ms"]
        else:
            s = sweeps.setdefault(d, OrderedDict()).setdefault(
                r["sweep"], {"param": r["param"], "impls": OrderedDict()})
            pts = s["impls"].setdefault(r["impl"], OrderedDict())
            pts[r["value"]] = (r["ms"], r["tflops"])
    for d in sweeps.values():
        for s in d.values():
            for impl, pts in s["impls"].items():
                s["impls"][impl] = sorted((v, ms, tf) for v, (ms, tf) in pts.items())
    return shapes, sweeps


def _safe(text):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def plot_shapes(plt, by_layer, direction, path):
    layers = list(by_layer)
    impls = []
    for per in by_layer.values():
        impls += [i for i in per if i not in impls]
    width = 0.8 / max(1, len(impls))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(layers) * max(1, len(impls)) * 0.5 + 2), 4.5))
    for k, impl in enumerate(impls):
        xs = [i + (k - (len(impls) - 1) / 2) * width for i in range(len(layers))]
        ys = [by_layer[l].get(impl, float("nan")) for l in layers]
        ax.bar(xs, ys, width, label=impl)
    ax.set_xticks(range(len(layers)))
    ax.set_xticklabels(layers)
    ax.set_ylabel("time (ms)")
    ax.set_title("convolution %s: time by implementation" % direction)
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_sweep(plt, name, sweep, direction, metric, path):
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for impl, pts in sweep["impls"].items():
        xs = [p[0] for p in pts]
        ys = [p[1] if metric == "ms" else (p[2] if p[2] is not None else float("nan")) for p in pts]
        ax.plot(xs, ys, marker="o", label=impl)
    ax.set_xlabel(sweep["param"])
    ax.set_ylabel("time (ms)" if metric == "ms" else "TFLOP/s")
    ax.set_title("%s (%s): %s vs %s" % (name, direction, metric, sweep["param"]))
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Plot convolution benchmark CSVs (columns layer,impl,direction,ms,tflops) as "
                    "PNG figures: grouped bars of time per implementation for base shapes (one "
                    "figure per direction) and, for sweep points named '<sweep>/<param>=<value>', "
                    "time against the swept value with one line per implementation.",
        epilog="See the module docstring (head of this file) and bench/sweeps/README.md for the "
               "column meanings and point names.")
    ap.add_argument("csv", nargs="+", help="benchmark CSV file(s)")
    ap.add_argument("--out", help="output folder (default: each CSV's folder)")
    ap.add_argument("--metric", choices=("ms", "tflops"), default="ms",
                    help="y axis of the sweep figures (default: ms)")
    ap.add_argument("--check", action="store_true",
                    help="only parse the CSVs and print what would be plotted (no matplotlib needed)")
    args = ap.parse_args(argv)

    parsed = []
    for path in args.csv:
        try:
            rows = read_rows(path)
        except (OSError, ValueError) as e:
            print("plot_bench: error: %s" % e, file=sys.stderr)
            return 1
        parsed.append((path, group(rows), len(rows)))

    if args.check:
        for path, (shapes, sweeps), n in parsed:
            print("%s: %d rows" % (path, n))
            for d, by_layer in shapes.items():
                print("  %s: shapes %s" % (d, ", ".join(by_layer)))
            for d, by_sweep in sweeps.items():
                for name, s in by_sweep.items():
                    print("  %s: sweep %s over %s, %d implementation(s)"
                          % (d, name, s["param"], len(s["impls"])))
        return 0

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench: error: matplotlib is not installed (Debian: apt-get install "
              "python3-matplotlib; pip: pip install matplotlib). --check parses without it.",
              file=sys.stderr)
        return 1

    for path, (shapes, sweeps), _ in parsed:
        out = args.out or os.path.dirname(os.path.abspath(path))
        os.makedirs(out, exist_ok=True)
        stem = _safe(os.path.splitext(os.path.basename(path))[0])
        for d, by_layer in shapes.items():
            f = os.path.join(out, "%s_%s_shapes.png" % (stem, _safe(d)))
            plot_shapes(plt, by_layer, d, f)
            print(f)
        for d, by_sweep in sweeps.items():
            for name, s in by_sweep.items():
                f = os.path.join(out, "%s_%s_%s.png" % (stem, _safe(d), _safe(name)))
                plot_sweep(plt, name, s, d, args.metric, f)
                print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
