"""Pods and nodes decoded to the part we read, straight from the API server's JSON.

A pod of a 10,000-agent experiment is kilobytes of JSON (environment, probes, volumes, managed
fields; the replay pod has a container per shard), so its 1,022 pods are megabytes: `json.loads` was
most of `surreal-kube status` on a loaded machine, and the operator decodes each of the thousands of
pod events of a create the same way, with the scheduler and kwok waiting for the CPU. msgspec
decodes against a schema and skips every field the schema does not name without building it, an
order of magnitude faster (`bench/scale.py` times `status`). What is kept is what `status.slim_pod`
and the operator's `nodecache.slim_node` keep (and the `resourceVersion` a watch resumes from); each
decoded object still passes through those, so the result is the same dict either way.

Anything that does not fit the schema (a watch's ERROR event, whose object is a Status; a
server that answers something unexpected) is decoded again in full with `json`, so nothing is
lost but speed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypedDict

import msgspec


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


class _NodeSpec(TypedDict, total=False):
    taints: list[dict[str, Any]]
    unschedulable: bool


class _NodeStatus(TypedDict, total=False):
    allocatable: dict[str, str]


class Node(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: _Meta
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
