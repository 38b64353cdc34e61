"""The operator's own pod and node watches (`operator/podwatch.py`, `operator/nodecache.py`)
against the test control plane."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api import watch as kube_watch
from surreal_kube.launch.kube.api.client import NODE, Kube, resource
from surreal_kube.launch.kube.placement.pools import discover_pools
from surreal_kube.operator import apply as operator_apply
from surreal_kube.operator.config import Config
from surreal_kube.operator.nodecache import NodeCache
from surreal_kube.operator.podwatch import PodWatcher, Watcher
from tests.operator.support import connect, wait_for

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


class CountingKube(Kube):
    """Our client, recording the paths it reads (to show what was not listed)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.paths: list[str] = []

    def raw(self, method: str, path: str, **kw: Any) -> Any:
        self.paths.append(path)
        return super().raw(method, path, **kw)


def test_the_node_watch_keeps_the_pools_without_a_list_of_nodes(kube_cluster, kube_namespace):
    """The same loop over nodes (`Watcher`, `NodeCache`): the operator's pools and pending
    reasons come from it; a node added or removed reaches them through the watch."""
    kube = connect(kube_cluster, kube_namespace)
    cache = NodeCache()
    watcher = Watcher(kube, NODE, None, cache.observe, on_list=cache.replace)
    watcher.start()
    extra = "watch-test-0"
    try:
        wait_for("the node watch's list", lambda: cache.nodes() is not None, timeout=30)
        listed = {n["metadata"]["name"] for n in kube.list(NODE)}
        nodes, generation = cache.nodes()  # type: ignore[misc]
        assert {n["metadata"]["name"] for n in nodes} == listed

        counting = CountingKube(kubeconfig=kube_cluster.kubeconfig, namespace=kube_namespace)
        config = Config(nodes=cache)
        pools = operator_apply.profile(counting, config).pools  # type: ignore[union-attr]
        assert pools == discover_pools(kube).pools
        assert not [p for p in counting.paths if p.endswith("/nodes")], counting.paths

        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": extra,
                    "labels": {"cloud.google.com/gke-nodepool": "watch-test-pool"},
                },
                # nothing of the other tests may land here
                "spec": {"taints": [{"key": "watch-test", "effect": "NoSchedule"}]},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
            }
        )

        def held() -> set[str]:
            return {n["metadata"]["name"] for n in cache.nodes()[0]}  # type: ignore[index]

        wait_for("the new node in the cache", lambda: extra in held(), timeout=30)
        assert cache.nodes()[1] > generation  # type: ignore[index]
        pools = operator_apply.profile(counting, config).pools  # type: ignore[union-attr]
        assert "watch-test-pool" in {p.name for p in pools}
        kube.delete(NODE, extra)
        wait_for("the node gone from the cache", lambda: extra not in held(), timeout=30)
        pools = operator_apply.profile(counting, config).pools  # type: ignore[union-attr]
        assert "watch-test-pool" not in {p.name for p in pools}
        assert not [p for p in counting.paths if p.endswith("/nodes")], counting.paths
    finally:
        watcher.stop()
        kube.delete(NODE, extra)


def test_the_children_are_watched_as_metadata_and_a_deleted_one_is_recreated(
    kube_cluster, kube_namespace
):
    kube = connect(kube_cluster, kube_namespace)
    # a live owner: the garbage collector deletes what names an owner that does not exist
    held = kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}},
                       kube_namespace)  # fmt: skip
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
             "uid": held["metadata"]["uid"]}  # fmt: skip
    labels = {"app.kubernetes.io/managed-by": naming.NAME, naming.EXPERIMENT_LABEL: "exp-c"}
    cm = resource("v1", "ConfigMap")
    seen: list[tuple[str, str | None, dict[str, Any]]] = []
    lock = threading.Lock()

    class Memo(dict):
        __getattr__ = dict.get

    memo = Memo(kube=kube, refresher=Memo(poke=lambda ns, name: seen.append(("poke", name, {}))))
    from surreal_kube.operator import handlers

    def recreate(memo: Any, kind: str, meta: Any) -> None:
        with lock:
            seen.append((kind, meta.get("name"), dict(meta)))

    watchers = handlers.watch_children(memo, [kube_namespace])
    original = handlers._recreate
    handlers._recreate = recreate
    try:
        for w in watchers:
            w.start()
        time.sleep(1.0)
        for name in ("exp-c-config", naming.progress_name("exp-c")):
            kube.create({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v" * 1000},
                         "metadata": {"name": name, "labels": labels,
                                      "ownerReferences": [owner]}}, kube_namespace)  # fmt: skip
        kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "stranger", "ownerReferences": [owner]}},
                    kube_namespace)  # fmt: skip
        kube.delete(cm, "exp-c-config", kube_namespace)
        kube.delete(cm, "stranger", kube_namespace)
        wait_for("the deletion", lambda: any(k == "ConfigMap" for k, _, _ in seen))
        time.sleep(1.0)
        with lock:
            deleted = [(n, m) for k, n, m in seen if k == "ConfigMap"]
            poked = [n for k, n, _ in seen if k == "poke"]
        assert [n for n, _ in deleted] == ["exp-c-config"]  # not the unlabelled one
        meta = deleted[0][1]
        assert meta["ownerReferences"][0]["uid"] == owner["uid"]
        assert poked == ["exp-c"]  # the progress record, not the config
    finally:
        handlers._recreate = original
        for w in watchers:
            w.stop()


def test_a_metadata_watch_carries_no_spec_or_data(kube_cluster, kube_namespace):
    kube = connect(kube_cluster, kube_namespace)
    cm = resource("v1", "ConfigMap")
    _, version = kube_watch.list_with_version(kube, cm, kube_namespace, "", metadata_only=True)
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"},
                 "metadata": {"name": "meta-only"}}, kube_namespace)  # fmt: skip
    for kind, obj in kube.watch(
        cm, kube_namespace, resource_version=version, timeout=5, metadata_only=True
    ):
        if obj["metadata"].get("name") == "meta-only":
            assert kind == "ADDED"
            assert obj["kind"] == "PartialObjectMetadata" and "data" not in obj
            break
    else:
        raise AssertionError("no event of the ConfigMap")
    listed, _ = kube_watch.list_with_version(kube, cm, kube_namespace, "", metadata_only=True)
    found = [o for o in listed if o["metadata"]["name"] == "meta-only"]
    assert found and "data" not in found[0]
