"""One plan per create, dry run and reconcile (launch/kube/plan.py), and the profile it carries.

- each stage of the plan runs once: the topology, the image stage, the rendering;
- the CLI's dry run and the operator's reconcile of the Experiment the CLI would write print the
  same objects, byte for byte apart from the owner;
- an Experiment's `spec.profile` reaches the operator's rendering, key by key over the operator's
  own profile; without one the operator's applies; a bad one is refused naming the field;
- on the test cluster, the operator as a process: an Experiment created by `surreal-kube create
  --profile` runs its pods with that profile's volume, pull secrets and pool, and one applied
  without a profile with the operator's.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment, to_document
from surreal_kube.launch.kube import plan as kube_plan
from surreal_kube.launch.kube.plan import make_plan
from surreal_kube.launch.kube.profile import load_profile, merge_profiles, profile_from_dict
from surreal_kube.launch.kube.render import objects as render
from surreal_kube.launch.kube.render.custom_resource import experiment_object, resolve_object
from surreal_kube.launch.kube.render.objects import dump_objects
from surreal_kube.operator import apply as operator_apply
from surreal_kube.operator.config import Config as OperatorConfig

ROOT = Path(__file__).resolve().parents[3]
IMAGES = {
    "cpu": "registry.test/surreal-kube/runtime-cpu:1",
    "gpu": "registry.test/surreal-kube/runtime-cuda:1",
}
IMAGE_ARGS = [arg for key, ref in IMAGES.items() for arg in ("--image", f"{key}={ref}")]
CLI_PROFILE = """\
pools:
  - {name: cpu-pool, count: 4, cpu: "8", memory: 32Gi}
  - {name: gpu-pool, count: 2, cpu: "16", memory: 64Gi, gpus: 4}
imagePullSecrets: [cli-secret]
experimentVolume: {kind: hostPath, path: /srv/cli}
"""
OPERATOR_PROFILE = """\
imagePullSecrets: [operator-secret]
experimentVolume: {kind: emptyDir}
experimentMayOverride: [pools, imagePullSecrets, experimentVolume]
allowHostPath: true
"""
"""An admin's profile that lets Experiments choose their pools, pull secrets and volume."""


def cli(argv: list[str]) -> tuple[int, str, str]:
    """The CLI in this process (so that its calls can be counted): exit code, stdout, stderr."""
    from surreal_kube.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main.run(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    """Counts of the plan's stages: each spy calls the real function and counts the call.

    A stage is spied on in every loaded `surreal_kube` module that holds it by name, so moving
    a caller to a new module (or importing the function by name there) cannot hide a call."""
    import sys

    from surreal_kube.cli import image_options
    from surreal_kube.launch.kube.lifecycle import creating  # noqa: F401  (loaded: spied on)

    counts: collections.Counter[str] = collections.Counter()

    def spy(real: Any) -> None:
        name = real.__name__

        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        holders = [
            module
            for key, module in list(sys.modules.items())
            if key.startswith("surreal_kube") and getattr(module, name, None) is real
        ]
        assert holders, f"{name} is held by no surreal_kube module"
        for module in holders:
            monkeypatch.setattr(module, name, counted)

    spy(render.render_text)  # the rendering: render_experiment's one way in
    # the topology: built once per resolved experiment (Experiment.topology), by validation
    from surreal_kube.experiment import topology

    spy(topology.build_topology)
    spy(image_options.resolve_images)  # the CLI's image stage
    spy(kube_plan.make_plan)
    yield counts


def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "cli.yaml").write_text(CLI_PROFILE)
    (tmp_path / "operator.yaml").write_text(OPERATOR_PROFILE)
    return tmp_path / "cli.yaml", tmp_path / "operator.yaml"


def without_owners(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(objects)
    for obj in out:
        obj["metadata"].pop("ownerReferences", None)
    return out


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
    }


def experiment_volume(pod: dict[str, Any]) -> dict[str, Any]:
    return next(v for v in pod["volumes"] if v["name"] == "experiment")


# --------------------------------------------------------------------------- once


