"""What the operator applies for one `Experiment`, independent of kopf.

- `plan_of`: the one plan of the object (`launch/kube/plan.py`), owned by it, with the profile
  the operator resolves (`profile`) and the images it may use (`default_images`).
- `apply_experiment`: server-side apply the plan's objects and prune what the spec no longer
  has; the `Applied` condition says so. Idempotent: an operator killed half-way simply applies
  again on restart.
- `ensure`: recreate the objects that disappeared (someone deleted a StatefulSet or a Service).
- `admitted`: with a queue (`spec.queue`, or the operator's default), the experiment is one Kueue
  Workload (render/workload.py) and its Deployments and StatefulSets exist only while Kueue
  admits it; until then everything else is applied and the `Admitted` condition says why it
  waits (Kueue's own message). An admitted Workload whose pod sets the spec changed is made
  anew: Kueue does not resize an admitted one, so the experiment queues again.

Errors are ours (SpecError, KubeError ...); the handlers turn them into kopf's retry decisions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from surreal_kube.errors import SpecError, SurrealKubeError
from surreal_kube.experiment.progress import STATE_FINISHED
from surreal_kube.experiment.spec import Experiment
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import EXPERIMENT, Kube, NotFoundError, resource
from surreal_kube.launch.kube.lifecycle import apply as kube_apply
from surreal_kube.launch.kube.lifecycle import keys
from surreal_kube.launch.kube.placement import pools
from surreal_kube.launch.kube.placement.priorities import check_priority_classes
from surreal_kube.launch.kube.plan import (
    ImageChooser,
    Plan,
    make_plan,
)
from surreal_kube.launch.kube.profile import ClusterProfile, merge_profiles, object_profile
from surreal_kube.launch.kube.render import custom_resource, workload
from surreal_kube.launch.kube.status import progress as kube_progress
from surreal_kube.launch.kube.status.summary import pod_ready
from surreal_kube.operator import events
from surreal_kube.operator.config import Config
from surreal_kube.operator.status import (
    condition,
    condition_message,
    condition_status,
    set_conditions,
)

PROFILE_TTL = 60.0
"""Seconds a discovered cluster profile (node pools) is reused when there is no node watch."""


@dataclass
class _Cache:
    profiles: dict[str, tuple[ClusterProfile | None, tuple[str, float]]] = field(
        default_factory=dict
    )
    """The profile's JSON -> (with the live pools, from what: ("watch", the nodes' generation)
    or ("list", when))."""
    lock: threading.Lock = field(default_factory=threading.Lock)


_profile_cache = _Cache()


def owner_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """The owner reference of everything the experiment's plan makes: deleting the `Experiment`
    deletes them all, without the operator (it puts no finalizer on it)."""
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
    }


def profile(
    kube: Kube | None, config: Config, obj: Mapping[str, Any] | None = None
) -> ClusterProfile | None:
    """The profile to render `obj` with: the operator's, with the object's `spec.profile` keys
    over it (`profile.merge_profiles`), pools discovered when it lists none (cached a minute).
    kube None: no nodes are read."""
    base = merge_profiles(config.profile, object_profile(obj) if obj is not None else None)
    if kube is None or not config.read_nodes:
        return base  # no pools listed: placement is the scheduler's (--no-read-nodes)
    if base is not None and base.pools:
        return pools.effective_profile(None, base, check_fit=True, read_nodes=False)
    key = base.model_dump_json() if base is not None else ""
    held = config.held_nodes()
    with _profile_cache.lock:
        cached, (source, stamp) = _profile_cache.profiles.get(key, (None, ("", 0.0)))
        if held is not None:  # the watch's nodes: valid until a node changes
            fresh = source == "watch" and stamp == held[1]
        else:
            fresh = source == "list" and time.monotonic() - stamp <= PROFILE_TTL
        if cached is None or not fresh:
            if len(_profile_cache.profiles) > 64:  # many experiments, many profiles: bounded
                _profile_cache.profiles.clear()
            if held is not None:
                cached = pools.effective_profile(kube, base, check_fit=True, nodes=held[0])
                _profile_cache.profiles[key] = (cached, ("watch", float(held[1])))
            else:
                cached = pools.effective_profile(kube, base, check_fit=True)
                _profile_cache.profiles[key] = (cached, ("list", time.monotonic()))
        return cached


def default_images(config: Config) -> ImageChooser:
    """The operator's image stage: prebuilt images as the spec names them, else its defaults.

    It cannot build: a build without a default is refused with what to do instead.
    """

    def choose(exp: Experiment, keys: list[str]) -> dict[str, str]:
        refs = {}
        for key in keys:
            spec = exp.spec.images[key]
            ref = spec.image or config.default_images.get(key)
            if not ref:
                raise SpecError(
                    f"spec.images.{key}: the operator cannot build images; name a prebuilt "
                    f"image (spec.images.{key}.image), set the operator's default "
                    f"(--default-image {key}=REF, Helm value experimentImages.{key}), or create "
                    "the experiment with `surreal-kube create`, which builds the images and "
                    "pins their tags"
                )
            refs[key] = ref
        return refs

    return choose


def plan_of(kube: Kube | None, obj: Mapping[str, Any], config: Config) -> Plan:
    """The one plan of an `Experiment` object (`launch/kube/plan.py`), owned by it: the same
    plan `surreal-kube create` makes for the same spec and profile."""
    exp = custom_resource.resolve_object(obj)
    chosen = profile(kube, config, obj)
    if kube is not None:  # a class it lacks: no pod would ever be made, and nothing said why
        check_priority_classes(kube, chosen)
    return make_plan(
        exp,
        obj["metadata"]["namespace"],
        profile=chosen,
        images=default_images(config),
        owner=owner_of(obj),
    )


def desired(kube: Kube, obj: Mapping[str, Any], config: Config) -> tuple[Experiment, list[dict]]:
    """The resolved experiment and every object it should have now, owned by `obj`: with a
    queue, no Deployment or StatefulSet until Kueue admits it (`admitted`); the CURVE key
    Secret (made at the first apply, read back on every later one) and its mounts
    (`lifecycle/keys.py`)."""
    plan = plan_of(kube, obj, config)
    return plan.exp, to_apply(kube, obj, config, plan)


def to_apply(kube: Kube, obj: Mapping[str, Any], config: Config, plan: Plan) -> list[dict]:
    """The plan's objects as they go to the API server: those Kueue lets exist now
    (`admitted`), with the CURVE key Secret and its mounts (`lifecycle/keys.py`)."""
    objects = admitted(kube, obj, config, plan)
    name, namespace = plan.exp.metadata.name, plan.namespace
    return keys.keyed_by_operator(kube, objects, name, namespace, owner_of(obj))


def queue_of(exp: Experiment, config: Config) -> str | None:
    """The LocalQueue that admits the experiment: its own, else the operator's default."""
    return exp.spec.queue or config.default_queue


