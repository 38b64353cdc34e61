"""Gang admission through Kueue (render/workload.py, operator/apply.py) on a control plane with
a real Kueue (tests/cluster/addons.py): two experiments whose learners together exceed the GPU
quota; the second is Queued whole, with Kueue's reason and no Deployment, StatefulSet or pod of
it, and starts once the first is deleted; a third waits behind it, its position in the queue
moving up as the second is admitted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import EXPERIMENT, Kube, resource
from surreal_kube.launch.kube.render.workload import WORKLOAD
from tests.cluster.fixtures import KueueCluster
from tests.operator.support import (
    IMAGE_ARGS,
    TINY,
    ensure_crd,
    profile_file,
    running_operator,
    sk,
    wait_for,
)

pytestmark = pytest.mark.cluster

POD = resource("v1", "Pod")
HOLDERS = [resource("apps/v1", "Deployment"), resource("apps/v1", "StatefulSet")]


def phase(kube: Kube, name: str) -> tuple[str | None, str]:
    obj = kube.get_or_none(EXPERIMENT, name)
    st = (obj or {}).get("status") or {}
    return st.get("phase"), st.get("reason") or ""


def holders(kube: Kube, name: str) -> list[str]:
    selector = naming.experiment_selector(name)
    found = [o for res in HOLDERS for o in kube.list(res, kube.namespace, labels=selector)]
    return [o["metadata"]["name"] for o in found]


def test_an_experiment_that_exceeds_the_quota_waits_whole_then_starts(
    kueue_cluster: KueueCluster, tmp_path: Path
) -> None:
    ns = kueue_cluster.create_namespace("t-queue")
    try:
        with Kube(kubeconfig=kueue_cluster.kubeconfig, namespace=ns) as kube:
            ensure_crd(kube)
            queue = kueue_cluster.kueue.create_local_queue(ns, "team-a")
            profile = profile_file(tmp_path)

            def create(name: str) -> None:
                res = sk(
                    kueue_cluster,
                    "create", name, "-n", ns, "--no-wait", "--profile", str(profile),
                    *IMAGE_ARGS, *TINY,
                    "--set", "resources.learner.gpu=3",  # two of them: 6 of the quota's 4
                    "--set", f"queue={queue}",
                )  # fmt: skip
                assert res.returncode == 0, res.stderr

            # the operator's profile is the CLI's: an Experiment may not override the volume kind
            with running_operator(kueue_cluster, ns, tmp_path, "--profile", str(profile)):
                create("exp-first")
                wait_for("exp-first Running", lambda: phase(kube, "exp-first")[0] == "Running")
                create("exp-second")
                queued = wait_for(
                    "exp-second Queued",
                    lambda: p if (p := phase(kube, "exp-second"))[0] == "Queued" else None,
                )
                assert queued is not None
                assert queued[1].startswith("queued in team-a (position 1 of 1): ")
                assert "nvidia.com/gpu" in queued[1]
                # and `status` says so, as the Experiment does
                res = sk(kueue_cluster, "status", "exp-second", "-n", ns, "-o", "json")
                assert res.returncode == 0, res.stderr
                shown = json.loads(res.stdout)
                assert shown["phase"] == "Queued"
                assert shown["reason"].startswith("queued in team-a (position 1 of 1): ")
                # waiting whole: its ConfigMap and Services exist, nothing that makes a pod
                assert holders(kube, "exp-second") == []
                pods = kube.list(POD, ns, labels=naming.experiment_selector("exp-second"))
                assert pods == []
                wl = kube.get(WORKLOAD, "exp-second")
                assert {p["name"] for p in wl["spec"]["podSets"]} >= {"learner", "agents"}

                create("exp-third")  # behind exp-second, in Kueue's order (created later)
                wait_for(
                    "exp-third Queued second",
                    lambda: phase(kube, "exp-third")[1].startswith(
                        "queued in team-a (position 2 of 2): "
                    ),
                )

                kube.delete(EXPERIMENT, "exp-first")  # its Workload goes with it (owned)
                wait_for(
                    "exp-second admitted and Running",
                    lambda: phase(kube, "exp-second")[0] == "Running",
                    timeout=180,
                )
                assert holders(kube, "exp-second")
                # 3 GPUs of the quota's 4 are exp-second's: exp-third waits, first in line now
                wait_for(
                    "exp-third moved up",
                    lambda: phase(kube, "exp-third")[1].startswith(
                        "queued in team-a (position 1 of 1): "
                    ),
                )
                assert holders(kube, "exp-third") == []
    finally:
        kueue_cluster.delete_namespace(ns)


def test_a_queued_experiment_cannot_be_created_directly(
    kueue_cluster: KueueCluster, tmp_path: Path
) -> None:
    ns = kueue_cluster.create_namespace("t-queue-direct")
    try:
        res = sk(
            kueue_cluster,
            "create", "exp-direct", "-n", ns, "--direct", "--no-wait",
            "--profile", str(profile_file(tmp_path)), *IMAGE_ARGS, *TINY,
            "--set", "queue=team-a",
        )  # fmt: skip
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().splitlines() == [
            "error: spec.queue 'team-a': a queued experiment waits whole for Kueue's admission, "
            "which the operator manages; --direct: create it through the operator, or leave "
            "spec.queue unset"
        ]
        with Kube(kubeconfig=kueue_cluster.kubeconfig, namespace=ns) as kube:
            assert kube.list(resource("v1", "ConfigMap"), ns, labels="surreal.ai/experiment") == []
    finally:
        kueue_cluster.delete_namespace(ns)
