"""The CRD upgrade path (issue 27 item 5), as docs/kubernetes.md writes it: `helm upgrade` never
touches a chart's crds/, so the new CRD is applied first (`kubectl apply --server-side -f
operators/crd.yaml`), then the chart. An Experiment made under the first chart's CRD keeps
running under this one's, and can still be edited.

The previous CRD is kept as the first chart shipped it (tests/charts/fixtures/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal_kube.launch.kube.api.client import CRD, EXPERIMENT
from tests.operator.support import (
    IMAGES,
    connect,
    ensure_crd,
    profile_file,
    running_operator,
    running_pods,
    wait_for,
)

pytestmark = pytest.mark.cluster

FIRST_CRD = Path(__file__).parent / "fixtures" / "crd-first-chart.yaml"
SMALL = {"cpu": "10m", "memory": "16Mi"}
COMPONENTS = ("learner", "agent", "eval", "replay", "ps", "tensorplex", "loggerplex", "tensorboard")


def served(kube: Any, crd: dict[str, Any]) -> bool:
    got = kube.get(CRD, crd["metadata"]["name"])
    conds = {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []}
    return conds.get("Established") == "True" and kube.has_experiment_crd()


def test_an_experiment_made_under_the_first_crd_runs_on_after_the_upgrade(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    first = yaml.safe_load(FIRST_CRD.read_text())
    try:
        kube.field_manager = "surreal-kube-tests"
        kube.apply(first)
        wait_for("the first chart's CRD served", lambda: served(kube, first), timeout=30)
        # what a user applied then: the keys that CRD knew
        obj = {
            "apiVersion": EXPERIMENT.api_version,
            "kind": "Experiment",
            "metadata": {"name": "exp-old", "namespace": kube_namespace},
            "spec": {
                "env": {"id": "gym:CartPole-v1"},
                "agents": {"count": 2},
                "images": {k: {"image": ref} for k, ref in IMAGES.items()},
                "resources": {c: SMALL for c in COMPONENTS},
            },
        }
        kube.create(obj, kube_namespace)
        ensure_crd(kube)  # the upgrade: this chart's CRD over the first one
        stored = kube.get(EXPERIMENT, "exp-old", kube_namespace)
        assert stored["spec"]["agents"] == {"count": 2}  # nothing lost or rewritten
        with running_operator(
            kube_cluster, kube_namespace, tmp_path, "--profile", str(profile_file(tmp_path))
        ):
            wait_for(
                "Running under the new CRD",
                lambda: (
                    (kube.get(EXPERIMENT, "exp-old").get("status") or {}).get("phase") == "Running"
                ),
                timeout=120,
            )
            # and it can still be edited: the new schema admits the old object's update
            kube.patch(EXPERIMENT, "exp-old", {"spec": {"agents": {"count": 3}}}, kube_namespace)
            wait_for(
                "the third agent",
                lambda: len(running_pods(kube, "exp-old", "agents")) == 3,
                timeout=120,
            )
    finally:
        ensure_crd(kube)  # every later test gets this chart's CRD whatever happened here
