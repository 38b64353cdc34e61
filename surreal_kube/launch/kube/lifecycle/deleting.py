"""Deleting an experiment: the root goes, ownership removes the rest; optionally wait for it.

A claim kept for its data (`naming.is_retained`) is not waited for: it outlives the
experiment on purpose (`delete --delete-data` removes it, `placement/storage.py`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import (
    CONFIG_MAP,
    EXPERIMENT,
    Kube,
    KubeError,
    Resource,
)
from surreal_kube.launch.kube.lifecycle import apply
from surreal_kube.launch.kube.lifecycle.finding import Found
from surreal_kube.launch.kube.naming import is_retained

Progress = Callable[[str], None]


def _any_left(kube: Kube, namespace: str, selector: str) -> bool:
    """Whether any object of the experiment is left (retained ones aside), cheaply.

    One small page per kind, stopping at the first kind with something left, and that kind is
    asked first the next time: waiting for a thousand pods to go costs one small request per
    poll, not a list of every object of every kind.
    """

    kinds = sorted(apply.CLEANUP, key=lambda r: r != _last_left.get(namespace))
    for res in kinds:
        query = {"labelSelector": selector, "limit": 20}
        page = kube.raw("GET", res.path(namespace), query=query, what=f"list {res.plural}")
        items = page.get("items") or []
        if any(not is_retained(o) for o in items) or (
            (page.get("metadata") or {}).get("continue")
            and any(not is_retained(o) for o in kube.list(res, namespace, labels=selector))
        ):
            _last_left[namespace] = res  # asked first next time: one request per poll
            return True
    return False


_last_left: dict[str, Resource] = {}


def delete(
    kube: Kube,
    found: Found,
    *,
    wait: bool = False,
    timeout: float = 180.0,
    progress: Progress | None = None,
) -> list[str]:
    """Delete the root; ownership removes the rest. With wait, until nothing is left.

    Returns the objects still there when waiting timed out (empty when all are gone).
    """
    name, ns = found.name, found.namespace
    if found.via_operator:
        kube.delete(EXPERIMENT, name, ns, propagation="Background")
    # a direct experiment's root, and stragglers whose owner is already gone; through the
    # operator `<name>-config` may be someone else's (the operator refused to apply over it)
    config = (
        kube.get_or_none(CONFIG_MAP, naming.config_name(name), ns) if found.via_operator else None
    )
    labels = ((config or {}).get("metadata") or {}).get("labels") or {}
    if not found.via_operator or labels.get(naming.EXPERIMENT_LABEL) == name:
        kube.delete(CONFIG_MAP, naming.config_name(name), ns, propagation="Background")
    if progress:
        progress(f"deleted {'Experiment' if found.via_operator else 'ConfigMap'} {name}")
    if not wait:
        return []

    deadline = time.monotonic() + timeout
    selector = naming.experiment_selector(name)
    while _any_left(kube, ns, selector) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [
        f"{o['kind']}/{o['metadata']['name']}"
        for res in apply.CLEANUP
        for o in kube.list(res, ns, labels=selector)
        if not is_retained(o)
    ]
    if found.via_operator:
        with contextlib.suppress(KubeError):
            while kube.get_or_none(EXPERIMENT, name, ns) and time.monotonic() < deadline:
                time.sleep(0.3)
    return left
