"""The end of a run: one rule, which the local supervisor and the cluster's conductor both ask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from surreal_kube.experiment import run_end
from surreal_kube.experiment.resolve import resolve_experiment


def _session(*sets: str) -> Any:
    return resolve_experiment("exp-end", sets=list(sets)).spec.session


def test_the_budget_is_steps_or_time_whichever_comes_first() -> None:
    both = _session("session.maxEnvSteps=1000", "session.maxTimeSeconds=60")
    assert run_end.budget_reached(both, env_steps=999, elapsed=59.9) is None
    assert run_end.budget_reached(both, env_steps=1000, elapsed=0.0) == "reached 1000 env steps"
    assert run_end.budget_reached(both, env_steps=0, elapsed=60.0) == "reached 60 s of wall time"
    # every agent process done is the step budget too; an unknown time never ends a run
    assert run_end.budget_reached(both, env_steps=0, elapsed=None, agents_done=True) == (
        "reached 1000 env steps"
    )
    assert run_end.budget_reached(both, env_steps=0, elapsed=None) is None
    none = _session()
    assert run_end.budget_reached(none, env_steps=10**9, elapsed=1e9, agents_done=True) is None


def test_a_learner_fails_the_run_after_its_restarts() -> None:
    assert run_end.learner_failed(4, "exit code 1") is None
    assert run_end.learner_failed(5, "signal 9") == (
        "learner exhausted its 5 restarts (last: signal 9)"
    )
    assert run_end.learner_failed(2, "exit code 1", max_restarts=2) is not None


def test_both_backends_decide_with_this_rule(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The supervisor and the conductor count their own figures but decide alike: here."""
    from surreal_kube.launch.local.folder import ExperimentFolder
    from surreal_kube.launch.local.sockets import Wiring
    from surreal_kube.launch.local.supervisor import Supervisor
    from surreal_kube.runtime.conductor import Conductor
    from surreal_kube.runtime.reporter import ProgressTracker

    asked: list[dict[str, Any]] = []

    def rule(session: Any, **counts: Any) -> str:
        asked.append(counts)
        return "the rule's reason"

    monkeypatch.setattr(run_end, "budget_reached", rule)
    exp = resolve_experiment("exp-end", sets=["session.maxEnvSteps=1000"])
    wiring = Wiring(tmp_path / "sockets", {"tensorboard": 1})  # nothing started
    sup = Supervisor(exp, exp.topology, ExperimentFolder(tmp_path / "exp-end"), wiring)
    conductor = Conductor(
        exp,
        ProgressTracker(),
        api=None,  # type: ignore[arg-type]
        results_dir=tmp_path,
        results_configmap=None,
        workloads=[],
    )
    assert sup.budget_reached() == conductor.budget_reached() == "the rule's reason"
    assert [sorted(c) for c in asked] == [
        ["elapsed", "env_steps"],
        ["agents_done", "elapsed", "env_steps"],
    ]
