"""GKE Autopilot's admission rules as ValidatingAdmissionPolicies on the test API server (issue 24
item 3): every render of the test matrix is admitted, a render that breaks a rule is refused by
that rule's policy (so each policy is shown to bite), and pre-flight recognises Autopilot.

The policies (tests/cluster/autopilot/admission.yaml, with the GKE pages they encode) bind only
to namespaces labelled surreal.test/autopilot=true; nothing here touches another test's."""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.api.client import CRD, Kube, KubeError, resource
from surreal_kube.launch.kube.autopilot import AUTOPILOT_API_GROUP
from surreal_kube.launch.kube.placement.pools import effective_profile, serves_autopilot
from surreal_kube.launch.kube.plan import make_plan
from surreal_kube.launch.kube.profile import profile_from_dict
from tests.operator.support import TINY

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[3]
POLICIES = list(yaml.safe_load_all((ROOT / "tests/cluster/autopilot/admission.yaml").read_text()))
NAMESPACE = resource("v1", "Namespace")
IMAGES = {"cpu": "localhost/surreal-kube/runtime-cpu:test", "gpu": "localhost/rt-gpu:test"}
WORKLOADS = ("Deployment", "StatefulSet")


@pytest.fixture(scope="module")
def autopilot(kube_cluster: Any) -> Iterator[Kube]:
    """A namespace where the Autopilot policies are in force, and a client in it."""
    ns = kube_cluster.create_namespace("autopilot")
    with Kube(kubeconfig=kube_cluster.kubeconfig, namespace=ns) as kube:
        try:
            kube.patch(NAMESPACE, ns, {"metadata": {"labels": {"surreal.test/autopilot": "true"}}})
            for doc in POLICIES:
                kube.apply(doc)
            # a pod's ServiceAccount must exist for it to be admitted at all (tensorplex's)
            for account in [o for o in render() if o["kind"] == "ServiceAccount"]:
                kube.apply({**account, "metadata": {**account["metadata"], "namespace": ns}})
            # a policy takes effect once the API server has compiled it: wait for one to bite
            bad = pod_of(workloads(render())[0], ns)
            bad["spec"]["hostNetwork"] = True
            deadline = time.monotonic() + 60
            while refusal(kube, bad) is None:
                assert time.monotonic() < deadline, "the Autopilot policies never took effect"
                time.sleep(0.5)
            yield kube
        finally:
            for doc in reversed(POLICIES):
                kind = kube.resource_for(doc["apiVersion"], doc["kind"])
                with contextlib.suppress(KubeError):  # never applied: the setup failed first
                    kube.delete(kind, doc["metadata"]["name"])
            kube_cluster.delete_namespace(ns)


def render(*sets: str, **autopilot: Any) -> list[dict[str, Any]]:
    exp = resolve_experiment("exp-ap", sets=list(sets))
    profile = profile_from_dict({"autopilot": autopilot})
    return make_plan(exp, "default", profile=profile, images=IMAGES).objects


def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in WORKLOADS]


