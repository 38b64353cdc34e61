"""What the operator writes to an `Experiment`'s status, and its conditions.

- `refresh`: compute the status from the pods (the same `summarize` as `surreal-kube status`),
  count failed-and-replaced pods, enforce the learner's restart budget, and write the status.
- `record_failure`: count one failed pod from its own event, before its StatefulSet replaces it.
- `set_conditions`: the conditions the apply reports (`Applied`), and any fields beside them.

All status writes of one experiment go through here, under one lock (`lock_for`), because they
come both from the experiment's own handlers and from its pods' events.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from surreal_kube.errors import SpecError
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api import slim
from surreal_kube.launch.kube.api import watch as kube_watch
from surreal_kube.launch.kube.api.client import (
    EXPERIMENT,
    NODE,
    POD,
    ForbiddenError,
    Kube,
    NotFoundError,
    resource,
)
from surreal_kube.launch.kube.lifecycle import observing
from surreal_kube.launch.kube.render import custom_resource
from surreal_kube.launch.kube.status import progress as kube_progress
from surreal_kube.launch.kube.status.summary import (
    Condition,
    ExperimentStatus,
    count_replacement,
    failure_seen,
    pending_reason,
    process_key,
    summarize,
    unscheduled,
)
from surreal_kube.operator import events
from surreal_kube.operator.config import Config
from surreal_kube.operator.podcache import PodCache

log = logging.getLogger("surreal_kube.operator")

WORKLOADS = (resource("apps/v1", "StatefulSet"), resource("apps/v1", "Deployment"))
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


@dataclass(frozen=True)
class Shape:
    """What a status refresh needs of an experiment's spec: the pods each group wants, agents
    per pod, GPUs requested."""

    desired: dict[str, int]
    agents_per_pod: int
    gpus: int


SHAPES_KEPT = 256
"""Spec shapes kept by (uid, generation): bounded, the oldest goes first."""
_shapes: OrderedDict[tuple[str, int], Shape] = OrderedDict()
_shapes_guard = threading.Lock()


def shape_of(obj: Mapping[str, Any]) -> Shape:
    """The shape of an `Experiment`'s spec, from memory when its generation was seen before.

    A refresh runs every second or so while pods start; resolving and validating the spec and
    building its topology was half of its CPU (`bench/scale.py`, 10,000 agents), on a machine
    whose scheduler needed every cycle. The spec changes
    only with the object's generation, so its shape is kept by (uid, generation).
    Raises SpecError for a spec that does not resolve (never kept).
    """
    meta = obj.get("metadata") or {}
    key = (str(meta.get("uid")), int(meta.get("generation") or 0))
    with _shapes_guard:
        shape = _shapes.get(key)
        if shape is not None:
            _shapes.move_to_end(key)
            return shape
    exp = custom_resource.resolve_object(obj)
    shape = Shape(
        desired=observing.desired_groups(exp),
        agents_per_pod=exp.spec.agents.per_process,
        gpus=observing.requested_gpus(exp),
    )
    if meta.get("uid") and meta.get("generation"):
        with _shapes_guard:
            _shapes[key] = shape
            while len(_shapes) > SHAPES_KEPT:
                _shapes.popitem(last=False)
    return shape


def lock_for(namespace: str, name: str) -> threading.Lock:
    """The lock that serializes one experiment's status writes."""
    with _locks_guard:
        return _locks.setdefault((namespace, name), threading.Lock())


def forget_lock(namespace: str, name: str) -> None:
    """The experiment is gone: drop its lock (the table holds live experiments only)."""
    with _locks_guard:
        _locks.pop((namespace, name), None)


def condition_status(obj: Mapping[str, Any], type_: str) -> str | None:
    """ "True", "False" or "Unknown" of one of the experiment's conditions; None: not set."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return str(cond.get("status"))
    return None


def condition_message(obj: Mapping[str, Any], type_: str) -> str | None:
    """The message of one of the experiment's conditions; None: not set."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond.get("message")
    return None


def condition(type_: str, status: str, reason: str, message: str) -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=message)


