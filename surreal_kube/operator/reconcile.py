"""What the operator does for one `Experiment`, independent of kopf.

- `apply_experiment`: resolve the object's spec, render it with the CLI's renderer (owned by the
  object), server-side apply everything and prune what the spec no longer has. Idempotent: an
  operator killed half-way simply applies again on restart.
- `ensure`: recreate the objects that disappeared (someone deleted a StatefulSet or a Service).
- `refresh`: compute the status from the pods (the same `summarize` as `surreal-kube status`),
  count failed-and-replaced pods, enforce the learner's restart budget, and write the status.
  All status writes of one experiment go through here, under one lock, because they come both
  from the experiment's own handlers and from its pods' events.

Errors are ours (SpecError, KubeError ...); the handlers turn them into kopf's retry decisions.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from surreal_kube.errors import SpecError, SurrealKubeError
from surreal_kube.experiment.progress import STATE_FINISHED
from surreal_kube.experiment.spec import Experiment
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api import slim
from surreal_kube.launch.kube.api import watch as kube_watch
from surreal_kube.launch.kube.api.client import (
    EXPERIMENT,
    NODE,
    POD,
    ForbiddenError,
    Kube,
    NotFoundError,
    resource,
)
from surreal_kube.launch.kube.lifecycle import apply, observing
from surreal_kube.launch.kube.placement import pools
from surreal_kube.launch.kube.plan import (
    ImageChooser,
    Plan,
    make_plan,
    merge_profiles,
    object_profile,
)
from surreal_kube.launch.kube.profile import ClusterProfile
from surreal_kube.launch.kube.render import custom_resource
from surreal_kube.launch.kube.status import progress as kube_progress
from surreal_kube.launch.kube.status.summary import (
    Condition,
    ExperimentStatus,
    count_replacement,
    failure_seen,
    pending_reason,
    process_key,
    summarize,
    unscheduled,
)
from surreal_kube.operator.nodecache import NodeCache
from surreal_kube.operator.podcache import PodCache

log = logging.getLogger("surreal_kube.operator")

FIELD_MANAGER = "surreal-kube-operator"
WORKLOADS = (resource("apps/v1", "StatefulSet"), resource("apps/v1", "Deployment"))
PROFILE_TTL = 60.0
"""Seconds a discovered cluster profile (node pools) is reused when there is no node watch."""


@dataclass
class Config:
    """Settings of one operator run (command-line flags, Helm values)."""

    learner_max_restarts: int = 5
    resync_seconds: float = 300.0
    """A safety net only: watch events drive recreation and status; the resync re-reads every
    experiment's objects and pods this often, to heal anything a missed event left behind."""
    profile: ClusterProfile | None = None
    read_nodes: bool = True
    refresh_delay: float = 0.5
    """Pod events within this many seconds are folded into one status refresh."""
    refresh_cpu_share: float = 0.03
    """At most this share of a core goes to refreshing one experiment's status: after a refresh
    that took c CPU seconds the next waits at least c / share, so a refresh costs the same share
    of a core whatever the experiment's size. While the cluster creates the pods, every CPU
    second the operator spends is one the scheduler and kubelets wait for: at 5 % the refreshes
    were most of the operator's CPU during a create (`bench/scale.py`)."""
    default_images: dict[str, str] = field(default_factory=dict)
    """key of spec.images -> image used when an experiment's spec names a build there."""
    nodes: NodeCache | None = None
    """The node watch's nodes (None, or not listed yet: nodes are listed when needed)."""


@dataclass
class _Cache:
    profiles: dict[str, tuple[ClusterProfile | None, tuple[str, float]]] = field(
        default_factory=dict
    )
    """The profile's JSON -> (with the live pools, from what: ("watch", the nodes' generation)
    or ("list", when))."""
    lock: threading.Lock = field(default_factory=threading.Lock)


_profile_cache = _Cache()
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


