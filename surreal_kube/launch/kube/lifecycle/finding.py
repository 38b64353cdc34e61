"""An experiment on the cluster by name: its `Experiment` object, or its spec's ConfigMap.

Every verb after `create` starts here. Through the operator the object is the root and its
spec is resolved as the operator resolves it; a direct experiment's root is the ConfigMap that
holds the resolved spec the roles read."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.resolve import (
    default_document,
    load_yaml_text,
    validate_document,
)
from surreal_kube.experiment.spec import Experiment
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import (
    CONFIG_MAP,
    EXPERIMENT,
    Kube,
)
from surreal_kube.launch.kube.api.watch import list_pods
from surreal_kube.launch.kube.render.custom_resource import resolve_object
from surreal_kube.launch.kube.render.objects import CONFIG_KEY


@dataclass
class Found:
    """An experiment on the cluster, by name."""

    name: str
    namespace: str
    exp: Experiment
    root: dict[str, Any]
    """The `Experiment` object, or the spec's ConfigMap for a direct one."""
    via_operator: bool
    pods: list[dict[str, Any]] | None = None
    """Its pods when they were listed together with other experiments' (`list_found`)."""

    @property
    def created(self) -> str | None:
        return (self.root.get("metadata") or {}).get("creationTimestamp")

    @property
    def reported(self) -> dict[str, Any]:
        """The status the operator wrote (empty for a direct experiment)."""
        return dict(self.root.get("status") or {}) if self.via_operator else {}


def _config_exp(cm: Mapping[str, Any]) -> Experiment:

    text = (cm.get("data") or {}).get(CONFIG_KEY)
    if text is None:
        raise LaunchError(f"ConfigMap {cm['metadata']['name']} has no {CONFIG_KEY}")
    return validate_document(load_yaml_text(text, f"ConfigMap {cm['metadata']['name']}"))


def find_or_none(kube: Kube, name: str, namespace: str | None = None) -> Found | None:
    """The experiment `name` in the namespace, through its Experiment object or its ConfigMap."""
    ns = namespace or kube.namespace
    if kube.has_experiment_crd():
        cr = kube.get_or_none(EXPERIMENT, name, ns)
        if cr is not None:
            try:
                exp = resolve_object(cr)
            except SpecError:
                exp = None
            if exp is not None:
                return Found(name, ns, exp, cr, True)
            cm = kube.get_or_none(CONFIG_MAP, naming.config_name(name), ns)
            return Found(name, ns, _config_exp(cm) if cm else _stub(name), cr, True)
    cm = kube.get_or_none(CONFIG_MAP, naming.config_name(name), ns)
    if cm is None or (cm["metadata"].get("labels") or {}).get(naming.EXPERIMENT_LABEL) != name:
        return None
    return Found(name, ns, _config_exp(cm), cm, False)


def _stub(name: str) -> Experiment:
    return validate_document(default_document(name))


def find(kube: Kube, name: str, namespace: str | None = None) -> Found:
    """Like find_or_none, but LaunchError naming the namespace and context when it is missing."""
    found = find_or_none(kube, name, namespace)
    if found is None:
        ns = namespace or kube.namespace
        raise LaunchError(
            f"no experiment named {name!r} in namespace {ns!r} (context {kube.context}); "
            "see `surreal-kube list`"
        )
    return found


def list_found(
    kube: Kube, namespace: str | None = None, *, all_namespaces: bool = False
) -> list[Found]:
    """Every experiment in the namespace (or all namespaces), by name."""
    ns = None if all_namespaces else (namespace or kube.namespace)
    out: dict[tuple[str, str], Found] = {}
    if kube.has_experiment_crd():
        for cr in kube.list(EXPERIMENT, ns, all_namespaces=all_namespaces):
            meta = cr["metadata"]
            try:
                exp = resolve_object(cr)
            except SpecError:
                exp = _stub(meta["name"])
            out[(meta["namespace"], meta["name"])] = Found(
                meta["name"], meta["namespace"], exp, cr, True
            )
    selector = f"{naming.GROUP_LABEL}=experiment,app.kubernetes.io/managed-by={naming.NAME}"
    for cm in kube.list(CONFIG_MAP, ns, labels=selector, all_namespaces=all_namespaces):
        meta = cm["metadata"]
        name = (meta.get("labels") or {}).get(naming.EXPERIMENT_LABEL)
        if not name or (meta["namespace"], name) in out:
            continue
        if meta["name"] != naming.config_name(name):
            continue
        with contextlib.suppress(SpecError, LaunchError):
            out[(meta["namespace"], name)] = Found(
                name, meta["namespace"], _config_exp(cm), cm, False
            )
    if len(out) > 1:  # one list of every experiment's pods, not one list per experiment
        for found in out.values():
            found.pods = []
        managed = f"app.kubernetes.io/managed-by={naming.NAME},{naming.EXPERIMENT_LABEL}"
        for pod in list_pods(kube, ns, managed, all_namespaces=all_namespaces):
            meta = pod["metadata"]
            key = (meta.get("namespace") or "", meta["labels"][naming.EXPERIMENT_LABEL])
            if key in out:
                out[key].pods.append(pod)  # type: ignore[union-attr]
    return [out[k] for k in sorted(out)]
