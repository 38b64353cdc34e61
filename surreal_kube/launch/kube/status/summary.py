"""What the cluster says about an experiment: per-component readiness, restarts, pending reasons.

One function, `summarize`, turns the experiment's pods (and, when the caller may read them, the
nodes and their pods) into an `ExperimentStatus`. The operator writes it to the `Experiment`'s
`status`; `surreal-kube status` and `list` compute it the same way when no operator runs, so both
paths show the same words. The model is also the CRD's status schema (crd.py).

Progress: the experiment's tensorplex writes a progress record (experiment/progress.py: learner
iteration, env steps, steps/s, last eval return, state) into the ConfigMap `<exp>-progress`;
launch/kube/status/progress.py reads it and folds it into this status (`status`, `list`, the
operator).
A pod annotation `surreal.ai/progress` with the same keys is read too (a role's progress file as
JSON). What nobody reported stays null, nothing is invented.

Pending reasons are said in plain words: "needs 8 nvidia.com/gpu, the largest free slot on
gpu-pool has 4", from the pod's requests, its node selector and the nodes' free capacity
(allocatable minus the requests of the pods bound there). Without permission to read nodes, the
scheduler's own message is rephrased instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from pydantic.alias_generators import to_camel

from surreal_kube.experiment import progress as progress_keys
from surreal_kube.experiment.quantity import BINARY_UNITS
from surreal_kube.experiment.run_end import LEARNER_MAX_RESTARTS
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.slim import slim_pod as slim_pod  # its callers import it here
from surreal_kube.launch.kube.placement.fit import admits, allocatable, free_capacity, pod_requests
from surreal_kube.launch.kube.profile import POOL_LABELS

EXPERIMENT_LABEL = naming.EXPERIMENT_LABEL
COMPONENT_LABEL = naming.GROUP_LABEL
INSTANCE_LABEL = naming.INSTANCE_LABEL
POD_INDEX_LABEL = naming.POD_INDEX_LABEL
KEEP_UIDS = 5
PROGRESS_ANNOTATION = naming.PROGRESS_ANNOTATION
GPU = "nvidia.com/gpu"
MAX_PENDING_SHOWN = 10
"""Pending reasons kept per component in the status (a thousand pending agents say it once)."""
MAX_MESSAGE = 200

Phase = Literal["Pending", "Queued", "Running", "Succeeded", "Failed"]
"""Queued: waiting whole for Kueue's admission (spec.queue), no pod of it created."""


class StatusModel(BaseModel):
    """camelCase on the wire; unknown keys ignored (a newer operator may write more)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class ProcessStatus(StatusModel):
    """One pod of a component."""

    pod: str = Field(description="pod name")
    phase: str = Field(description="Pending, Running, Succeeded, Failed or Unknown")
    ready: bool = Field(False, description="every container ready")
    restarts: int = Field(0, description="container restarts plus pod replacements seen")
    node: str | None = Field(None, description="node the pod is bound to")
    reason: str | None = Field(None, description="why it is not running, in plain words")


class ComponentStatus(StatusModel):
    """One component (workload) of the experiment."""

    desired: int = Field(0, description="pods wanted")
    ready: int = Field(0, description="pods running and ready")
    restarts: int = Field(0, description="restarts of its pods, all together")
    pending: dict[str, str] = Field(
        default_factory=dict, description="pod -> why it is not running yet"
    )


class Condition(StatusModel):
    """A Kubernetes-style condition."""

    type: str = Field(description="Applied, Ready or Failed")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown")
    reason: str = Field("", description="CamelCase reason")
    message: str = Field("", description="one line for people")
    last_transition_time: str | None = Field(None, description="RFC 3339 time of the change")


class ReplacementRecord(StatusModel):
    """How often one process's pod failed and was replaced."""

    count: int = Field(0, description="failed pods replaced so far")
    uids: list[str] = Field(default_factory=list, description="uids of the last failed pods")


