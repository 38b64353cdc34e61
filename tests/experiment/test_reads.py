"""What each component reads of the spec: the table matches the code, digests roll the right pods."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from surreal_kube.experiment.reads import (
    COMPONENT_READS,
    changed_components,
    config_digest,
    describe_changes,
)
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.experiment.spec import ExperimentSpec
from surreal_kube.rl import factory

RUNTIME = Path(__file__).resolve().parents[2] / "surreal_kube" / "runtime"
MODULE_COMPONENT = {
    "agent.py": "agent",
    "eval.py": "eval",
    "learner.py": "learner",
    "replay.py": "replay",
    "ps.py": "ps",
    "tensorplex.py": "tensorplex",
    "conductor.py": "tensorplex",  # tensorplex's: it ends a run that has a budget
    "loggerplex.py": "loggerplex",
    "tensorboard.py": "tensorboard",
}
SECTIONS = set(ExperimentSpec.model_fields)


class Recorder:
    """Stands in for the spec and notes which top-level sections are read."""

    def __init__(self, spec: ExperimentSpec) -> None:
        self._spec, self.read = spec, set()

    def __getattr__(self, name: str) -> Any:
        if name in SECTIONS:
            self.read.add(name)
        return getattr(self._spec, name)


def factory_reads(algorithm: str) -> dict[str, set[str]]:
    """The sections each rl.factory function reads, by calling it."""
    spec = resolve_experiment("exp-reads", flags={"algorithm.name": algorithm}).spec
    obs = gym.spaces.Box(-1, 1, (3,), np.float32)
    act = gym.spaces.Box(-1, 1, (2,), np.float32)
    calls = {
        "make_actor": lambda s: factory.make_actor(s, 0, "train", obs, act),
        "actor_seed": lambda s: factory.actor_seed(s, 0),
        "make_learner": lambda s: factory.make_learner(s, obs, act, device="cpu"),
        "learner_batch_size": factory.learner_batch_size,
        "make_replay": factory.make_replay,
        "replay_ready": lambda s: factory.replay_ready(s, 0),
    }
    out = {}
    for name, call in calls.items():
        rec = Recorder(spec)
        call(rec)
        out[name] = rec.read
    return out


@pytest.mark.parametrize("algorithm", ["ppo", "ddpg"])
@pytest.mark.parametrize("module", sorted(MODULE_COMPONENT))
def test_every_section_a_role_reads_is_declared(module: str, algorithm: str) -> None:
    text = (RUNTIME / module).read_text()
    read = {m for m in re.findall(r"(?:ctx\.spec|\bspec)\.(\w+)", text) if m in SECTIONS}
    for name, sections in factory_reads(algorithm).items():
        if re.search(rf"\b{name}\(", text):
            read |= sections
    declared = {entry.split(".")[0] for entry in COMPONENT_READS[MODULE_COMPONENT[module]]}
    undeclared = read - declared
    assert not undeclared, f"{module} reads {sorted(undeclared)}: declare it in COMPONENT_READS"


@pytest.mark.parametrize("module", sorted(MODULE_COMPONENT))
def test_a_section_declared_by_its_fields_is_read_by_those_fields_only(module: str) -> None:
    """Before, tensorplex (its conductor) read evals.episodes, evals.intervalSeconds and
    agents.batch while it declared only the counts: an edit of those left it running stale."""
    entries = COMPONENT_READS[MODULE_COMPONENT[module]]
    whole = {e for e in entries if "." not in e}
    fields = {e for e in entries if "." in e}
    text = (RUNTIME / module).read_text()
    read = set()
    for section, field in re.findall(r"(?:ctx\.spec|\bspec)\.(\w+)\.(\w+)", text):
        if section in SECTIONS and section not in whole:
            for name in DERIVED.get((section, field), (field,)):
                read.add(f"{section}.{_camel(name)}")
    undeclared = read - fields
    assert not undeclared, f"{module} reads {sorted(undeclared)}: declare it in COMPONENT_READS"


DERIVED = {("agents", "groups"): ("count", "batch")}
"""Properties of the spec and the fields they read."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def exp(**sets: Any) -> Any:
    return resolve_experiment("exp-reads", sets=[f"spec.{k}={v}" for k, v in sets.items()])


def test_an_eval_setting_restarts_only_evals_and_what_waits_for_them() -> None:
    before, after = exp(), exp(**{"evals.episodes": 7})
    assert changed_components(before, after) == {
        "eval": ["evals"],
        "tensorplex": ["evals.episodes"],  # the final evaluation of a budget's end
    }
    assert config_digest(before, "learner") == config_digest(after, "learner")
    assert config_digest(before, "eval") != config_digest(after, "eval")


def test_scaling_restarts_only_what_sizes_itself_by_the_count() -> None:
    before, after = exp(), exp(**{"agents.count": 8, "evals.count": 2})
    assert changed_components(before, after) == {"tensorplex": ["agents.count", "evals.count"]}


def test_a_hyper_parameter_restarts_the_learner_and_says_so() -> None:
    before, after = exp(), exp(**{"algorithm.lrPolicy": 0.001})
    changes = changed_components(before, after)
    assert set(changes) == {"learner", "agent", "eval", "replay"}
    assert describe_changes(changes).startswith("learner (algorithm changed); agent (")
