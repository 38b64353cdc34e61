"""The operator's node cache: slim nodes kept by a list and a watch, so that pools and pending
reasons need no list of every node (on 1,000 nodes, megabytes while the cluster is busiest)."""

from __future__ import annotations

from typing import Any

from surreal_kube.launch.kube.placement.pools import profile_from_nodes
from surreal_kube.operator.nodecache import NodeCache, slim_node
from tests.launch.kube.test_lifecycle_status import NODES, node


def heartbeat(n: dict[str, Any]) -> dict[str, Any]:
    """The same node as a kubelet's status report sends it: only conditions and times moved."""
    out = {**n, "status": {**n["status"], "conditions": [{"type": "Ready", "status": "True"}]}}
    out["metadata"] = {**n["metadata"], "resourceVersion": "99"}
    return out


def test_events_before_the_first_list_wait_for_it() -> None:
    cache = NodeCache()
    cache.observe("ADDED", NODES[0])
    assert cache.nodes() is None  # not listed yet: callers list the nodes themselves
    cache.replace([])
    assert cache.nodes() == ([], 1)  # listed, and empty: an answer


def test_the_generation_moves_only_when_what_is_read_of_a_node_does() -> None:
    cache = NodeCache()
    cache.replace(list(NODES))
    nodes, generation = cache.nodes()  # type: ignore[misc]
    assert sorted(n["metadata"]["name"] for n in nodes) == [
        "cpu-pool-0",
        "gpu-pool-0",
        "gpu-pool-1",
    ]
    cache.observe("MODIFIED", heartbeat(NODES[0]))
    cache.replace([heartbeat(n) for n in NODES])  # a relist of the same nodes
    assert cache.nodes()[1] == generation  # type: ignore[index]
    cache.observe("ADDED", node("gpu-pool-2", "gpu-pool", cpu="16", gpus=4))
    nodes, later = cache.nodes()  # type: ignore[misc]
    assert later > generation and len(nodes) == 4
    cache.observe("DELETED", NODES[0])
    cache.observe("DELETED", NODES[0])  # twice: nothing more to drop
    nodes, last = cache.nodes()  # type: ignore[misc]
    assert last == later + 1 and "cpu-pool-0" not in {n["metadata"]["name"] for n in nodes}
    cache.replace(list(NODES))  # a relist after a gap: a node deleted meanwhile goes too
    assert {n["metadata"]["name"] for n in cache.nodes()[0]} == {  # type: ignore[index]
        "cpu-pool-0",
        "gpu-pool-0",
        "gpu-pool-1",
    }


def test_slim_nodes_give_the_pools_whole_nodes_give() -> None:
    whole = [heartbeat(n) for n in NODES]
    assert profile_from_nodes([slim_node(n) for n in whole]) == profile_from_nodes(whole)
    cordoned = {**NODES[1], "spec": {**NODES[1]["spec"], "unschedulable": True}}
    pools = profile_from_nodes([slim_node(n) for n in (NODES[0], cordoned, NODES[2])]).pools
    assert {p.name: p.count for p in pools} == {"cpu-pool": 1, "gpu-pool": 1}
