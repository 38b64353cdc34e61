"""Benchmark of the CLI's start-up: how long a person waits for `--help` and a first answer.

    python bench/cli.py [--quick]

Each row is the median wall time of fresh processes (the way a person or a script runs the
CLI), against a reference measured in the same run on the same machine:

- `surreal-kube --help` and `surreal-kube create --help` against `python -c pass`: the
  interpreter's own floor, so the ratio is the share of the wait that is Python itself
  (1.0 would mean the CLI costs nothing on top of it). The goal is under 0.5 s for `--help`.
- `surreal-kube --help` against `kubectl --help`, when the test control plane's kubectl is built
  (~/.cache/surreal-kube/controlplane/*/bin/kubectl): what a kubectl user is used to.
- `surreal-kube config NAME -o yaml` (resolves and validates a spec: pydantic models load)
  against `python -c pass`.

The console script is run as installed (`.venv/bin/surreal-kube`, else `python -m`). Writes
bench/results/cli.json.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, parse_args, print_table, write_results  # noqa: E402

GOAL_HELP_SECONDS = 0.5


def entry_point() -> list[str]:
    script = Path(sys.executable).parent / "surreal-kube"
    return [str(script)] if script.exists() else [sys.executable, "-m", "surreal_kube.cli.main"]


def kubectl() -> Path | None:
    built = sorted(Path("~/.cache/surreal-kube/controlplane").expanduser().glob("*/bin/kubectl"))
    return built[-1] if built else None


def median_seconds(cmd: list[str], repeats: int) -> float:
    """Median wall time of `repeats` fresh runs (after one warm-up run for the page cache)."""
    env = {**os.environ, "COLUMNS": "100"}
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    repeats = 5 if args.quick else 21
    sk = entry_point()
    floor = median_seconds([sys.executable, "-c", "pass"], repeats)
    helps = median_seconds([*sk, "--help"], repeats)
    create_help = median_seconds([*sk, "create", "--help"], repeats)
    config = median_seconds([*sk, "config", "exp-ppo-ant", "-o", "yaml"], repeats)
    rows = [
        Row("surreal-kube --help vs python -c pass", helps, floor, "s", "lower"),
        Row("surreal-kube create --help vs python -c pass", create_help, floor, "s", "lower"),
        Row("surreal-kube config -o yaml vs python -c pass", config, floor, "s", "lower"),
    ]
    ctl = kubectl()
    if ctl is not None:
        ref = median_seconds([str(ctl), "--help"], repeats)
        rows.append(Row("surreal-kube --help vs kubectl --help", helps, ref, "s", "lower"))
    print_table("cli", rows)
    verdict = "met" if helps < GOAL_HELP_SECONDS else "NOT met"
    print(f"goal --help under {GOAL_HELP_SECONDS} s: {verdict} ({helps:.3f} s)")
    write_results("cli", rows)


if __name__ == "__main__":
    main()
