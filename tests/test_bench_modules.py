"""Every benchmark under bench/ starts: its imports and its arguments parse (`--help`).

The benchmarks run outside the suite (`make bench`), so nothing else notices when a refactor
renames what they import: issue 26's redesign left bench/scale.py and bench/render.py importing
`experiment_topology`, gone with the topology carried by the Experiment, until a before/after
run of scale.py failed on it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.stem not in ("common", "report")) + sorted(
    BENCH.glob("peers/*.py")  # the peers' own scripts (their imports are inside their commands)
)


IDS = [str(p.relative_to(BENCH).with_suffix("")) for p in SCRIPTS]


@pytest.mark.parametrize("script", SCRIPTS, ids=IDS)
def test_a_benchmark_imports_and_parses_its_arguments(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "usage:" in done.stdout
