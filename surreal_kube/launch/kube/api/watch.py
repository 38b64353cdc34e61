"""Lists that a watch continues from, and the pods of a selector kept current by one.

Whoever waits on many pods (`create` waiting for 10,000 agents, the operator) lists them once
and then follows the changes from the list's resourceVersion, instead of listing every pod each
second. Pods are kept slim (`slim.slim_pod`): about a tenth of a whole pod."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from surreal_kube.launch.kube.api import slim
from surreal_kube.launch.kube.api.client import (
    METADATA_LIST,
    POD,
    Kube,
    KubeError,
    Resource,
)


def list_with_version(
    kube: Kube,
    res: Resource,
    namespace: str | None,
    selector: str,
    *,
    metadata_only: bool = False,
    decode: Callable[[bytes], Any] | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """Every object of a kind matching `selector` (pages of 500; namespace None: every
    namespace) and the list's resourceVersion, from which a watch continues without missing a
    change. metadata_only: the objects' metadata alone (PartialObjectMetadata). decode: parses
    each page (`slim.pod_list`: slim pods)."""
    query: dict[str, Any] = {"labelSelector": selector, "limit": 500}
    items: list[dict[str, Any]] = []
    accept = METADATA_LIST if metadata_only else None
    while True:
        page = kube.raw(
            "GET",
            res.path(namespace),
            query=query,
            what=f"list {res.plural}",
            accept=accept,
            decode=decode,
        )
        items.extend(page.get("items") or [])
        meta = page.get("metadata") or {}
        if not meta.get("continue"):
            return items, str(meta.get("resourceVersion") or "")
        query["continue"] = meta["continue"]


def list_pods(
    kube: Kube, namespace: str | None, selector: str, *, all_namespaces: bool = False
) -> list[dict[str, Any]]:
    """The pods matching `selector`, slim (`slim.slim_pod`), decoded as such (`slim.py`)."""
    listed = kube.list(
        POD, namespace, labels=selector, all_namespaces=all_namespaces, decode=slim.pod_list
    )
    return [slim.slim_pod(p) for p in listed]


class PodWatch:
    """The pods matching a selector, kept current by one list and then a watch (a thread).

    `snapshot()` gives the pods (slim copies, `slim.slim_pod`); `changed` is set whenever one
    changed. A watch the server ends is resumed from the last resourceVersion; one that expired
    (410 Gone) or broke starts again with a list. Use it as a context manager.
    """

    def __init__(self, kube: Kube, namespace: str, selector: str, timeout: float = 60.0) -> None:
        self.kube = kube
        self.namespace = namespace
        self.selector = selector
        self.timeout = timeout
        self.changed = threading.Event()
        self._pods: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._version = self._list()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def __enter__(self) -> PodWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> list[dict[str, Any]]:
        """The pods now (raises what made the watch give up, if anything did)."""
        if self._error is not None:
            raise self._error
        with self._lock:
            return list(self._pods.values())

    def stop(self) -> None:
        self._stop.set()

    def _list(self) -> str:
        items, version = list_with_version(
            self.kube, POD, self.namespace, self.selector, decode=slim.pod_list
        )
        pods = {pod["metadata"]["name"]: slim.slim_pod(pod) for pod in items}
        with self._lock:
            self._pods = pods
        self.changed.set()
        return version

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                for kind, pod in self.kube.watch(
                    POD, self.namespace, labels=self.selector, resource_version=self._version,
                    timeout=self.timeout, decode=slim.pod_event,
                ):  # fmt: skip
                    if self._stop.is_set():
                        return
                    self._version = (pod.get("metadata") or {}).get("resourceVersion") or (
                        self._version
                    )
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        with self._lock:
                            name = pod["metadata"]["name"]
                            if kind == "DELETED":
                                self._pods.pop(name, None)
                            else:
                                self._pods[name] = slim.slim_pod(pod)
                        self.changed.set()
                failures = 0
            except KubeError as exc:
                failures += 1
                if failures > 5:
                    self._error = exc
                    self.changed.set()
                    return
                if self._stop.wait(min(0.2 * failures, 1.0)):
                    return
                try:
                    self._version = self._list()
                except KubeError:
                    continue
