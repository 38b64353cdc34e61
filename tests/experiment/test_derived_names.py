"""One list of the names derived from an experiment's: the name check measures every object the
Kubernetes backend names, the experiment's own objects (`-config`, `-progress`, `-reporter`...)
as well as its workloads."""

from __future__ import annotations

import pytest

from surreal_kube.errors import InvalidNameError
from surreal_kube.experiment.names import EXPERIMENT_OBJECTS, MAX_LENGTH, validate_name
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.experiment.topology import Group, Topology


def test_the_name_check_measures_the_experiments_own_objects() -> None:
    suffixes = {s for s, _ in resolve_experiment("exp").topology.derived_name_suffixes()}
    assert {"-config", "-data", "-progress", "-results", "-reporter"} <= suffixes
    assert {f"-{s}" for s, _ in EXPERIMENT_OBJECTS} <= suffixes


@pytest.mark.parametrize("suffix", ["progress", "reporter"])
def test_a_name_whose_object_name_is_too_long_is_refused(suffix: str) -> None:
    # a topology whose groups are all short: the experiment's own objects are the longest names
    topo = Topology("x", (Group("ps", "ps", 1, ("ps",), ()),))
    name = "a" * (MAX_LENGTH - len(f"-{suffix}") + 1)
    assert len(name + "-ps") <= MAX_LENGTH  # the workload's name alone would pass
    with pytest.raises(InvalidNameError) as info:
        validate_name(name, topo.derived_name_suffixes())
    message = str(info.value)
    assert "too long for this experiment" in message
    assert f"{name}-progress" in message or f"{name}-reporter" in message
    validate_name(name[:-1], topo.derived_name_suffixes())  # one shorter fits