class ExperimentStatus(StatusModel):
    """The observed state of an experiment."""

    phase: Phase | None = Field(
        None, description="Pending, Queued (waiting for Kueue), Running, Succeeded or Failed"
    )
    reason: str | None = Field(None, description="why it is in this phase, one line")
    observed_generation: int | None = Field(None, description="the spec generation reconciled")
    ready: str | None = Field(None, description="ready pods / desired pods, e.g. 9/9")
    agents: str | None = Field(None, description="ready agents / desired agents, e.g. 8/8")
    agents_ready: int = Field(0, description="agents whose pod is ready (scale subresource)")
    agent_selector: str | None = Field(None, description="label selector of the agent pods")
    gpus: int = Field(0, description="nvidia.com/gpu the experiment asks for in all")
    restarts: int = Field(0, description="restarts of all pods together")
    learner_restarts: int = Field(0, description="restarts of the learner")
    learner_iteration: int | None = Field(None, description="latest learner iteration reported")
    eval_return: float | None = Field(None, description="latest mean eval return reported")
    env_steps: int | None = Field(None, description="environment steps of all agents reported")
    env_steps_per_second: float | None = Field(
        None, description="environment steps per second of all agents, lately"
    )
    progress: str | None = Field(
        None, description="the progress record's state: starting, running, stopped, finished"
    )
    components: dict[str, ComponentStatus] = Field(
        default_factory=dict, description="per component: desired, ready, restarts, pending"
    )
    replacements: dict[str, ReplacementRecord] = Field(
        default_factory=dict,
        description="per process: pods that failed and were replaced (counted by the operator)",
    )
    conditions: list[Condition] = Field(default_factory=list, description="conditions")

    _processes: dict[str, ProcessStatus] = PrivateAttr(default_factory=dict)

    @property
    def processes(self) -> dict[str, ProcessStatus]:
        """Per pod: phase, readiness, restarts, node, reason (shown by `status`, not stored)."""
        return self._processes

    def to_wire(self) -> dict[str, Any]:
        """The JSON document written to `.status`."""
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


# --------------------------------------------------------------------------- pods


def unscheduled(pods: Iterable[Mapping[str, Any]]) -> bool:
    """True when the scheduler could not place some pod (only then do node capacities matter)."""
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for p in pods
        for c in (p.get("status") or {}).get("conditions") or []
    )


def pod_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def pod_phase(pod: Mapping[str, Any]) -> str:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    return str((pod.get("status") or {}).get("phase") or "Unknown")


def container_restarts(pod: Mapping[str, Any]) -> int:
    status = pod.get("status") or {}
    return sum(
        int(c.get("restartCount") or 0)
        for key in ("containerStatuses", "initContainerStatuses")
        for c in status.get(key) or []
    )


def show(resource: str, amount: float) -> str:
    """Back to words: 2 nvidia.com/gpu, 1.5 cpu, 3Gi memory."""
    if resource == "memory" or resource == "ephemeral-storage":
        for unit, size in BINARY_UNITS:
            if amount >= size:
                n = amount / size
                return f"{n:g}{unit} {resource}" if n == int(n) else f"{n:.1f}{unit} {resource}"
        return f"{int(amount)} bytes of {resource}"
    if resource == "cpu":
        return f"{amount:g} cpu"
    return f"{amount:g} {resource}"


# --------------------------------------------------------------------------- nodes


def node_pool(node: Mapping[str, Any]) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key in POOL_LABELS:
        if labels.get(key):
            return str(labels[key])
    return str((node.get("metadata") or {}).get("name"))


_INSUFFICIENT = re.compile(r"Insufficient ([\w./-]*\w)")


def pending_reason(
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]] | None = None,
    free: Mapping[str, Mapping[str, float]] | None = None,
) -> str | None:
    """Why a pod is not running, in plain words (None when it is running or finished)."""
    status = pod.get("status") or {}
    phase = pod_phase(pod)
    if phase in ("Running", "Succeeded") and pod_ready(pod):
        return None
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            return (
                f"image {c.get('image')} cannot be pulled ({reason}): {waiting.get('message', '')}"
            )
        if reason == "CrashLoopBackOff":
            times = c.get("restartCount", 0)
            return f"container {c.get('name')} keeps crashing (restarted {times} times)"
        if reason and reason not in ("ContainerCreating", "PodInitializing"):
            return f"container {c.get('name')}: {reason} {waiting.get('message', '')}".strip()
    if phase == "Failed":
        term = _last_termination(pod)
        return f"failed: {term}" if term else f"failed: {status.get('reason') or 'unknown'}"
    if phase == "Terminating":
        return "terminating"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return _unschedulable(pod, cond.get("message") or "", nodes, free)
    if not (pod.get("spec") or {}).get("nodeName"):
        return "waiting for the scheduler"
    if phase == "Running":
        return "running, not ready yet"
    return "starting containers"


