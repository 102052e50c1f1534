#!/usr/bin/python3
"""The convolution study's write-up from `cnn-bench conv --csv` files: figures and a Markdown summary.

Runs with Debian's /usr/bin/python3 and python3-matplotlib (figures; --no-figures needs only the
standard library). Input: CSVs written by `cnn-bench conv --csv` (any version: the columns used are
group, layer, impl, direction, ms, status, N, C, H, W, K, R, S, stride, padding and, where present,
tflops, peak_share, rel_err, precision). A later file's row replaces an earlier one's for the same
(layer, impl, direction).

Which rows count: status ok or "time box" (one timed run when a point ran out of its time box);
"abandoned (...)" rows (over the --cutoff, one timed run) are drawn but never the best; rows whose
rel_err is above the tolerance (--tolerance, default 1e-4, the autotuner's; --tf32-tolerance 5e-3
for rows whose precision is tf32) are left out of the best, as the trainer would leave them; rows
without rel_err count. "ours" is cpu:*/cuda:*, "cuDNN" is cudnn:*. Families: FFT (fft, fft_tiling),
Winograd (winograd, winograd_nonfused), direct, im2col+GEMM (im2col_gemm, cuDNN's gemm), implicit
GEMM (implicit_gemm, implicit_precomp_gemm, cuDNN's backward algo_0, algo_1, algo_3).

Roofline: a point's FLOPs are the CSV's (tflops x time: 2*N*K*P*Q*C*R*S, direct-convolution
arithmetic), its minimal bytes 4 x (x + w + y elements), FP32, each tensor moved once (groups 1
assumed); arithmetic intensity = FLOPs / bytes. The roof is min(peak, intensity x bandwidth): peak
from the CSV (tflops / peak_share, the run's measured FP32 peak) or --peak-tflops; bandwidth
--bandwidth-gbs, default 3921 GB/s (the H200's DRAM copy bandwidth measured by measure_peak,
bench/RESULTS.md) or the peak_gb_per_s of a `cnn-bench conv --json` file given with --peaks. A point
is memory-bound when its intensity is under the ridge (peak / bandwidth), else compute-bound. FFT
and Winograd do fewer operations than they are credited with, so their points may sit above the roof.

Output: in --out (default: the first CSV's folder), per sweep and direction
sweep_<layer>_<direction>_<param>.png (a sweep named "L3_fsize": sweep_L3_forward_fsize.png): the
best time of each implementation family, ours and cuDNN's, against the swept value (open markers:
only abandoned rows of that family there); per direction roofline_<direction>.png. On stdout, the
Markdown summary: per direction the table of cuDNN-best / ours-best geometric means by layer and
sweep, L1-L5 (the base shapes) per direction, the winners per sweep and direction with the
memory-bound points, and what the rows hold (abandoned, time box, missing sides).
"""
import argparse
import json
import math
import os
import sys
from collections import OrderedDict, defaultdict

# Point names and numbers are read as tools/plot_bench.py reads them (this script's folder is on the path).
from plot_bench import _number as number, csv_records, split_layer

REQUIRED = ("layer", "impl", "direction", "ms", "status", "N", "C", "H", "W", "K", "R", "S", "stride", "padding")
DIRECTIONS = ("forward", "backward_data", "backward_filter")
# Sweep name suffix -> column of the README's study table.
COLUMNS = OrderedDict([("batch", "batch"), ("input", "input size"), ("channels", "channels"),
                       ("filters", "filters"), ("fsize", "filter size"), ("stride", "stride")])
FAMILY_COLORS = OrderedDict([("FFT", "tab:blue"), ("Winograd", "tab:green"), ("implicit GEMM", "tab:red"),
                             ("im2col+GEMM", "tab:orange"), ("direct", "tab:purple")])
DEFAULT_BANDWIDTH_GBS = 3921.0


def family(impl):
    name = impl.split(":", 1)[-1]
    if "fft" in name:
        return "FFT"
    if "winograd" in name:
        return "Winograd"
    if name == "direct":
        return "direct"
    if name in ("im2col_gemm", "gemm"):
        return "im2col+GEMM"
    if "implicit" in name or name.startswith("algo_"):
        return "implicit GEMM"
    return name


