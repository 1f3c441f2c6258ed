"""Draw the benchmark results (bench/results/*.json) as PNG bar charts.

    python bench/charts.py                      # every results file -> docs/charts/NAME.png
    python bench/charts.py bench/results/read.json --out /tmp/charts

One PNG per results file: a row per comparison, shardkit's bars in blue and each peer's in
grey, every peer bar labelled with shardkit's ratio over it; a second panel with peak
memory where the results have it; the command, the machine, the date and where the figures
come from under the chart. ``make charts`` runs this (matplotlib, the ``plot`` extra).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
OURS, PEER = "#3366aa", "#aaaaaa"


def _ours(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((r for r in rows if r["name"].startswith("shardkit")), None)


def _ratio(section: dict[str, Any], row: dict[str, Any], ours: dict[str, Any] | None) -> str:
    if ours is None or row["name"].startswith("shardkit") or not row["rate"]:
        return ""
    ratio = ours["rate"] / row["rate"]
    if section.get("better") == "lower":
        ratio = 1 / ratio
    return f"  shardkit {ratio:.2f}x" if ratio < 10 else f"  shardkit {ratio:.0f}x"


def _panel(axes: Any, section: dict[str, Any], key: str, unit: str, ratios: bool) -> None:
    rows = [r for r in section["rows"] if r.get(key) is not None]
    names = [r["name"] for r in rows][::-1]
    values = [r[key] for r in rows][::-1]
    colours = [OURS if n.startswith("shardkit") else PEER for n in names]
    bars = axes.barh(range(len(rows)), values, color=colours)
    axes.set_yticks(range(len(rows)), names, fontsize=8)
    axes.set_xlabel(unit, fontsize=8)
    axes.tick_params(axis="x", labelsize=7)
    top = max(values) if values else 1
    axes.set_xlim(0, top * (1.45 if ratios else 1.2))
    ours = _ours(section["rows"])
    for bar, row in zip(bars, rows[::-1], strict=True):
        label = f" {row[key]:,.0f}" + (_ratio(section, row, ours) if ratios else "")
        axes.text(
            bar.get_width(), bar.get_y() + bar.get_height() / 2, label, va="center", fontsize=7
        )


def draw(document: dict[str, Any], output: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    sections = document["sections"]
    memory = any(r.get("peak_mb") is not None for s in sections for r in s["rows"])
    heights = [0.9 + 0.28 * len(s["rows"]) for s in sections]
    figure = Figure(figsize=(11 if memory else 7.5, sum(heights) + 0.55), dpi=80)
    grid = figure.add_gridspec(
        len(sections),
        2 if memory else 1,
        height_ratios=heights,
        width_ratios=[3, 2] if memory else None,
    )
    for i, section in enumerate(sections):
        better = (
            "higher is better" if section.get("better", "higher") == "higher" else "lower is better"
        )
        rate = figure.add_subplot(grid[i, 0])
        _panel(rate, section, "rate", f"{section['unit']} ({better})", ratios=True)
        rate.set_title(section["title"], fontsize=9, loc="left")
        if memory and any(r.get("peak_mb") is not None for r in section["rows"]):
            peak = figure.add_subplot(grid[i, 1])
            _panel(peak, section, "peak_mb", "peak memory, MB (lower is better)", ratios=False)
    machine = document["machine"]
    cores = f", {machine['cores']} cores" if machine.get("cores") else ""
    memory_gb = f", {machine['memory_gb']} GB" if machine.get("memory_gb") else ""
    caption = (
        f"$ {document['command']}\n"
        f"machine: {machine.get('cpu', '?')}{cores}{memory_gb}, {machine.get('os', '')}, "
        f"Python {machine.get('python', '?')}; {document['date']}\n"
        f"figures: {document['source']}"
    )
    figure.text(0.01, 0.005, caption, fontsize=7, family="monospace", va="bottom")
    figure.tight_layout(rect=(0, 0.5 / (sum(heights) + 0.55), 1, 1))
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    figure.savefig(output, format="png")
    _shrink(output)


def _shrink(output: str) -> None:
    """The PNG in 64 colours (a third of the bytes; bar charts need no more)."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(output) as image:
        small = image.convert("RGB").quantize(colors=64)
    small.save(output, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", help="results files (default: bench/results/*.json)")
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "charts"))
    args = parser.parse_args(argv)
    paths = args.results or sorted(glob.glob(os.path.join(HERE, "results", "*.json")))
    if not paths:
        print("no results: run a benchmark first (bench/*.py --json PATH)", file=sys.stderr)
        return 2
    for path in paths:
        with open(path, encoding="utf-8") as file:
            document = json.load(file)
        if "sections" not in document:  # tokens.json: its own summary, no rows to draw
            print(f"{os.path.relpath(path)}: not a results file of bench/_results.py, skipped")
            continue
        output = os.path.join(args.out, f"{document['benchmark']}.png")
        draw(document, output)
        print(f"{os.path.relpath(output)}: {len(document['sections'])} charts from {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
