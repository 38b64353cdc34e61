"""Object names and labels of a rendered experiment, derived in one place.

Names follow the suffixes that `Topology.derived_name_suffixes` declares (and that the experiment
name check already measured): `<exp>-<group>` for workloads and their Services, `<exp>-<group>-<i>`
for StatefulSet pods, and the objects of `experiment.names.EXPERIMENT_OBJECTS` (`<exp>-config`,
`<exp>-data`, `<exp>-progress`, `<exp>-results`, `<exp>-reporter`), named here from that list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from surreal_kube.experiment import names

NAME = "surreal-kube"
"""`app.kubernetes.io/name`, `part-of` and `managed-by` of everything we render."""
EXPERIMENT_LABEL = "surreal.ai/experiment"
GROUP_LABEL = "app.kubernetes.io/component"
INSTANCE_LABEL = "app.kubernetes.io/instance"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
"""Set by the StatefulSet controller on each pod: its ordinal, read through the downward API."""
PROGRESS_ANNOTATION = "surreal.ai/progress"
"""A pod annotation with a role's progress record as JSON (read by status)."""


def object_name(experiment: str, suffix: str) -> str:
    """`<exp>-<suffix>`: every object we render is named this way."""
    return f"{experiment}-{suffix}"


def pod_name(experiment: str, group: str, ordinal: int) -> str:
    """`<exp>-<group>-<i>`: the name the StatefulSet controller gives a replicated group's pod."""
    return f"{object_name(experiment, group)}-{ordinal}"


def config_name(experiment: str) -> str:
    """The ConfigMap holding the resolved spec (and the default root object)."""
    return object_name(experiment, names.CONFIG)


def data_name(experiment: str) -> str:
    """The PersistentVolumeClaim of the experiment folder."""
    return object_name(experiment, names.DATA)


def progress_name(experiment: str) -> str:
    """The ConfigMap holding the experiment's progress record (experiment/progress.py)."""
    return object_name(experiment, names.PROGRESS)


def results_name(experiment: str) -> str:
    """The ConfigMap tensorplex copies the results into when the run ends (summary, curve,
    picture): it outlives the pods, so `surreal-kube results` works after compute is released."""
    return object_name(experiment, names.RESULTS)


def reporter_name(experiment: str) -> str:
    """The ServiceAccount, Role and RoleBinding of the progress reporter: the only identity of
    an experiment's pods, allowed to write that one ConfigMap and nothing else."""
    return object_name(experiment, names.REPORTER)


def curve_name(experiment: str) -> str:
    """The Secret of the experiment's CURVE key (made at apply: launch/kube/lifecycle/keys.py)."""
    return object_name(experiment, names.CURVE)


def selector_labels(experiment: str, group: str) -> dict[str, str]:
    """Labels that select one group's pods: stable, so a selector never has to change."""
    return {
        "app.kubernetes.io/name": NAME,
        INSTANCE_LABEL: experiment,
        GROUP_LABEL: group,
    }


def labels(
    experiment: str, group: str | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Labels of every rendered object: the recommended `app.kubernetes.io/*` set plus ours.

    The user's own labels (`metadata.labels`) come first so that ours always win a clash: a
    selector must never be changed by a user label.
    """
    out = dict(sorted((extra or {}).items()))
    out.update(
        {
            "app.kubernetes.io/name": NAME,
            INSTANCE_LABEL: experiment,
            GROUP_LABEL: group or "experiment",
            "app.kubernetes.io/part-of": NAME,
            "app.kubernetes.io/managed-by": NAME,
            EXPERIMENT_LABEL: experiment,
        }
    )
    return out


def experiment_selector(experiment: str) -> str:
    """A label selector string matching every object of one experiment (for list and delete)."""
    return f"{EXPERIMENT_LABEL}={experiment}"


RETAIN_ANNOTATION = "surreal.ai/retain"
"""On an object that must outlive its experiment (the data claim unless `retain: false`): never
owned, so deleting the experiment keeps it."""


def is_retained(obj: Mapping[str, Any]) -> bool:
    """True for objects that must outlive the experiment (never owned)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations.get(RETAIN_ANNOTATION) == "true"
