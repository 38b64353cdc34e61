"""Shards as pods of their own (`layout: pods`) on the real test control plane with kwok pools.

Sixteen replay shards and four parameter shards of one experiment: each shard its own pod with
its own resources, spread over the four cpu-pool nodes (one pod's containers would all share
one node); every collector address an agent dials is one shard pod's own name under the
group's headless Service, which the EndpointSlice controller backs with exactly that pod; the
shards' disruption budgets hold all of them; one delete of the root removes everything.
"""

from __future__ import annotations

from collections import Counter

import pytest

from surreal_kube.launch.kube.api.client import Kube
from surreal_kube.launch.kube.lifecycle.apply import create_objects
from surreal_kube.launch.kube.placement.pools import discover_pools
from surreal_kube.launch.kube.render.objects import render_experiment
from tests.launch.kube.specs import IMAGES, TINY, experiment
from tests.operator.support import wait_for

pytestmark = pytest.mark.cluster

SHARDS = 16
NAME = "exp-matrix"
POOL_LABEL = "cloud.google.com/gke-nodepool"


def test_sixteen_shard_pods_spread_over_nodes_each_dialled_by_its_own_name(
    kube: Kube, kube_namespace: str
) -> None:
    exp = experiment(
        "shard-pods",
        extra=[*TINY, f"replay.shards={SHARDS}", "ps.shards=4", "agents.count=2", "evals.count=0"],
    )
    objects = render_experiment(exp, kube_namespace, images=IMAGES, profile=discover_pools(kube))
    create_objects(kube, objects, kube_namespace)
    pods_res = kube.resource_for("v1", "Pod")
    # learner replay ps tensorplex loggerplex tensorboard, the shards, the agents
    expected = 6 + SHARDS + 4 + 2

    def running() -> list[dict]:
        pods = kube.list(pods_res, kube_namespace, labels=f"surreal.ai/experiment={NAME}")
        ok = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return pods if len(pods) == expected == len(ok) else []

    pods = wait_for("every pod Running", running, timeout=120)
    nodes = {n["metadata"]["name"]: n for n in kube.list(kube.resource_for("v1", "Node"), None)}
    cpu_nodes = sorted(
        n for n, o in nodes.items() if o["metadata"]["labels"].get(POOL_LABEL) == "cpu-pool"
    )
    shards = [
        p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/component"] == "replay-shard"
    ]
    assert len(shards) == SHARDS
    per_node = Counter(p["spec"]["nodeName"] for p in shards)
    assert sorted(per_node) == cpu_nodes, per_node  # every node of the pool holds some
    assert max(per_node.values()) - min(per_node.values()) <= 1, per_node  # and evenly
    for pod in shards:  # each with its own resources, not a share of one pod's
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["requests"]["cpu"] == "10m"
        ordinal = pod["metadata"]["name"].rsplit("-", 1)[1]
        assert pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == ordinal
        assert pod["spec"]["hostname"] == pod["metadata"]["name"]
        assert pod["spec"]["subdomain"] == f"{NAME}-replay-shard"

    # every collector an agent dials: <pod>.<headless service>, backed by exactly that pod
    agents = next(
        o
        for o in objects
        if o["kind"] == "StatefulSet" and o["metadata"]["name"] == f"{NAME}-agents"
    )
    env = {
        e["name"]: e.get("value")
        for e in agents["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    slices_res = kube.resource_for("discovery.k8s.io/v1", "EndpointSlice")
    service = f"{NAME}-replay-shard"

    def endpoints() -> dict[str, dict]:
        slices = kube.list(
            slices_res, kube_namespace, labels=f"kubernetes.io/service-name={service}"
        )
        found = {
            e["hostname"]: {"pod": e["targetRef"]["name"], "ports": [p["port"] for p in s["ports"]]}
            for s in slices
            for e in s.get("endpoints") or []
        }
        return found if len(found) == SHARDS else {}

    backing = wait_for(f"EndpointSlices of {service}", endpoints, timeout=120)
    for i in range(SHARDS):
        host, port = env[f"SURREAL_REPLAY_COLLECTOR_{i}_ADDR"].split("://")[1].rsplit(":", 1)
        pod_name, headless, namespace, *_ = host.split(".")
        assert (headless, namespace) == (service, kube_namespace)
        assert backing[pod_name] == {"pod": f"{NAME}-replay-shard-{i}", "ports": [int(port)]}

    budgets = kube.resource_for("policy/v1", "PodDisruptionBudget")
    for group, count in (("replay-shard", SHARDS), ("ps-shard", 4)):
        budget = kube.get(budgets, f"{NAME}-{group}", kube_namespace)
        assert budget["spec"]["minAvailable"] == count

    kube.delete(
        kube.resource_for("v1", "ConfigMap"),
        f"{NAME}-config",
        kube_namespace,
        propagation="Background",
    )

    def gone() -> bool:
        return not kube.list(
            pods_res, kube_namespace, labels=f"surreal.ai/experiment={NAME}"
        ) and not kube.list(
            kube.resource_for("apps/v1", "StatefulSet"),
            kube_namespace,
            labels=f"surreal.ai/experiment={NAME}",
        )

    wait_for("everything garbage-collected", gone, timeout=120)
