"""`wait_running` through the operator: it follows the status the operator writes.

At 10,000 agents a second watch of every pod (the CLI's, beside the operator's) cost the machine
about as much CPU as the operator itself while the cluster was busiest creating those pods
(bench/scale.py). So through the operator the CLI reads the one `Experiment`, and never the pods;
and a status written for an older generation of the spec (right after `scale`) is not taken as
the answer.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from surreal_kube.errors import LaunchError
from surreal_kube.experiment import progress
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.lifecycle import waiting
from surreal_kube.launch.kube.status.summary import ExperimentStatus


class StatusOnly:
    """A cluster that serves one Experiment whose status changes from read to read; any other
    read (pods above all) fails the test."""

    def __init__(self, statuses: list[tuple[int, dict[str, Any]]]) -> None:
        self.statuses = statuses
        self.reads = 0

    def get_or_none(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        assert res.kind == "Experiment", f"read a {res.kind}"
        generation, status = self.statuses[min(self.reads, len(self.statuses) - 1)]
        self.reads += 1
        return {"metadata": {"name": name, "generation": generation}, "status": status}

    def __getattr__(self, attr: str) -> Any:
        raise AssertionError(f"wait_running through the operator called kube.{attr}")


def running(generation: int, ready: str = "5/5") -> dict[str, Any]:
    return {"phase": "Running", "observedGeneration": generation, "ready": ready}


@pytest.fixture
def found() -> Any:
    exp = resolve_experiment("waiting", sets=["agents.count=2"])
    return SimpleNamespace(exp=exp, namespace="ns", via_operator=True)


def test_through_the_operator_the_status_is_followed_not_the_pods(found: Any) -> None:
    kube = StatusOnly(
        [
            (1, {}),  # not picked up yet
            (1, {"phase": "Pending", "observedGeneration": 1, "ready": "2/5"}),
            (1, running(1)),
        ]
    )
    ticks: list[ExperimentStatus] = []
    status = waiting.wait_running(kube, found, poll=0.01, tick=ticks.append)  # type: ignore[arg-type]
    assert status.phase == "Running" and status.ready == "5/5"
    assert [t.phase for t in ticks] == ["Pending", "Pending", "Running"]
    assert ticks[0].ready.startswith("0/") and ticks[1].ready == "2/5"


def test_a_status_of_an_older_generation_is_not_the_answer(found: Any) -> None:
    # `scale` bumped the generation to 2; the operator's status still describes generation 1
    kube = StatusOnly([(2, running(1, "4/4")), (2, running(1, "4/4")), (2, running(2, "5/5"))])
    status = waiting.wait_running(kube, found, poll=0.01)  # type: ignore[arg-type]
    assert status.ready == "5/5" and kube.reads == 3


def test_an_experiment_the_operator_failed_raises(found: Any) -> None:
    kube = StatusOnly([(1, {"phase": "Failed", "reason": "the learner cannot run"})])
    with pytest.raises(LaunchError, match="the learner cannot run"):
        waiting.wait_running(kube, found, poll=0.01)  # type: ignore[arg-type]


def test_through_the_operator_a_run_that_finished_before_it_was_running_is_the_answer(
    found: Any,
) -> None:
    # CI: a 30,000-step run reached its budget and released its pods before the last of its 12
    # pods was ready; `create` waited its whole --timeout 900 and said "not running"
    ended = {"phase": "Succeeded", "observedGeneration": 1, "ready": "0/5", "reason": "finished"}
    kube = StatusOnly(
        [(1, {"phase": "Pending", "observedGeneration": 1, "ready": "4/5"}), (1, ended)]
    )
    status = waiting.wait_running(kube, found, timeout=5, poll=0.01)  # type: ignore[arg-type]
    assert status.phase == "Succeeded" and kube.reads == 2


class Records:
    """A cluster whose only object is the experiment's progress ConfigMap, one record per read
    (the last repeated); any other read fails the test."""

    def __init__(self, records: list[progress.Record | None]) -> None:
        self.records = records
        self.reads = 0

    def get_or_none(self, res: Any, name: str, namespace: str | None = None) -> Any:
        assert res.kind == "ConfigMap" and name.endswith("-progress"), (res.kind, name)
        record = self.records[min(self.reads, len(self.records) - 1)]
        self.reads += 1
        return None if record is None else {"data": {progress.DATA_KEY: record.to_json()}}


class NeverReady:
    """A pod watch of pods that never become ready (the slowest of them on a busy node)."""

    def __init__(self, *_: Any) -> None:
        import threading

        self.changed = threading.Event()

    def __enter__(self) -> NeverReady:
        return self

    def __exit__(self, *_: Any) -> None:
        pass

    def snapshot(self) -> list[dict[str, Any]]:
        return []


def test_applied_directly_a_run_that_finished_before_every_pod_was_ready_ends_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(waiting, "PodWatch", NeverReady)
    monkeypatch.setattr(waiting, "RECORD_SECONDS", 0.01)
    done = progress.Record(
        state=progress.STATE_FINISHED, env_steps=30_000, reason="reached 30000 env steps"
    )
    kube = Records([None, progress.Record(state=progress.STATE_RUNNING, env_steps=9_000), done])
    exp = resolve_experiment("waiting", sets=["agents.count=2"])
    direct = SimpleNamespace(exp=exp, namespace="ns", via_operator=False)
    ticks: list[ExperimentStatus] = []
    status = waiting.wait_running(kube, direct, timeout=10, poll=0.01, tick=ticks.append)  # type: ignore[arg-type]
    assert status.phase == "Succeeded" and status.env_steps == 30_000
    assert "reached 30000 env steps" in (status.reason or "")
    # while it waited, the live view showed how far the run got
    assert [t.phase for t in ticks][-1] == "Succeeded" and ticks[0].phase == "Pending"
    assert any(t.env_steps == 9_000 for t in ticks)


class ChangingPods:
    """A pod watch whose pods change all the time (a thousand pods starting)."""

    def __init__(self, *_: Any) -> None:
        import threading

        self.changed = threading.Event()
        self.changed.set()

    def __enter__(self) -> ChangingPods:
        return self

    def __exit__(self, *_: Any) -> None:
        pass

    def snapshot(self) -> list[dict[str, Any]]:
        self.changed.set()  # another change is always on its way
        return []


def test_applied_directly_the_wait_takes_a_bounded_share_of_a_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recomputing the status of 1,022 pods costs 25-50 ms; redone after every burst of changes
    (5 a second) it took 7.3 CPU-seconds of a 50 s create (bench/scale.py) from a machine whose
    scheduler needed them. Spaced by its own cost, it takes WAIT_CPU_SHARE of a core."""
    import time

    cost = 0.02
    spent: list[float] = []
    start = time.monotonic()

    def summarize(**_: Any) -> ExperimentStatus:
        begin = time.thread_time()
        while time.thread_time() - begin < cost:  # the CPU a big recomputation takes
            pass
        spent.append(time.thread_time() - begin)
        done = time.monotonic() - start > 1.5
        return ExperimentStatus(phase="Running" if done else "Pending", ready="0/5")

    monkeypatch.setattr(waiting, "PodWatch", ChangingPods)
    monkeypatch.setattr(waiting, "summarize", summarize)
    exp = resolve_experiment("waiting", sets=["agents.count=2"])
    direct = SimpleNamespace(exp=exp, namespace="ns", via_operator=False)
    status = waiting.wait_running(Records([None]), direct, poll=1.0)  # type: ignore[arg-type]
    elapsed = time.monotonic() - start
    assert status.phase == "Running"
    assert sum(spent) <= waiting.WAIT_CPU_SHARE * elapsed + 2 * cost, (len(spent), elapsed)
