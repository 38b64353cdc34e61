"""Applying a rendered experiment: server-side apply in order, pruning, and all-or-nothing create.

Shared by the CLI (which applies the rendered objects itself when no operator runs) and the
operator (which applies them for an `Experiment` object), so both produce the same objects.

- `apply_objects`: server-side apply of the objects, several at once: what pods refer to first,
  then the workloads.
- `create_objects`: a fresh create. The root (the spec's ConfigMap) goes first; its uid becomes
  every other object's owner; if anything fails part-way, everything applied so far is deleted
  again (the root last, and its deletion would garbage-collect stragglers anyway), so a refused
  create leaves nothing behind.
- `check_ours`: before anything is applied, refuse an object of the same kind and name that
  exists and is not this experiment's (made by hand, by another tool or another experiment):
  server-side apply with force would take its fields over silently, and our owner reference
  would have its deletion garbage-collect it.
- `prune`: delete objects of the experiment that the current rendering no longer has (e.g. the
  evals StatefulSet after `evals.count` went to 0). Claims (the experiment's data) are never pruned.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from surreal_kube.errors import SpecError
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import (
    KubeError,
    NotFoundError,
    Resource,
    describe,
    resource,
)
from surreal_kube.launch.kube.render.ownership import root_of, set_owner

log = logging.getLogger(__name__)

PRUNABLE: tuple[Resource, ...] = (
    resource("apps/v1", "StatefulSet"),
    resource("apps/v1", "Deployment"),
    resource("v1", "Service"),
    resource("v1", "ConfigMap"),
    resource("networking.k8s.io/v1", "NetworkPolicy"),
    resource("policy/v1", "PodDisruptionBudget"),
)
"""Kinds an experiment renders that may disappear when its spec changes."""

CLEANUP: tuple[Resource, ...] = (
    *PRUNABLE,
    resource("rbac.authorization.k8s.io/v1", "RoleBinding"),
    resource("rbac.authorization.k8s.io/v1", "Role"),
    resource("v1", "ServiceAccount"),
    resource("v1", "PersistentVolumeClaim"),
    resource("v1", "Pod"),
)
"""Kinds `delete` waits for (pods last: their workloads go first)."""

Progress = Callable[[str], None]


def key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """(apiVersion, kind, name): an object's identity within one namespace."""
    return (obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


WORKLOAD_KINDS = ("StatefulSet", "Deployment", "Job", "ReplicaSet", "Pod")
POD_NEEDS = ("ServiceAccount", "ConfigMap", "Secret", "PersistentVolumeClaim", "NetworkPolicy")
"""What a pod refers to and cannot be admitted (its ServiceAccount), scheduled (its claim) or
started (its volumes) without, and its NetworkPolicy (no pod runs, even briefly, open to
strangers); applied before any workload."""
PARALLEL = 8
"""Requests in flight at once: on a busy API server each apply waits for its answer, and the
answers of twenty objects need not come one after another."""


def apply_objects(
    kube: Any,
    objects: Iterable[Mapping[str, Any]],
    namespace: str,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    applied: list[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Server-side apply the objects; the objects as stored (or as they would be), in order.

    Two waves of up to PARALLEL requests at once: first what a pod cannot be made or started
    without (`POD_NEEDS`: ServiceAccount, ConfigMaps, Secrets, claims, policies), then the
    workloads, largest first, and after them what only running processes use (Services, RBAC),
    so that no pod is made before its claim exists and the thousand agent pods start first: the
    Services and RBAC in the first wave held the workloads back by another round of requests at
    10,000 agents. `applied` (if given) collects the objects the server took, for a rollback.
    """
    from concurrent.futures import ThreadPoolExecutor

    objs = list(objects)
    out: list[dict[str, Any] | None] = [None] * len(objs)

    def replicas(i: int) -> int:
        if objs[i].get("kind") not in WORKLOAD_KINDS:
            return 0  # after every workload
        return int((objs[i].get("spec") or {}).get("replicas") or 1)

    first = [i for i, o in enumerate(objs) if o.get("kind") in POD_NEEDS]
    rest = [i for i, o in enumerate(objs) if o.get("kind") not in POD_NEEDS]
    waves = [first, sorted(rest, key=lambda i: -replicas(i))]

    def one(i: int) -> None:
        out[i] = kube.apply(objs[i], namespace, dry_run=dry_run)
        if applied is not None:
            applied.append(objs[i])
        if progress:
            progress(f"applied {describe(objs[i])}")

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        for wave in waves:
            failures = [f.exception() for f in [pool.submit(one, i) for i in wave]]
            error = next((e for e in failures if e is not None), None)
            if error is not None:
                raise error
    return [o for o in out if o is not None]


MANAGED_BY = "app.kubernetes.io/managed-by"
"""The label (naming.labels sets it to naming.NAME) that says an object is surreal-kube's."""


class NotOursError(SpecError):
    """An object the experiment would apply exists and belongs to someone else."""


def _manager(obj: Mapping[str, Any]) -> str:
    """Who made or manages an object, as far as it says: its managed-by label, its owner, or
    the field manager that first wrote it."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    other = labels.get(naming.EXPERIMENT_LABEL)
    if other and labels.get(MANAGED_BY) == naming.NAME:
        return f"experiment {other!r}"
    owners = [f"{o.get('kind')}/{o.get('name')}" for o in meta.get("ownerReferences") or []]
    if owners:
        return "owned by " + ", ".join(owners)
    if MANAGED_BY in labels:
        return f"managed by {labels[MANAGED_BY]}"
    fields = [f.get("manager") for f in meta.get("managedFields") or [] if f.get("manager")]
    return f"made by {fields[0]}" if fields else "made by hand"


def check_ours(
    kube: Any,
    objects: Iterable[Mapping[str, Any]],
    namespace: str,
    experiment: str,
    *,
    owner_uid: str | None = None,
) -> None:
    """NotOursError, in one line naming each, for objects of `objects` that exist and are not
    this experiment's: without our managed-by and experiment labels, or (owner_uid known: the
    operator's `Experiment`) owned by another object. Read-only, so nothing is half-created.

    One list per kind of the objects, selecting what is *not* labelled as this experiment
    (`key!=value` also selects objects without the label), so the answer holds the few
    strangers, not our own objects; with owner_uid one more per kind for ours, to compare
    owners. A create of 10,000 agents has the same few kinds: the cost does not grow with it.
    Objects being deleted are left to the apply, as before.
    """
    objs = list(objects)
    names: dict[Resource, set[str]] = {}
    for obj in objs:
        res = kube.resource_for(obj["apiVersion"], obj["kind"])
        names.setdefault(res, set()).add(obj["metadata"]["name"])
    ours = naming.experiment_selector(experiment)
    theirs = f"{naming.EXPERIMENT_LABEL}!={experiment}"

    def found(res: Resource, selector: Any) -> list[dict[str, Any]]:
        try:
            return [
                o
                for o in kube.list(res, namespace, labels=selector)
                if o["metadata"]["name"] in names[res]
                and not o["metadata"].get("deletionTimestamp")
            ]
        except NotFoundError:  # a kind the server does not serve: the apply says so
            return []

    from concurrent.futures import ThreadPoolExecutor

    queries = [(res, theirs) for res in names]
    if owner_uid is not None:
        queries += [(res, ours) for res in names]
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        answers = list(pool.map(lambda q: (q, found(*q)), queries))
    problems = []
    for (res, selector), hits in answers:
        for obj in hits:
            meta = obj["metadata"]
            what = f"{res.kind}/{meta['name']}"
            labels = meta.get("labels") or {}
            if selector == theirs or labels.get(MANAGED_BY) != naming.NAME:
                problems.append(f"{what} exists and is not ours ({_manager(obj)})")
                continue
            others = [o for o in meta.get("ownerReferences") or [] if o.get("uid") != owner_uid]
            if others:
                owners = ", ".join(f"{o.get('kind')}/{o.get('name')}" for o in others)
                problems.append(f"{what} exists and is not ours (owned by {owners})")
    if problems:
        raise NotOursError(
            f"experiment {experiment!r}: "
            + "; ".join(sorted(set(problems)))
            + ": nothing was applied; delete or rename those objects, or name the experiment "
            "otherwise"
        )


def create_objects(
    kube: Any,
    objects: Sequence[Mapping[str, Any]],
    namespace: str,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Create a rendered experiment whose root is its first object; all or nothing.

    The objects must have been rendered without an owner: the root's uid only exists once the
    server stored it. On any failure everything applied so far is deleted before the error is
    re-raised.
    """
    if not objects:
        return []
    labels = objects[0]["metadata"].get("labels") or {}
    if naming.EXPERIMENT_LABEL in labels:  # before the root: a refusal leaves nothing
        check_ours(kube, objects, namespace, labels[naming.EXPERIMENT_LABEL])
    applied: list[Mapping[str, Any]] = []
    try:
        root = kube.apply(objects[0], namespace, dry_run=dry_run)
        applied.append(objects[0])
        if progress:
            progress(f"applied {describe(objects[0])}")
        uid = (root.get("metadata") or {}).get("uid") or ("dry-run" if dry_run else None)
        owner = {**root_of(list(objects)), "uid": uid}
        rest = set_owner(objects[1:], owner)
        out = apply_objects(
            kube, rest, namespace, dry_run=dry_run, progress=progress, applied=applied
        )
        return [root, *out]
    except BaseException as exc:
        if not dry_run and applied:
            log.warning("create failed (%s); deleting the %d objects applied", exc, len(applied))
            rollback(kube, applied, namespace, progress=progress)
        if isinstance(exc, KubeError) and len(applied) < len(objects):
            raise type(exc)(
                f"{exc} (nothing was left behind: the {len(applied)} objects created "
                f"meanwhile were deleted again)",
                exc.status,
                exc.reason,
            ) from exc
        raise


def rollback(
    kube: Any,
    applied: list[Mapping[str, Any]],
    namespace: str,
    *,
    progress: Progress | None = None,
) -> None:
    """Delete `applied` objects in reverse order, ignoring those already gone."""
    for obj in reversed(applied):
        res = kube.resource_for(obj["apiVersion"], obj["kind"])
        try:
            kube.delete(res, obj["metadata"]["name"], namespace, propagation="Foreground")
        except KubeError as e:  # keep going: delete as much as we can
            log.warning("rollback: could not delete %s: %s", describe(obj), e)
        else:
            if progress:
                progress(f"deleted {describe(obj)}")


def prune(
    kube: Any,
    experiment: str,
    desired: Iterable[Mapping[str, Any]],
    namespace: str,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> list[str]:
    """Delete the experiment's objects that `desired` no longer has; what was deleted."""
    wanted = {key(o) for o in desired}
    gone = []
    for res in PRUNABLE:
        for obj in kube.list(res, namespace, labels=naming.experiment_selector(experiment)):
            if key(obj) in wanted or obj["metadata"].get("deletionTimestamp"):
                continue
            with contextlib.suppress(NotFoundError):
                kube.delete(res, obj["metadata"]["name"], namespace, dry_run=dry_run)
            gone.append(describe(obj))
            if progress:
                progress(f"pruned {describe(obj)}")
    return gone


def missing(
    kube: Any, desired: Iterable[Mapping[str, Any]], namespace: str
) -> list[Mapping[str, Any]]:
    """Desired objects that are not on the server (someone deleted them), in order."""
    have: dict[Resource, set[str]] = {}
    out = []
    for obj in desired:
        res = kube.resource_for(obj["apiVersion"], obj["kind"])
        if res not in have:
            labels = obj["metadata"].get("labels") or {}
            selector = (
                naming.experiment_selector(labels[naming.EXPERIMENT_LABEL])
                if naming.EXPERIMENT_LABEL in labels
                else None
            )
            have[res] = {
                o["metadata"]["name"]
                for o in kube.list(res, namespace, labels=selector)
                if not o["metadata"].get("deletionTimestamp")
            }
        if obj["metadata"]["name"] not in have[res]:
            out.append(obj)
    return out
