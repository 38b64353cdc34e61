"""Rendering for GKE Autopilot (issue 24 item 3): hardware selectors instead of pools, requests as
Autopilot admits them unchanged, and bad input refused in one line before anything is made.

The policies that check the same renders against a real API server are in
test_autopilot_cluster.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal_kube.errors import SpecError
from surreal_kube.experiment.quantity import parse_cpu, parse_memory
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.autopilot import (
    ACCELERATOR_LABEL,
    ALLOWED_SELECTOR_KEYS,
    COMPUTE_CLASS_LABEL,
    COMPUTE_CLASSES,
    GIB,
    MIB,
    SPOT_LABEL,
    within_ratio,
)
from surreal_kube.launch.kube.plan import make_plan
from surreal_kube.launch.kube.profile import DEFAULT_POOL_LABEL, profile_from_dict

ROOT = Path(__file__).resolve().parents[3]
SK = [sys.executable, "-m", "surreal_kube.cli.main"]
KWOK_POOLS = ROOT / "tests" / "cluster" / "kwok" / "pools.yaml"


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
    }


def autopilot_render(*sets: str, **autopilot: Any) -> dict[str, dict[str, Any]]:
    exp = resolve_experiment("exp-ap", sets=list(sets))
    profile = profile_from_dict({"autopilot": autopilot})
    return pod_specs(make_plan(exp, "rl", profile=profile, images={"cpu": "c", "gpu": "g"}).objects)


def test_discovered_gke_pools_would_select_node_pools_autopilot_refuses() -> None:
    """The defect: with the nodes' pools (what --discover reads on any GKE cluster), every pod
    selects cloud.google.com/gke-nodepool, which Autopilot's admission rejects."""
    exp = resolve_experiment("exp-ap", sets=["resources.learner.gpu=1"])
    pools = yaml.safe_load(KWOK_POOLS.read_text())
    plan = make_plan(exp, "rl", profile=profile_from_dict(pools), images={"cpu": "c", "gpu": "g"})
    selectors = [s.get("nodeSelector") or {} for s in pod_specs(plan.objects).values()]
    assert all(DEFAULT_POOL_LABEL in s for s in selectors)