def pod_of(workload: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The pod a workload's controller would create from its template."""
    template = copy.deepcopy(workload["spec"]["template"])
    meta = {**template.get("metadata", {}), "name": f"{workload['metadata']['name']}-0"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def refusal(kube: Kube, obj: dict[str, Any]) -> str | None:
    """The API server's refusal of `obj` (a dry run: nothing is stored), or None if admitted."""
    body = copy.deepcopy(obj)
    body["metadata"]["namespace"] = kube.namespace
    try:
        if body["kind"] == "Pod":
            kube.create(body, dry_run=True)
        else:
            kube.apply(body, dry_run=True)
    except KubeError as exc:
        return str(exc)
    return None


MATRIX = {
    "cpu": ((), {}),
    "gpu learner": (("resources.learner.gpu=1",), {}),
    "gpu learner, 4 x h100": (("resources.learner.gpu=4",), {"accelerator": "nvidia-h100-80gb"}),
    "1,000 agents": (("agents.count=1000", "agents.batch=4"), {}),
    "sharded, Scale-Out, Spot agents": (
        ("replay.shards=4", "ps.shards=2", "resources.agent.memory=256Mi"),
        {"computeClass": "Scale-Out", "spot": ["agent"]},
    ),
    "Balanced, 12Gi replay": (("resources.replay.memory=12Gi",), {"computeClass": "Balanced"}),
    "pods below the minimum": (tuple(a for a in TINY if a != "--set"), {}),
}


@pytest.mark.parametrize("case", list(MATRIX))
def test_every_render_of_the_matrix_is_admitted(autopilot: Kube, case: str) -> None:
    sets, settings = MATRIX[case]
    for workload in workloads(render(*sets, **settings)):
        assert refusal(autopilot, workload) is None, workload["metadata"]["name"]
        pod = pod_of(workload, autopilot.namespace)
        assert refusal(autopilot, pod) is None, pod["metadata"]["name"]


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["containers"][0]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for key in parents:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        node[last] = value

    return edit


def _without_ephemeral(spec: dict[str, Any]) -> None:
    for part in ("requests", "limits"):
        _container(spec)["resources"][part].pop("ephemeral-storage")


def _memory(value: str) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        for part in ("requests", "limits"):
            _container(spec)["resources"][part]["memory"] = value

    return edit


def _cpu(value: str) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        for part in ("requests", "limits"):
            _container(spec)["resources"][part]["cpu"] = value

    return edit


def _gpus(count: int) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        _container(spec)["resources"]["limits"]["nvidia.com/gpu"] = count

    return edit


def _no_accelerator(spec: dict[str, Any]) -> None:
    spec["nodeSelector"].pop("cloud.google.com/gke-accelerator")


def _host_path(spec: dict[str, Any]) -> None:
    spec["volumes"].append({"name": "node", "hostPath": {"path": "/var/lib/kubelet"}})


BROKEN: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    # case: (component, the edit, the policy that refuses it)
    "a pool selector": (
        "agents",
        _set("nodeSelector", {"cloud.google.com/gke-nodepool": "cpu-pool"}),
        "surreal-autopilot-node-selectors",
    ),
    "a GPU without its model": ("learner", _no_accelerator, "surreal-autopilot-gpus"),
    "3 L4 GPUs": ("learner", _gpus(3), "surreal-autopilot-gpus"),
    "no ephemeral storage": ("agents", _without_ephemeral, "surreal-autopilot-requests"),
    "limits above requests": (
        "agents",
        _set("containers.0.resources.limits.cpu", "2"),
        "surreal-autopilot-requests",
    ),
    "1 CPU with 256Mi": ("agents", _memory("256Mi"), "surreal-autopilot-sizes"),
    "40 CPUs": ("agents", _cpu("40"), "surreal-autopilot-sizes"),
    "a hostPath": ("agents", _host_path, "surreal-autopilot-host"),
    "the host's network": ("agents", _set("hostNetwork", True), "surreal-autopilot-host"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_render_that_breaks_a_rule_is_refused_by_its_policy(autopilot: Kube, case: str) -> None:
    group, edit, policy = BROKEN[case]
    objects = workloads(render("resources.learner.gpu=1"))
    workload = next(o for o in objects if o["metadata"]["name"] == f"exp-ap-{group}")
    workload = copy.deepcopy(workload)
    edit(workload["spec"]["template"]["spec"])
    for obj in (workload, pod_of(workload, autopilot.namespace)):
        refused = refusal(autopilot, obj)
        assert refused is not None and f"'{policy}'" in refused, (obj["kind"], refused)


def test_pre_flight_recognises_autopilot_by_its_api_group(kube_cluster: Any) -> None:
    """Autopilot clusters serve auto.gke.io (their workload allowlists); a CRD of that group
    makes the test API server look like one, and taking it away makes it Standard again."""
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"allowlistedworkloads.{AUTOPILOT_API_GROUP}"},
        "spec": {
            "group": AUTOPILOT_API_GROUP,
            "scope": "Cluster",
            "names": {
                "plural": "allowlistedworkloads",
                "singular": "allowlistedworkload",
                "kind": "AllowlistedWorkload",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    with Kube(kubeconfig=kube_cluster.kubeconfig) as kube:
        assert not serves_autopilot(kube)
        standard = effective_profile(kube, None, check_fit=True)
        assert standard is not None and standard.autopilot is None and standard.pools
        kube.apply(crd)
        try:
            deadline = time.monotonic() + 60
            while not serves_autopilot(kube):
                assert time.monotonic() < deadline, "the CRD's group was never served"
                time.sleep(0.2)
            found = effective_profile(kube, None, check_fit=True)
            assert found is not None and found.autopilot is not None and not found.pools
        finally:
            kube.delete(CRD, crd["metadata"]["name"])
            deadline = time.monotonic() + 60
            while serves_autopilot(kube) and time.monotonic() < deadline:
                time.sleep(0.2)
        assert not serves_autopilot(kube)


def test_what_was_rendered_before_for_gke_is_refused_on_autopilot(autopilot: Kube) -> None:
    """The defect: pools as discovered on GKE become `cloud.google.com/gke-nodepool` selectors,
    which Autopilot's admission rejects. Each rule is checked in no fixed order, so the render
    is given the ephemeral storage Autopilot would default, leaving the pool selector the only
    rule it breaks; the same experiment rendered for Autopilot is admitted (the matrix)."""
    pools = yaml.safe_load((ROOT / "tests/cluster/kwok/pools.yaml").read_text())
    exp = resolve_experiment("exp-ap")
    standard = workloads(
        make_plan(exp, "default", profile=profile_from_dict(pools), images=IMAGES).objects
    )
    for workload in standard:
        for c in workload["spec"]["template"]["spec"]["containers"]:
            for part in ("requests", "limits"):
                c["resources"][part]["ephemeral-storage"] = "1Gi"
        refused = refusal(autopilot, workload)
        assert refused and "'surreal-autopilot-node-selectors'" in refused, refused