def merge_conditions(old: list[Mapping[str, Any]], new: list[Condition]) -> list[dict[str, Any]]:
    """Replace conditions of the same type; keep the transition time when the status is equal."""
    out = {c["type"]: dict(c) for c in old}
    for cond in new:
        doc = cond.model_dump(by_alias=True, mode="json", exclude_none=True)
        prev = out.get(cond.type)
        doc["lastTransitionTime"] = (
            prev.get("lastTransitionTime")
            if prev and prev.get("status") == cond.status and prev.get("lastTransitionTime")
            else events.timestamp()
        )
        out[cond.type] = doc
    return [out[k] for k in sorted(out)]


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch turning `old` into `new`: removed keys become null, maps recurse."""
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = status_patch(before, value)
            if sub:
                patch[key] = sub
        elif value != before:
            patch[key] = value
    return patch


def write_status(kube: Kube, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
    if patch:
        kube.patch(EXPERIMENT, name, {"status": dict(patch)}, namespace, sub="status")


def set_conditions(
    kube: Kube,
    obj: Mapping[str, Any],
    conds: list[Condition],
    *,
    observed_generation: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Update some conditions (and fields) of the status, under the experiment's lock."""
    meta = obj["metadata"]
    with lock_for(meta["namespace"], meta["name"]):
        current = kube.get(EXPERIMENT, meta["name"], meta["namespace"])
        old = dict(current.get("status") or {})
        new = dict(old)
        new["conditions"] = merge_conditions(old.get("conditions") or [], conds)
        if observed_generation is not None:
            new["observedGeneration"] = observed_generation
        new.update(extra or {})
        write_status(kube, meta["namespace"], meta["name"], status_patch(old, new))


