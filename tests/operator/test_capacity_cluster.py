"""An experiment the node pools have no room for yet (issue 24 item 2): the operator keeps it
Pending with the reason and retries, instead of a permanent error; when nodes join the pool (as
an autoscaler adds them) it is applied without anyone touching it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from surreal_kube.launch.kube.api.client import EXPERIMENT, NODE, Kube
from tests.cluster import controlplane
from tests.operator.support import (
    IMAGE_ARGS,
    TINY,
    connect,
    ensure_crd,
    running_operator,
    sk,
    wait_for,
)

pytestmark = pytest.mark.cluster

POOL = "burst-pool"
TAINT = {"key": "burst-test", "value": "true", "effect": "NoSchedule"}
"""Nothing of the other tests lands on these nodes."""


def burst_node(i: int) -> dict[str, Any]:
    pool = controlplane.NodePool.from_dict(
        {"name": POOL, "count": i + 1, "cpu": "2", "memory": "4Gi", "taints": [TAINT]}
    )
    return pool.node_manifests()[i]


def condition(kube: Kube, name: str, type_: str) -> dict[str, Any] | None:
    obj = kube.get_or_none(EXPERIMENT, name) or {}
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def test_an_experiment_without_room_waits_for_nodes_then_is_applied(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    ensure_crd(kube)
    added: list[str] = []
    try:
        kube.create(burst_node(0))  # 2 CPUs: not enough for 3 agents of 1 CPU
        added.append(f"{POOL}-0")
        with running_operator(kube_cluster, kube_namespace, tmp_path):
            res = sk(
                kube_cluster,
                "create", "exp-burst", "-n", kube_namespace, "--no-wait", "--skip-preflight",
                *IMAGE_ARGS, *TINY,
                "--set", "agents.count=3", "--set", "resources.agent.cpu=1",
                "--set", f"placement.agent={POOL}",
            )  # fmt: skip
            assert res.returncode == 0, res.stderr
            waiting = wait_for(
                "the operator to say it waits for capacity",
                lambda: (
                    (c := condition(kube, "exp-burst", "Applied"))
                    and c["reason"] == "WaitingForCapacity"
                    and c
                ),
                timeout=60,
            )
            assert waiting["status"] == "False"
            assert "waiting for capacity: cannot place agents" in waiting["message"], waiting
            obj = kube.get(EXPERIMENT, "exp-burst")
            assert obj["status"]["phase"] == "Pending"  # not Failed: it passes
            for i in (1, 2):  # the pool grows, as an autoscaler would grow it
                kube.create(burst_node(i))
                added.append(f"{POOL}-{i}")
            wait_for(
                "the experiment applied on its own once the pool has room",
                lambda: (c := condition(kube, "exp-burst", "Applied")) and c["status"] == "True",
                timeout=120,
            )
    finally:
        for name in added:
            kube.delete(NODE, name)
