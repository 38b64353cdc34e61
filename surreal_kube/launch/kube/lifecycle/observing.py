"""An experiment's status now: its pods summarized (`status.summary`), with what only the
operator knows (replacements, Failed) merged in; and kubectl-style ages."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from surreal_kube.experiment.spec import Experiment
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api import slim
from surreal_kube.launch.kube.api.client import (
    NODE,
    POD,
    ForbiddenError,
    Kube,
    selector,
)
from surreal_kube.launch.kube.api.watch import list_pods
from surreal_kube.launch.kube.lifecycle.finding import Found
from surreal_kube.launch.kube.status.summary import (
    ExperimentStatus,
    summarize,
    unscheduled,
)


def desired_groups(exp: Experiment) -> dict[str, int]:
    """group -> pods wanted."""
    return {g.name: g.replicas for g in exp.topology.groups}


def requested_gpus(exp: Experiment) -> int:
    """GPUs the whole experiment holds once every pod runs."""
    groups = exp.topology.groups
    return sum(g.replicas * exp.spec.component_resources(g.component).gpu for g in groups)


def agent_selector(name: str) -> str:

    return selector(naming.selector_labels(name, "agents"))


def observe(
    kube: Kube,
    exp: Experiment,
    namespace: str,
    *,
    replacements: Mapping[str, Any] | None = None,
    capacity: str = "free",
    pods: list[dict[str, Any]] | None = None,
) -> ExperimentStatus:
    """The experiment's status computed from its pods now (`pods`: already listed).

    capacity: "free" reads every node and every pod bound to them, so that pending reasons name
    the free space ("the largest free slot on gpu-pool has 1"); "nodes" reads nodes only (their
    whole capacity); "none" reads neither (the scheduler's own words). Falls back quietly when
    the credentials may not read them.
    """
    name = exp.metadata.name
    if pods is None:
        pods = list_pods(kube, namespace, naming.experiment_selector(name))
    nodes = all_pods = None
    if capacity in ("free", "nodes") and unscheduled(pods):
        try:
            nodes = kube.list(NODE, decode=slim.node_list)
            if capacity == "free":
                all_pods = kube.list(
                    POD,
                    all_namespaces=True,
                    fields="status.phase!=Succeeded,status.phase!=Failed",
                    decode=slim.pod_list,
                )
        except ForbiddenError:
            pass
    return summarize(
        experiment=name,
        desired=desired_groups(exp),
        pods=pods,
        agents_per_pod=exp.spec.agents.per_process,
        gpus=requested_gpus(exp),
        agent_selector=agent_selector(name),
        nodes=nodes,
        all_pods=all_pods,
        replacements=replacements,
    )


def status_of(kube: Kube, found: Found, *, capacity: str = "free") -> ExperimentStatus:
    """Status from the pods, with what only the operator knows merged: replacements, Failed,
    and Queued (Kueue has not admitted it: no pod to observe, its position and Kueue's reason)."""
    reported = found.reported
    status = observe(
        kube,
        found.exp,
        found.namespace,
        replacements=reported.get("replacements"),
        capacity=capacity,
        pods=found.pods,
    )
    if reported:
        if reported.get("phase") in ("Failed", "Queued"):
            status.phase = reported["phase"]
            status.reason = reported.get("reason")
        status.conditions = ExperimentStatus.model_validate(reported).conditions
        if status.learner_iteration is None:
            status.learner_iteration = reported.get("learnerIteration")
        if status.eval_return is None:
            status.eval_return = reported.get("evalReturn")
    return status


def age(timestamp: str | None) -> str:
    """kubectl-style age: 5s, 3m, 2h, 4d."""
    if not timestamp:
        return "-"
    then = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    s = int((dt.datetime.now(dt.UTC) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{max(s, 0)}s"