def test_an_autopilot_render_selects_hardware_never_a_pool() -> None:
    pods = autopilot_render("resources.learner.gpu=1")
    for name, spec in pods.items():
        assert DEFAULT_POOL_LABEL not in (spec.get("nodeSelector") or {}), name
    learner = pods["exp-ap-learner"]
    assert learner["nodeSelector"] == {ACCELERATOR_LABEL: "nvidia-l4"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in learner[
        "tolerations"
    ]
    # CPU pods of the general-purpose class select nothing; the data pods follow the learner
    # onto its GPU node (affinity) and tolerate its taint, selecting no GPU of their own
    assert "nodeSelector" not in pods["exp-ap-agents"]
    tensorplex = pods["exp-ap-tensorplex"]
    assert "nodeSelector" not in tensorplex
    assert [t["key"] for t in tensorplex["tolerations"]] == ["nvidia.com/gpu"]
    assert tensorplex["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


@pytest.mark.parametrize("compute_class", [None, "Balanced", "Scale-Out"])
def test_every_container_is_what_autopilot_admits_unchanged(compute_class: str | None) -> None:
    pods = autopilot_render(
        "resources.agent.memory=256Mi",  # 1 CPU with 0.25 GiB: below every class's ratio
        "resources.replay.memory=12Gi",  # 1 CPU with 12 GiB: above general-purpose's
        "replay.shards=2",
        "ps.shards=2",
        computeClass=compute_class,
    )
    limits = COMPUTE_CLASSES[compute_class or "general-purpose"]
    for name, spec in pods.items():
        assert (spec.get("nodeSelector") or {}).get(COMPUTE_CLASS_LABEL) == compute_class, name
        for c in spec["containers"]:
            res = c["resources"]
            assert res["requests"] == {k: v for k, v in res["limits"].items()}, c["name"]
            cpu = parse_cpu(res["requests"]["cpu"])
            gib = parse_memory(res["requests"]["memory"]) / GIB
            assert limits.min_ratio * cpu <= gib <= limits.max_ratio * cpu, (c["name"], cpu, gib)
            assert parse_memory(res["requests"]["ephemeral-storage"]) >= 256 * MIB
        total = sum(
            parse_memory(c["resources"]["requests"]["ephemeral-storage"])
            for c in spec["containers"]
        )
        assert total <= 10 * GIB


def test_a_pod_below_autopilots_minimum_is_raised_to_it() -> None:
    """Autopilot raises a pod below 50m CPU / 52Mi silently; the render asks for it at once."""
    pods = autopilot_render("resources.agent.cpu=10m", "resources.agent.memory=16Mi")
    (agent,) = pods["exp-ap-agents"]["containers"]
    assert agent["resources"]["requests"]["cpu"] == "50m"
    assert parse_memory(agent["resources"]["requests"]["memory"]) == 52 * MIB


def test_within_ratio_raises_the_smaller_side_as_autopilot_does() -> None:
    general = COMPUTE_CLASSES["general-purpose"]
    assert within_ratio(1000, 256 * MIB, general) == (1000, GIB)  # too little memory
    cpu, memory = within_ratio(250, 8 * GIB, general)  # too much memory: more CPU
    assert memory == 8 * GIB and cpu == 1231 and memory <= cpu * 6.5 * GIB / 1000
    assert within_ratio(1000, 2 * GIB, general) == (1000, 2 * GIB)  # within: unchanged
    scale_out = COMPUTE_CLASSES["Scale-Out"]
    assert within_ratio(1000, GIB, scale_out) == (1000, 4 * GIB)
    cpu, memory = within_ratio(1100, 4 * GIB, scale_out)  # a fixed ratio: CPU in 125m steps
    assert (cpu, memory) == (1125, 4608 * MIB)


def test_spot_pods_are_agents_and_evals_that_keep_no_state() -> None:
    exp = resolve_experiment("exp-ap", sets=[])
    profile = profile_from_dict(
        {
            "autopilot": {"spot": ["agent", "eval"]},
            "experimentVolume": {"accessMode": "ReadWriteMany", "storageClassName": "standard-rwx"},
        }
    )
    specs = pod_specs(make_plan(exp, "rl", profile=profile, images={"cpu": "c"}).objects)
    for name, spec in specs.items():  # only the labels Autopilot lets a pod select
        assert set(spec.get("nodeSelector") or {}) <= set(ALLOWED_SELECTOR_KEYS), name
    for name in ("exp-ap-agents", "exp-ap-evals"):
        assert specs[name]["nodeSelector"] == {SPOT_LABEL: "true"}
        assert any(t["key"] == SPOT_LABEL for t in specs[name]["tolerations"])
    assert "nodeSelector" not in specs["exp-ap-learner"]
    # with the default ReadWriteOnce volume the evals share the learner's (on-demand) node
    ro = pod_specs(
        make_plan(
            exp,
            "rl",
            profile=profile_from_dict({"autopilot": {"spot": ["eval"]}}),
            images={"cpu": "c"},
        ).objects
    )
    assert "nodeSelector" not in ro["exp-ap-evals"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SK, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize(
    ("profile", "sets", "words"),
    [
        ({"autopilot": {}}, ["placement.learner=gpu-pool"], "names a node pool"),
        ({"autopilot": {"accelerator": "nvidia-k80"}}, [], "no GPU model 'nvidia-k80'"),
        ({"autopilot": {}}, ["resources.learner.gpu=3"], "take 1, 2, 4, 8"),
        ({"autopilot": {}, "pools": [{"name": "gpu-pool"}]}, [], "Autopilot has no node pools"),
        (
            {"autopilot": {}, "experimentVolume": {"kind": "hostPath", "path": "/data"}},
            [],
            "refuses hostPath",
        ),
        ({"autopilot": {"spot": ["learner"]}}, [], "may not run on Spot Pods"),
        ({"autopilot": {"computeClass": "Huge"}}, [], "compute class 'Huge'"),
        ({"autopilot": {}}, ["resources.learner.cpu=40"], "above what its general-purpose"),
        ({"autopilot": {}}, ["replay.shards=40"], "ephemeral storage"),
    ],
)
def test_bad_autopilot_input_is_one_line_exit_2(
    tmp_path: Path, profile: dict[str, Any], sets: list[str], words: str
) -> None:
    path = tmp_path / "autopilot.yaml"
    path.write_text(yaml.safe_dump(profile))
    args = [a for s in sets for a in ("--set", s)]
    res = cli("render", "exp-ap", "--profile", str(path), *args)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], res.stderr
    assert res.stdout == ""


def test_placement_refusal_is_a_spec_error() -> None:
    exp = resolve_experiment("exp-ap", sets=["placement.agent=cpu-pool"])
    with pytest.raises(SpecError, match=r"spec\.placement\.agent"):
        make_plan(exp, "rl", profile=profile_from_dict({"autopilot": {}}), images={"cpu": "c"})
