#!/usr/bin/env python3
"""Plot benchmark points as a PNG laid out like the paper's Figure 1.

Usage:
  scripts/plot.sh [--stat mean|p50|p90|p99] [--title T] [--out FILE.png] [--table]
                  [--label L] [--series [PROTOCOL:]SERIES,...] FILE.jsonl [FILE2.jsonl ...]

(plot.sh runs this file in a venv that has matplotlib; run it directly if
you already have matplotlib.)

Each input line is one point from `creek bench tpcc|ycsb|tickets --json`:
a JSON object with protocol, optional label, throughput_ops_per_sec,
latency_us {series: {p50, p90, p99, max, mean, count}}, accuracy,
execution_ratio, cpu_busy, divergence. Null or missing fields are skipped,
unknown fields ignored, and lines that are not JSON objects (or have no
throughput) are skipped with a warning on stderr.

Panels, each against throughput (k ops/s), lettered in the order drawn:
  (a) latency in ms of every (protocol, label, series), e.g. "creek weak
      tentative", "archie response"; the y axis is logarithmic when the
      values span more than two decades;
  (b) accuracy in %, (c) execution ratio, (d) divergence in % -- each only
      when some point has that field.
One colour per (protocol, label); in (a) one marker per series, dashed for
tentative series. When the points come from more than one bench or target,
those are put in front of the curve names so they are not merged.

--label keeps only the points with that label (e.g. one variation of
`creek bench paper`'s paper.jsonl). --series keeps only the listed latency
series, each for every protocol or, as PROTOCOL:SERIES, for one (e.g.
creek:weak_tentative,creek:strong_stable,archie:response).
--stat defaults to mean; --out to the first input with .png for .jsonl.
--table prints a Markdown table of the points to stdout instead of plotting
(plotting too if --out is given); it does not need matplotlib.
Exit 2 on a missing file or no usable point.
Sample inputs (made up, with a few bad lines): scripts/testdata/plot/.
"""
import argparse
import json
import math
import os
import sys

SERIES_ORDER = ["weak_tentative", "weak_final", "strong_tentative", "strong_stable", "response"]
PROTOCOL_ORDER = ["creek", "archie", "bayou", "smr"]
MARKERS = {"weak_tentative": "o", "weak_final": "s", "strong_tentative": "^",
           "strong_stable": "D", "response": "o"}
OTHER_MARKERS = ["v", "P", "X", "*", "<", ">", "h"]
PANELS = [("accuracy", "accuracy (%)", 100), ("execution_ratio", "execution ratio", 1),
          ("divergence", "divergence (%)", 100)]


def die(msg):
    print(f"plot-bench: {msg}", file=sys.stderr)
    sys.exit(2)