def refresh(
    kube: Kube, namespace: str, name: str, config: Config, pods: PodCache | None = None
) -> ExperimentStatus | None:
    """Recompute and write the status of one experiment; None when it is gone.

    pods: the operator's pod cache (from its pod watch); without one the pods are listed.
    """
    with lock_for(namespace, name):
        obj = kube.get_or_none(EXPERIMENT, name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            if pods is not None:
                pods.forget((namespace, name))
            forget_lock(namespace, name)
            events.forget(namespace, name)
            config.metrics.forget(namespace, name)
            return None
        old = dict(obj.get("status") or {})
        try:
            shape = shape_of(obj)
        except SpecError as exc:
            new = dict(old)
            new.update(phase="Failed", reason=f"invalid spec: {exc}")
            write_status(kube, namespace, name, status_patch(old, new))
            return ExperimentStatus.model_validate(new)
        selector = naming.experiment_selector(name)
        if pods is None:
            found = kube_watch.list_pods(kube, namespace, selector)
        else:
            found = pods.pods(
                (namespace, name),
                lambda: kube_watch.list_with_version(
                    kube, POD, namespace, selector, decode=slim.pod_list
                ),
            )
        replacements = dict(old.get("replacements") or {})
        for pod in found:
            if failure_seen(pod):
                record = count_replacement(replacements, pod)
                if record is not None:
                    replacements[process_key(pod)] = record
        nodes = None
        if config.read_nodes and unscheduled(found):
            held = config.held_nodes()
            if held is not None:
                nodes = held[0]
            else:
                with contextlib.suppress(ForbiddenError):
                    nodes = kube.list(NODE, decode=slim.node_list)
        status = summarize(
            experiment=name,
            desired=shape.desired,
            pods=found,
            agents_per_pod=shape.agents_per_pod,
            gpus=shape.gpus,
            agent_selector=observing.agent_selector(name),
            nodes=nodes,
            replacements=replacements,
            learner_max_restarts=config.learner_max_restarts,
        )
        status.observed_generation = old.get("observedGeneration")
        # the figures tensorplex reports into <exp>-progress; what it lacks keeps its last value
        kube_progress.merge(status, kube_progress.read(kube, name, namespace))
        kube_progress.keep_previous(status, old)
        conds: list[Condition] = []
        budget = config.learner_max_restarts
        if old.get("phase") == "Failed":
            status.phase, status.reason = "Failed", old.get("reason")
        elif status.phase == "Succeeded" or old.get("phase") == "Succeeded":
            if status.phase != "Succeeded":  # a record gone since: the run still succeeded
                status.phase, status.reason = "Succeeded", old.get("reason")
            conds.append(condition("Succeeded", "True", "BudgetReached", status.reason or ""))
        elif condition_status(obj, "Admitted") == "False":  # Kueue has not admitted it
            queued = next(c for c in old.get("conditions") or [] if c.get("type") == "Admitted")
            status.phase, status.reason = "Queued", queued.get("message") or "queued"
        elif condition_status(obj, "LearnerReady") == "False" and status.phase != "Failed":
            held = next(c for c in old.get("conditions") or [] if c.get("type") == "LearnerReady")
            status.phase, status.reason = (
                "Pending",
                held.get("message") or "waiting for the learner",
            )
        elif status.phase == "Failed":  # a learner container that cannot run (summarize)
            status.reason = (
                f"{status.reason}; its workloads were scaled to 0, data and logs are kept"
            )
            conds.append(condition("Failed", "True", "LearnerCannotRun", status.reason))
            stop_workloads(kube, namespace, name)
        elif status.learner_restarts > budget:
            status.phase = "Failed"
            last = last_learner_failure(found)
            status.reason = (
                f"the learner exhausted its {budget} restarts"
                + (f" (last: {last})" if last else "")
                + "; its workloads were scaled to 0, data and logs are kept"
            )
            conds.append(condition("Failed", "True", "LearnerRestartsExhausted", status.reason))
            stop_workloads(kube, namespace, name)
        conds.append(
            condition(
                "Ready",
                "True" if status.phase == "Running" else "False",
                status.phase or "Pending",
                status.reason or "",
            )
        )
        new = status.to_wire()
        new["conditions"] = merge_conditions(old.get("conditions") or [], conds)
        write_status(kube, namespace, name, status_patch(old, new))
        if status.phase and status.phase != old.get("phase"):
            events.phase_changed(kube, obj, old.get("phase"), status.phase, status.reason)
        config.metrics.observed(namespace, name, status)
        return status


def record_failure(kube: Kube, namespace: str, name: str, pod: Mapping[str, Any]) -> bool:
    """Count a failed pod of the experiment once (its uid); True when it was new.

    Called from the pod's own event: a StatefulSet deletes a failed pod within a second, before
    any periodic look would see it.
    """
    with lock_for(namespace, name):
        obj = kube.get_or_none(EXPERIMENT, name, namespace)
        if obj is None:
            return False
        replacements = (obj.get("status") or {}).get("replacements") or {}
        record = count_replacement(replacements, pod)
        if record is None:
            return False
        write_status(kube, namespace, name, {"replacements": {process_key(pod): record}})
        return True


def last_learner_failure(pods: list[dict[str, Any]]) -> str | None:
    """Why the newest failed learner pod failed, in words."""
    failed = [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(naming.GROUP_LABEL) == "learner"
        and failure_seen(p)
    ]
    if not failed:
        return None
    newest = max(failed, key=lambda p: p["metadata"].get("creationTimestamp") or "")
    return pending_reason(newest)


def stop_workloads(kube: Kube, namespace: str, name: str) -> None:
    """Scale every workload of the experiment to 0 (a Failed experiment burns no GPUs)."""
    for res in WORKLOADS:
        for obj in kube.list(res, namespace, labels=naming.experiment_selector(name)):
            with contextlib.suppress(NotFoundError):
                kube.patch(res, obj["metadata"]["name"], {"spec": {"replicas": 0}}, namespace)
    log.warning("%s/%s failed: its workloads were scaled to 0", namespace, name)


def applied_generation(obj: Mapping[str, Any]) -> int | None:
    """The spec generation whose objects were applied (the Applied condition is True and the
    status observed it), from the object as an event carries it; None: not applied yet."""
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Applied" and cond.get("status") == "True":
            return status.get("observedGeneration")
    return None


def is_failed(obj: Mapping[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") == "Failed"
