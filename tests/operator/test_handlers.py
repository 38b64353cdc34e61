"""The kopf handlers themselves, called as kopf calls them."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest

from surreal_kube.operator import apply, handlers
from surreal_kube.operator.config import Config


class _Refresher:
    def __init__(self) -> None:
        self.poked: list[tuple[str, str]] = []

    def poke(self, namespace: str, name: str) -> None:
        self.poked.append((namespace, name))


def _experiment(generation: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "surreal.ai/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "exp", "namespace": "ns", "generation": generation, "uid": "u"},
        "spec": {},
    }
    if status is not None:
        obj["status"] = status
    return obj


APPLIED = {"type": "Applied", "status": "True", "reason": "Applied", "message": "22 objects"}


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The generations `apply_experiment` was called for (it touches no cluster here)."""
    seen: list[int] = []

    def fake(kube: Any, obj: dict[str, Any], config: Any) -> list[str]:
        seen.append(obj["metadata"]["generation"])
        return []

    monkeypatch.setattr(apply, "apply_experiment", fake)
    return seen


def _call(obj: dict[str, Any], reason: str) -> _Refresher:
    memo = kopf.Memo(kube=None, config=Config(), refresher=_Refresher())
    handlers.apply_spec(
        body=obj, memo=memo, logger=logging.getLogger("test"), reason=kopf.Reason(reason)
    )
    return memo.refresher


def test_a_create_replayed_after_its_objects_were_applied_applies_nothing(
    applied: list[int],
) -> None:
    """In a 10,000-agent create kopf ran the create handler twice for one generation: the
    second applied all 22 objects again while the cluster created the first's pods."""
    replayed = _experiment(1, {"observedGeneration": 1, "conditions": [APPLIED]})
    _call(replayed, "create")
    assert applied == []


def test_a_create_applies_and_a_resume_or_a_new_generation_applies_again(
    applied: list[int],
) -> None:
    refresher = _call(_experiment(1), "create")
    assert applied == [1] and refresher.poked == [("ns", "exp")]
    # an operator start converges what is there even when its generation was applied before
    _call(_experiment(1, {"observedGeneration": 1, "conditions": [APPLIED]}), "resume")
    # a refused generation (Applied=False) or one not observed yet is applied
    refused = {**APPLIED, "status": "False"}
    _call(_experiment(2, {"observedGeneration": 2, "conditions": [refused]}), "create")
    _call(_experiment(3, {"observedGeneration": 2, "conditions": [APPLIED]}), "create")
    assert applied == [1, 1, 2, 3]


def test_after_the_warm_up_the_first_render_compiles_nothing() -> None:
    """The operator's first create compiled every template (0.15-0.3 s) before the first
    StatefulSet left, with the cluster idle; the operator's start does it now."""
    import subprocess
    import sys

    script = """
import jinja2
from surreal_kube.operator.apply import warm_up
from surreal_kube.launch.kube.render.objects import render_experiment
from tests.launch.kube.specs import IMAGES, experiment
warm_up()
compiled = []
real = jinja2.Environment._compile
jinja2.Environment._compile = lambda self, *a, **k: compiled.append(a) or real(self, *a, **k)
assert render_experiment(experiment("thousand-agents"), "rl", images=IMAGES)
print(len(compiled))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "0", out.stderr


def test_kopf_watches_experiments_alone() -> None:
    # py-spy on the operator during a 10,000-agent create: kopf's diff-base copy of every
    # StatefulSet status event (the child-deleted handlers were kopf event handlers) was a
    # quarter of the operator's CPU; the children are now watched as metadata by `Watcher`
    registry = handlers.register(kopf.OperatorRegistry())
    watched = {
        (h.selector.group, h.selector.plural or h.selector.any_name)
        for reg in (registry._watching, registry._changing, registry._spawning)
        for h in reg.get_all_handlers()
    }
    assert watched == {("surreal.ai", "experiments")}