def _last_termination(pod: Mapping[str, Any]) -> str | None:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get(
            "terminated"
        )
        if term:
            return f"container {c.get('name')} exited with code {term.get('exitCode')}" + (
                f" ({term['reason']})" if term.get("reason") else ""
            )
    return None


def _last_line(text: str | None) -> str | None:
    """The last non-empty line of a termination message (the crash's last log line)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return None
    line = lines[-1]
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 3] + "..."


def crash_looping(pod: Mapping[str, Any], max_restarts: int) -> str | None:
    """Why a pod's container cannot run, or None: restarted `max_restarts` times or more and its
    last run ended with a non-zero exit. Names the container, the exit code and the last log
    line (its termination message: the pods say FallbackToLogsOnError)."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        restarts = int(c.get("restartCount") or 0)
        if restarts < max_restarts:
            continue
        term = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get(
            "terminated"
        )
        if not term or not term.get("exitCode"):
            continue
        said = _last_line(term.get("message")) or term.get("reason")
        return (
            f"container {c.get('name')} restarted {restarts} times, last exit code "
            f"{term.get('exitCode')}" + (f": {said}" if said else "")
        )
    return None


def _unschedulable(
    pod: Mapping[str, Any],
    message: str,
    nodes: Sequence[Mapping[str, Any]] | None,
    free: Mapping[str, Mapping[str, float]] | None,
) -> str:
    wants = pod_requests(pod)
    short = set(_INSUFFICIENT.findall(message))
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if nodes is not None:
        fitting = [n for n in nodes if admits(n, pod)]
        if not fitting:
            what = ", ".join(f"{k}={v}" for k, v in sorted(selector.items())) or "its tolerations"
            return f"no node matches {what}"
        where = ", ".join(sorted({node_pool(n) for n in fitting}))
        # free space when every pod on the nodes is known, else the nodes' whole capacity
        room = free or {n["metadata"]["name"]: allocatable(n) for n in fitting}
        slot = "free slot" if free is not None else "node"
        lacking = []
        for res, amount in sorted(wants.items()):
            if amount <= 0:
                continue
            best = max(room.get(n["metadata"]["name"], {}).get(res, 0.0) for n in fitting)
            if best < amount:
                have = show(res, max(best, 0.0)).split(" ", 1)[0]
                lacking.append(
                    f"needs {show(res, amount)}, the largest {slot} on {where} has {have}"
                )
            elif res in short and free is None:
                lacking.append(
                    f"needs {show(res, amount)}, and no {where} node has that much free now"
                )
        if lacking:
            return "; ".join(lacking)
    if short:
        parts = [
            f"needs {show(r, wants[r])}" if r in wants else f"needs more {r}" for r in sorted(short)
        ]
        return f"{'; '.join(parts)}, more than any node has free ({_scheduler_words(message)})"
    return f"cannot be scheduled: {_scheduler_words(message)}" if message else "not scheduled yet"


def _scheduler_words(message: str) -> str:
    """The scheduler's message without its preemption tail."""
    return message.split(" preemption:", 1)[0].strip().rstrip(".")


# --------------------------------------------------------------------------- progress


