"""The operator's view of its experiments' pods, kept from the pod watch it already has.

The pod watch (`podwatch`) hands every event of every managed pod to `handlers.pod_changed`;
keeping a slim copy of each (`slim.slim_pod`, about a tenth of a pod) lets a status refresh
read the pods from memory instead of listing them: with 10,000 pods a list is megabytes on the
wire and seconds of parsing, and a refresh follows every burst of pod events.

Bounded: a pod leaves with its DELETED event, an experiment's pods with the experiment
(`forget`); nothing else is kept. The first refresh of an experiment after the operator starts
lists its pods once (`prime`), since the watch's initial listing may still be on its way; events
that arrive meanwhile are applied on top. A periodic resync primes again, healing whatever a
missed event could have left behind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.slim import slim_pod

Key = tuple[str, str]
"""(namespace, experiment)."""
Lister = Callable[[], tuple[list[dict[str, Any]], str]]
"""Lists an experiment's pods: (pods, the list's resourceVersion)."""


class PodCache:
    """Slim pods per experiment, from watch events; thread-safe."""

    def __init__(self) -> None:
        self._pods: dict[Key, dict[str, dict[str, Any]]] = {}
        self._primed: set[Key] = set()
        self._journal: dict[Key, list[tuple[str | None, str, dict[str, Any]]]] = {}
        """Events seen while a list of the experiment's pods is on its way."""
        self._lock = threading.Lock()

    def observe(self, event: str | None, pod: Mapping[str, Any]) -> Key | None:
        """Apply one watch event (kopf's `type`: None for its initial listing); the key."""
        meta = pod.get("metadata") or {}
        experiment = (meta.get("labels") or {}).get(naming.EXPERIMENT_LABEL)
        namespace = meta.get("namespace")
        if not experiment or not namespace:
            return None
        key = (str(namespace), str(experiment))
        slim = slim_pod(pod)
        with self._lock:
            journal = self._journal.get(key)
            if journal is not None:
                journal.append((event, str(meta.get("resourceVersion") or ""), slim))
            self._apply(key, event, slim)
        return key

    def _apply(self, key: Key, event: str | None, slim: dict[str, Any]) -> None:
        name = slim["metadata"]["name"]
        if event == "DELETED":
            pods = self._pods.get(key)
            if pods is not None:
                pods.pop(name, None)
        else:
            self._pods.setdefault(key, {})[name] = slim

    def pods(self, key: Key, lister: Lister) -> list[dict[str, Any]]:
        """The experiment's pods: from memory once primed, else listed (`lister`) first."""
        with self._lock:
            if key in self._primed:
                return list(self._pods.get(key, {}).values())
        self.prime(key, lister)
        with self._lock:
            return list(self._pods.get(key, {}).values())

    def prime(self, key: Key, lister: Lister) -> None:
        """Replace what is known of an experiment's pods with a fresh list of them.

        Events that arrive while the list is on its way are kept and applied on top when they
        are newer than the list (their resourceVersion), so a pod that changed or went away
        meanwhile is not brought back to an older state.
        """
        with self._lock:
            self._journal[key] = []
        try:
            listed, version = lister()
        except BaseException:
            with self._lock:
                self._journal.pop(key, None)
            raise
        with self._lock:
            journal = self._journal.pop(key, [])
            self._pods[key] = {p["metadata"]["name"]: slim_pod(p) for p in listed}
            for event, rv, slim in journal:
                if _newer(rv, version):
                    self._apply(key, event, slim)
            self._primed.add(key)

    def forget(self, key: Key) -> None:
        """The experiment is gone: drop its pods."""
        with self._lock:
            self._pods.pop(key, None)
            self._primed.discard(key)

    def retain(self, live: set[Key], namespace: str | None = None) -> None:
        """Forget the experiments (of `namespace`, or all) that are not in `live`."""
        with self._lock:
            for key in list(self._pods):
                if key not in live and (namespace is None or key[0] == namespace):
                    self._pods.pop(key, None)
                    self._primed.discard(key)

    def size(self) -> int:
        """Pods held, all experiments together."""
        with self._lock:
            return sum(len(p) for p in self._pods.values())


def _newer(version: str, than: str) -> bool:
    """resourceVersions are opaque, but etcd's are increasing integers; unknown: assume newer."""
    try:
        return int(version) > int(than)
    except ValueError:
        return True
