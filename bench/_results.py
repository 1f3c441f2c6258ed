"""Benchmark results as JSON, which ``bench/charts.py`` draws.

Every benchmark takes ``--json PATH`` (default ``bench/results/NAME.json``) and writes one
document there after its run::

    {"benchmark": "read", "command": "python bench/read.py --quick", "date": "2026-12-02",
     "machine": {"cpu": "...", "cores": 2, "memory_gb": 8, "python": "3.11.7", ...},
     "source": "measured by bench/read.py",
     "sections": [{"title": "read raw", "unit": "samples/s",
                   "rows": [{"name": "shardkit", "rate": 72400, "peak_mb": 27}, ...]}]}

Rows named ``shardkit...`` are shardkit's; ``peak_mb`` (peak resident memory) is optional;
a section's ``"better"`` is ``"higher"`` (a rate) or ``"lower"`` (a cost).
Absolute paths in the command are written as ``PATH`` (no machine's folders in results).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from typing import Any

__all__ = ["Results", "add_json_option", "builder_module", "machine"]

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
_KEPT_PATHS = ("/dev/shm", "/tmp")


def builder_module(name: str) -> Any:
    """``shardkit.builder``'s module ``_NAME``, or ``NAME`` in a ``--base`` tree from before
    the build's modules were private by name."""
    import importlib

    try:
        return importlib.import_module(f"shardkit.builder._{name}")
    except ModuleNotFoundError:
        return importlib.import_module(f"shardkit.builder.{name}")


def add_json_option(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=os.path.join(RESULTS, f"{name}.json"),
        help="write the results here as JSON for bench/charts.py (default: bench/results/)",
    )


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return round(pages * size / 2**30, 1)


def machine() -> dict[str, Any]:
    """What ran the benchmark: CPU model, cores, memory, OS and Python."""
    return {
        "cpu": _cpu(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def _command(argv: list[str]) -> str:
    words = []
    for word in argv:
        key, eq, value = word.partition("=")
        target = value if eq else key
        if target.startswith("/") and not target.startswith(_KEPT_PATHS):
            target = "PATH"
        words.append(f"{key}={target}" if eq else target)
    return " ".join(["python", *words])


class Results:
    """Sections of rows, collected as a benchmark runs, then written once."""

    def __init__(self, benchmark: str) -> None:
        self.benchmark = benchmark
        self.sections: list[dict[str, Any]] = []

    def section(
        self, title: str, unit: str, rows: list[dict[str, Any]], *, better: str = "higher"
    ) -> None:
        """One comparison: ``rows`` of ``{"name", "rate"[, "peak_mb"]}``; shardkit's rows
        are named ``shardkit...``. ``better``: ``"lower"`` for costs (CPU us per image)."""
        self.sections.append({"title": title, "unit": unit, "better": better, "rows": rows})

    def write(self, path: str) -> None:
        script = os.path.relpath(sys.argv[0], os.path.dirname(RESULTS))
        document = {
            "benchmark": self.benchmark,
            "command": _command([os.path.join("bench", script), *sys.argv[1:]]),
            "date": datetime.date.today().isoformat(),
            "machine": machine(),
            "source": f"measured by bench/{script}",
            "sections": self.sections,
        }
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=1)
            file.write("\n")
        print(f"results: {path}", file=sys.stderr)