@dataclass(frozen=True)
class Shape:
    """What a status refresh needs of an experiment's spec: the pods each group wants, agents
    per pod, GPUs requested."""

    desired: dict[str, int]
    agents_per_pod: int
    gpus: int


SHAPES_KEPT = 256
"""Spec shapes kept by (uid, generation): bounded, the oldest goes first."""
_shapes: OrderedDict[tuple[str, int], Shape] = OrderedDict()
_shapes_guard = threading.Lock()


def shape_of(obj: Mapping[str, Any]) -> Shape:
    """The shape of an `Experiment`'s spec, from memory when its generation was seen before.

    A refresh runs every second or so while pods start; resolving and validating the spec and
    building its topology was half of its CPU (`bench/scale.py`, 10,000 agents), on a machine
    whose scheduler needed every cycle. The spec changes
    only with the object's generation, so its shape is kept by (uid, generation).
    Raises SpecError for a spec that does not resolve (never kept).
    """
    meta = obj.get("metadata") or {}
    key = (str(meta.get("uid")), int(meta.get("generation") or 0))
    with _shapes_guard:
        shape = _shapes.get(key)
        if shape is not None:
            _shapes.move_to_end(key)
            return shape
    exp = custom_resource.resolve_object(obj)
    shape = Shape(
        desired=observing.desired_groups(exp),
        agents_per_pod=exp.spec.agents.per_process,
        gpus=observing.requested_gpus(exp),
    )
    if meta.get("uid") and meta.get("generation"):
        with _shapes_guard:
            _shapes[key] = shape
            while len(_shapes) > SHAPES_KEPT:
                _shapes.popitem(last=False)
    return shape


def lock_for(namespace: str, name: str) -> threading.Lock:
    """The lock that serializes one experiment's status writes."""
    with _locks_guard:
        return _locks.setdefault((namespace, name), threading.Lock())


def forget_lock(namespace: str, name: str) -> None:
    """The experiment is gone: drop its lock (the table holds live experiments only)."""
    with _locks_guard:
        _locks.pop((namespace, name), None)


def owner_of(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
    }


def _held_nodes(config: Config) -> tuple[list[dict[str, Any]], int] | None:
    """The node watch's nodes and their generation; None without a watch or before its list."""
    return config.nodes.nodes() if config.nodes is not None else None


def profile(
    kube: Kube | None, config: Config, obj: Mapping[str, Any] | None = None
) -> ClusterProfile | None:
    """The profile to render `obj` with: the operator's, with the object's `spec.profile` keys
    over it (`plan.merge_profiles`), pools discovered when it lists none (cached a minute).
    kube None: no nodes are read."""
    base = merge_profiles(config.profile, object_profile(obj) if obj is not None else None)
    if kube is None or not config.read_nodes:
        return base  # no pools listed: placement is the scheduler's (--no-read-nodes)
    if base is not None and base.pools:
        return pools.effective_profile(None, base, check_fit=True, read_nodes=False)
    key = base.model_dump_json() if base is not None else ""
    held = _held_nodes(config)
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
    return make_plan(
        exp,
        obj["metadata"]["namespace"],
        profile=profile(kube, config, obj),
        images=default_images(config),
        owner=owner_of(obj),
    )


def desired(kube: Kube, obj: Mapping[str, Any], config: Config) -> tuple[Experiment, list[dict]]:
    """The resolved experiment and every object it should have, owned by `obj`."""
    plan = plan_of(kube, obj, config)
    return plan.exp, plan.objects


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
    """Apply everything the experiment should have and prune the rest; what was pruned."""
    exp, objects = desired(kube, obj, config)
    objects = released(kube, obj, objects)
    namespace = obj["metadata"]["namespace"]
    restarts = restarted_by_edit(kube, exp, namespace)
    apply.apply_objects(kube, objects, namespace)
    pruned = apply.prune(kube, exp.metadata.name, objects, namespace)
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
    """Recreate desired objects that are missing; their names."""
    _, objects = desired(kube, obj, config)
    objects = released(kube, obj, objects)
    namespace = obj["metadata"]["namespace"]
    gone = apply.missing(kube, objects, namespace)
    if gone:
        apply.apply_objects(kube, gone, namespace)
    return [f"{o['kind']}/{o['metadata']['name']}" for o in gone]


