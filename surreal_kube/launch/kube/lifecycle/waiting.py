"""Waiting for an experiment to run: through the operator its status, directly its pods."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from surreal_kube.errors import LaunchError
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import (
    EXPERIMENT,
    Kube,
)
from surreal_kube.launch.kube.api.watch import PodWatch
from surreal_kube.launch.kube.lifecycle.finding import Found
from surreal_kube.launch.kube.lifecycle.observing import (
    agent_selector,
    desired_groups,
    observe,
    requested_gpus,
)
from surreal_kube.launch.kube.plan import Plan
from surreal_kube.launch.kube.status import progress as kube_progress
from surreal_kube.launch.kube.status.summary import (
    ExperimentStatus,
    summarize,
)

OPERATOR_ACK_SECONDS = 30.0

"""How long `create` waits for an operator to pick up a new `Experiment` object."""


WAIT_CPU_SHARE = 0.03

"""At most this share of a core goes to recomputing the status while `create` (applied
directly) waits for the pods: a recomputation over 1,022 pods costs tens of milliseconds, and
five a second (one per burst of changes) took a large share of a create's CPU on a machine whose
scheduler and kubelets were waiting for it (`bench/scale.py`, create --direct)."""


RECORD_SECONDS = 1.0
"""How often a direct `create` reads the progress record while it waits for the pods."""

WAIT_ENDS = ("Running", "Succeeded")
"""The phases a wait for Running returns in: Succeeded is a run that ended before it was seen
running (its pods released already), not one to wait for."""


class RefusedError(LaunchError):
    """The operator refused an `Experiment` (or none picked it up): nothing of it runs."""


def wait_running(
    kube: Kube,
    found_or_plan: Found | Plan,
    *,
    timeout: float = 600.0,
    poll: float = 1.0,
    tick: Callable[[ExperimentStatus], None] | None = None,
) -> ExperimentStatus:
    """Wait until every pod is Running or the run already finished (returns the status, its
    phase Running or Succeeded), or the experiment Failed (raises).

    A short run on a busy node can reach its budget, and release its pods, before its slowest
    pod (a tensorboard with a twentieth of a core) was ever ready: waiting for every pod then
    waited out the timeout and called a finished run "not running". So the progress record
    (tensorplex's, the one `status` reads) is read once a second beside the pods.

    Applied directly, the pods are listed once and then watched (`PodWatch`), so waiting for
    10,000 pods costs one list and a stream of changes, not a list of every pod each second;
    the status is recomputed after a burst of changes (and every `poll` seconds without one),
    spaced by its own cost so that it takes at most `WAIT_CPU_SHARE` of a core.

    Through the operator the `Experiment`'s status is read every `poll` seconds instead, and
    nothing else: the operator already watches the pods and writes the same `summarize`. A
    second watch of 10,000 pods here cost the machine as much CPU as the operator's own, while
    the cluster was busiest creating them. A spec the operator refuses (its condition
    Applied=False) or an operator that never picks the object up fails fast instead of waiting
    for the timeout.
    """
    exp, namespace = found_or_plan.exp, found_or_plan.namespace
    name = exp.metadata.name
    start = time.monotonic()
    desired, gpus = desired_groups(exp), requested_gpus(exp)

    def summary(pods: list[dict[str, Any]], reported: Mapping[str, Any]) -> ExperimentStatus:
        return summarize(
            experiment=name,
            desired=desired,
            pods=pods,
            agents_per_pod=exp.spec.agents.per_process,
            gpus=gpus,
            agent_selector=agent_selector(name),
            replacements=reported.get("replacements"),
        )

    def timed_out(reported: Mapping[str, Any]) -> LaunchError:
        # now say why in the words that need the nodes (one look, not one per second)
        status = observe(
            kube, exp, namespace, replacements=reported.get("replacements"), capacity="nodes"
        )
        return LaunchError(
            f"{name} is not running after {timeout:.0f}s: {status.reason}; it was left "
            f"as it is: see `surreal-kube status {name}`, or delete it"
        )

    if found_or_plan.via_operator:
        while True:
            reported, generation = _operator_verdict(kube, name, namespace, start)
            status = _reported_status(reported, generation) or summary([], reported)
            if tick:
                tick(status)
            if status.phase in WAIT_ENDS:
                return status
            if time.monotonic() - start > timeout:
                raise timed_out(reported)
            time.sleep(poll)

    record, record_due = None, start
    with PodWatch(kube, namespace, naming.experiment_selector(name)) as pods:
        while True:
            cpu = time.thread_time()
            if time.monotonic() >= record_due:
                record = kube_progress.read(kube, name, namespace)
                record_due = time.monotonic() + RECORD_SECONDS
            status = kube_progress.merge(summary(pods.snapshot(), {}), record)
            if tick:
                tick(status)
            if status.phase in WAIT_ENDS:
                return status
            if time.monotonic() - start > timeout:
                raise timed_out({})
            # a burst of changes folded into one recomputation, spaced by its own cost
            rest = max(0.2, (time.thread_time() - cpu) / WAIT_CPU_SHARE)
            time.sleep(rest)
            pods.changed.wait(max(0.0, poll - rest))
            pods.changed.clear()


def _reported_status(
    reported: Mapping[str, Any], generation: int | None
) -> ExperimentStatus | None:
    """The operator's status when it describes the current spec (observedGeneration is the
    object's generation), else None: right after a spec edit the status still counts the
    pods of the spec before it."""
    if not reported.get("phase") or reported.get("observedGeneration") != generation:
        return None
    return ExperimentStatus.model_validate(reported)


def _operator_verdict(
    kube: Kube, name: str, namespace: str, start: float
) -> tuple[dict[str, Any], int | None]:
    """The operator's status of `name` and the object's generation; RefusedError / LaunchError
    when it gave up on it."""
    cr = kube.get_or_none(EXPERIMENT, name, namespace)
    if cr is None:
        raise LaunchError(f"Experiment {name} disappeared while starting")
    reported = dict(cr.get("status") or {})
    for cond in reported.get("conditions") or []:
        if cond.get("type") == "Applied" and cond.get("status") == "False":
            why = cond.get("message") or cond.get("reason")
            raise RefusedError(f"the operator cannot apply {name}: {why}")
    if reported.get("phase") == "Failed":
        raise LaunchError(f"{name} failed: {reported.get('reason')}")
    if not reported and time.monotonic() - start > OPERATOR_ACK_SECONDS:
        raise RefusedError(
            f"the Experiment CRD is installed but no operator picked up {name} within "
            f"{OPERATOR_ACK_SECONDS:.0f}s: is the surreal-kube operator running and "
            f"watching namespace {namespace!r}? (use --direct to apply the objects "
            "without an operator)"
        )
    return reported, cr["metadata"].get("generation")