def test_a_dry_run_makes_one_plan_each_stage_once(
    calls: collections.Counter[str], tmp_path: Path
) -> None:
    cli_profile, _ = files(tmp_path)
    argv = ["exp-once", "--profile", str(cli_profile), *IMAGE_ARGS, "--num-agents", "4"]
    code, out, err = cli(["create", *argv, "--dry-run"])
    assert code == 0, err
    assert next(d["kind"] for d in yaml.safe_load_all(out)) == "ConfigMap"
    assert calls == {
        "make_plan": 1,
        "build_topology": 1,
        "resolve_images": 1,
        "render_text": 1,
    }
    calls.clear()
    code, again, err = cli(["render", *argv])
    assert code == 0, err
    assert again == out  # render and create --dry-run print the same plan
    assert calls["render_text"] == 1 and calls["build_topology"] == 1


def test_the_operators_reconcile_renders_once_from_the_same_plan(
    calls: collections.Counter[str], tmp_path: Path
) -> None:
    cli_profile, operator_profile = files(tmp_path)
    sets = ["agents.count=4", "agents.batch=2", "resources.learner.gpu=1"]
    argv = ["exp-same", "-n", "rl", "--profile", str(cli_profile), *IMAGE_ARGS]
    code, printed, err = cli(
        ["create", *argv, *(a for s in sets for a in ("--set", s)), "--dry-run"]
    )
    assert code == 0, err
    # the Experiment `create --profile` writes (images pinned as the CLI chose them)
    exp = resolve_experiment("exp-same", sets=sets)
    planned = make_plan(exp, "rl", profile=load_profile(cli_profile), images=IMAGES)
    obj = experiment_object(planned.exp, "rl", load_profile(cli_profile))
    obj["metadata"]["uid"] = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
    calls.clear()
    # an operator whose own profile differs: the object's profile wins, key by key
    config = OperatorConfig(profile=load_profile(operator_profile), read_nodes=False)
    ours = operator_apply.plan_of(None, obj, config)
    assert calls == {"make_plan": 1, "build_topology": 1, "render_text": 1}
    for obj_ in ours.objects[1:]:
        (ref,) = obj_["metadata"]["ownerReferences"]
        assert ref["kind"] == "Experiment" and ref["uid"] == obj["metadata"]["uid"]
    assert dump_objects(without_owners(ours.objects)) == printed
    pods = pod_specs(ours.objects)
    assert pods["exp-same-learner"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "gpu-pool"}
    assert {p["imagePullSecrets"][0]["name"] for p in pods.values()} == {"cli-secret"}
    assert experiment_volume(pods["exp-same-learner"])["hostPath"]["path"] == "/srv/cli/exp-same"


# --------------------------------------------------------------------------- spec.profile


def test_without_a_profile_the_operators_applies_and_a_partial_one_replaces_its_keys(
    tmp_path: Path,
) -> None:
    _, operator_profile = files(tmp_path)
    config = OperatorConfig(profile=load_profile(operator_profile), read_nodes=False)
    exp = resolve_experiment(
        "exp-kubectl", sets=[f"images.cpu.image={IMAGES['cpu']}", "images.cpu.build=null"]
    )
    obj = experiment_object(exp, "rl")  # as kubectl applies it: no spec.profile
    obj["metadata"]["uid"] = "uid-1"
    assert "profile" not in obj["spec"]
    plain = pod_specs(operator_apply.plan_of(None, obj, config).objects)
    for spec in plain.values():
        assert spec["imagePullSecrets"] == [{"name": "operator-secret"}]
    assert experiment_volume(plain["exp-kubectl-learner"]) == {"name": "experiment", "emptyDir": {}}
    obj["spec"]["profile"] = {"imagePullSecrets": ["mine"]}
    partial = operator_apply.plan_of(None, obj, config)
    assert partial.profile.image_pull_secrets == ["mine"]
    assert partial.profile.experiment_volume.kind == "emptyDir"  # not given: the operator's
    assert to_document(resolve_object(obj)) == to_document(exp)  # the spec the roles read