def admitted(kube: Kube, obj: Mapping[str, Any], config: Config, plan: Plan) -> list[dict]:
    """The plan's objects that may exist now. With a queue, the Workload is applied (made anew
    when its pod sets changed), and the pods' workloads are left out while it is not admitted;
    the `Admitted` condition records Kueue's verdict (the status reads it: phase Queued)."""
    queue = queue_of(plan.exp, config)
    if queue is None:
        return learner_first(kube, obj, plan)
    name, namespace = plan.exp.metadata.name, plan.namespace
    wanted = workload.workload_object(name, queue, plan.objects, owner_of(obj))
    digest = workload.pod_sets_digest(wanted)
    wanted["metadata"].setdefault("annotations", {})[workload.DIGEST_ANNOTATION] = digest
    live = kube.get_or_none(workload.WORKLOAD, name, namespace)
    if live is not None and workload.digest_of(live) != digest:
        kube.delete(workload.WORKLOAD, name, namespace)  # Kueue keeps an admitted one's sets
        live = None
    if live is None:
        try:
            live = kube.apply(wanted, namespace)
        except NotFoundError as exc:
            raise SpecError(
                f"spec.queue {queue!r}: Kueue's Workload API is not served by this cluster "
                "(install Kueue, or leave spec.queue and the operator's --default-queue unset)"
            ) from exc
    if workload.is_admitted(live):
        verdict = condition("Admitted", "True", "Admitted", f"admitted by {queue}")
        objects = plan.objects
    else:
        verdict = condition("Admitted", "False", "Queued", queued_reason(kube, live, namespace))
        objects = [o for o in plan.objects if o["kind"] not in workload.POD_KINDS]
    set_conditions(kube, obj, [verdict])
    return objects


