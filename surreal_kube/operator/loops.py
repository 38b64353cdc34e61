"""The operator's background threads: the status refresher and the periodic resync.

- `Refresher`: folds bursts of pod events into one status refresh per experiment, spaced by the
  refresh's own CPU cost (`Config.refresh_cpu_share`).
- `Resyncer`: every `Config.resync_seconds`, recreate what disappeared and refresh the status of
  every experiment, a safety net for what a missed watch event left behind.

What they do to one experiment is `apply` and `status`'s; here is only when.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from surreal_kube.errors import SpecError
from surreal_kube.launch.kube.api.client import EXPERIMENT, Kube
from surreal_kube.operator import apply, status
from surreal_kube.operator.config import Config
from surreal_kube.operator.podcache import PodCache

log = logging.getLogger("surreal_kube.operator")


class Refresher:
    """Folds bursts of pod events into one status refresh per experiment.

    `poke(ns, name)` marks the experiment dirty; one worker thread per experiment refreshes it
    `refresh_delay` seconds after the first poke (later when the last refresh was costly, see
    `Config.refresh_cpu_share`), then waits for the next one (and exits when idle).
    """

    def __init__(
        self,
        kube: Kube,
        config: Config,
        idle_exit: float = 60.0,
        pods: PodCache | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.idle_exit = idle_exit
        self.pods = pods
        self._dirty: dict[tuple[str, str], threading.Event] = {}
        self._guard = threading.Lock()
        self._stopped = threading.Event()

    def poke(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        with self._guard:
            event = self._dirty.get(key)
            if event is None:
                event = self._dirty[key] = threading.Event()
                threading.Thread(
                    target=self._run, args=(key, event), name=f"refresh-{name}", daemon=True
                ).start()
        event.set()

    def stop(self) -> None:
        self._stopped.set()

    def waiting(self) -> int:
        """Experiments poked and not refreshed yet (the metrics' queue depth)."""
        with self._guard:
            return sum(1 for event in self._dirty.values() if event.is_set())

    def _run(self, key: tuple[str, str], event: threading.Event) -> None:
        spacing = 0.0
        last = -float("inf")
        while not self._stopped.is_set():
            if not event.wait(self.idle_exit):
                with self._guard:
                    if not event.is_set():
                        self._dirty.pop(key, None)
                        return
                continue
            time.sleep(max(self.config.refresh_delay, last + spacing - time.monotonic()))
            if self._stopped.is_set():
                return
            event.clear()
            cpu = time.thread_time()
            try:
                status.refresh(self.kube, key[0], key[1], self.config, self.pods)
            except Exception as exc:  # a refresh failure must not kill the worker
                self.config.metrics.refresh_failed()
                log.warning("status refresh of %s/%s failed: %s", key[0], key[1], exc)
            last = time.monotonic()
            spacing = (time.thread_time() - cpu) / self.config.refresh_cpu_share


class Resyncer:
    """Every `resync_seconds`: recreate what disappeared and refresh the status of every
    experiment in the watched namespaces.

    A thread of our own rather than a kopf timer: kopf puts a finalizer on every object that has
    a timer, so an `Experiment` could not be deleted while the operator is down (or uninstalled).
    With no finalizer, deleting an experiment never needs the operator: ownership does it all.
    """

    def __init__(
        self,
        kube: Kube,
        config: Config,
        namespaces: list[str] | None,
        pods: PodCache | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.pods = pods
        self.namespaces = namespaces
        """None: every namespace."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.config.resync_seconds):
            targets: list[str | None] = [*(self.namespaces or [])] or [None]  # None: all
            for namespace in targets:
                try:
                    found = self.kube.list(EXPERIMENT, namespace, all_namespaces=namespace is None)
                except Exception as exc:  # keep resyncing whatever one list does
                    log.warning("resync: cannot list experiments: %s", exc)
                    continue
                if self.pods is not None:  # experiments deleted while no event said so
                    live = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in found}
                    self.pods.retain(live, namespace)
                for obj in found:
                    if self._stop.is_set():
                        return
                    self.resync_one(obj)

    def resync_one(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        key = (meta["namespace"], meta["name"])
        if self.pods is not None:  # re-read the pods: heals what a missed event left behind
            self.pods.forget(key)
        try:
            # the object as it is now, not as the resync pass listed it: a spec edit that landed
            # since (evals.count=0, say) must not get its pruned objects back from the old spec
            fresh = self.kube.get_or_none(EXPERIMENT, meta["name"], meta["namespace"])
            if fresh is None or fresh["metadata"].get("uid") != meta.get("uid"):
                return
            obj = fresh
            if not status.is_failed(obj):
                recreated = apply.ensure(self.kube, obj, self.config)
                if recreated:
                    log.warning(
                        "%s/%s: recreated %s", meta["namespace"], meta["name"], ", ".join(recreated)
                    )
            status.refresh(self.kube, meta["namespace"], meta["name"], self.config, self.pods)
        except SpecError:
            status.refresh(self.kube, meta["namespace"], meta["name"], self.config, self.pods)
        except Exception as exc:  # one experiment's trouble must not stop the others
            log.warning("resync of %s/%s failed: %s", meta["namespace"], meta["name"], exc)
