"""Shared helpers of the benchmarks: result rows, the table, the JSON file (DESIGN.md section 7).

Every `bench/<name>.py [--quick]` measures our path and its reference in the same run, prints a
table and writes `bench/results/<name>.json`: a list of rows
`{"metric", "ours", "reference", "unit", "better", "ratio"}`, where `ratio` is ours/reference when
higher is better and reference/ours when lower is better, so above 1 always means ahead. Each row
also says when and where it was measured (`date`, `machine`, `quick`): a figure means little
without them, and `bench/report.py` writes them beside it into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import multiprocessing
import os
import platform
import queue as queue_module
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

RESULTS = Path(__file__).resolve().parent / "results"
_quick: bool | None = None
"""Whether this run is `--quick` (set by parse_args; None for a bench with its own options)."""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1 << 20)
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine() -> str:
    """This machine in one line: cores, processor, memory, system, Python, and how busy it was
    (the load average when the results are written: a loaded machine's figures are slower)."""
    memory = _memory_gib()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    parts = [
        f"{os.cpu_count()} cores ({_cpu_model()})",
        f"{memory:.0f} GiB" if memory is not None else None,
        f"{platform.system()} {platform.release()}",
        f"Python {platform.python_version()}",
        f"load average {load:.1f}" if load is not None else None,
    ]
    return ", ".join(p for p in parts if p)


def local_run_active(folder: Path) -> bool:
    """Whether a local experiment has yet to publish its final phase.

    The supervisor writes `Stopping` first (the final evaluation, checkpoints and results are
    still to come) and publishes Succeeded, Failed or Stopped only once the results are
    written: a reader that took every phase but Starting and Running for the end read
    `results/summary.json` before it existed."""
    from surreal_kube.launch.local.backend import ACTIVE

    state = json.loads((folder / "state.json").read_text())
    return state.get("phase") in ACTIVE


def raw_env_rate(env_id: str, seconds: float) -> float:
    """Steps/s of the bare gymnasium environment `env_id` with random actions."""
    import gymnasium as gym

    env = gym.make(env_id)
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(1000)]
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, term, trunc, _ = env.step(actions[steps % 1000])
        steps += 1
        if term or trunc:
            env.reset()
    env.close()
    return steps / (time.perf_counter() - start)


def _raw_env_worker(env_id: str, seconds: float, queue: Any) -> None:
    queue.put(raw_env_rate(env_id, seconds))


def raw_env_limit(env_id: str, seconds: float, processes: int) -> float:
    """Steps/s of `processes` bare environments stepping at once, one process each: what the
    machine's cores can step with nothing else running (one process alone overstates a loaded
    machine and understates one with more cores). Measured beside a figure, it says how fast
    the machine was that hour: a shared host's speed drifts by a third from one day to the
    next, and a wall-clock budget's return drifts with it."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    workers = [
        ctx.Process(target=_raw_env_worker, args=(env_id, seconds, queue)) for _ in range(processes)
    ]
    try:
        for w in workers:
            w.start()
        rates: list[float] = []
        deadline = time.monotonic() + seconds + 120
        while len(rates) < len(workers):
            with contextlib.suppress(queue_module.Empty):
                rates.append(queue.get(timeout=1.0))
                continue
            failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                why = f"exit codes {failed}" if failed else f"no result in {seconds + 120:.0f} s"
                raise RuntimeError(f"the bare {env_id} could not be stepped: {why} (see above)")
    finally:  # a worker that failed leaves none of the others stepping behind it
        for w in workers:
            if w.is_alive():
                w.terminate()
            if w.pid is not None:
                w.join()
    return float(sum(rates))


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
    args = parser.parse_args()
    global _quick
    _quick = bool(args.quick)
    return args


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


def utc_stamp() -> str:
    """Now, as every result row and protocol run is dated."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_results(
    name: str, rows: list[Row], quick: bool | None = None, keep_others: bool = False
) -> Path:
    """Write `bench/results/<name>.json` (each row with the date and machine) and its path.

    keep_others: a run that measured part of a bench keeps the committed rows of the metrics it
    did not measure (each keeps its own date and machine); otherwise the file is the run's."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    stamp = {
        "date": utc_stamp(),
        "machine": machine(),
        "quick": _quick if quick is None else quick,
    }
    out = [{**r.to_dict(), **stamp} for r in rows]
    if keep_others and path.is_file():
        measured = {row["metric"] for row in out}
        kept = [row for row in json.loads(path.read_text()) if row["metric"] not in measured]
        out = kept + out
    path.write_text(json.dumps(out, indent=2) + "\n")
    return path
