"""Changing the number of agents of a running experiment; re-applying a changed spec.

Through the operator the `Experiment`'s scale subresource is patched and the operator applies
it; a direct experiment is re-rendered and only what changed is applied (and what it no longer
renders pruned)."""

from __future__ import annotations

from collections.abc import Callable

from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment import progress as records
from surreal_kube.experiment.resolve import (
    to_document,
    validate_document,
)
from surreal_kube.experiment.spec import Experiment
from surreal_kube.launch.kube.api.client import (
    EXPERIMENT,
    Kube,
    describe,
)
from surreal_kube.launch.kube.lifecycle import apply, keys
from surreal_kube.launch.kube.lifecycle.finding import Found
from surreal_kube.launch.kube.placement.pools import effective_profile
from surreal_kube.launch.kube.plan import used_image_refs
from surreal_kube.launch.kube.profile import ClusterProfile
from surreal_kube.launch.kube.render.curve import with_curve_secret
from surreal_kube.launch.kube.render.objects import render_experiment
from surreal_kube.launch.kube.render.ownership import root_of, set_owner
from surreal_kube.launch.kube.status import progress as progress_channel

Progress = Callable[[str], None]


def scale(
    kube: Kube,
    found: Found,
    agents: int,
    *,
    profile: ClusterProfile | None = None,
    progress: Progress | None = None,
) -> Experiment:
    """Change the number of agents; the learner's pod is not touched. Returns the new spec.

    A finished experiment (its budget spent, compute released) is refused: re-applying its
    StatefulSet would start agents again with no learner and no budget left to end them.
    """

    record = progress_channel.read(kube, found.name, found.namespace)
    if record is not None and record.state == records.STATE_FINISHED:
        why = f" ({record.reason})" if record.reason else ""
        raise LaunchError(
            f"{found.name} has finished{why} and its pods are released: there is nothing to "
            f"scale; its results: `surreal-kube results {found.name}`; to run again, delete it "
            "and create it anew"
        )
    batch = found.exp.spec.agents.per_process
    if agents < 1 or agents % batch:
        raise SpecError(
            f"--agents: must be a positive multiple of agents.batch ({batch}), got {agents}"
        )
    doc = to_document(found.exp)
    doc["spec"]["agents"]["count"] = agents
    new = validate_document(doc)
    if found.via_operator:
        kube.patch(
            EXPERIMENT, found.name, {"spec": {"replicas": agents}}, found.namespace, sub="scale"
        )
        if progress:
            progress(f"Experiment/{found.name}: agents.count={agents}; the operator applies it")
        return new
    reapply(kube, new, found.namespace, profile=profile, progress=progress, old=found.exp)
    return new


def reapply(
    kube: Kube,
    exp: Experiment,
    namespace: str,
    *,
    profile: ClusterProfile | None = None,
    progress: Progress | None = None,
    old: Experiment | None = None,
) -> None:
    """Render a changed spec of a direct experiment and apply the difference (and prune).

    old: the experiment as it runs; then only the objects whose rendering changed are applied
    and only those it no longer renders are deleted (scaling the agents touches the spec's
    ConfigMap and one StatefulSet: two requests, not one per object plus a list per kind).
    """

    refs = used_image_refs(exp) or {}
    prof = effective_profile(kube, profile, check_fit=True)
    name = exp.metadata.name
    key = keys.existing_key(kube, name, namespace) or keys.key_file_text()  # the running one
    objects = with_curve_secret(
        render_experiment(exp, namespace, images=refs or None, profile=prof), name, namespace, key
    )
    root = kube.apply(objects[0], namespace)
    owner = {**root_of(objects), "uid": root["metadata"]["uid"]}
    if old is None:
        owned = set_owner(objects[1:], owner)
        apply.apply_objects(kube, owned, namespace, progress=progress)
        apply.prune(kube, exp.metadata.name, objects, namespace, progress=progress)
        return
    before_refs = used_image_refs(old) or {}
    rendered = render_experiment(old, namespace, images=before_refs or None, profile=prof)
    before = {apply.key(o): o for o in with_curve_secret(rendered, name, namespace, key)}
    changed = [o for o in objects[1:] if before.get(apply.key(o)) != o]
    apply.apply_objects(kube, set_owner(changed, owner), namespace, progress=progress)
    wanted = {apply.key(o) for o in objects}
    for gone_key, obj in before.items():
        if gone_key not in wanted and obj.get("kind") in {r.kind for r in apply.PRUNABLE}:
            res = kube.resource_for(obj["apiVersion"], obj["kind"])
            kube.delete(res, obj["metadata"]["name"], namespace)
            if progress:
                progress(f"pruned {describe(obj)}")
