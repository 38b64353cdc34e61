"""The spec: layering, defaults per algorithm, and precise errors for bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import dump_yaml, load_experiment_file, resolve_experiment
from surreal_kube.experiment.spec import COMPONENTS


def test_no_file_is_a_complete_experiment() -> None:
    exp = resolve_experiment("exp-ppo-ant", flags={"algorithm.name": "ppo", "env.id": "gym:Ant-v5"})
    spec = exp.spec
    assert exp.api_version == "surreal.ai/v1alpha1" and exp.kind == "Experiment"
    assert spec.algorithm.name == "ppo"
    assert spec.algorithm.gamma == 0.99 and spec.algorithm.lam == 0.95
    assert spec.algorithm.clip_epsilon == 0.2 and spec.algorithm.clip_range == (0.05, 0.3)
    assert spec.algorithm.kl_target == 0.015
    assert spec.algorithm.epochs_policy == 10 and spec.algorithm.epochs_baseline == 10
    assert (spec.algorithm.horizon, spec.algorithm.stride) == (25, 20)
    assert spec.replay.kind == "fifo"
    # every component of the default graph has its resources written out; shard pods exist
    # only with `layout: pods`, and their defaults apply when they do
    assert set(spec.resources) == {g.component for g in exp.topology.groups}
    assert set(spec.resources) | {"replay-shard", "ps-shard"} == set(COMPONENTS)


def test_ddpg_defaults_follow_the_reference() -> None:
    spec = resolve_experiment("exp-ddpg", flags={"algorithm.name": "ddpg"}).spec
    assert spec.algorithm.name == "ddpg"
    assert spec.algorithm.batch_size == 512 and spec.algorithm.n_step == 3
    assert spec.algorithm.gamma == 0.99
    assert (spec.algorithm.lr_actor, spec.algorithm.lr_critic) == (1e-4, 1e-3)
    assert spec.algorithm.noise.theta == 0.15
    assert spec.replay.kind == "uniform" and spec.replay.start_sampling == 3000


def test_layering_later_wins(tmp_path: Path) -> None:
    base = tmp_path / "a.yaml"
    base.write_text("spec:\n  agents: {count: 4, batch: 2}\n  evals: {count: 3}\n")
    over = tmp_path / "b.yaml"
    over.write_text("agents:\n  count: 6\n")  # a bare spec is accepted too
    exp = resolve_experiment(
        "exp",
        spec_files=[base, over],
        flags={"agents.batch": 3},
        sets=["spec.evals.count=5", "replay.shards=2"],
    )
    assert exp.spec.agents.count == 6  # second file beats the first
    assert exp.spec.agents.batch == 3  # flag beats files
    assert exp.spec.evals.count == 5  # --set beats files
    assert exp.spec.replay.shards == 2  # --set without the spec. prefix


def test_set_beats_flags() -> None:
    exp = resolve_experiment("exp", flags={"agents.count": 4}, sets=["agents.count=8"])
    assert exp.spec.agents.count == 8


def test_algorithm_switch_in_file_takes_that_algorithms_defaults(tmp_path: Path) -> None:
    f = tmp_path / "ddpg.yaml"
    f.write_text("spec:\n  algorithm:\n    name: ddpg\n    nStep: 5\n")
    spec = resolve_experiment("exp", spec_files=[f]).spec
    assert spec.algorithm.name == "ddpg" and spec.algorithm.n_step == 5
    assert spec.replay.kind == "uniform"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["agents.count=0"], "spec.agents.count: must be >= 1, got 0"),
        (["agents.count=-3"], "spec.agents.count: must be >= 1, got -3"),
        (["evals.count=-1"], "spec.evals.count: must be >= 0, got -1"),
        (["replay.shards=0"], "spec.replay.shards: must be >= 1, got 0"),
        (["agents.count=many"], "spec.agents.count: must be an integer, got 'many'"),
        (["algorithm.gamma=abc"], "spec.algorithm.gamma: must be a number, got 'abc'"),
        (["agents.cuont=3"], "spec.agents.cuont: unknown key 'cuont'; did you mean 'count'?"),
        (["algorithm.gama=0.9"], "spec.algorithm.gama: unknown key 'gama'; did you mean 'gamma'?"),
        (["sesion.seed=1"], "spec.sesion: unknown key 'sesion'; did you mean 'session'?"),
        (["resources.lerner.cpu=1"], "unknown component 'lerner'; did you mean 'learner'?"),
        (["resources.learner.memory=lots"], "'lots' is not a Kubernetes quantity"),
        (["algorithm.name=dqn"], "spec.algorithm.name: unknown algorithm 'dqn'"),
        (["env.id=Ant-v5"], "spec.env.id: must look like 'gym:<gymnasium id>'"),
        (
            ["agents.count=6", "agents.batch=4"],
            "spec.agents.batch: must divide agents.count (6), got 4",
        ),
        (["replay.kind=uniform"], "spec.replay.kind: ppo is on-policy and needs 'fifo'"),
        (
            ["replay.startSampling=10", "replay.capacity=5"],
            "spec.replay.startSampling: must be <= replay.capacity (5), got 10",
        ),
        (["evals.mode=greedy"], "spec.evals.mode: must be one of 'deterministic' or 'stochastic'"),
        (["agents=3"], "spec.agents: must be a mapping, got 3"),
        (["novalue"], "expected KEY=VALUE"),
    ],
)
def test_bad_specs_name_the_field_and_the_rule(sets: list[str], message: str) -> None:
    with pytest.raises(SpecError) as info:
        resolve_experiment("exp", sets=sets)
    assert message in str(info.value)
    assert "Traceback" not in str(info.value)


def test_missing_file() -> None:
    with pytest.raises(SpecError, match=re.escape("spec file '/nonexistent.yaml' does not exist")):
        resolve_experiment("exp", spec_files=["/nonexistent.yaml"])


def test_invalid_yaml_shows_line_and_column(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("spec:\n  agents:\n    count: [1, 2\n  evals: {}\n")
    with pytest.raises(SpecError) as info:
        resolve_experiment("exp", spec_files=[f])
    assert str(info.value).startswith(f"{f}: invalid YAML at line 4, column")


def test_file_must_be_a_mapping(tmp_path: Path) -> None:
    f = tmp_path / "list.yaml"
    f.write_text("- a\n- b\n")
    with pytest.raises(SpecError, match="must be a mapping"):
        resolve_experiment("exp", spec_files=[f])


def test_file_name_must_agree_with_command_line(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text("metadata: {name: other}\nspec: {}\n")
    with pytest.raises(SpecError, match="names the experiment 'other'"):
        resolve_experiment("exp", spec_files=[f])


def test_resolved_yaml_round_trips(tmp_path: Path) -> None:
    exp = resolve_experiment("exp-rt", flags={"algorithm.name": "ddpg", "agents.count": 3})
    text = dump_yaml(exp)
    path = tmp_path / "config.yml"
    path.write_text(text)
    again = load_experiment_file(path)
    assert dump_yaml(again) == text
    assert yaml.safe_load(text)["spec"]["algorithm"]["nStep"] == 3  # camelCase on the wire


def test_a_prebuilt_image_replaces_the_default_build(tmp_path: Path) -> None:
    exp = resolve_experiment("exp", sets=["images.cpu.image=registry.example/runtime:1.0"])
    assert exp.spec.images["cpu"].image == "registry.example/runtime:1.0"
    assert exp.spec.images["cpu"].build is None
    assert exp.spec.images["gpu"].build is not None  # untouched
    f = tmp_path / "img.yaml"
    f.write_text("spec:\n  images:\n    gpu: {image: 'registry.example/cuda:2'}\n")
    assert (
        resolve_experiment("exp", spec_files=[f]).spec.images["gpu"].image
        == "registry.example/cuda:2"
    )


def test_a_rate_tolerance_with_no_room_for_a_whole_message_is_refused() -> None:
    """Before, only room for a batch was checked: with 40-item messages a shard between its two
    limits could neither take the next message nor serve a batch, and the run stood still."""
    sets = ["spec.agents.flushIteration=40", "spec.replay.rateTolerance=40"]
    with pytest.raises(SpecError, match=r"messages of 40 item\(s\).*use at least 52"):
        resolve_experiment("exp-rate", sets=sets)
    resolve_experiment("exp-rate", sets=[sets[0], "spec.replay.rateTolerance=52"])
    resolve_experiment("exp-rate")  # the defaults fit (PPO: one batch, one item per message)