# --------------------------------------------------------------------------- status


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(type_: str, status: str, reason: str, message: str) -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=message)


def merge_conditions(old: list[Mapping[str, Any]], new: list[Condition]) -> list[dict[str, Any]]:
    """Replace conditions of the same type; keep the transition time when the status is equal."""
    out = {c["type"]: dict(c) for c in old}
    for cond in new:
        doc = cond.model_dump(by_alias=True, mode="json", exclude_none=True)
        prev = out.get(cond.type)
        doc["lastTransitionTime"] = (
            prev.get("lastTransitionTime")
            if prev and prev.get("status") == cond.status and prev.get("lastTransitionTime")
            else now()
        )
        out[cond.type] = doc
    return [out[k] for k in sorted(out)]


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch turning `old` into `new`: removed keys become null, maps recurse."""
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = status_patch(before, value)
            if sub:
                patch[key] = sub
        elif value != before:
            patch[key] = value
    return patch


def write_status(kube: Kube, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
    if patch:
        kube.patch(EXPERIMENT, name, {"status": dict(patch)}, namespace, sub="status")


def set_conditions(
    kube: Kube,
    obj: Mapping[str, Any],
    conds: list[Condition],
    *,
    observed_generation: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Update some conditions (and fields) of the status, under the experiment's lock."""
    meta = obj["metadata"]
    with lock_for(meta["namespace"], meta["name"]):
        current = kube.get(EXPERIMENT, meta["name"], meta["namespace"])
        old = dict(current.get("status") or {})
        new = dict(old)
        new["conditions"] = merge_conditions(old.get("conditions") or [], conds)
        if observed_generation is not None:
            new["observedGeneration"] = observed_generation
        new.update(extra or {})
        write_status(kube, meta["namespace"], meta["name"], status_patch(old, new))


