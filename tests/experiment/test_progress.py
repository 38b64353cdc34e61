"""The progress record: one set of keys for the runtime's files, the reporter and the readers."""

from __future__ import annotations

import json
from pathlib import Path

from surreal_kube.experiment import progress
from surreal_kube.runtime.status import ProgressFile


def test_a_record_round_trips_through_its_configmap_value() -> None:
    rec = progress.Record(
        state="running", iteration=12, env_steps=3400, env_steps_per_s=512.5,
        iterations_per_s=2.0, last_return=-140.25, updated_at=1.0,
    )  # fmt: skip
    cm = {"data": {progress.DATA_KEY: rec.to_json()}}
    assert progress.from_configmap(cm) == rec
    assert len(rec.to_json()) < 300


def test_what_was_not_reported_stays_null_and_bad_values_are_dropped() -> None:
    assert progress.from_configmap(None) is None
    assert progress.from_configmap({"metadata": {"name": "x"}}) is None  # created, not written
    assert progress.parse("not json") is None
    assert progress.parse("[1, 2]") is None
    assert progress.parse("x" * (progress.MAX_BYTES + 1)) is None
    rec = progress.parse(
        json.dumps(
            {"iteration": "7", "env_steps": -3, "last_return": True, "state": "x", "newer": 1}
        )
    )
    assert rec == progress.Record()  # every field null, the state back to "starting"


def test_the_runtime_progress_file_speaks_the_same_keys(tmp_path: Path) -> None:
    # The defect: launch/kube/status/summary.py read `iterations` / `last_eval_return` while the roles
    # write `iteration` / `last_return`. A learner's and an eval's own files, read as records:
    learner = ProgressFile(tmp_path, "e", "learner", "learner")
    learner.update(**{progress.ITERATION: 42})
    learner.write("running")
    evals = ProgressFile(tmp_path, "e", "evals-0", "eval")
    evals.update(**{progress.LAST_RETURN: 12.5})
    evals.write("running")
    assert progress.from_mapping(learner.data).iteration == 42
    assert progress.from_mapping(learner.data).state == "running"
    assert progress.from_mapping(evals.data).last_return == 12.5


def test_new_evaluations_are_those_numbered_above_the_last_one_read() -> None:
    recs = [
        {"evaluation": 1, "return": 1.0},
        {"evaluation": 2, "return": 2},
        "not an evaluation",
        {"evaluation": 3, "return": float("nan")},  # no point to place
        {"evaluation": True, "return": 4.0},
        {"return": 5.0},
        {"evaluation": 6.0, "return": 6.0, "param_version": 9},
    ]
    data = {"recent_evaluations": recs}
    assert progress.new_evaluations(data, 1) == [
        {"evaluation": 2, "return": 2.0},
        {"evaluation": 6, "return": 6.0, "param_version": 9},
    ]
    assert progress.new_evaluations(data, 6) == [] and progress.new_evaluations({}, -1) == []
