"""The operator and a finished run, against the test control plane: its apply and status (in this
process) must not scale a finished experiment's workloads back up, and reports it Succeeded.

Before, an operator restart (kopf resumes every Experiment: apply again), a spec edit or a resync
recreating a deleted workload re-applied the spec's replica counts: the pods tensorplex had
released at the end of the run came back, billed and doing nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from surreal_kube.experiment import progress
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import EXPERIMENT, resource
from surreal_kube.launch.kube.profile import load_profile
from surreal_kube.launch.kube.render.custom_resource import experiment_object
from surreal_kube.operator import apply as operator_apply
from surreal_kube.operator import status as operator_status
from surreal_kube.operator.config import Config
from tests.launch.kube.reporter_support import write_progress
from tests.operator.support import (
    SPEC_IMAGES,
    TINY,
    connect,
    ensure_crd,
    objects_of,
    profile_file,
    wait_for,
)

pytestmark = pytest.mark.cluster

STS = resource("apps/v1", "StatefulSet")
DEPLOY = resource("apps/v1", "Deployment")


def replicas(kube: Any, name: str) -> dict[str, int]:
    return {
        o["metadata"]["name"]: o["spec"]["replicas"] for o in objects_of(kube, name, [DEPLOY, STS])
    }


def test_a_finished_experiment_is_not_scaled_back_up_and_is_succeeded(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-done"
    kube = connect(kube_cluster, ns)
    ensure_crd(kube)
    sets = [*SPEC_IMAGES, *(a for a in TINY if a != "--set"), "agents.count=2"]
    obj = kube.apply(experiment_object(resolve_experiment(name, sets=sets), ns))
    config = Config(profile=load_profile(profile_file(tmp_path)), read_nodes=False)
    operator_apply.apply_experiment(kube, obj, config)
    # agents and evals start once the learner is Ready (apply.learner_first): apply again then,
    # as the operator does on the learner pod's event
    learner = naming.object_name(name, "learner")
    wait_for(
        "the learner Ready",
        lambda: (kube.get(DEPLOY, learner).get("status") or {}).get("readyReplicas"),
    )
    operator_apply.apply_experiment(kube, kube.get(EXPERIMENT, name), config)
    running = replicas(kube, name)
    assert running[f"{name}-agents"] == 2 and running[f"{name}-learner"] == 1

    # tensorplex ends the run: results, a finished record, every workload scaled to 0
    write_progress(
        kube_cluster,
        kube,
        name,
        ns,
        tmp_path,
        progress.Record(state="finished", reason="reached 1000 env steps", last_return=9.5),
    )
    for workload in running:
        res = STS if workload.endswith(("-agents", "-evals")) else DEPLOY
        kube.patch(res, workload, {"spec": {"replicas": 0}}, sub="scale")

    # an operator restart applies again; a deleted workload is recreated: all at 0
    operator_apply.apply_experiment(kube, kube.get(EXPERIMENT, name), config)
    assert set(replicas(kube, name).values()) == {0}
    kube.delete(DEPLOY, naming.object_name(name, "learner"))
    assert operator_apply.ensure(kube, kube.get(EXPERIMENT, name), config) == [
        f"Deployment/{name}-learner"
    ]
    assert set(replicas(kube, name).values()) == {0}

    st = operator_status.refresh(kube, ns, name, config)
    assert st is not None and st.phase == "Succeeded"
    reported = kube.get(EXPERIMENT, name)["status"]
    assert reported["phase"] == "Succeeded" and reported["evalReturn"] == 9.5
    assert reported["reason"].startswith("finished: reached 1000 env steps; final return 9.50")
    conditions = {c["type"]: c for c in reported["conditions"]}
    assert conditions["Succeeded"]["status"] == "True"
    assert conditions["Succeeded"]["reason"] == "BudgetReached"
    # the phase alone holds it too (the record's ConfigMap could be gone): still 0, Succeeded
    kube.delete(resource("v1", "ConfigMap"), naming.progress_name(name))
    operator_apply.apply_experiment(kube, kube.get(EXPERIMENT, name), config)
    assert set(replicas(kube, name).values()) == {0}
    assert operator_status.refresh(kube, ns, name, config).phase == "Succeeded"  # type: ignore[union-attr]
