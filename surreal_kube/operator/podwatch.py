"""The operator's pod watch: one list, then one stream of changes, outside kopf.

Every managed pod's every change passes here: a 10,000-agent experiment starts 1,022 pods that
change four or five times each on the way to Running. Through a kopf event handler each change
cost milliseconds of the operator's CPU (kopf's body views, filters, a thread-pool hop per
handler call), seconds of CPU while the pods started, on a machine whose controller-manager and
scheduler needed every cycle (`bench/scale.py`: create through the operator against `kubectl
apply`). Here a change is one `json.loads` and a call of `on_event`.

The watch resumes from the last resourceVersion it saw when the server ends it, and starts again
with a list when the version expired (410 Gone) or the stream broke; the list's pods are handed
over as events of type None (as kopf's initial listing), so `PodCache` heals what a gap missed.
The node watch (`nodecache`) is the same loop over another kind.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api import slim
from surreal_kube.launch.kube.api.client import POD, Kube, KubeError, Resource
from surreal_kube.launch.kube.api.slim import Decode
from surreal_kube.launch.kube.api.watch import list_with_version

log = logging.getLogger(__name__)

SELECTOR = f"app.kubernetes.io/managed-by={naming.NAME},{naming.EXPERIMENT_LABEL}"
"""The pods of experiments (those the operator renders and the CLI applies)."""
WATCH_SECONDS = 300
"""How long one watch request lasts on the server before it is resumed."""

OnEvent = Callable[[str | None, Mapping[str, Any]], None]
"""Called with (event type: ADDED, MODIFIED, DELETED, or None for a listed object; the object)."""


class Watcher:
    """Watch one kind in some namespaces (None: all; a cluster-scoped kind: [None]), one thread
    each: a list, then changes, resumed from the last version; a fresh list after a gap.

    on_list: given, it receives each (re)list whole (to replace what a cache held: an object
    deleted during a gap has no DELETED event); else the listed objects come as events of
    type None. metadata_only: the objects come as PartialObjectMetadata (no spec or status),
    for a watcher that needs names, labels and owners alone. decode: (list page, event line)
    parsers that keep only the part the handler reads (`launch/kube/api/slim.py`).
    """

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        namespaces: Sequence[str] | None,
        on_event: OnEvent,
        *,
        selector: str = "",
        on_list: Callable[[list[dict[str, Any]]], None] | None = None,
        metadata_only: bool = False,
        decode: tuple[Decode, Decode] | None = None,
    ) -> None:
        self.kube = kube
        self.decode = decode
        self.metadata_only = metadata_only
        self.resource = resource
        self.selector = selector
        self.on_event = on_event
        self.on_list = on_list
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(ns,),
                name=f"{resource.plural}-{ns or 'all'}",
                daemon=True,
            )
            for ns in (namespaces if namespaces else [None])
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Deliver nothing more. A thread waiting on its stream ends with its next line or the
        server's end of the watch (they are daemons: the operator's exit does not wait)."""
        self._stop.set()

    def _deliver(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        try:
            self.on_event(kind, obj)
        except Exception:  # one bad event must not end the watch
            log.exception(
                "%s event %s of %s",
                self.resource.kind,
                kind,
                (obj.get("metadata") or {}).get("name"),
            )

    def _listed(self, objects: list[dict[str, Any]]) -> None:
        if self.on_list is None:
            for obj in objects:
                self._deliver(None, obj)
            return
        try:
            self.on_list(objects)
        except Exception:
            log.exception("%s list of %d", self.resource.kind, len(objects))

    def _run(self, namespace: str | None) -> None:
        version: str | None = None
        failures = 0
        where = namespace or ("all namespaces" if self.resource.namespaced else "the cluster")
        while not self._stop.is_set():
            try:
                if version is None:
                    objects, version = list_with_version(
                        self.kube,
                        self.resource,
                        namespace,
                        self.selector,
                        metadata_only=self.metadata_only,
                        decode=self.decode[0] if self.decode else None,
                    )
                    self._listed(objects)
                version = self._follow(namespace, version)
                failures = 0
            except KubeError as exc:  # expired (410 Gone) or broken: list again
                failures += 1
                version = None
                if failures > 1:
                    log.warning("%s watch of %s: %s", self.resource.kind, where, exc)
                if self._stop.wait(min(0.5 * failures, 10.0)):
                    return

    def _follow(self, namespace: str | None, version: str) -> str:
        """Hand over changes from `version` until the server ends the watch; the last version."""
        events = self.kube.watch(
            self.resource,
            namespace,
            labels=self.selector or None,
            resource_version=version,
            timeout=WATCH_SECONDS,
            all_namespaces=namespace is None and self.resource.namespaced,
            metadata_only=self.metadata_only,
            decode=self.decode[1] if self.decode else None,
        )
        for kind, obj in events:
            if self._stop.is_set():
                break
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._deliver(kind, obj)
        return version


class PodWatcher(Watcher):
    """Watch the managed pods of some namespaces (None: all) in one thread each."""

    def __init__(self, kube: Kube, namespaces: Sequence[str] | None, on_event: OnEvent) -> None:
        super().__init__(
            kube,
            POD,
            namespaces,
            on_event,
            selector=SELECTOR,
            decode=(slim.pod_list, slim.pod_event),
        )