def queued_reason(kube: Kube, live: Mapping[str, Any], namespace: str) -> str:
    """The `Queued` reason of a waiting Workload: its position in its LocalQueue, in Kueue's
    order (`workload.queue_position`), and Kueue's own message."""
    queue = str((live.get("spec") or {}).get("queueName"))
    others = kube.list(workload.WORKLOAD, namespace)
    return workload.waiting_reason(live, queue, workload.queue_position(live, others))


def requeue_positions(kube: Kube, namespace: str, queue: str) -> list[str]:
    """Write the `Queued` reason anew for every experiment waiting in `queue` whose position
    or Kueue's message changed (a Workload ahead of them was admitted, deleted or evicted);
    the experiments it changed."""
    found = kube.list(workload.WORKLOAD, namespace)
    changed = []
    for live in found:
        meta = live.get("metadata") or {}
        name = (meta.get("labels") or {}).get(naming.EXPERIMENT_LABEL)
        spec_queue = (live.get("spec") or {}).get("queueName")
        if not name or spec_queue != queue or workload.is_admitted(live):
            continue
        position = workload.queue_position(live, found)
        reason = workload.waiting_reason(live, queue, position)
        obj = kube.get_or_none(EXPERIMENT, name, namespace)
        if obj is None or condition_status(obj, "Admitted") != "False":
            continue
        if condition_message(obj, "Admitted") != reason:
            set_conditions(kube, obj, [condition("Admitted", "False", "Queued", reason)])
            changed.append(name)
    return changed


LEARNER_FIRST = ("agents", "evals")
"""Groups that start once the learner is Ready, when no queue admits the experiment whole."""
LEARNER_READY = "LearnerReady"
"""The condition that records it: False while they wait; True once they were started (a
learner restarted later does not stop them again)."""


def learner_first(kube: Kube, obj: Mapping[str, Any], plan: Plan) -> list[dict]:
    """The plan's objects without the agents' and evals' workloads until the learner is Ready.

    Without Kueue nothing admits an experiment whole, so the learner (the largest pod, maybe a
    GPU, the last to find a node) is started first: agents that held guaranteed CPU and polled
    for parameters while it was Pending would make an autoscaler buy CPU nodes only to wait.
    The learner's pod is Ready once its startup probe saw the first heartbeat of its loop.
    Workloads that exist already (an experiment started before) are never held back, nor are
    they once the condition says they were started.
    """
    if condition_status(obj, LEARNER_READY) == "True":
        return plan.objects
    namespace = plan.namespace

    def group(o: Mapping[str, Any]) -> str:
        return str(((o.get("metadata") or {}).get("labels") or {}).get(naming.GROUP_LABEL))

    workloads = [o for o in plan.objects if o["kind"] in workload.POD_KINDS]
    held = [o for o in workloads if group(o) in LEARNER_FIRST]
    learner = next((o for o in workloads if group(o) == "learner"), None)
    if not held or learner is None:
        return plan.objects

    def live(o: Mapping[str, Any]) -> dict[str, Any] | None:
        return kube.get_or_none(
            resource(o["apiVersion"], o["kind"]), o["metadata"]["name"], namespace
        )

    # the pods, not the Deployment's readyReplicas: its controller writes that a moment after
    # the pod's Ready event, which is what applies again (handlers.pod_changed)
    pods = kube.list(
        resource("v1", "Pod"),
        namespace,
        labels=naming.selector_labels(plan.exp.metadata.name, group(learner)),
    )
    ready = any(pod_ready(p) for p in pods)
    if ready or any(live(o) is not None for o in held):
        verdict = condition(LEARNER_READY, "True", "LearnerReady", "agents and evals started")
        set_conditions(kube, obj, [verdict])
        return plan.objects
    message = "agents and evals start once the learner is Ready (its first heartbeat)"
    if waits := plan.placements.waiting_for():  # a pool at zero: the learner's node comes
        message = f"{waits}; {message}"
        events.record(kube, obj, "WaitingForAutoscaler", waits)
    set_conditions(kube, obj, [condition(LEARNER_READY, "False", "WaitingForLearner", message)])
    return [o for o in plan.objects if o not in held]


