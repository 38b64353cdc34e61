"""The names naming.py gives an experiment's objects are those the name check measured."""

from __future__ import annotations

from surreal_kube.experiment.names import EXPERIMENT_OBJECTS
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.render.objects import render_experiment
from tests.launch.kube.specs import IMAGES, experiment


def test_the_experiments_own_objects_are_named_from_the_one_list() -> None:
    named = {
        naming.config_name("e"),
        naming.data_name("e"),
        naming.progress_name("e"),
        naming.results_name("e"),
        naming.reporter_name("e"),
        naming.curve_name("e"),
    }
    assert named == {naming.object_name("e", s) for s, _ in EXPERIMENT_OBJECTS}


def test_every_rendered_object_has_a_measured_name() -> None:
    exp = experiment("eight-agents-batch4-gpu")
    suffixes = {s for s, _ in exp.topology.derived_name_suffixes()}
    for obj in render_experiment(exp, "rl", images=IMAGES):
        name = obj["metadata"]["name"]
        assert name.removeprefix(exp.metadata.name) in suffixes, (obj["kind"], name)


def test_a_replicated_groups_pods_are_named_by_ordinal() -> None:
    assert naming.pod_name("exp", "agents", 3) == "exp-agents-3"
