"""One plan per create, dry run or reconcile: topology -> placement -> images -> objects.

An experiment reaches a cluster three ways: `surreal-kube create` (directly or through the
operator), `render` / `create --dry-run`, and the operator's reconcile of an `Experiment`. All
three call `make_plan` with one resolved spec and one cluster profile, and apply (or print) the
objects of the `Plan` it returns. Each stage runs once, in this order, and later stages take what
earlier ones computed instead of computing it again:

1. the topology (`experiment/topology.py`): groups, processes, endpoints;
2. placement (`placement.place`): a pool per group, checked against the profile's pools, so an
   experiment that cannot fit is refused before any image is built (on GKE Autopilot,
   `placement.autopilot`: hardware selectors and Autopilot's sizes instead of pools);
3. images: the exact reference of each key of `spec.images` the topology runs. Who chooses them
   differs (the CLI builds or checks them in an engine, a dry run computes their content-hash
   tags, the operator takes prebuilt ones or its default images), so `make_plan` takes a chooser;
   the spec is then pinned to those references, which is what the roles read;
4. the objects (`render.render_experiment`, entered once).

Same spec, same profile, same images: the same objects, byte for byte (`Plan.yaml`), whichever
entry point made the plan; only the owner differs (the CLI sets the spec's ConfigMap as the root
once it exists, the operator owns everything by its `Experiment`).

Where the profile comes from is decided by the callers (`placement.pools.effective_profile`
reads the live pools when the profile lists none); an `Experiment` may carry its own
(`spec.profile`, `profile.object_profile`), whose keys replace the operator's
(`profile.merge_profiles`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from surreal_kube.experiment.spec import Experiment, ImageSpec
from surreal_kube.launch.kube.images.planner import planned_references
from surreal_kube.launch.kube.placement.autopilot import place_for
from surreal_kube.launch.kube.placement.place import Placements
from surreal_kube.launch.kube.profile import ClusterProfile
from surreal_kube.launch.kube.render.objects import (
    dump_objects,
    render_experiment,
    used_image_keys,
)

ImageChooser = Callable[[Experiment, list[str]], Mapping[str, str]]
"""(experiment, keys of spec.images it runs) -> key -> exact reference."""


@dataclass
class Plan:
    """What one create, dry run or reconcile applies: computed once by `make_plan`."""

    exp: Experiment
    """The resolved experiment, its images pinned to the references in `images`."""
    namespace: str
    profile: ClusterProfile
    """The profile the objects were rendered with (pools as placement saw them)."""
    placements: Placements
    """group -> pool, node selector and tolerations; `.growth`: the nodes it waits for."""
    images: Mapping[str, str]
    """key of spec.images -> exact reference."""
    objects: list[dict[str, Any]]
    """The rendered objects, root first; owned by `owner` when it has a uid."""
    owner: Mapping[str, Any] | None = None
    via_operator: bool = False
    """Applied as one `Experiment` object that the operator renders (from this same plan)."""
    profile_choice: ClusterProfile | None = None
    """The profile the user chose (`--profile`), written into the `Experiment` so the operator
    renders it the same way; None: the operator's own profile applies."""

    def yaml(self) -> str:
        """The objects as one deterministic YAML stream (what `render` prints)."""

        return dump_objects(self.objects, "yaml")


def make_plan(
    exp: Experiment,
    namespace: str,
    *,
    profile: ClusterProfile | None,
    images: ImageChooser | Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
    render: bool = True,
) -> Plan:
    """Topology, placement, images and objects of `exp`, each computed once.

    Args:
        exp: the resolved experiment (images not necessarily pinned yet).
        namespace: where the objects go.
        profile: the cluster profile to place and render with; None: the defaults (nothing
            checked, placement left to the scheduler).
        images: a chooser called once with the keys the experiment runs, or references already
            chosen; keys left without one get the spec's prebuilt image or its build's
            content-hash tag (which needs the build context, as `render` does).
        owner: the root object ({apiVersion, kind, name, uid}); None: the ConfigMap is the root.
        render: False: no objects (`objects` is empty). `create` through the operator sends the
            spec and the operator renders this same plan; rendering it here as well was a
            quarter of a second before the `Experiment` left, with the cluster idle meanwhile.

    Raises SpecError (cannot be placed, bad image key) or LaunchError before anything is applied.
    """

    prof = profile or ClusterProfile()
    placements = place_for(exp, exp.topology, prof)
    keys = used_image_keys(exp)
    chosen = dict(images(exp, keys) if callable(images) else (images or {}))
    missing = [k for k in keys if k not in chosen]
    if missing:
        chosen.update(planned_references(exp, keys=missing, registry=prof.registry))
    pinned = pin_images(exp, chosen)  # images are not part of the topology: it stays valid
    objects = (
        render_experiment(
            pinned,
            namespace,
            owner=owner,
            images=chosen,
            profile=prof,
            placements=placements,
        )
        if render
        else []
    )
    return Plan(
        exp=pinned,
        namespace=namespace,
        profile=prof,
        placements=placements,
        images=chosen,
        objects=objects,
        owner=owner,
    )


# --------------------------------------------------------------------------- images


def pin_images(exp: Experiment, refs: Mapping[str, str]) -> Experiment:
    """The experiment with `spec.images[key]` replaced by the exact references it runs.

    Both paths render from the pinned spec, so the spec's ConfigMap is the same whether the CLI
    or the operator applies it, and the operator never needs the build context.
    """
    if not refs:
        return exp
    return exp.with_images({key: ImageSpec(image=ref) for key, ref in refs.items()})


def used_image_refs(exp: Experiment) -> dict[str, str] | None:
    """key -> reference when every image the experiment runs is prebuilt (pinned), else None."""

    refs = {}
    for key in used_image_keys(exp):
        spec = exp.spec.images.get(key)
        if spec is None or spec.image is None:
            return None
        refs[key] = spec.image
    return refs
