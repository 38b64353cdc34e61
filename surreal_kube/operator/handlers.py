"""The kopf handlers of the operator: small functions, each registered with an explicit id.

`register(registry)` attaches them to a registry, so the handlers themselves stay plain
module-level functions that take only the keyword arguments they need. The shared connection,
settings, status refresher, periodic resync and pod watch come in kopf's `memo`. Pods are the
one kind not watched through kopf: `podwatch` says why.

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
from collections.abc import Mapping
from typing import Any

import kopf

from surreal_kube.errors import SpecError
from surreal_kube.experiment.spec import API_VERSION
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.client import (
    EXPERIMENT,
    ConflictError,
    ForbiddenError,
    InvalidError,
    KubeError,
)
from surreal_kube.launch.kube.status import failure_seen
from surreal_kube.operator import reconcile

log = logging.getLogger(__name__)
GROUP, VERSION = API_VERSION.split("/")
PLURAL = EXPERIMENT.plural
STORAGE_PREFIX = "operator.surreal.ai"
MANAGED = {"app.kubernetes.io/managed-by": naming.NAME, naming.EXPERIMENT_LABEL: kopf.PRESENT}
CHILD_KINDS = (
    ("apps", "v1", "statefulsets"),
    ("apps", "v1", "deployments"),
    (None, "v1", "services"),
    (None, "v1", "configmaps"),
)


def plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """A kopf body as a plain, private dict."""
    return copy.deepcopy({key: body[key] for key in body})


# --------------------------------------------------------------------------- handlers


def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo | None:
    """Connect kopf the way our own client connects (kubeconfig and context, or in-cluster)."""
    cfg = memo.kube.configuration
    if memo.kube.context == "in-cluster":
        return kopf.login_with_service_account(**_)
    token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    scheme = token.split(" ", 1)[0] if token and " " in token else None
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        scheme=scheme or ("Bearer" if token else None),
        token=token.split(" ", 1)[-1] if token else None,
        default_namespace=memo.kube.namespace,
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


def apply_spec(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Render and apply the experiment (create, spec edit, operator start)."""
    obj = plain(body)
    meta = obj["metadata"]
    if reconcile.is_failed(obj):
        logger.info("experiment is Failed; not applying (delete and recreate it to retry)")
        return
    try:
        pruned = reconcile.apply_experiment(memo.kube, obj, memo.config)
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
        raise kopf.TemporaryError(str(exc), delay=5) from exc
    if pruned:
        logger.info("pruned %s", ", ".join(pruned))
    memo.refresher.poke(meta["namespace"], meta["name"])


def _refuse(memo: kopf.Memo, obj: Mapping[str, Any], reason: str, message: str) -> None:
    try:
        reconcile.set_conditions(
            memo.kube,
            obj,
            [reconcile.condition("Applied", "False", reason, message)],
            extra={"phase": "Pending", "reason": message},
        )
    except KubeError as exc:  # the status is best effort here; the error itself is raised
        logging.getLogger(__name__).warning("cannot write the status: %s", exc)


def start_resync(memo: kopf.Memo, **_: Any) -> None:
    """Operator start: begin the pod and node watches and the periodic resync (recreate what
    disappeared, refresh status)."""
    memo.podwatch.start()
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
    if failure_seen(pod):
        try:
            if reconcile.record_failure(memo.kube, meta["namespace"], name, dict(pod)):
                log.warning("pod %s failed; counted as a restart of %s", meta["name"], name)
        except KubeError as exc:  # its next event (at the latest its DELETED) counts it then
            log.warning("cannot count the failure of pod %s yet: %s", meta.get("name"), exc)
    memo.refresher.poke(meta["namespace"], name)


def progress_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """tensorplex wrote its experiment's progress record: refresh that status soon (the
    refresher folds several writes into one status patch)."""
    meta = body.get("metadata") or {}
    name = (meta.get("labels") or {}).get(naming.EXPERIMENT_LABEL)
    if name and meta.get("name") == naming.progress_name(name):
        memo.refresher.poke(meta["namespace"], name)


def child_deleted(
    type: str | None, body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    """A workload, Service or ConfigMap of an experiment was deleted: recreate it at once."""
    if type != "DELETED":
        return
    meta = body.get("metadata") or {}
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
            or reconcile.is_failed(obj)
        ):
            return
        recreated = reconcile.ensure(memo.kube, obj, memo.config)
    except (SpecError, KubeError) as exc:
        logger.warning("cannot recreate %s/%s: %s", body.get("kind"), meta.get("name"), exc)
        return
    if recreated:
        logger.warning("recreated %s", ", ".join(recreated))


def stop(memo: kopf.Memo, **_: Any) -> None:
    """Operator shutdown: stop the watches, the periodic resync and the status refresher."""
    memo.podwatch.stop()
    if memo.get("nodewatch") is not None:
        memo.nodewatch.stop()
    memo.resyncer.stop()
    memo.refresher.stop()


# --------------------------------------------------------------------------- registration


def _deleted(type: str | None, **_: Any) -> bool:
    return type == "DELETED"


def _progress(type: str | None, body: kopf.Body, **_: Any) -> bool:
    meta = body.get("metadata") or {}
    name = (meta.get("labels") or {}).get(naming.EXPERIMENT_LABEL)
    return type != "DELETED" and bool(name) and meta.get("name") == naming.progress_name(name)


def register(registry: kopf.OperatorRegistry) -> kopf.OperatorRegistry:
    """Attach every handler to `registry`."""
    kopf.on.login(registry=registry, id="login")(login)
    kopf.on.startup(registry=registry, id="configure")(configure)
    kopf.on.startup(registry=registry, id="start-resync")(start_resync)
    kopf.on.cleanup(registry=registry, id="stop")(stop)
    resource = (GROUP, VERSION, PLURAL)
    kopf.on.create(*resource, registry=registry, id="apply-on-create")(apply_spec)
    kopf.on.update(*resource, registry=registry, id="apply-on-update", field="spec")(apply_spec)
    kopf.on.resume(*resource, registry=registry, id="apply-on-resume")(apply_spec)
    kopf.on.event(
        group="",
        version="v1",
        plural="configmaps",
        registry=registry,
        id="progress-changed",
        labels=MANAGED,
        when=_progress,
    )(progress_changed)
    for group, version, plural in CHILD_KINDS:
        kopf.on.event(
            group=group or "",
            version=version,
            plural=plural,
            registry=registry,
            id=f"{plural}-deleted",
            labels=MANAGED,
            when=_deleted,
        )(child_deleted)
    return registry
