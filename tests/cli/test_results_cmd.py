"""`surreal-kube results NAME -o DIR` for a local experiment, run as a person runs it (the cluster
side, from `<exp>-results` after the pods are gone, is in tests/launch/kube/test_run_end_cluster.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from surreal_kube.session import results as shared
from tests.cli.test_first_day import fake_local_experiment, run


def test_local_results_are_fetched_in_the_one_format(tmp_path: Path) -> None:
    folder = fake_local_experiment(tmp_path / "exps", "exp-r", results=False)
    points = [
        {"env_steps": 100 * i, "wall_time": float(i), "eval_return": float(i), "eval_std": 0.5}
        for i in range(1, 4)
    ]
    for point in points:
        shared.append_point(folder / "results" / shared.CURVE, point)
    summary = shared.summarize(
        points,
        name="exp-r",
        phase="Succeeded",
        reason="reached 300 env steps",
        env_steps=300,
        elapsed=3.0,
        learner_iteration=9,
        restarts={},
        health={},
    )
    shared.write_files(folder / "results", summary, points)
    out = tmp_path / "out"
    res = run("results", "exp-r", "--local", "-o", str(out), home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(out / f) for f in shared.FILES]
    assert res.stderr.strip() == (
        "exp-r: Succeeded (reached 300 env steps), final return 3.00, 3 evaluations"
    )
    for name in shared.FILES:
        assert (out / name).read_bytes() == (folder / "results" / name).read_bytes()
    assert json.loads((out / shared.SUMMARY).read_text())["final_return"] == 3.0


def test_no_results_yet_says_what_the_run_is_doing_in_one_line(tmp_path: Path) -> None:
    folder = fake_local_experiment(tmp_path / "exps", "exp-n", results=False)
    res = run("results", "exp-n", "--local", "-o", str(tmp_path / "out"), home=tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip() == (
        "error: exp-n has no results yet: it is Succeeded (1,000 env steps, learner iteration 0); "
        f"it ended without writing them (see {folder / 'logs'})"
    )
    assert not (tmp_path / "out").exists()
    res = run("results", "nosuch", "--local", home=tmp_path)
    assert res.returncode == 1 and res.stderr.startswith("error: no local experiment named")
