"""The `Experiment` custom resource, to and from a resolved experiment.

The CLI writes one (`experiment_object`: the resolved spec, images pinned, and the chosen
profile); the operator, `status`, `list` and the chart's tests read one back with
`resolve_object`, through the same layering as the CLI's resolver."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import (
    deep_merge,
    default_document,
    to_document,
    validate_document,
)
from surreal_kube.experiment.spec import Experiment
from surreal_kube.launch.kube.profile import PROFILE_KEY, ClusterProfile, profile_document


def resolve_object(obj: Mapping[str, Any]) -> Experiment:
    """The experiment an `Experiment` object describes: its algorithm's defaults, then its spec.

    The same layering as the CLI's resolver, so a partial spec (from Helm values or kubectl)
    means exactly what it would mean on the command line.
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise SpecError("spec: must be a mapping")
    spec = {k: v for k, v in spec.items() if k != PROFILE_KEY}  # how it runs, not what (plan.py)
    algo = spec.get("algorithm") if isinstance(spec.get("algorithm"), Mapping) else {}
    algorithm = str((algo or {}).get("name") or "ppo")
    if algorithm not in ("ppo", "ddpg"):
        raise SpecError(f"spec.algorithm.name: unknown algorithm {algorithm!r}; valid: ppo, ddpg")
    doc = default_document(str(meta.get("name")), algorithm)
    for key, image in (spec.get("images") or {}).items():
        if isinstance(image, Mapping) and (image.get("image") is None) != (
            image.get("build") is None
        ):
            doc["spec"]["images"].pop(key, None)  # a prebuilt image replaces the default build
    deep_merge(doc, {"spec": dict(spec)})
    doc["metadata"] = {"name": meta.get("name")}
    labels = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if not k.startswith(("app.kubernetes.io/", "helm.sh/", "surreal.ai/"))
    }
    if labels:
        doc["metadata"]["labels"] = labels
    return validate_document(doc)


def experiment_object(
    exp: Experiment, namespace: str, profile: ClusterProfile | None = None
) -> dict[str, Any]:
    """The `Experiment` custom resource for a resolved experiment.

    profile: the cluster profile chosen for it (`create --profile`), written whole as
    `spec.profile` so that the operator renders exactly what the CLI planned; None: the
    operator's own profile applies, as for an object applied with kubectl.
    """

    doc = to_document(exp)
    meta: dict[str, Any] = {"name": exp.metadata.name, "namespace": namespace}
    if exp.metadata.labels:
        meta["labels"] = dict(exp.metadata.labels)
    spec = doc["spec"]
    if profile is not None:
        spec = {**spec, PROFILE_KEY: profile_document(profile)}
    return {
        "apiVersion": doc["apiVersion"],
        "kind": doc["kind"],
        "metadata": meta,
        "spec": spec,
    }
