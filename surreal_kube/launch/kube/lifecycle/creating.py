"""Creating an experiment on a cluster: pre-flight, the one plan, then apply.

Two ways to run an experiment, with the same objects in the end:

- through the operator: when the `Experiment` CRD is installed, `create` writes one `Experiment`
  object (the fully resolved spec, images pinned to exact references) and the operator renders and
  applies everything, owned by that object;
- directly: otherwise (or with `direct=True`) the CLI renders and applies the objects itself, the
  spec's ConfigMap first as the root that owns the rest.

Either way one delete of the root removes everything through ownership, and the spec the roles
read (the ConfigMap) is identical, so `status`, `logs`, `tb`, `scale` and `delete` work the same."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.spec import Experiment
from surreal_kube.launch.kube.api.client import (
    Kube,
)
from surreal_kube.launch.kube.lifecycle import apply, keys
from surreal_kube.launch.kube.lifecycle.finding import find_or_none
from surreal_kube.launch.kube.placement.pools import effective_profile
from surreal_kube.launch.kube.placement.priorities import check_priority_classes
from surreal_kube.launch.kube.placement.storage import check_kept_claim, check_storage
from surreal_kube.launch.kube.plan import ImageChooser, Plan, make_plan
from surreal_kube.launch.kube.profile import ClusterProfile
from surreal_kube.launch.kube.render.custom_resource import experiment_object

Progress = Callable[[str], None]


def plan_create(
    kube: Kube,
    exp: Experiment,
    *,
    profile: ClusterProfile | None = None,
    preflight: bool = True,
    images: ImageChooser | Mapping[str, str] | None = None,
    direct: bool = False,
) -> Plan:
    """Pre-flight and the one plan (`plan.make_plan`): SpecError / LaunchError before anything
    is created.

    images: a chooser (the CLI's: check or build them) or key -> exact reference; keys left
    out: the spec's own prebuilt references, or the content-hash tags of its builds.
    Through the operator the chosen profile travels in the `Experiment` (`Plan.profile_choice`),
    so the operator's plan of the same spec comes out the same.
    """

    # The nodes (a thousand of them take the longest answer) are read beside the other checks:
    # each is a round trip to a server that may be busy, and none depends on another.
    with ThreadPoolExecutor(max_workers=1) as pool:
        nodes = pool.submit(effective_profile, kube, profile, check_fit=preflight)
        via_operator = not direct and kube.has_experiment_crd()
        if preflight:  # storage.py: data of an earlier run
            check_kept_claim(kube, exp.metadata.name, kube.namespace)
        prof = nodes.result()
    if exp.spec.queue and not via_operator:
        why = "--direct" if direct else "this cluster has no surreal-kube operator (its CRD)"
        raise SpecError(
            f"spec.queue {exp.spec.queue!r}: a queued experiment waits whole for Kueue's "
            f"admission, which the operator manages; {why}: create it through the operator, "
            "or leave spec.queue unset"
        )
    if preflight and (profile is not None or not via_operator):  # else the operator's profile
        check_storage(kube, (prof or ClusterProfile()).experiment_volume, exp.metadata.name)
        check_priority_classes(kube, prof)
    plan = make_plan(exp, kube.namespace, profile=prof, images=images, render=not via_operator)
    plan.via_operator = via_operator
    plan.profile_choice = profile
    return plan


def ensure_absent(kube: Kube, name: str, namespace: str) -> None:
    """Refuse to create over an existing experiment of the same name."""
    found = find_or_none(kube, name, namespace)
    if found is not None:
        raise LaunchError(
            f"experiment {name!r} already exists in namespace {namespace!r} "
            f"({'an Experiment object' if found.via_operator else 'applied directly'}); "
            f"delete it first (surreal-kube delete {name} --wait) or scale it"
        )


def create(
    kube: Kube,
    plan: Plan,
    *,
    dry_run: str | None = None,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Create the experiment (server-side apply); all or nothing. Returns what was applied.

    dry_run: None, "server" (the API server validates and admits everything, stores nothing).
    """
    name = plan.exp.metadata.name
    server_dry = dry_run == "server"
    if not server_dry:
        ensure_absent(kube, name, plan.namespace)
    if plan.via_operator:
        obj = experiment_object(plan.exp, plan.namespace, plan.profile_choice)
        stored = kube.apply(obj, plan.namespace, dry_run=server_dry)
        if progress:
            progress(f"applied Experiment/{name}: the operator creates the rest")
        return [stored]
    # a fresh key for a new experiment, added only here: the plan (what render prints) holds none
    objects = keys.keyed(plan.objects, name, plan.namespace)
    return apply.create_objects(
        kube, objects, plan.namespace, dry_run=server_dry, progress=progress
    )