def refresh(
    kube: Kube, namespace: str, name: str, config: Config, pods: PodCache | None = None
) -> ExperimentStatus | None:
    """Recompute and write the status of one experiment; None when it is gone.

    pods: the operator's pod cache (from its pod watch); without one the pods are listed.
    """
    with lock_for(namespace, name):
        obj = kube.get_or_none(EXPERIMENT, name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            if pods is not None:
                pods.forget((namespace, name))
            forget_lock(namespace, name)
            return None
        old = dict(obj.get("status") or {})
        try:
            shape = shape_of(obj)
        except SpecError as exc:
            new = dict(old)
            new.update(phase="Failed", reason=f"invalid spec: {exc}")
            write_status(kube, namespace, name, status_patch(old, new))
            return ExperimentStatus.model_validate(new)
        selector = naming.experiment_selector(name)
        if pods is None:
            found = kube_watch.list_pods(kube, namespace, selector)
        else:
            found = pods.pods(
                (namespace, name),
                lambda: kube_watch.list_with_version(
                    kube, POD, namespace, selector, decode=slim.pod_list
                ),
            )
        replacements = dict(old.get("replacements") or {})
        for pod in found:
            if failure_seen(pod):
                record = count_replacement(replacements, pod)
                if record is not None:
                    replacements[process_key(pod)] = record
        nodes = None
        if config.read_nodes and unscheduled(found):
            held = _held_nodes(config)
            if held is not None:
                nodes = held[0]
            else:
                with contextlib.suppress(ForbiddenError):
                    nodes = kube.list(NODE, decode=slim.node_list)
        status = summarize(
            experiment=name,
            desired=shape.desired,
            pods=found,
            agents_per_pod=shape.agents_per_pod,
            gpus=shape.gpus,
            agent_selector=observing.agent_selector(name),
            nodes=nodes,
            replacements=replacements,
            learner_max_restarts=config.learner_max_restarts,
        )
        status.observed_generation = old.get("observedGeneration")
        # the figures tensorplex reports into <exp>-progress; what it lacks keeps its last value
        kube_progress.merge(status, kube_progress.read(kube, name, namespace))
        kube_progress.keep_previous(status, old)
        conds: list[Condition] = []
        budget = config.learner_max_restarts
        if old.get("phase") == "Failed":
            status.phase, status.reason = "Failed", old.get("reason")
        elif status.phase == "Succeeded" or old.get("phase") == "Succeeded":
            if status.phase != "Succeeded":  # a record gone since: the run still succeeded
                status.phase, status.reason = "Succeeded", old.get("reason")
            conds.append(condition("Succeeded", "True", "BudgetReached", status.reason or ""))
        elif status.phase == "Failed":  # a learner container that cannot run (summarize)
            status.reason = (
                f"{status.reason}; its workloads were scaled to 0, data and logs are kept"
            )
            conds.append(condition("Failed", "True", "LearnerCannotRun", status.reason))
            stop_workloads(kube, namespace, name)
        elif status.learner_restarts > budget:
            status.phase = "Failed"
            last = last_learner_failure(found)
            status.reason = (
                f"the learner exhausted its {budget} restarts"
                + (f" (last: {last})" if last else "")
                + "; its workloads were scaled to 0, data and logs are kept"
            )
            conds.append(condition("Failed", "True", "LearnerRestartsExhausted", status.reason))
            stop_workloads(kube, namespace, name)
        conds.append(
            condition(
                "Ready",
                "True" if status.phase == "Running" else "False",
                status.phase or "Pending",
                status.reason or "",
            )
        )
        new = status.to_wire()
        new["conditions"] = merge_conditions(old.get("conditions") or [], conds)
        write_status(kube, namespace, name, status_patch(old, new))
        return status


def record_failure(kube: Kube, namespace: str, name: str, pod: Mapping[str, Any]) -> bool:
    """Count a failed pod of the experiment once (its uid); True when it was new.

    Called from the pod's own event: a StatefulSet deletes a failed pod within a second, before
    any periodic look would see it.
    """
    with lock_for(namespace, name):
        obj = kube.get_or_none(EXPERIMENT, name, namespace)
        if obj is None:
            return False
        replacements = (obj.get("status") or {}).get("replacements") or {}
        record = count_replacement(replacements, pod)
        if record is None:
            return False
        write_status(kube, namespace, name, {"replacements": {process_key(pod): record}})
        return True


def last_learner_failure(pods: list[dict[str, Any]]) -> str | None:
    """Why the newest failed learner pod failed, in words."""
    failed = [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(naming.GROUP_LABEL) == "learner"
        and failure_seen(p)
    ]
    if not failed:
        return None
    newest = max(failed, key=lambda p: p["metadata"].get("creationTimestamp") or "")
    return pending_reason(newest)


def stop_workloads(kube: Kube, namespace: str, name: str) -> None:
    """Scale every workload of the experiment to 0 (a Failed experiment burns no GPUs)."""
    for res in WORKLOADS:
        for obj in kube.list(res, namespace, labels=naming.experiment_selector(name)):
            with contextlib.suppress(NotFoundError):
                kube.patch(res, obj["metadata"]["name"], {"spec": {"replicas": 0}}, namespace)
    log.warning("%s/%s failed: its workloads were scaled to 0", namespace, name)


def applied_generation(obj: Mapping[str, Any]) -> int | None:
    """The spec generation whose objects were applied (the Applied condition is True and the
    status observed it), from the object as an event carries it; None: not applied yet."""
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Applied" and cond.get("status") == "True":
            return status.get("observedGeneration")
    return None


def is_failed(obj: Mapping[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") == "Failed"


# --------------------------------------------------------------------------- debounce


class Refresher:
    """Folds bursts of pod events into one status refresh per experiment.

    `poke(ns, name)` marks the experiment dirty; one worker thread per experiment refreshes it
    `refresh_delay` seconds after the first poke (later when the last refresh was costly, see
    `Config.refresh_cpu_share`), then waits for the next one (and exits when idle).
    """

    def __init__(
        self,
        kube: Kube,
        config: Config,
        idle_exit: float = 60.0,
        pods: PodCache | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.idle_exit = idle_exit
        self.pods = pods
        self._dirty: dict[tuple[str, str], threading.Event] = {}
        self._guard = threading.Lock()
        self._stopped = threading.Event()

    def poke(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        with self._guard:
            event = self._dirty.get(key)
            if event is None:
                event = self._dirty[key] = threading.Event()
                threading.Thread(
                    target=self._run, args=(key, event), name=f"refresh-{name}", daemon=True
                ).start()
        event.set()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self, key: tuple[str, str], event: threading.Event) -> None:
        spacing = 0.0
        last = -float("inf")
        while not self._stopped.is_set():
            if not event.wait(self.idle_exit):
                with self._guard:
                    if not event.is_set():
                        self._dirty.pop(key, None)
                        return
                continue
            time.sleep(max(self.config.refresh_delay, last + spacing - time.monotonic()))
            if self._stopped.is_set():
                return
            event.clear()
            cpu = time.thread_time()
            try:
                refresh(self.kube, key[0], key[1], self.config, self.pods)
            except Exception as exc:  # a refresh failure must not kill the worker
                log.warning("status refresh of %s/%s failed: %s", key[0], key[1], exc)
            last = time.monotonic()
            spacing = (time.thread_time() - cpu) / self.config.refresh_cpu_share


# --------------------------------------------------------------------------- resync


class Resyncer:
    """Every `resync_seconds`: recreate what disappeared and refresh the status of every
    experiment in the watched namespaces.

    A thread of our own rather than a kopf timer: kopf puts a finalizer on every object that has
    a timer, so an `Experiment` could not be deleted while the operator is down (or uninstalled).
    With no finalizer, deleting an experiment never needs the operator: ownership does it all.
    """

    def __init__(
        self,
        kube: Kube,
        config: Config,
        namespaces: list[str] | None,
        pods: PodCache | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.pods = pods
        self.namespaces = namespaces
        """None: every namespace."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.config.resync_seconds):
            targets: list[str | None] = [*(self.namespaces or [])] or [None]  # None: all
            for namespace in targets:
                try:
                    found = self.kube.list(EXPERIMENT, namespace, all_namespaces=namespace is None)
                except Exception as exc:  # keep resyncing whatever one list does
                    log.warning("resync: cannot list experiments: %s", exc)
                    continue
                if self.pods is not None:  # experiments deleted while no event said so
                    live = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in found}
                    self.pods.retain(live, namespace)
                for obj in found:
                    if self._stop.is_set():
                        return
                    self.resync_one(obj)

    def resync_one(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        key = (meta["namespace"], meta["name"])
        if self.pods is not None:  # re-read the pods: heals what a missed event left behind
            self.pods.forget(key)
        try:
            # the object as it is now, not as the resync pass listed it: a spec edit that landed
            # since (evals.count=0, say) must not get its pruned objects back from the old spec
            fresh = self.kube.get_or_none(EXPERIMENT, meta["name"], meta["namespace"])
            if fresh is None or fresh["metadata"].get("uid") != meta.get("uid"):
                return
            obj = fresh
            if not is_failed(obj):
                recreated = ensure(self.kube, obj, self.config)
                if recreated:
                    log.warning(
                        "%s/%s: recreated %s", meta["namespace"], meta["name"], ", ".join(recreated)
                    )
            refresh(self.kube, meta["namespace"], meta["name"], self.config, self.pods)
        except SpecError:
            refresh(self.kube, meta["namespace"], meta["name"], self.config, self.pods)
        except Exception as exc:  # one experiment's trouble must not stop the others
            log.warning("resync of %s/%s failed: %s", meta["namespace"], meta["name"], exc)