def released(kube: Kube, obj: Mapping[str, Any], objects: list[dict]) -> list[dict]:
    """The objects with every workload at 0 replicas when the run finished.

    tensorplex scaled them to 0 at the end of the run (runtime/conductor.py); applying the spec's
    replica counts again (an operator restart resumes every experiment, a spec edit, a resync
    recreating a deleted workload) would start a finished run's pods once more. Re-rendering
    with 0 replicas, rather than skipping the workloads, keeps them converged to the spec in
    everything else and recreates a deleted one at 0.
    """
    meta = obj["metadata"]
    done = (obj.get("status") or {}).get("phase") == "Succeeded"
    if not done:
        record = kube_progress.read(kube, meta["name"], meta["namespace"])
        done = record is not None and record.state == STATE_FINISHED
    if not done:
        return objects
    for o in objects:
        if o["kind"] in ("Deployment", "StatefulSet"):
            o["spec"]["replicas"] = 0
    return objects


def apply_experiment(kube: Kube, obj: Mapping[str, Any], config: Config) -> list[str]:
    """Apply everything the experiment should have and prune the rest; what was pruned.

    Nothing is applied (not even the Kueue Workload) while an object of the plan exists and is
    someone else's (`kube_apply.check_ours`: NotOursError, a SpecError the status shows).
    """
    plan = plan_of(kube, obj, config)
    kube_apply.check_ours(
        kube,
        plan.objects,
        plan.namespace,
        plan.exp.metadata.name,
        owner_uid=obj["metadata"]["uid"],
    )
    exp, objects = plan.exp, to_apply(kube, obj, config, plan)
    objects = released(kube, obj, objects)
    namespace = obj["metadata"]["namespace"]
    restarts = restarted_by_edit(kube, exp, namespace)
    kube_apply.apply_objects(kube, objects, namespace)
    pruned = kube_apply.prune(kube, exp.metadata.name, objects, namespace)
    message = f"{len(objects)} objects applied"
    if restarts:
        message += f"; restarting {restarts}"
    set_conditions(
        kube,
        obj,
        [condition("Applied", "True", "Applied", message)],
        observed_generation=obj["metadata"].get("generation"),
    )
    return pruned


def warm_up() -> None:
    """What the first create would otherwise pay for, done at operator start: the templates'
    compilation and the imports the reconcile makes lazily."""
    from surreal_kube.experiment import reads  # noqa: F401 - restarted_by_edit's
    from surreal_kube.launch.kube.render.objects import compile_templates

    compile_templates()


def restarted_by_edit(kube: Kube, exp: Experiment, namespace: str) -> str:
    """Which components a spec edit restarts, and why (reads.py), from the live ConfigMap's spec.

    Their pod templates carry a new config digest, so Kubernetes rolls them; this only says so,
    in the Applied condition, because a restarted learner is worth knowing about.
    """
    from surreal_kube.experiment.reads import changed_components, describe_changes
    from surreal_kube.experiment.resolve import load_yaml_text, validate_document
    from surreal_kube.launch.kube.render.objects import CONFIG_KEY

    live = kube.get_or_none(
        resource("v1", "ConfigMap"), naming.config_name(exp.metadata.name), namespace
    )
    text = ((live or {}).get("data") or {}).get(CONFIG_KEY)
    if not text:
        return ""
    try:
        before = validate_document(load_yaml_text(text, "the live ConfigMap"))
    except SurrealKubeError:
        return ""  # written by another version: nothing to compare against
    return describe_changes(changed_components(before, exp))


def ensure(kube: Kube, obj: Mapping[str, Any], config: Config) -> list[str]:
    """Recreate desired objects that are missing; their names.

    "Missing" is "none labelled as ours by that name": one by that name that is not ours is
    refused as in `apply_experiment` (NotOursError), or the resync would take it over.
    """
    exp, objects = desired(kube, obj, config)
    objects = released(kube, obj, objects)
    namespace = obj["metadata"]["namespace"]
    gone = kube_apply.missing(kube, objects, namespace)
    if gone:
        kube_apply.check_ours(
            kube, gone, namespace, exp.metadata.name, owner_uid=obj["metadata"]["uid"]
        )
        kube_apply.apply_objects(kube, gone, namespace)
    return [f"{o['kind']}/{o['metadata']['name']}" for o in gone]
