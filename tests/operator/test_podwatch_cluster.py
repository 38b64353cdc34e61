"""The operator's own pod watch (`operator/podwatch.py`) against the test control plane."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.client import resource
from surreal_kube.operator.podwatch import PodWatcher
from tests.operator.support import connect

pytestmark = pytest.mark.cluster

POD = resource("v1", "Pod")


def _pod(name: str, experiment: str | None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": naming.NAME}
    if experiment:
        labels[naming.EXPERIMENT_LABEL] = experiment
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.test/none:1"}]},
    }


def test_the_watch_lists_then_follows_the_managed_pods_only(kube_cluster, kube_namespace):
    kube = connect(kube_cluster, kube_namespace)
    kube.create(_pod("before", "exp-a"), kube_namespace)  # there before the watch: listed
    seen: list[tuple[str | None, str]] = []
    lock = threading.Lock()

    def on_event(kind: str | None, pod: Any) -> None:
        with lock:
            seen.append((kind, pod["metadata"]["name"]))

    def events() -> list[tuple[str | None, str]]:
        with lock:
            return list(seen)

    watcher = PodWatcher(kube, [kube_namespace], on_event)
    watcher.start()
    try:
        deadline = time.monotonic() + 30
        while (None, "before") not in events() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (None, "before") in events(), events()
        kube.create(_pod("after", "exp-a"), kube_namespace)
        kube.create(_pod("stranger", None), kube_namespace)  # no experiment label: not ours
        kube.delete(POD, "after", kube_namespace)
        deadline = time.monotonic() + 30
        while ("DELETED", "after") not in events() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ("ADDED", "after") in events() and ("DELETED", "after") in events(), events()
        assert all(name != "stranger" for _, name in events()), events()
        watcher.stop()
        kube.create(_pod("late", "exp-a"), kube_namespace)
        time.sleep(2)
        assert all(name != "late" for _, name in events()), events()  # stopped: nothing more
    finally:
        watcher.stop()
