"""What we keep of a pod and of a node, defined once: the schema, its decoders, the slim copies.

A pod of a 10,000-agent experiment is kilobytes of JSON (environment, probes, volumes, managed
fields; the replay pod has a container per shard), so its 1,022 pods are megabytes: `json.loads` was
most of `surreal-kube status` on a loaded machine, and the operator decodes each of the thousands of
pod events of a create the same way, with the scheduler and kwok waiting for the CPU. msgspec
decodes against a schema and skips every field the schema does not name without building it, an
order of magnitude faster (`bench/scale.py` times `status`).

The same schema says what `slim_pod` and `slim_node` keep (every key it names, of the
annotations only the progress one, and not the `resourceVersion` a watch resumes from): the
copies the operator's caches hold and that status reads. Each decoded object still passes
through those, so the result is the same dict either way; a field added to the schema is kept by
both.

Anything that does not fit the schema (a watch's ERROR event, whose object is a Status; a
server that answers something unexpected) is decoded again in full with `json`, so nothing is
lost but speed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

import msgspec

from surreal_kube.launch.kube.naming import PROGRESS_ANNOTATION


class _Owner(TypedDict, total=False):
    kind: str
    name: str


class _Meta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[_Owner]


class _Container(TypedDict, total=False):
    name: str
    resources: dict[str, Any]


class _PodSpec(TypedDict, total=False):
    nodeName: str
    nodeSelector: dict[str, str]
    tolerations: list[dict[str, Any]]
    overhead: dict[str, str]
    containers: list[_Container] | None
    initContainers: list[_Container] | None


class _Condition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str


class _ContainerStatus(TypedDict, total=False):
    name: str
    image: str
    ready: bool
    restartCount: int
    state: dict[str, Any]
    lastState: dict[str, Any]


class _PodStatus(TypedDict, total=False):
    phase: str
    reason: str
    message: str
    conditions: list[_Condition]
    containerStatuses: list[_ContainerStatus]


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: _Meta
    spec: _PodSpec
    status: _PodStatus


class _NodeMeta(TypedDict, total=False):
    name: str
    resourceVersion: str
    labels: dict[str, str]


class _NodeSpec(TypedDict, total=False):
    taints: list[dict[str, Any]]
    unschedulable: bool


class _NodeStatus(TypedDict, total=False):
    allocatable: dict[str, str]


class Node(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: _NodeMeta
    spec: _NodeSpec
    status: _NodeStatus


class _PodList(TypedDict, total=False):
    metadata: dict[str, Any]
    items: list[Pod]


class _NodeList(TypedDict, total=False):
    metadata: dict[str, Any]
    items: list[Node]


class _PodEvent(TypedDict):
    type: str
    object: Pod


class _NodeEvent(TypedDict):
    type: str
    object: Node


Decode = Callable[[bytes], Any]


def _with_fallback(decoder: msgspec.json.Decoder[Any]) -> Decode:
    def decode(data: bytes) -> Any:
        try:
            return decoder.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return json.loads(data)

    return decode


pod_list: Decode = _with_fallback(msgspec.json.Decoder(_PodList))
"""A pod list page (`items`, `metadata.continue`, `metadata.resourceVersion`), pods slim."""
pod_event: Decode = _with_fallback(msgspec.json.Decoder(_PodEvent))
"""One line of a pod watch: `{"type", "object"}`, the pod slim (an ERROR event in full)."""
node_list: Decode = _with_fallback(msgspec.json.Decoder(_NodeList))
"""A node list page, nodes slim (name, labels, taints, unschedulable, allocatable)."""
node_event: Decode = _with_fallback(msgspec.json.Decoder(_NodeEvent))
"""One line of a node watch, the node slim."""


# --------------------------------------------------------------------------- slim copies


def _keys(schema: type, *apart: str) -> tuple[str, ...]:
    """The keys `schema` names, in order, less those kept in a shape of their own (`apart`)."""
    return tuple(k for k in schema.__annotations__ if k not in apart)


_SHAPED_META = ("resourceVersion", "labels", "annotations", "ownerReferences")
_POD_META = _keys(_Meta, *_SHAPED_META)
_OWNER = _keys(_Owner)
_CONTAINERS = ("containers", "initContainers")
_POD_SPEC = _keys(_PodSpec, *_CONTAINERS)
_POD_STATUS = _keys(_PodStatus, "conditions", "containerStatuses")
_CONDITION = _keys(_Condition)
_CONTAINER_STATUS = _keys(_ContainerStatus)


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a pod that `summarize` and `pending_reason` read, as a new plain dict.

    Whoever keeps many pods (the operator watching 10,000 of them, `create` waiting for them)
    keeps these: about a tenth of a whole pod (no env, volumes, probes, managed fields). The
    small parts kept (resources, tolerations, container states) are shared with `pod`, not
    copied: every caller drops the decoded pod at once, so the rest of it is freed all the same,
    and deep copies were a third of the operator's CPU per pod event at 1,000 pods.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    out_meta: dict[str, Any] = {k: meta[k] for k in _POD_META if meta.get(k) is not None}
    out_meta["labels"] = dict(meta.get("labels") or {})
    progress = (meta.get("annotations") or {}).get(PROGRESS_ANNOTATION)
    if progress is not None:
        out_meta["annotations"] = {PROGRESS_ANNOTATION: progress}
    owners = [{k: r.get(k) for k in _OWNER} for r in meta.get("ownerReferences") or []]
    if owners:
        out_meta["ownerReferences"] = owners
    out_spec: dict[str, Any] = {k: spec[k] for k in _POD_SPEC if spec.get(k) is not None}
    for key in _CONTAINERS:
        if spec.get(key):
            out_spec[key] = [
                {"name": c.get("name"), "resources": c.get("resources") or {}} for c in spec[key]
            ]
    out_status: dict[str, Any] = {k: status[k] for k in _POD_STATUS if status.get(k) is not None}
    if status.get("conditions"):
        out_status["conditions"] = [
            {k: c[k] for k in _CONDITION if k in c} for c in status["conditions"]
        ]
    if status.get("containerStatuses"):
        out_status["containerStatuses"] = [
            {k: c[k] for k in _CONTAINER_STATUS if k in c} for c in status["containerStatuses"]
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": out_meta, "spec": out_spec,
            "status": out_status}  # fmt: skip


def slim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """What the pools and the pending reasons read of a node (the schema's `Node`)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "metadata": {"name": meta.get("name", ""), "labels": dict(meta.get("labels") or {})},
        "spec": {
            "taints": list(spec.get("taints") or []),
            "unschedulable": spec.get("unschedulable"),
        },
        "status": {"allocatable": dict(status.get("allocatable") or {})},
    }