def number(v):
    """v if it is a finite number (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return v


def load(paths):
    points = []
    for path in paths:
        if not os.path.isfile(path):
            die(f"{path}: no such file")
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    p = json.loads(line)
                except json.JSONDecodeError:
                    p = None
                if not isinstance(p, dict):
                    print(f"plot-bench: {path}:{n}: not a JSON object, skipped", file=sys.stderr)
                elif number(p.get("throughput_ops_per_sec")) is None:
                    print(f"plot-bench: {path}:{n}: no throughput_ops_per_sec, skipped", file=sys.stderr)
                else:
                    points.append(p)
    if not points:
        die("no usable points in " + ", ".join(paths))
    return points


def keep_series(points, spec):
    """Drop the latency series of each point that spec (PROTOCOL:SERIES or
    SERIES, comma-separated) does not list."""
    wanted = [w.strip() for w in spec.split(",") if w.strip()]
    for p in points:
        lat = p.get("latency_us")
        if isinstance(lat, dict):
            proto = str(p.get("protocol") or "?")
            p["latency_us"] = {s: v for s, v in lat.items() if s in wanted or f"{proto}:{s}" in wanted}
    return points


def rank(order, name):
    return (order.index(name), "") if name in order else (len(order), str(name))


def group_key(p, prefix_fields):
    """(prefix..., protocol, label): one colour, and one curve per series."""
    prefix = tuple(str(p.get(f) or "?") for f in prefix_fields)
    return prefix + (str(p.get("protocol") or "?"), str(p.get("label") or ""))


def group_sort(key):
    return key[:-2] + (rank(PROTOCOL_ORDER, key[-2]), key[-1])


def curve_name(key, series=None):
    """"creek weak tentative", with the label (if any) after it in parentheses."""
    name = " ".join(key[:-1] + ((series.replace("_", " "),) if series else ()))
    return f"{name} ({key[-1]})" if key[-1] else name


def series_of(p, stat):
    """{series: latency in us} of the series of p that have this stat."""
    lat = p.get("latency_us")
    out = {}
    if isinstance(lat, dict):
        for s, v in lat.items():
            if isinstance(v, dict) and number(v.get(stat)) is not None:
                out[s] = v[stat]
    return out


def all_series(points, stat):
    names = {s for p in points for s in series_of(p, stat)}
    return sorted(names, key=lambda s: rank(SERIES_ORDER, s))


def fmt(v, scale=1, digits=2):
    v = number(v)
    return "-" if v is None else f"{v * scale:.{digits}f}"


def table(points, stat, prefix_fields):
    series = all_series(points, stat)
    extra = [f for f, _, _ in PANELS + [("cpu_busy", "", 0)] if any(number(p.get(f)) is not None for p in points)]
    names = {"accuracy": "accuracy %", "execution_ratio": "exec ratio",
             "divergence": "divergence %", "cpu_busy": "cpu %"}
    scale_digits = {"accuracy": (100, 2), "execution_ratio": (1, 3), "divergence": (100, 2), "cpu_busy": (100, 1)}
    head = ["curve", "k ops/s"] + [f"{s.replace('_', ' ')} {stat} ms" for s in series] + [names[f] for f in extra]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    rows = sorted(points, key=lambda p: (group_sort(group_key(p, prefix_fields)), p["throughput_ops_per_sec"]))
    for p in rows:
        lat = series_of(p, stat)
        cells = [curve_name(group_key(p, prefix_fields)), fmt(p["throughput_ops_per_sec"], 1e-3)]
        cells += [fmt(lat.get(s), 1e-3, 3) for s in series]
        cells += [fmt(p.get(f), *scale_digits[f]) for f in extra]
        print("| " + " | ".join(cells) + " |")


def plot(points, stat, title, out, prefix_fields):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    groups = sorted({group_key(p, prefix_fields) for p in points}, key=group_sort)
    colours = {g: f"C{i % 10}" for i, g in enumerate(groups)}
    series = all_series(points, stat)
    markers = {s: MARKERS.get(s) or OTHER_MARKERS[i % len(OTHER_MARKERS)] for i, s in enumerate(series)}

    # (title, y label, {curve name: (colour, marker, linestyle, [(x, y)])})
    panels = [(f"latency ({stat})", f"latency {stat} (ms)", {})]
    for p in points:
        g = group_key(p, prefix_fields)
        for s, us in series_of(p, stat).items():
            style = "--" if "tentative" in s else "-"
            curve = panels[0][2].setdefault(curve_name(g, s), (colours[g], markers[s], style, []))
            curve[3].append((p["throughput_ops_per_sec"] / 1e3, us / 1e3))
    for field, ylabel, scale in PANELS:
        curves = {}
        for p in points:
            if number(p.get(field)) is not None:
                g = group_key(p, prefix_fields)
                curve = curves.setdefault(curve_name(g), (colours[g], "o", "-", []))
                curve[3].append((p["throughput_ops_per_sec"] / 1e3, p[field] * scale))
        if curves:
            panels.append((ylabel.split(" (")[0], ylabel, curves))
    if not panels[0][2]:
        panels.pop(0)
    if not panels:
        die(f"no point has a latency {stat}, accuracy, execution ratio or divergence")

    widths = [1.6 if "latency" in panels[0][0] else 1] + [1] * (len(panels) - 1)
    big = [len(c) for _, _, c in panels if len(c) > 8]  # legends that go below their panel
    legend_rows = math.ceil(max(big) / 2) if big else 0
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * sum(widths), 4.6 + 0.16 * legend_rows), squeeze=False,
                             gridspec_kw={"width_ratios": widths}, layout="constrained")
    for i, (ax, (name, ylabel, curves)) in enumerate(zip(axes[0], panels)):
        ys = []
        for label, (colour, marker, style, xy) in curves.items():
            xy.sort()
            ax.plot([x for x, _ in xy], [y for _, y in xy], color=colour, marker=marker,
                    linestyle=style, markersize=4, linewidth=1.3, label=label)
            ys += [y for _, y in xy if y > 0]
        if name.startswith("latency") and ys and max(ys) / min(ys) > 100:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        elif name.startswith("latency"):
            ax.set_ylim(0, max(ys) * 1.08 if ys else None)
        if name == "accuracy":  # no room above 100% (matplotlib pads a flat 100% line to 105)
            ax.set_ylim(top=min(ax.get_ylim()[1], 100.5))
        ax.set_title(f"({chr(ord('a') + i)}) {name}", fontsize=10)
        ax.set_xlabel("throughput (k ops/s)")
        ax.set_ylabel(ylabel)
        ax.set_xlim(left=0)
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.12)
        if len(curves) > 8:  # too many to sit inside the axes without hiding data
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=2)
        else:
            ax.legend(fontsize=7, loc="best")
    fig.suptitle(title)
    fig.savefig(out, dpi=130)
    print(f"plot-bench: wrote {out}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", metavar="FILE.jsonl")
    ap.add_argument("--stat", choices=["mean", "p50", "p90", "p99"], default="mean")
    ap.add_argument("--title", help="figure title (default: the benches and targets)")
    ap.add_argument("--out", help="PNG to write (default: first FILE with .png)")
    ap.add_argument("--table", action="store_true", help="print a Markdown table of the points")
    ap.add_argument("--label", help="keep only the points with this label")
    ap.add_argument("--series", help="latency series to keep: [PROTOCOL:]SERIES,...")
    args = ap.parse_args()

    points = load(args.files)
    if args.label is not None:
        points = [p for p in points if str(p.get("label") or "") == args.label]
        if not points:
            die(f"no point has label {args.label!r}")
    if args.series:
        points = keep_series(points, args.series)
    prefix_fields = [f for f in ("bench", "target") if len({p.get(f) for p in points}) > 1]
    if args.table:
        table(points, args.stat, prefix_fields)
    if args.out or not args.table:
        out = args.out or os.path.splitext(args.files[0])[0] + ".png"
        title = args.title or ", ".join(sorted({f"{p.get('bench') or '?'} ({p.get('target') or '?'})" for p in points}))
        plot(points, args.stat, title, out, prefix_fields)


if __name__ == "__main__":
    main()
