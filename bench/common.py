"""Shared helpers of the benchmarks: result rows, the table, the JSON file (DESIGN.md section 7).

Every `bench/<name>.py [--quick]` measures our path and its reference in the same run, prints a
table and writes `bench/results/<name>.json`: a list of rows
`{"metric", "ours", "reference", "unit", "better", "ratio"}`, where `ratio` is ours/reference when
higher is better and reference/ours when lower is better, so above 1 always means ahead.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Row:
    """One measured metric, ours against the reference."""

    metric: str
    ours: float
    reference: float
    unit: str
    better: Literal["higher", "lower"]

    @property
    def ratio(self) -> float:
        """Above 1: we are ahead of the reference."""
        num, den = (
            (self.ours, self.reference)
            if self.better == "higher"
            else (
                self.reference,
                self.ours,
            )
        )
        return num / den if den else math.inf

    def to_dict(self) -> dict[str, object]:
        """The JSON form of the row."""
        return {
            "metric": self.metric,
            "ours": self.ours,
            "reference": self.reference,
            "unit": self.unit,
            "better": self.better,
            "ratio": self.ratio,
        }


def parse_args(description: str) -> argparse.Namespace:
    """The common command line: `--quick` (under a minute)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="short run, under a minute")
    return parser.parse_args()


def _fmt(value: float) -> str:
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:.3e}"


def print_table(name: str, rows: list[Row]) -> None:
    """A plain-text table of the rows."""
    header = ("metric", "ours", "reference", "unit", "ratio")
    lines = [(r.metric, _fmt(r.ours), _fmt(r.reference), r.unit, f"{r.ratio:.2f}") for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines, strict=False)]
    print(f"== {name}")
    for line in (header, *lines):
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)))


def write_results(name: str, rows: list[Row]) -> Path:
    """Write `bench/results/<name>.json` and return its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps([r.to_dict() for r in rows], indent=2) + "\n")
    return path
