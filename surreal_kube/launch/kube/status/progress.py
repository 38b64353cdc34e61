"""Reading the progress channel: the record tensorplex writes into `<exp>-progress`.

`status`, `list` and the operator read the same ConfigMap (experiment/progress.py says what it
holds, runtime/reporter.py who writes it) and fold it into the `ExperimentStatus` with `merge`, so
all three show the same figures. `list` reads every experiment's record in one request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from surreal_kube.experiment import progress
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import ForbiddenError, Kube, NotFoundError, resource
from surreal_kube.launch.kube.status.summary import ExperimentStatus

CONFIG_MAP = resource("v1", "ConfigMap")


def read(kube: Kube, experiment: str, namespace: str) -> progress.Record | None:
    """The experiment's progress record; None when nothing was written yet or it is unreadable
    (no ConfigMap: an experiment created before the channel existed; no right to read it)."""
    try:
        obj = kube.get_or_none(CONFIG_MAP, naming.progress_name(experiment), namespace)
    except (ForbiddenError, NotFoundError):
        return None
    return progress.from_configmap(obj)


def read_all(
    kube: Kube, namespace: str | None, *, all_namespaces: bool = False
) -> dict[tuple[str, str], progress.Record]:
    """(namespace, experiment) -> record, for every experiment in one list request."""
    selector = f"app.kubernetes.io/managed-by={naming.NAME},{naming.EXPERIMENT_LABEL}"
    try:
        items = kube.list(CONFIG_MAP, namespace, labels=selector, all_namespaces=all_namespaces)
    except ForbiddenError:
        return {}
    out: dict[tuple[str, str], progress.Record] = {}
    for obj in items:
        meta = obj.get("metadata") or {}
        name = (meta.get("labels") or {}).get(naming.EXPERIMENT_LABEL, "")
        if meta.get("name") != naming.progress_name(name):
            continue
        record = progress.from_configmap(obj)
        if record is not None:
            out[(meta.get("namespace") or namespace or "", name)] = record
    return out


def merge(status: ExperimentStatus, record: progress.Record | None) -> ExperimentStatus:
    """Fold a record into a status computed from the pods (in place; returned for chaining).

    A figure the record lacks keeps what the status had (e.g. the operator's last value, after
    tensorplex restarted). A record saying the run finished makes the phase Succeeded (tensorplex
    writes it once the final evaluation and the results are in, runtime/conductor.py).
    """
    if record is None:
        return status
    if record.iteration is not None:
        status.learner_iteration = record.iteration
    if record.last_return is not None:
        status.eval_return = record.last_return
    if record.env_steps is not None:
        status.env_steps = record.env_steps
    if record.env_steps_per_s is not None:
        status.env_steps_per_second = record.env_steps_per_s
    status.progress = record.state
    if record.state == progress.STATE_FINISHED and status.phase != "Failed":
        finished(status, record)
    return status


def finished(status: ExperimentStatus, record: progress.Record) -> None:
    """A finished run is Succeeded, and its pods being gone is its compute released, not a
    broken experiment: no pending reasons, a reason that says how it ended."""
    live = [p for p in status.processes.values() if p.phase in ("Running", "Pending")]
    parts = [f"finished: {record.reason or 'the run reached its budget'}"]
    if record.last_return is not None:
        parts.append(f"final return {record.last_return:.2f}")
    parts.append(
        f"releasing compute ({len(live)} pods left)" if live else "compute released (no pods)"
    )
    status.phase, status.reason = "Succeeded", "; ".join(parts)
    for comp in status.components.values():
        comp.pending = {}
    for proc in status.processes.values():
        proc.reason = None


def keep_previous(status: ExperimentStatus, previous: Mapping[str, Any]) -> ExperimentStatus:
    """Figures nobody reported this time keep their last value from `.status` (camelCase)."""
    for attr, key in (
        ("learner_iteration", "learnerIteration"),
        ("eval_return", "evalReturn"),
        ("env_steps", "envSteps"),
        ("env_steps_per_second", "envStepsPerSecond"),
    ):
        if getattr(status, attr) is None and previous.get(key) is not None:
            setattr(status, attr, previous[key])
    return status
