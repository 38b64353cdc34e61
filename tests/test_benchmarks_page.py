"""docs/benchmarks.md is generated from bench/results/*.json (bench/report.py): every figure in
it has the JSON row that backs it, with the date and the machine it was measured on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402


def test_the_committed_page_is_what_the_results_give() -> None:
    assert report.PAGE.read_text() == report.render(), "run python bench/report.py"


def test_each_figure_comes_with_its_date_and_machine(tmp_path: Path) -> None:
    bench, results = tmp_path / "bench", tmp_path / "results"
    bench.mkdir()
    results.mkdir()
    for name in ("alpha", "beta", "common"):
        (bench / f"{name}.py").write_text(f'"""Benchmark {name}: what it measures.\n\nMore."""\n')
    row = {"metric": "m", "ours": 2.0, "reference": 1.0, "unit": "s", "better": "lower"}
    (results / "alpha.json").write_text(
        json.dumps(
            [
                {**row, "ratio": 0.5, "date": "2026-12-03T10:00:00Z", "machine": "2 cores"},
                {**row, "metric": "old", "ratio": 0.5},  # written before rows had a date
            ]
        )
    )
    page = report.render(results, bench)
    assert "Measured 2026-12-03T10:00:00Z on 2 cores." in page
    assert "Measured date not recorded on machine not recorded." in page
    assert "| m | 2 | 1 | s | 0.50 |" in page
    assert page.endswith(
        "## Not measured here\n\nNo committed results; each figure comes from running the "
        "benchmark:\n\n- `python bench/beta.py`: Benchmark beta: what it measures.\n"
    )
    assert "common" not in page


def test_a_protocol_shows_every_seed_with_median_and_range(tmp_path: Path) -> None:
    bench, results = tmp_path / "bench", tmp_path / "results"
    bench.mkdir()
    results.mkdir()
    (bench / "learning.py").write_text('"""Learning: three seeds."""\n')
    row = {"metric": "m", "ours": 4000.0, "reference": 1000.0, "unit": "return", "ratio": 4.0}
    (results / "learning.json").write_text(json.dumps([{**row, "better": "higher"}]))
    runs = [
        {"task": "ppo-ant", "who": who, "seed": seed, "return": ret, "env_steps_per_s": 10.0}
        for who, rets in (
            ("sample-factory", (2000.0, 3000.0, 2500.0)),
            ("peer", (900.0, 1000.0, 1500.0)),
            ("ours", (4200.0, 3100.0, 4000.0)),
        )
        for seed, ret in enumerate(rets)
    ]
    # the machine's speed before each run: ours and SB3's measured it, Sample Factory's older
    # runs did not
    for run, raw in zip(runs[3:], (8600.0, 5400.0, 8000.0, 5000.0, 5400.0, 8600.0), strict=True):
        run["raw_env_steps_per_s"] = raw
    (results / "learning.details.json").write_text(json.dumps({"runs": runs}))
    page = report.render(results, bench)
    ours = "| ppo-ant | ours | 0: 4,200, 1: 3,100, 2: 4,000 | 4,000 | 3,100 to 4,200 | 10 | 5,400 |"
    peer = "| ppo-ant | peer | 0: 900, 1: 1,000, 2: 1,500 | 1,000 | 900 to 1,500 | 10 | 8,000 |"
    sf = "| ppo-ant | sample-factory | 0: 2,000, 1: 3,000, 2: 2,500 | 2,500 | 2,000 to 3,000 | 10 | - |"
    assert ours in page and peer in page and sf in page
    # ours, then the peers by name, whatever the order of the runs and the process's hash seed
    assert page.index(ours) < page.index(peer) < page.index(sf)
