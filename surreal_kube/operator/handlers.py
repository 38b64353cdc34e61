"""The kopf handlers of the operator: small functions, each registered with an explicit id.

`register(registry)` attaches them to a registry, so the handlers themselves stay plain
module-level functions that take only the keyword arguments they need. The shared connection,
settings, status refresher, periodic resync and watches come in kopf's `memo`.

kopf watches `Experiment` objects alone. Pods, nodes and the experiments' own objects (workloads,
Services, ConfigMaps) are watched by `podwatch.Watcher`, with a server-side label selector, and
the children as metadata only: kopf deep-copies every event's whole body (managed fields and
status included) to compare it with the last, for any kind it watches, and a StatefulSet of 1,000
agents changes its status hundreds of times while its pods start. Through kopf those events were
a quarter of the operator's CPU during a 10,000-agent create; the children's handler needs only
their deletion (and the progress record's name), which their metadata says.

No handler here makes kopf put a finalizer on an `Experiment` (no timers, daemons or deletion
handlers): deleting one never waits for the operator, ownership removes everything.

Retry intent is in the code: an invalid spec or a placement that cannot fit is a
`kopf.PermanentError` (the condition `Applied=False` says why, until the spec changes); a
refusal that may pass (RBAC being granted, a quota freed) or a flaky API server is a
`kopf.TemporaryError` with a delay.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from surreal_kube.errors import CapacityError, SpecError
from surreal_kube.experiment.spec import API_VERSION
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import (
    EXPERIMENT,
    ConflictError,
    ForbiddenError,
    InvalidError,
    KubeError,
    resource,
)
from surreal_kube.launch.kube.lifecycle.apply import NotOursError
from surreal_kube.launch.kube.render import workload
from surreal_kube.launch.kube.status.summary import failure_seen, pod_ready
from surreal_kube.operator import apply, events, status
from surreal_kube.operator.podwatch import SELECTOR, Watcher

log = logging.getLogger(__name__)

CAPACITY_RETRY = 30.0
"""Seconds between tries of an experiment the node pools have no room for yet (a GKE node takes
about a minute to join; the cluster autoscaler scans every 10 s)."""
GROUP, VERSION = API_VERSION.split("/")
PLURAL = EXPERIMENT.plural
STORAGE_PREFIX = "operator.surreal.ai"
CHILD_KINDS = (
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
)
"""What the operator recreates when it disappears (the progress record is a ConfigMap too; a
deleted NetworkPolicy would leave its pods open)."""


def plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """A kopf body as a plain, private dict."""
    return copy.deepcopy({key: body[key] for key in body})


# --------------------------------------------------------------------------- handlers


def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo | None:
    """Connect kopf the way our own client connects (kubeconfig and context, or in-cluster):
    the same credentials, read once (`launch/kube/api/kubeconfig.py`)."""
    creds = memo.kube.credentials
    if creds.in_cluster:
        return kopf.login_with_service_account(**_)
    auth = creds.authorization()
    scheme, _sep, token = auth.partition(" ") if auth else (None, "", None)
    pair = creds.client_certificate()
    issued = creds.exec_plugin.credential() if creds.exec_plugin is not None else None
    return kopf.ConnectionInfo(
        server=creds.server,
        ca_data=creds.ca_pem,
        insecure=not creds.verify,
        certificate_data=pair[0] if pair else None,
        private_key_data=pair[1] if pair else None,
        scheme=scheme or None,
        token=token or None,
        proxy_url=creds.proxy,
        default_namespace=memo.kube.namespace,
        expiration=issued.expires if issued is not None else None,
    )


def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Where kopf keeps its bookkeeping, and what it may watch."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=STORAGE_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=STORAGE_PREFIX, key="last-handled-configuration"
    )
    # namespaced and least-privileged: no cluster-wide CRD/namespace scanning
    settings.scanning.disabled = True
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "surreal-kube-operator"
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 8


def apply_spec(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, reason: str | None = None, **_: Any
) -> None:
    """Render and apply the experiment (create, spec edit, operator start).

    A create whose objects are already applied at this generation is not applied again: kopf
    marks an object handled only after its create handler returns, and in some creates of
    10,000 agents (`bench/scale.py`) it ran the create a second time for the same generation
    (from an event of the first's own status write): every server-side apply and list again
    while the cluster was creating a thousand pods.
    """
    obj = plain(body)
    meta = obj["metadata"]
    if status.is_failed(obj):
        logger.info("experiment is Failed; not applying (delete and recreate it to retry)")
        return
    if reason == "create" and status.applied_generation(obj) == meta.get("generation"):
        logger.info("already applied at generation %s; not applying again", meta.get("generation"))
        return
    try:
        pruned = apply.apply_experiment(memo.kube, obj, memo.config)
    except CapacityError as exc:  # the pools as they are now: an autoscaler or an end frees room
        _refuse(memo, obj, "WaitingForCapacity", f"waiting for capacity: {exc}")
        raise kopf.TemporaryError(f"waiting for capacity: {exc}", delay=CAPACITY_RETRY) from exc
    except NotOursError as exc:  # someone else's object by our name: retried, it may go
        _refuse(memo, obj, "NotOurs", str(exc))
        raise kopf.TemporaryError(str(exc), delay=60) from exc
    except SpecError as exc:
        _refuse(memo, obj, "InvalidSpec", str(exc))
        raise kopf.PermanentError(f"invalid experiment: {exc}") from exc
    except InvalidError as exc:
        _refuse(memo, obj, "Invalid", str(exc))
        raise kopf.PermanentError(str(exc)) from exc
    except ForbiddenError as exc:
        _refuse(memo, obj, "Forbidden", str(exc))
        raise kopf.TemporaryError(str(exc), delay=30) from exc
    except (ConflictError, KubeError) as exc:
        memo.config.metrics.reconciled("retry")
        raise kopf.TemporaryError(str(exc), delay=5) from exc
    memo.config.metrics.reconciled("applied")
    if pruned:
        logger.info("pruned %s", ", ".join(pruned))
    memo.refresher.poke(meta["namespace"], meta["name"])


def _refuse(memo: kopf.Memo, obj: Mapping[str, Any], reason: str, message: str) -> None:
    memo.config.metrics.reconciled(reason)
    events.record(memo.kube, obj, reason, message, warning=reason in events.WARNING_REASONS)
    try:
        status.set_conditions(
            memo.kube,
            obj,
            [status.condition("Applied", "False", reason, message)],
            extra={"phase": "Pending", "reason": message},
        )
    except KubeError as exc:  # the status is best effort here; the error itself is raised
        logging.getLogger(__name__).warning("cannot write the status: %s", exc)


def start_resync(memo: kopf.Memo, **_: Any) -> None:
    """Operator start: begin the pod, node and children's watches and the periodic resync
    (recreate what disappeared, refresh status)."""
    apply.warm_up()
    memo.podwatch.start()
    for watcher in memo.get("childwatches") or []:
        watcher.start()
    if memo.get("nodewatch") is not None:
        memo.nodewatch.start()
    memo.resyncer.start()


def pod_changed(memo: kopf.Memo, type: str | None, pod: Mapping[str, Any]) -> None:
    """A pod of an experiment changed (`podwatch`, not kopf: see there why): keep it in the pod
    cache, count it if it failed, refresh the status soon (from the cache: no list of pods)."""
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(naming.EXPERIMENT_LABEL)
    if not name:
        return
    memo.pods.observe(type, pod)
    if type != "DELETED" and _learner_ready(pod):
        _start_held(memo, meta["namespace"], name)
    if failure_seen(pod):
        try:
            if status.record_failure(memo.kube, meta["namespace"], name, dict(pod)):
                log.warning("pod %s failed; counted as a restart of %s", meta["name"], name)
        except KubeError as exc:  # its next event (at the latest its DELETED) counts it then
            log.warning("cannot count the failure of pod %s yet: %s", meta.get("name"), exc)
    memo.refresher.poke(meta["namespace"], name)


def _learner_ready(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(naming.GROUP_LABEL) == "learner" and pod_ready(pod)


def _start_held(memo: kopf.Memo, namespace: str, name: str) -> None:
    """The learner is Ready: apply the experiment again if its agents and evals wait for it
    (apply.learner_first)."""
    try:
        obj = memo.kube.get_or_none(EXPERIMENT, name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp") or status.is_failed(obj):
            return
        if status.condition_status(obj, apply.LEARNER_READY) != "False":
            return
        log.info("%s/%s: the learner is Ready; starting agents and evals", namespace, name)
        apply.apply_experiment(memo.kube, plain(obj), memo.config)
    except (SpecError, KubeError) as exc:  # the next learner pod event, or the resync, retries
        log.warning("cannot start the agents of %s yet: %s", name, exc)


def child_changed(memo: kopf.Memo, kind: str, type: str | None, obj: Mapping[str, Any]) -> None:
    """An object of an experiment changed (its metadata, from `watch_children`): a deleted
    workload, Service or ConfigMap is recreated at once; a write of the progress record that
    tensorplex keeps refreshes the status soon (the refresher folds several into one patch)."""
    meta = obj.get("metadata") or {}
    name = (meta.get("labels") or {}).get(naming.EXPERIMENT_LABEL)
    if not name:
        return
    if type == "DELETED":
        _recreate(memo, kind, meta)
    elif kind == "ConfigMap" and meta.get("name") == naming.progress_name(name):
        memo.refresher.poke(meta["namespace"], name)


def _recreate(memo: kopf.Memo, kind: str, meta: Mapping[str, Any]) -> None:
    owner = next(
        (
            ref
            for ref in meta.get("ownerReferences") or []
            if ref.get("kind") == EXPERIMENT.kind and ref.get("apiVersion") == API_VERSION
        ),
        None,
    )
    if owner is None:
        return
    try:
        obj = memo.kube.get_or_none(EXPERIMENT, owner["name"], meta["namespace"])
        if (
            obj is None
            or obj["metadata"].get("uid") != owner.get("uid")
            or obj["metadata"].get("deletionTimestamp")
            or status.is_failed(obj)
        ):
            return
        recreated = apply.ensure(memo.kube, obj, memo.config)
    except (SpecError, KubeError) as exc:
        log.warning("cannot recreate %s/%s: %s", kind, meta.get("name"), exc)
        return
    if recreated:
        log.warning("recreated %s", ", ".join(recreated))


def workload_changed(memo: kopf.Memo, type: str | None, wl: Mapping[str, Any]) -> None:
    """A Kueue Workload of an experiment changed: when Kueue's verdict (admitted or not) is not
    the one the experiment was last applied with, apply it again, which creates its pods'
    workloads on admission and removes them on eviction (apply.admitted). Then every experiment
    waiting in its queue gets its position and Kueue's newest message (`apply.requeue_positions`):
    one admitted, deleted or evicted ahead of them moves them up."""
    meta = wl.get("metadata") or {}
    name = (meta.get("labels") or {}).get(naming.EXPERIMENT_LABEL)
    if not name:
        return
    namespace = meta["namespace"]
    try:
        if type != "DELETED":
            _apply_on_new_verdict(memo, wl, name, namespace)
        queue = str((wl.get("spec") or {}).get("queueName"))
        for waiting in apply.requeue_positions(memo.kube, namespace, queue):
            memo.refresher.poke(namespace, waiting)
    except (SpecError, KubeError) as exc:
        log.warning("cannot apply %s after its Workload changed: %s", name, exc)


def _apply_on_new_verdict(
    memo: kopf.Memo, wl: Mapping[str, Any], name: str, namespace: str
) -> None:
    obj = memo.kube.get_or_none(EXPERIMENT, name, namespace)
    if obj is None or obj["metadata"].get("deletionTimestamp") or status.is_failed(obj):
        return
    admitted = workload.is_admitted(wl)
    if status.condition_status(obj, "Admitted") == ("True" if admitted else "False"):
        return
    log.info("%s/%s: Kueue's verdict changed; applying", namespace, name)
    apply.apply_experiment(memo.kube, plain(obj), memo.config)
    memo.refresher.poke(namespace, name)


def watch_workloads(memo: kopf.Memo, namespaces: Sequence[str] | None) -> Watcher | None:
    """The watch of the experiments' Kueue Workloads, when this cluster serves Kueue's API
    (checked once, at start: an operator started before Kueue is installed needs a restart)."""
    try:
        memo.kube.resource_for(workload.WORKLOAD.api_version, workload.WORKLOAD.kind)
    except KubeError:
        return None
    return Watcher(
        memo.kube,
        workload.WORKLOAD,
        namespaces,
        lambda type, wl: workload_changed(memo, type, wl),
        selector=SELECTOR,
    )


def watch_children(memo: kopf.Memo, namespaces: Sequence[str] | None) -> list[Watcher]:
    """One metadata-only watch per kind the operator creates for an experiment and recreates
    when it is deleted (not yet started), and the watch of its Kueue Workloads when Kueue is
    installed."""
    watchers = []
    for api_version, kind in CHILD_KINDS:

        def on_event(type: str | None, obj: Mapping[str, Any], kind: str = kind) -> None:
            child_changed(memo, kind, type, obj)

        watchers.append(
            Watcher(
                memo.kube,
                resource(api_version, kind),
                namespaces,
                on_event,
                selector=SELECTOR,
                metadata_only=True,
            )
        )
    queued = watch_workloads(memo, namespaces)
    if queued is not None:
        watchers.append(queued)
    return watchers


def stop(memo: kopf.Memo, **_: Any) -> None:
    """Operator shutdown: stop the watches, the periodic resync and the status refresher."""
    memo.podwatch.stop()
    for watcher in memo.get("childwatches") or []:
        watcher.stop()
    if memo.get("nodewatch") is not None:
        memo.nodewatch.stop()
    memo.resyncer.stop()
    memo.refresher.stop()


# --------------------------------------------------------------------------- registration


def register(registry: kopf.OperatorRegistry) -> kopf.OperatorRegistry:
    """Attach every handler to `registry`."""
    kopf.on.login(registry=registry, id="login")(login)
    kopf.on.startup(registry=registry, id="configure")(configure)
    kopf.on.startup(registry=registry, id="start-resync")(start_resync)
    kopf.on.cleanup(registry=registry, id="stop")(stop)
    experiments = (GROUP, VERSION, PLURAL)
    kopf.on.create(*experiments, registry=registry, id="apply-on-create")(apply_spec)
    kopf.on.update(*experiments, registry=registry, id="apply-on-update", field="spec")(apply_spec)
    kopf.on.resume(*experiments, registry=registry, id="apply-on-resume")(apply_spec)
    return registry
