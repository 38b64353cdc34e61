"""The progress reporter's pure parts: what it keeps of the scalars, and staying quiet without
an API server (the channel itself is tested against the real API server in
tests/launch/kube/test_progress_cluster.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from surreal_kube.experiment import progress
from surreal_kube.runtime.reporter import ConfigMapWriter, ProgressTracker, Reporter


def test_the_tracker_keeps_the_newest_figures_of_each_role() -> None:
    t = ProgressTracker()
    assert t.record().state == "starting" and t.record().iteration is None
    t.observe("learner", None, None, 1200, 1.0, {"learner/iteration": 7.0,
              "learner/iterations_per_s": 3.25})  # fmt: skip
    t.observe("agents-0", "agents", 0, 1100, 1.0, {"agent/env_steps_per_s": 100.0})
    t.observe("agents-0", "agents", 1, 1100, 1.0, {"agent/env_steps_per_s": 50.0})
    t.observe("agents-0", "agents", 0, 1300, 2.0, {"agent/env_steps_per_s": 120.0})
    t.observe("evals-0", "evals", 0, 1000, 5.0, {"charts/eval_return": -3.5})
    t.observe("evals-1", "evals", 1, 900, 4.0, {"charts/eval_return": -9.0})  # older: ignored
    rec = t.record()
    assert (rec.state, rec.iteration, rec.env_steps) == ("running", 7, 1200)
    assert (rec.env_steps_per_s, rec.iterations_per_s, rec.last_return) == (170.0, 3.25, -3.5)
    assert progress.parse(rec.to_json()) == rec


def test_a_finished_learner_stays_finished() -> None:
    t = ProgressTracker()
    t.observe("learner", None, None, 100, 1.0, {"learner/iteration": 9.0, "learner/finished": 1})
    t.observe("learner", None, None, 100, 2.0, {"learner/iteration": 9.0})
    assert t.record().state == "finished"


def test_without_an_api_server_the_writer_is_off_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert ConfigMapWriter.in_cluster({}) is None  # a local run: nothing said
    assert not caplog.records
    env = {"SURREAL_PROGRESS_CONFIGMAP": "e-progress", "SURREAL_REPORTER_DIR": str(tmp_path)}
    with caplog.at_level(logging.WARNING):
        assert ConfigMapWriter.in_cluster(env) is None
    assert len(caplog.records) == 1


def test_a_refused_write_is_said_once_then_silent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "token").write_text("not-a-real-token")

    class Refused(ConfigMapWriter):
        def __init__(self) -> None:
            self.where, self.secrets = "ns/e-progress", tmp_path

        def write(self, text: str) -> None:
            raise PermissionError("the API server refused the write (403)")

    reporter = Reporter(ProgressTracker(), Refused())
    with caplog.at_level(logging.INFO):
        assert not reporter.write_once()
        assert not reporter.write_once()
    assert reporter.failures == 2
    assert len(caplog.records) == 1
    assert "not-a-real-token" not in caplog.text
