"""The Experiment CRD: generated from the spec, structural, checked in where it is installed from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment, to_document
from surreal_kube.experiment.spec import COMPONENTS
from surreal_kube.launch.kube.render import crd
from surreal_kube.launch.kube.render.custom_resource import experiment_object, resolve_object

ROOT = Path(__file__).resolve().parents[2]


def walk(node: Any, path: str = "") -> list[tuple[str, dict]]:
    out = []
    if isinstance(node, dict):
        out.append((path, node))
        for key in ("properties",):
            for name, sub in (node.get(key) or {}).items():
                out += walk(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            out += walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            out += walk(node["additionalProperties"], f"{path}{{}}")
    return out


def test_checked_in_crd_is_current() -> None:
    text = crd.crd_yaml()
    assert (ROOT / "operators" / "crd.yaml").read_text() == text, (
        "operators/crd.yaml is stale: python -m surreal_kube.launch.kube.render.crd > operators/crd.yaml"
    )
    chart = ROOT / "charts" / "surreal-kube" / "crds" / "experiments.surreal.ai.yaml"
    assert chart.read_text() == text, "the chart's CRD differs from operators/crd.yaml"


def test_schema_is_structural() -> None:
    schema = crd.experiment_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        assert "$ref" not in node and "$defs" not in node, path
        assert "oneOf" not in node and "anyOf" not in node, path
        assert "default" not in node, f"{path}: defaults depend on the algorithm"
        typed = (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path


def test_schema_says_what_the_spec_says() -> None:
    spec = crd.spec_schema()
    agents = spec["properties"]["agents"]
    assert agents["properties"]["count"] == {
        "description": "number of agents",
        "type": "integer",
        "maximum": 100000,
        "minimum": 1,
    }
    assert agents["x-kubernetes-validations"] == [crd.AGENTS_RULE]
    # what the resolver refuses beyond types and bounds is a CEL rule where it applies
    assert spec["x-kubernetes-validations"][0]["fieldPath"] == ".replay.kind"
    assert spec["properties"]["replay"]["x-kubernetes-validations"][0]["fieldPath"] == (
        ".startSampling"
    )
    kwargs = spec["properties"]["env"]["properties"]["kwargs"]
    assert kwargs["maxProperties"] == 64
    for key in ("resources", "placement"):
        assert spec["properties"][key]["maxProperties"] == len(COMPONENTS) == 10
        assert (
            "unknown component" in spec["properties"][key]["x-kubernetes-validations"][0]["message"]
        )
    # both algorithms' keys, `name` required
    algo = spec["properties"]["algorithm"]
    assert algo["required"] == ["name"]
    assert algo["properties"]["name"]["enum"] == ["ppo", "ddpg"]
    assert {"clipEpsilon", "nStep", "tau", "lam"} <= set(algo["properties"])
    # quantities as in a pod spec; gt bounds as OpenAPI v3.0 exclusive minimums
    res = spec["properties"]["resources"]["additionalProperties"]["properties"]
    assert res["cpu"]["x-kubernetes-int-or-string"] is True
    gamma = algo["properties"]["gamma"]
    assert gamma["minimum"] == 0 and gamma["exclusiveMinimum"] is True
    # optional fields are nullable
    assert spec["properties"]["env"]["properties"]["maxEpisodeSteps"]["nullable"] is True


def test_printer_columns_status_and_scale() -> None:
    version = crd.experiment_crd()["spec"]["versions"][0]
    names = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert names == [
        "Phase", "Ready", "Agents", "GPUs", "Iteration", "Steps", "Steps/s", "Return", "Age",
    ]  # fmt: skip
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.agents.count"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"].split(".")[1:]
        if path[0] == "status":
            assert path[1] in status, column
    assert status["agentsReady"]["type"] == "integer"


def test_an_experiment_object_round_trips_to_the_same_experiment() -> None:
    exp = resolve_experiment("exp-ddpg", sets=["algorithm.name=ddpg", "agents.count=4"])
    obj = experiment_object(exp, "rl")
    assert obj["metadata"] == {"name": "exp-ddpg", "namespace": "rl"}
    assert to_document(resolve_object(obj)) == to_document(exp)


def test_a_partial_object_gets_its_algorithms_defaults() -> None:
    ddpg = resolve_object({"metadata": {"name": "exp-d"}, "spec": {"algorithm": {"name": "ddpg"}}})
    assert ddpg.spec.replay.kind == "uniform" and ddpg.spec.replay.capacity == 1_000_000
    ppo = resolve_object({"metadata": {"name": "exp-p"}, "spec": {"agents": {"count": 8}}})
    assert ppo.spec.replay.kind == "fifo" and ppo.spec.agents.count == 8


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"agents": {"count": 3, "batch": 2}}, r"agents.batch: must divide agents.count \(3\)"),
        ({"algorithm": {"name": "a2c"}}, "unknown algorithm 'a2c'"),
        ({"agents": {"cuont": 3}}, "unknown key 'cuont'"),
    ],
)
def test_a_bad_object_is_a_spec_error(spec: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        resolve_object({"metadata": {"name": "exp-bad"}, "spec": spec})


def test_crd_yaml_parses_back() -> None:
    doc = yaml.safe_load(crd.crd_yaml())
    assert doc["metadata"]["name"] == "experiments.surreal.ai"
    assert doc["spec"]["names"]["shortNames"] == ["exp", "exps"]