def provider(impl):
    return "cuDNN" if impl.startswith("cudnn:") else "ours"


def read_csvs(paths):
    """Rows keyed by (layer, impl, direction), later files replacing earlier ones."""
    rows = OrderedDict()
    for path in paths:
        for lineno, r in csv_records(path, REQUIRED):
            try:
                shape = {k: int(r[k]) for k in ("N", "C", "H", "W", "K", "R", "S", "stride", "padding")}
            except ValueError:
                raise ValueError("%s:%d: shape columns must be integers" % (path, lineno))
            rows[(r["layer"], r["impl"], r["direction"])] = {
                "group": r.get("group", ""), "layer": r["layer"], "impl": r["impl"],
                "direction": r["direction"], "status": r["status"], "ms": number(r["ms"]),
                "tflops": number(r.get("tflops")), "peak_share": number(r.get("peak_share")),
                "rel_err": number(r.get("rel_err")), "precision": r.get("precision") or "fp32",
                "shape": shape}
    return list(rows.values())


def flops_and_bytes(row):
    s = row["shape"]
    P = (s["H"] + 2 * s["padding"] - s["R"]) // s["stride"] + 1
    Q = (s["W"] + 2 * s["padding"] - s["S"]) // s["stride"] + 1
    flops = 2.0 * s["N"] * s["K"] * P * Q * s["C"] * s["R"] * s["S"]
    if row["tflops"] and row["ms"]:
        flops = row["tflops"] * 1e12 * row["ms"] * 1e-3  # what cnn-bench counted (groups included)
    nbytes = 4.0 * (s["N"] * s["C"] * s["H"] * s["W"] + s["K"] * s["C"] * s["R"] * s["S"] + s["N"] * s["K"] * P * Q)
    return flops, nbytes


class Point:
    """One (layer, direction): its rows and the best of each side."""

    def __init__(self, layer, direction):
        self.layer, self.direction, self.rows = layer, direction, []
        self.sweep, self.param, self.value = split_layer(layer)

    def finish(self, tol, tf32_tol):
        def accurate(r):
            limit = tf32_tol if r["precision"] == "tf32" else tol
            return r["rel_err"] is None or r["rel_err"] <= limit
        self.eligible = [r for r in self.rows if r["ms"] is not None and r["status"] in ("ok", "time box")
                         and accurate(r)]
        best = lambda rs: min(rs, key=lambda r: r["ms"]) if rs else None
        self.ours = best([r for r in self.eligible if provider(r["impl"]) == "ours"])
        self.cudnn = best([r for r in self.eligible if provider(r["impl"]) == "cuDNN"])
        self.winner = best(self.eligible)
        self.ratio = self.cudnn["ms"] / self.ours["ms"] if self.ours and self.cudnn else None
        self.flops, self.bytes = flops_and_bytes(self.rows[0])
        self.intensity = self.flops / self.bytes

    def family_times(self):
        """{(family, provider): (ms, from_abandoned_only)}: the best time of each, abandoned rows
        used only where the family has no other time here."""
        out = {}
        for r in self.rows:
            if r["ms"] is None or r["status"].startswith("failed"):
                continue
            key = (family(r["impl"]), provider(r["impl"]))
            abandoned = r["status"].startswith("abandoned")
            cur = out.get(key)
            if cur is None or (cur[1] and not abandoned) or (cur[1] == abandoned and r["ms"] < cur[0]):
                out[key] = (r["ms"], abandoned)
        return out


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def fmt(v, digits=2):
    return "-" if v is None else "%.*f" % (digits, v)


def layer_and_column(sweep):
    layer, _, suffix = sweep.partition("_")
    return (layer, suffix) if suffix else (sweep, "")


