"""What the operator writes to an Experiment's status (operator/status.py): patches,
conditions, and the spec's shape kept per generation."""

from __future__ import annotations

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.operator import status


def test_status_patch_nulls_what_disappeared_and_recurses_into_maps() -> None:
    old = {
        "phase": "Running",
        "components": {"agents": {"ready": 2}, "evals": {"ready": 1}},
        "conditions": [{"type": "Ready"}],
    }
    new = {"phase": "Running", "components": {"agents": {"ready": 4}}, "conditions": []}
    assert status.status_patch(old, new) == {
        "components": {"agents": {"ready": 4}, "evals": None},
        "conditions": [],
    }
    assert status.status_patch(new, new) == {}


def test_conditions_keep_their_transition_time_while_unchanged() -> None:
    old = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    same = status.merge_conditions(old, [status.condition("Ready", "True", "Running", "ok")])
    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = status.merge_conditions(old, [status.condition("Ready", "False", "Pending", "")])
    assert flipped[0]["lastTransitionTime"] != "2026-01-01T00:00:00Z"
    both = status.merge_conditions(old, [status.condition("Applied", "True", "Applied", "")])
    assert [c["type"] for c in both] == ["Applied", "Ready"]


def test_a_refresh_resolves_a_spec_once_per_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolving the spec and building its topology was half of each status refresh's CPU
    while 1,022 pods started; the spec changes only with the object's generation."""
    from surreal_kube.launch.kube.render import custom_resource

    exp = resolve_experiment("exp-shape", sets=["agents.count=40", "agents.batch=10"])
    obj = custom_resource.experiment_object(exp, "ns")
    obj["metadata"].update(uid="uid-1", generation=1)
    resolved: list[str] = []
    real = custom_resource.resolve_object
    monkeypatch.setattr(
        custom_resource,
        "resolve_object",
        lambda o: resolved.append(o["metadata"]["uid"]) or real(o),
    )
    first = status.shape_of(obj)
    assert first.desired["agents"] == 4 and first.agents_per_pod == 10
    assert status.shape_of(obj) == first and resolved == ["uid-1"]
    # an edit: a new generation is resolved again
    obj["spec"]["agents"]["count"] = 80
    obj["metadata"]["generation"] = 2
    assert status.shape_of(obj).desired["agents"] == 8 and len(resolved) == 2
    # bounded: the oldest shapes go first
    monkeypatch.setattr(status, "SHAPES_KEPT", 3)
    for uid in ("a", "b", "c", "d"):
        status.shape_of({**obj, "metadata": {**obj["metadata"], "uid": uid}})
    assert len(status._shapes) == 3 and ("a", 2) not in status._shapes