def reported_progress(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The progress a role reported on its pod (PROGRESS_ANNOTATION), if any."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(PROGRESS_ANNOTATION)
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------- summary


def process_key(pod: Mapping[str, Any]) -> str:
    """What a pod stands for across replacements: a StatefulSet pod's own (stable) name, else
    its workload's name (a Deployment's replacement pod gets a new random name)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if POD_INDEX_LABEL in labels:
        return str(meta["name"])
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "ReplicaSet":
            return str(ref["name"]).rsplit("-", 1)[0]  # <deployment>-<pod-template-hash>
    return f"{labels.get(INSTANCE_LABEL, '')}-{labels.get(COMPONENT_LABEL, '')}"


def failure_seen(pod: Mapping[str, Any]) -> bool:
    """True once a pod has failed for good (phase Failed): it is about to be replaced."""
    return pod_phase(pod) == "Failed" or (pod.get("status") or {}).get("phase") == "Failed"


def count_replacement(
    replacements: Mapping[str, Mapping[str, Any]], pod: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The new replacement record of a failed pod's process, or None if this failure (this pod
    uid) is already counted. Records keep the uids of the last few failures, so a failure is
    counted once even when an operator restart replays the events."""
    if not failure_seen(pod):
        return None
    key = process_key(pod)
    uid = str(pod["metadata"].get("uid"))
    record = dict(replacements.get(key) or {"count": 0, "uids": []})
    if uid in record.get("uids", []):
        return None
    record["count"] = int(record.get("count", 0)) + 1
    record["uids"] = [*list(record.get("uids", []))[-(KEEP_UIDS - 1) :], uid]
    return record


def summarize(
    *,
    experiment: str,
    desired: Mapping[str, int],
    pods: Iterable[Mapping[str, Any]],
    agents_per_pod: int = 1,
    gpus: int = 0,
    agent_group: str = "agents",
    learner_group: str = "learner",
    agent_selector: str | None = None,
    nodes: Sequence[Mapping[str, Any]] | None = None,
    all_pods: Sequence[Mapping[str, Any]] | None = None,
    replacements: Mapping[str, Mapping[str, Any]] | None = None,
    learner_max_restarts: int = LEARNER_MAX_RESTARTS,
) -> ExperimentStatus:
    """The status of one experiment from its pods.

    desired: group -> pods wanted (from the topology); a pod's group is its component label.
    replacements: process key -> {count, uids}: how often that process's pod failed and was
    replaced (the operator keeps these in the status); added to the containers' restart counts.
    Without it, failed pods still present are counted (a Deployment keeps them around).
    nodes / all_pods: when given, pending reasons name the free capacity of the node pools.
    learner_max_restarts: a learner container restarted this often after a failure makes the
    phase Failed, with which container, its exit code and its last log line.
    """
    replacements = dict(replacements or {})
    free = free_capacity(nodes, all_pods) if nodes is not None and all_pods is not None else None
    components = {g: ComponentStatus(desired=n) for g, n in desired.items()}
    processes: dict[str, ProcessStatus] = {}
    learner_iteration: int | None = None
    eval_return: float | None = None
    learner_state: str | None = None
    learner_failure: str | None = None
    # each pod's group, phase, failure and process key, read once: at 10,000 agents a status
    # refresh runs this over 1,022 pods about once a second while the cluster creates them
    rows: list[tuple[str, str, str, bool, str, Mapping[str, Any]]] = []
    for pod in pods:
        meta = pod["metadata"]
        group = (meta.get("labels") or {}).get(COMPONENT_LABEL)
        if not isinstance(group, str) or group not in desired:
            continue
        rows.append((meta["name"], group, pod_phase(pod), failure_seen(pod), process_key(pod), pod))
    rows.sort(key=lambda row: row[0])
    live_keys = {key for _, _, phase, _, key, _ in rows if phase not in ("Failed", "Succeeded")}
    counted: dict[str, int] = {k: int(v.get("count", 0)) for k, v in replacements.items()}
    for _, _, _, failed, key, pod in rows:  # failed pods nobody counted yet (no operator)
        if failed and key not in replacements and count_replacement(replacements, pod):
            counted[key] = counted.get(key, 0) + 1
    ready_in, restarts_in = dict.fromkeys(desired, 0), dict.fromkeys(desired, 0)
    pending_in: dict[str, dict[str, str]] = {g: {} for g in desired}
    for name, group, pod_state, failed, key, pod in rows:
        if failed and key in live_keys:
            continue  # an old failed pod whose replacement runs: counted, not shown
        own = container_restarts(pod)
        ready = pod_state == "Running" and pod_ready(pod)
        reason = None if ready else pending_reason(pod, nodes, free)
        processes[name] = ProcessStatus(
            pod=name,
            phase=pod_state,
            ready=ready,
            restarts=own + counted.get(key, 0),
            node=(pod.get("spec") or {}).get("nodeName"),
            reason=reason,
        )
        if group == learner_group and learner_failure is None and not failed:
            learner_failure = crash_looping(pod, learner_max_restarts)
        ready_in[group] += ready  # counted here, set on the models once below
        restarts_in[group] += own
        if reason:
            pending_in[group][name] = reason
        reported = reported_progress(pod)
        record = progress_keys.from_mapping(reported) if reported else None
        if record and group == learner_group:
            if record.iteration is not None:
                learner_iteration = record.iteration
            learner_state = record.state
            if eval_return is None and record.last_return is not None:
                eval_return = record.last_return
        elif record and record.last_return is not None:
            eval_return = record.last_return
    seen = ((key, group) for _, group, _, _, key, _ in rows)
    group_of = _process_groups(experiment, desired, seen) if counted else {}
    for key, count in counted.items():
        group = group_of.get(key)
        if group:
            restarts_in[group] += count
    for group, comp in components.items():
        comp.ready, comp.restarts, comp.pending = (
            ready_in[group],
            restarts_in[group],
            pending_in[group],
        )
        if len(comp.pending) > MAX_PENDING_SHOWN:
            shown = dict(list(comp.pending.items())[:MAX_PENDING_SHOWN])
            shown["..."] = f"and {len(comp.pending) - MAX_PENDING_SHOWN} more"
            comp.pending = shown
    total = sum(c.desired for c in components.values())
    ready_total = sum(min(c.ready, c.desired) for c in components.values())
    agent_pods = components.get(agent_group, ComponentStatus())
    agents_ready = min(agent_pods.ready, agent_pods.desired) * agents_per_pod
    if learner_state == progress_keys.STATE_FINISHED:
        phase: Phase = "Succeeded"
        why = "the learner finished its budget"
    elif learner_failure is not None:
        phase, why = "Failed", f"the learner cannot run: {learner_failure}"
    elif total and ready_total == total:
        phase, why = "Running", f"all {total} pods are running"
    else:
        phase = "Pending"
        first = next((f"{p}: {r}" for c in components.values() for p, r in c.pending.items()), None)
        why = f"{ready_total}/{total} pods ready" + (f"; {first}" if first else "")
    learner = components.get(learner_group)
    out = ExperimentStatus(
        phase=phase,
        reason=why,
        ready=f"{ready_total}/{total}",
        agents=f"{agents_ready}/{agent_pods.desired * agents_per_pod}",
        agents_ready=agents_ready,
        agent_selector=agent_selector,
        gpus=gpus,
        restarts=sum(c.restarts for c in components.values()),
        learner_restarts=learner.restarts if learner else 0,
        learner_iteration=learner_iteration,
        eval_return=eval_return,
        components=components,
        replacements={
            k: ReplacementRecord.model_validate(v) for k, v in sorted(replacements.items())
        },
    )
    out._processes = processes
    return out


def _process_groups(
    experiment: str, desired: Mapping[str, int], seen: Iterable[tuple[str, str]]
) -> dict[str, str]:
    """process key -> group, for counting a process's replacements into its group.

    The group is the one its pods' component label names (`seen`: key, group). A process whose
    pod is away right now (a StatefulSet deletes a failed pod before it creates the new one)
    still counts: the keys naming.py gives each group's processes (its workload, its pods'
    ordinals up to the pods wanted) stand for it. Another experiment's keys belong to no group.
    """
    out: dict[str, str] = {}
    for group, wanted in desired.items():
        out[naming.object_name(experiment, group)] = group
        out.update(
            dict.fromkeys((naming.pod_name(experiment, group, i) for i in range(wanted)), group)
        )
    out.update(seen)
    return out
