"""Pre-flight for the profile's PriorityClasses (`priorityClasses`, one per component).

A pod naming a PriorityClass the cluster does not have is refused by the API server's Priority
admission, but the pods are made by their StatefulSet or Deployment: the refusal is an event on
the workload, and the experiment sits at zero pods with nothing in `status` to say why. So the
classes are looked up before anything is created (by `create`, and by the operator at every
reconcile, whose status then names the class), and a missing one is refused in one line naming
the component, the class and the classes the cluster has. Credentials that may not read
PriorityClasses (cluster-scoped; the namespaced `edit` role cannot) skip the check.
"""

from __future__ import annotations

import logging

from surreal_kube.errors import SpecError
from surreal_kube.launch.kube.api.client import ForbiddenError, Kube, resource
from surreal_kube.launch.kube.profile import ClusterProfile

log = logging.getLogger(__name__)

PRIORITY_CLASS = resource("scheduling.k8s.io/v1", "PriorityClass")


def check_priority_classes(kube: Kube, profile: ClusterProfile | None) -> None:
    """SpecError (exit 2) for a component whose PriorityClass the cluster does not have."""
    wanted = (profile.priority_classes if profile is not None else None) or {}
    if not wanted:
        return
    known: dict[str, bool] = {}
    try:
        for name in sorted(set(wanted.values())):
            known[name] = kube.get_or_none(PRIORITY_CLASS, name) is not None
        if all(known.values()):
            return
        have = sorted(c["metadata"]["name"] for c in kube.list(PRIORITY_CLASS))
    except ForbiddenError as exc:
        log.info("cannot read PriorityClasses (%s): the profile's classes are not checked", exc)
        return
    component, name = next((c, n) for c, n in sorted(wanted.items()) if not known[n])
    raise SpecError(
        f"priorityClasses.{component}: no PriorityClass {name!r} in the cluster (it has: "
        f"{', '.join(have) or 'none'}); its pods would never be created: name one of those, "
        "or create it (kubectl create priorityclass NAME --value N)"
    )