def measured_peak(rows):
    shares = sorted(r["tflops"] / r["peak_share"] for r in rows
                    if r["tflops"] and r["peak_share"] and r["peak_share"] > 0)
    return shares[len(shares) // 2] if shares else None


def summary(points, peak, bandwidth, bandwidth_from, files, tol):
    out = ["# Convolution study: summary", ""]
    out.append("From %s. Best = fastest row with status ok or time box and rel_err <= %g (tf32 rows: their own "
               "tolerance); ratio = cuDNN-best ms / ours-best ms (> 1: ours faster), geometric means over the "
               "points that have both." % (", ".join(os.path.basename(f) for f in files), tol))
    if peak:
        ridge = peak * 1e12 / (bandwidth * 1e9)
        out.append("Roofline: measured FP32 peak %.1f TFLOP/s, bandwidth %.0f GB/s (%s): ridge at %.1f FLOP/byte."
                   % (peak, bandwidth, bandwidth_from, ridge))
    else:
        ridge = None
        out.append("Roofline: no measured peak in the CSVs (CPU run?) and no --peak-tflops: not classified.")
    by_dir = defaultdict(list)
    for p in points:
        by_dir[p.direction].append(p)
    directions = [d for d in DIRECTIONS if d in by_dir] + sorted(d for d in by_dir if d not in DIRECTIONS)

    out += ["", "## cuDNN-best / ours-best by sweep (geometric mean over each sweep's points)"]
    for d in directions:
        sweeps = OrderedDict()
        for p in by_dir[d]:
            if p.sweep:
                sweeps.setdefault(p.sweep, []).append(p)
        if not sweeps:
            continue
        layers, extra = OrderedDict(), []
        for s, pts in sweeps.items():
            layer, col = layer_and_column(s)
            layers.setdefault(layer, {})[col] = geomean([p.ratio for p in pts])
            if col not in COLUMNS and col not in extra:
                extra.append(col)
        cols = list(COLUMNS) + extra
        out += ["", "### %s" % d, "", "| around | " + " | ".join(COLUMNS.get(c, c or "(sweep)") for c in cols) + " |",
                "|---" * (len(cols) + 1) + "|"]
        for layer, vals in layers.items():
            out.append("| %s | %s |" % (layer, " | ".join(fmt(vals.get(c)) if c in vals else "not run"
                                                        for c in cols)))

    base = [p for p in points if p.sweep is None]
    if base:
        names = sorted(OrderedDict.fromkeys(p.layer for p in base), key=lambda n: (len(n), n))
        out += ["", "## Base shapes: cuDNN-best / ours-best", "",
                "| direction | " + " | ".join(names) + " | geometric mean |", "|---" * (len(names) + 2) + "|"]
        for d in directions:
            ratios = {p.layer: p.ratio for p in base if p.direction == d}
            if ratios:
                out.append("| %s | %s | %s |" % (d, " | ".join(fmt(ratios.get(n)) for n in names),
                                                fmt(geomean(ratios.values()))))
        out.append("| all | %s | %s |" % (" | ".join(fmt(geomean([p.ratio for p in base if p.layer == n]))
                                                     for n in names), fmt(geomean([p.ratio for p in base]))))

    out += ["", "## Winners per sweep and direction", "",
            "| sweep | direction | points | winner (family, side: points won) | geomean | memory-bound points |",
            "|---|---|---|---|---|---|"]
    for d in directions:
        sweeps = OrderedDict()
        for p in by_dir[d]:
            sweeps.setdefault(p.sweep or "base shapes", []).append(p)
        for s, pts in sweeps.items():
            wins = defaultdict(int)
            for p in pts:
                if p.winner:
                    wins["%s, %s" % (family(p.winner["impl"]), provider(p.winner["impl"]))] += 1
            won = "; ".join("%s: %d" % (k, v) for k, v in sorted(wins.items(), key=lambda kv: -kv[1])) or "-"
            if ridge:
                mem = [p for p in pts if p.intensity < ridge]
                mem_text = ", ".join(p.layer.rpartition("/")[2] if p.sweep else p.layer for p in mem) or "none"
            else:
                mem_text = "n/a"
            out.append("| %s | %s | %d | %s | %s | %s |" % (s, d, len(pts), won, fmt(geomean([p.ratio for p in pts])),
                                                           mem_text))
    if ridge:
        out += ["", "## Roofline, per direction", ""]
        for d in directions:
            pts = [p for p in by_dir[d] if p.winner]
            mem = [p for p in pts if p.intensity < ridge]
            shares = sorted(p.flops / (p.winner["ms"] * 1e-3) / 1e12 / min(peak, p.intensity * bandwidth * 1e-3)
                            for p in pts)
            out.append("- %s: %d points, %d memory-bound, %d compute-bound; the winner's share of its roof: median "
                       "%s, range %s-%s (above 1: fewer operations than direct convolution)."
                       % (d, len(pts), len(mem), len(pts) - len(mem), fmt(shares[len(shares) // 2] if shares else None),
                          fmt(shares[0] if shares else None), fmt(shares[-1] if shares else None)))

    rows = [r for p in points for r in p.rows]
    count = lambda pred: sum(1 for r in rows if pred(r))
    out += ["", "## What the rows hold", "",
            "- %d rows, %d points; ok %d, abandoned by the cutoff %d (one timed run each), time box %d, "
            "cannot implement %d, workspace over limit %d, failed %d."
            % (len(rows), len(points), count(lambda r: r["status"] == "ok"),
               count(lambda r: r["status"].startswith("abandoned")), count(lambda r: r["status"] == "time box"),
               count(lambda r: r["status"] == "cannot implement"),
               count(lambda r: r["status"] == "workspace over limit"), count(lambda r: r["status"].startswith("failed")))]
    lonely = [p for p in points if p.ratio is None]
    if lonely:
        out.append("- %d point(s) without a best of both sides (no ratio): %s"
                   % (len(lonely), ", ".join("%s %s" % (p.layer, p.direction) for p in lonely[:20])
                      + (" and %d more" % (len(lonely) - 20) if len(lonely) > 20 else "")))
    return "\n".join(out) + "\n"


def safe(text):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def plot_sweep(plt, sweep, direction, pts, path):
    pts = sorted(pts, key=lambda p: p.value)
    series = defaultdict(list)
    for p in pts:
        for key, (ms, abandoned) in p.family_times().items():
            series[key].append((p.value, ms, abandoned))
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    order = sorted(series, key=lambda k: (list(FAMILY_COLORS).index(k[0]) if k[0] in FAMILY_COLORS else 99, k[1]))
    for fam, side in order:
        xs = [v for v, _, _ in series[(fam, side)]]
        ys = [ms for _, ms, _ in series[(fam, side)]]
        color = FAMILY_COLORS.get(fam, "gray")
        ax.plot(xs, ys, linestyle="-" if side == "ours" else "--", color=color, marker="o" if side == "ours" else "^",
                label="%s (%s)" % (fam, side))
        hollow = [(v, ms) for v, ms, a in series[(fam, side)] if a]
        if hollow:
            ax.plot([v for v, _ in hollow], [ms for _, ms in hollow], linestyle="none", marker="o", markersize=10,
                    markerfacecolor="none", markeredgecolor=color)
    ax.set_yscale("log")
    ax.set_xlabel(pts[0].param if pts else "")
    ax.set_ylabel("time (ms), best of each family")
    ax.set_title("%s, %s (open circles: abandoned, one run)" % (sweep, direction), fontsize="medium")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_roofline(plt, direction, pts, peak, bandwidth, path):
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    ai = [p.intensity for p in pts]
    lo, hi = min(ai + [1.0]) / 2, max(ai + [peak * 1e3 / bandwidth * 4]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, x * bandwidth * 1e-3) for x in xs], color="black", label="roof")
    for side, marker in (("ours", "o"), ("cuDNN", "^")):
        for fam, color in FAMILY_COLORS.items():
            sel = [p for p in pts for r in [p.ours if side == "ours" else p.cudnn] if r and family(r["impl"]) == fam]
            if sel:
                best = [p.ours if side == "ours" else p.cudnn for p in sel]
                ax.scatter([p.intensity for p in sel], [p.flops / (r["ms"] * 1e-3) / 1e12 for p, r in zip(sel, best)],
                           marker=marker, color=color, s=18, label="%s best: %s" % (side, fam))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / minimal byte)")
    ax.set_ylabel("TFLOP/s (direct-convolution count)")
    ax.set_title("roofline, %s: %.1f TFLOP/s, %.0f GB/s" % (direction, peak, bandwidth), fontsize="medium")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Figures and a Markdown summary of the convolution study from "
                                             "`cnn-bench conv --csv` files (see the head of this file).")
    ap.add_argument("csv", nargs="+", help="CSV files of cnn-bench conv; later ones replace earlier rows")
    ap.add_argument("--out", help="folder for the figures (default: the first CSV's folder)")
    ap.add_argument("--no-figures", action="store_true", help="only the Markdown summary (no matplotlib needed)")
    ap.add_argument("--tolerance", type=float, default=1e-4, help="largest rel_err of a best row (default 1e-4)")
    ap.add_argument("--tf32-tolerance", type=float, default=5e-3, help="the same for tf32 rows (default 5e-3)")
    ap.add_argument("--peak-tflops", type=float, help="FP32 peak (default: from the CSVs' tflops / peak_share)")
    ap.add_argument("--bandwidth-gbs", type=float,
                    help="DRAM bandwidth of the roofline (default: --peaks' peak_gb_per_s, else %g, the H200's "
                         "measured copy bandwidth)" % DEFAULT_BANDWIDTH_GBS)
    ap.add_argument("--peaks", help="a `cnn-bench conv --json` file: its peak_tflops and peak_gb_per_s")
    args = ap.parse_args(argv)
    try:
        rows = read_csvs(args.csv)
        peaks = {}
        if args.peaks:
            with open(args.peaks) as f:
                peaks = json.load(f)
    except (OSError, ValueError) as e:
        print("study_report: error: %s" % e, file=sys.stderr)
        return 1
    if not rows:
        print("study_report: error: no rows in %s" % ", ".join(args.csv), file=sys.stderr)
        return 1
    peak = args.peak_tflops or measured_peak(rows) or (peaks.get("peak_tflops") or None)
    if args.bandwidth_gbs:
        bandwidth, bandwidth_from = args.bandwidth_gbs, "--bandwidth-gbs"
    elif peaks.get("peak_gb_per_s"):
        bandwidth, bandwidth_from = peaks["peak_gb_per_s"], "measured, " + os.path.basename(args.peaks)
    else:
        bandwidth, bandwidth_from = DEFAULT_BANDWIDTH_GBS, "the H200's measured copy bandwidth, the default"
    points = OrderedDict()
    for r in rows:
        points.setdefault((r["layer"], r["direction"]), Point(r["layer"], r["direction"])).rows.append(r)
    for p in points.values():
        p.finish(args.tolerance, args.tf32_tolerance)
    points = list(points.values())
    sys.stdout.write(summary(points, peak, bandwidth, bandwidth_from, args.csv, args.tolerance))
    if args.no_figures:
        return 0
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("study_report: error: matplotlib is not installed (Debian: apt-get install python3-matplotlib); "
              "--no-figures prints the summary without it", file=sys.stderr)
        return 1
    out = args.out or os.path.dirname(os.path.abspath(args.csv[0]))
    os.makedirs(out, exist_ok=True)
    written = []
    groups = OrderedDict()
    for p in points:
        if p.sweep:
            groups.setdefault((p.sweep, p.direction), []).append(p)
    for (sweep, d), pts in groups.items():
        layer, col = layer_and_column(sweep)
        name = "sweep_%s_%s_%s.png" % (safe(layer), safe(d), safe(col)) if col else "sweep_%s_%s.png" % (safe(sweep),
                                                                                                          safe(d))
        plot_sweep(plt, sweep, d, pts, os.path.join(out, name))
        written.append(name)
    if peak:
        for d in DIRECTIONS:
            pts = [p for p in points if p.direction == d and (p.ours or p.cudnn)]
            if pts:
                name = "roofline_%s.png" % d
                plot_roofline(plt, d, pts, peak, bandwidth, os.path.join(out, name))
                written.append(name)
    print("\nfigures (%d) in %s: %s" % (len(written), out, ", ".join(written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
