"""Folding the progress record into the status that `status`, `list` and the operator show."""

from __future__ import annotations

from surreal_kube.experiment import progress
from surreal_kube.launch.kube.status import progress as kube_progress
from surreal_kube.launch.kube.status.summary import ExperimentStatus


def test_the_record_fills_the_status_and_what_it_lacks_keeps_its_value() -> None:
    st = ExperimentStatus(phase="Running", learner_iteration=3, eval_return=-1.0)
    rec = progress.Record(state="running", iteration=42, env_steps=5000, env_steps_per_s=500.0)
    kube_progress.merge(st, rec)
    wire = st.to_wire()
    assert (wire["learnerIteration"], wire["envSteps"], wire["envStepsPerSecond"]) == (
        42, 5000, 500.0,
    )  # fmt: skip
    assert wire["evalReturn"] == -1.0 and wire["progress"] == "running"
    assert wire["phase"] == "Running"
    assert kube_progress.merge(st, None) is st


def test_a_finished_learner_is_success_unless_the_operator_said_failed() -> None:
    done = progress.Record(state="finished", iteration=50)
    assert kube_progress.merge(ExperimentStatus(phase="Running"), done).phase == "Succeeded"
    assert kube_progress.merge(ExperimentStatus(phase="Failed"), done).phase == "Failed"


def test_figures_not_reported_now_keep_the_last_status() -> None:
    st = kube_progress.keep_previous(
        ExperimentStatus(), {"learnerIteration": 7, "envSteps": 10, "envStepsPerSecond": 2.0}
    )
    assert (st.learner_iteration, st.env_steps, st.env_steps_per_second) == (7, 10, 2.0)