def test_merge_profiles_is_key_by_key_and_a_bad_profile_names_its_field() -> None:
    base = profile_from_dict(
        {
            "experimentVolume": {"kind": "nfs", "server": "s", "path": "/p"},
            "experimentMayOverride": ["experimentVolume"],
            "allowNfs": True,
        }
    )
    merged = merge_profiles(base, {"experimentVolume": {"kind": "emptyDir"}})
    assert merged is not None and merged.experiment_volume.kind == "emptyDir"
    assert merged.experiment_volume.server is None  # the key is replaced whole
    assert merge_profiles(base, None) is base
    with pytest.raises(
        SpecError, match=r"spec\.profile: experimentVolume: .*kind nfs needs server and path"
    ):
        merge_profiles(None, {"experimentVolume": {"kind": "nfs"}})
    obj = experiment_object(resolve_experiment("exp-bad"), "rl")
    obj["spec"]["profile"] = ["not", "a", "mapping"]
    with pytest.raises(SpecError, match=r"spec\.profile: must be a mapping"):
        operator_apply.plan_of(
            None,
            {**obj, "metadata": {**obj["metadata"], "uid": "u"}},
            OperatorConfig(read_nodes=False),
        )


def test_the_crd_validates_spec_profile_as_a_profile() -> None:
    from surreal_kube.launch.kube.render import crd

    schema = crd.spec_schema()["properties"]["profile"]
    assert schema["type"] == "object"
    assert set(schema["properties"]) >= {"pools", "experimentVolume", "imagePullSecrets"}
    pool = schema["properties"]["pools"]["items"]["properties"]
    assert pool["cpu"]["x-kubernetes-int-or-string"] is True


# --------------------------------------------------------------------------- on the cluster


@pytest.mark.cluster
def test_a_create_through_the_operator_plans_once_here_and_renders_only_in_the_operator(
    kube_cluster: Any,
    kube_namespace: str,
    calls: collections.Counter[str],
    tmp_path: Path,
) -> None:
    from surreal_kube.launch.kube.api.client import EXPERIMENT
    from tests.operator.support import TINY, connect, ensure_crd

    kube = connect(kube_cluster, kube_namespace)
    ensure_crd(kube)
    cli_profile, operator_profile = files(tmp_path)
    name = "exp-counted"
    argv = ["create", name, "-n", kube_namespace, "--profile", str(cli_profile), *IMAGE_ARGS]
    argv += ["--kubeconfig", str(kube_cluster.kubeconfig)]  # in this process: not $KUBECONFIG
    code, _, err = cli([*argv, *TINY, "--no-wait"])
    assert code == 0, err
    assert "through the operator" in err
    # placed and its images chosen here (pre-flight), rendered only by the operator: a render
    # here was a quarter of a second at 10,000 agents before the Experiment left
    assert calls == {"make_plan": 1, "build_topology": 1, "resolve_images": 1}
    # the operator's reconcile of what the CLI applied: one plan, rendered once, with the
    # CLI's profile (its own says otherwise)
    calls.clear()
    obj = kube.get(EXPERIMENT, name)
    config = OperatorConfig(profile=load_profile(operator_profile))
    operator_apply.apply_experiment(kube, obj, config)
    assert calls == {"make_plan": 1, "build_topology": 1, "render_text": 1}
    workloads = [
        o
        for kind in ("Deployment", "StatefulSet")
        for o in kube.list(kube.resource_for("apps/v1", kind), kube_namespace)
    ]
    assert workloads
    for workload in workloads:
        spec = workload["spec"]["template"]["spec"]
        assert spec["imagePullSecrets"] == [{"name": "cli-secret"}]
        (ref,) = workload["metadata"]["ownerReferences"]
        assert ref["uid"] == obj["metadata"]["uid"]


@pytest.mark.cluster
def test_a_direct_create_that_waits_for_running_plans_once(
    kube_cluster: Any, kube_namespace: str, calls: collections.Counter[str], tmp_path: Path
) -> None:
    from tests.operator.support import TINY

    (tmp_path / "p.yaml").write_text("experimentVolume: {kind: emptyDir}\n")
    argv = ["create", "exp-direct", "-n", kube_namespace, "--profile", str(tmp_path / "p.yaml")]
    argv += ["--kubeconfig", str(kube_cluster.kubeconfig), "--direct", *IMAGE_ARGS, *TINY]
    code, out, err = cli(argv)
    assert code == 0, err
    assert "exp-direct is running" in err and out.strip() == "exp-direct"
    # waiting for Running follows the plan's topology: no second one
    assert calls == {
        "make_plan": 1,
        "build_topology": 1,
        "resolve_images": 1,
        "render_text": 1,
    }
