"""The Kubernetes backend by experiment name: create, find, list, status, scale and delete.

Two ways to run an experiment, with the same objects in the end:

- through the operator: when the `Experiment` CRD is installed, `create` writes one `Experiment`
  object (the fully resolved spec, images pinned to exact references) and the operator renders and
  applies everything, owned by that object;
- directly: otherwise (or with `direct=True`) the CLI renders and applies the objects itself, the
  spec's ConfigMap first as the root that owns the rest.

Either way one delete of the root removes everything through ownership, and the spec the roles
read (the ConfigMap) is identical, so `status`, `logs`, `tb`, `scale` and `delete` work the same.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.resolve import (
    deep_merge,
    default_document,
    experiment_topology,
    load_yaml_text,
    to_document,
    validate_document,
)
from surreal_kube.experiment.spec import Experiment
from surreal_kube.experiment.topology import Topology
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api import slim
from surreal_kube.launch.kube.api.client import (
    EXPERIMENT,
    METADATA_LIST,
    NODE,
    POD,
    ForbiddenError,
    Kube,
    KubeError,
    Resource,
    describe,
    resource,
)
from surreal_kube.launch.kube.lifecycle import apply
from surreal_kube.launch.kube.plan import PROFILE_KEY, ImageChooser, Plan
from surreal_kube.launch.kube.profile import ClusterProfile, merge_pools
from surreal_kube.launch.kube.status.summary import (
    ExperimentStatus,
    slim_pod,
    summarize,
    unscheduled,
)

log = logging.getLogger(__name__)

CONFIG_MAP = resource("v1", "ConfigMap")
STATEFULSET = resource("apps/v1", "StatefulSet")
OPERATOR_ACK_SECONDS = 30.0
"""How long `create` waits for an operator to pick up a new `Experiment` object."""
Progress = Callable[[str], None]
WAIT_CPU_SHARE = 0.03
"""At most this share of a core goes to recomputing the status while `create` (applied
directly) waits for the pods: 1,022 pods cost 25-50 ms a recomputation, and five a second (one
per burst of changes) took 7.3 CPU-seconds of a 50 s create on a 2-core machine whose scheduler
and kubelets were waiting for the CPU."""


class RefusedError(LaunchError):
    """The operator refused an `Experiment` (or none picked it up): nothing of it runs."""


# --------------------------------------------------------------------------- connection


@dataclass(frozen=True)
class Target:
    """Which cluster and namespace, as kubectl users say it."""

    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str | None = None

    def connect(self) -> Kube:
        return Kube(kubeconfig=self.kubeconfig, context=self.context, namespace=self.namespace)


# --------------------------------------------------------------------------- the spec


def resolve_object(obj: Mapping[str, Any]) -> Experiment:
    """The experiment an `Experiment` object describes: its algorithm's defaults, then its spec.

    The same layering as the CLI's resolver, so a partial spec (from Helm values or kubectl)
    means exactly what it would mean on the command line.
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise SpecError("spec: must be a mapping")
    spec = {k: v for k, v in spec.items() if k != PROFILE_KEY}  # how it runs, not what (plan.py)
    algo = spec.get("algorithm") if isinstance(spec.get("algorithm"), Mapping) else {}
    algorithm = str((algo or {}).get("name") or "ppo")
    if algorithm not in ("ppo", "ddpg"):
        raise SpecError(f"spec.algorithm.name: unknown algorithm {algorithm!r}; valid: ppo, ddpg")
    doc = default_document(str(meta.get("name")), algorithm)
    for key, image in (spec.get("images") or {}).items():
        if isinstance(image, Mapping) and (image.get("image") is None) != (
            image.get("build") is None
        ):
            doc["spec"]["images"].pop(key, None)  # a prebuilt image replaces the default build
    deep_merge(doc, {"spec": dict(spec)})
    doc["metadata"] = {"name": meta.get("name")}
    labels = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if not k.startswith(("app.kubernetes.io/", "helm.sh/", "surreal.ai/"))
    }
    if labels:
        doc["metadata"]["labels"] = labels
    return validate_document(doc)


def experiment_object(
    exp: Experiment, namespace: str, profile: ClusterProfile | None = None
) -> dict[str, Any]:
    """The `Experiment` custom resource for a resolved experiment.

    profile: the cluster profile chosen for it (`create --profile`), written whole as
    `spec.profile` so that the operator renders exactly what the CLI planned; None: the
    operator's own profile applies, as for an object applied with kubectl.
    """
    from surreal_kube.launch.kube.plan import profile_document

    doc = to_document(exp)
    meta: dict[str, Any] = {"name": exp.metadata.name, "namespace": namespace}
    if exp.metadata.labels:
        meta["labels"] = dict(exp.metadata.labels)
    spec = doc["spec"]
    if profile is not None:
        spec = {**spec, PROFILE_KEY: profile_document(profile)}
    return {
        "apiVersion": doc["apiVersion"],
        "kind": doc["kind"],
        "metadata": meta,
        "spec": spec,
    }


def pin_images(exp: Experiment, refs: Mapping[str, str]) -> Experiment:
    """The experiment with `spec.images[key]` replaced by the exact references it runs.

    Both paths render from the pinned spec, so the spec's ConfigMap is the same whether the CLI
    or the operator applies it, and the operator never needs the build context.
    """
    if not refs:
        return exp
    doc = to_document(exp)
    for key, ref in refs.items():
        doc["spec"]["images"][key] = {"image": ref, "build": None}
    return validate_document(doc)


def used_image_refs(exp: Experiment) -> dict[str, str] | None:
    """key -> reference when every image the experiment runs is prebuilt (pinned), else None."""
    from surreal_kube.launch.kube.render.objects import used_image_keys

    refs = {}
    for key in used_image_keys(exp):
        spec = exp.spec.images.get(key)
        if spec is None or spec.image is None:
            return None
        refs[key] = spec.image
    return refs


# --------------------------------------------------------------------------- placement


def effective_profile(
    kube: Kube | None,
    base: ClusterProfile | None,
    *,
    check_fit: bool,
    read_nodes: bool = True,
    nodes: Sequence[Mapping[str, Any]] | None = None,
) -> ClusterProfile | None:
    """The profile to render with: the base's pools, else the live cluster's (when allowed).

    nodes: the cluster's nodes when the caller already holds them (the operator's node watch);
    else they are listed.

    A profile that declares autoscaled pools (`maxCount`) declares only what the nodes cannot say:
    the live pools are read too and the declared ones put over them (`profile.merge_pools`).

    With check_fit False, the pools keep their names, labels and taints (so GPU pods still go to
    GPU pools) but their capacity is made unlimited: placement is left to the scheduler, whose
    reason then shows in `status`.
    """
    profile = base
    declared = list(base.pools) if base is not None else []
    autoscaled = any(p.max_count is not None for p in declared)
    if (not declared or autoscaled) and kube is not None and read_nodes:
        try:
            if nodes is not None:
                profile = profile_from_nodes(nodes, base=profile)
            else:
                profile = discover_pools(kube, base=profile)
            if autoscaled:  # a pool scaled to zero has no node: its declaration says it exists
                profile = profile.model_copy(update={"pools": merge_pools(profile.pools, declared)})
        except LaunchError as exc:
            if autoscaled:
                log.info("cannot read the nodes (%s): the profile's pools alone", exc)
            elif check_fit:
                raise LaunchError(
                    f"{exc}; pass --profile FILE listing the node pools, or --skip-preflight"
                ) from exc
            log.info("no node pools (%s); placement left to the scheduler", exc)
    if profile is None or not profile.pools:
        return profile if profile is not None and profile.pools else _no_pools(profile)
    if check_fit:
        return profile
    big = [
        p.model_copy(
            update={
                "count": max(p.count, 100_000),
                "cpu": "1000000",
                "memory": "1000000Ti",
                "pods": 1_000_000,
                "gpus": 1_000 if p.gpus else 0,
            }
        )
        for p in profile.pools
    ]
    return profile.model_copy(update={"pools": big})


def discover_pools(kube: Kube, base: ClusterProfile | None = None) -> ClusterProfile:
    """The live cluster's node pools (`profile.pools_from_nodes`), from the nodes as plain JSON,
    in pages; other settings come from `base`. (The official client's typed node models cost
    seconds for a thousand nodes.)"""
    try:
        nodes = kube.list(NODE, decode=slim.node_list)
    except KubeError as exc:
        raise LaunchError(f"cannot list nodes to discover node pools: {exc}") from exc
    return profile_from_nodes(nodes, base)


def profile_from_nodes(
    nodes: Iterable[Mapping[str, Any]], base: ClusterProfile | None = None
) -> ClusterProfile:
    """`base` with the pools of these nodes (the schedulable ones)."""
    from surreal_kube.launch.kube.profile import pools_from_nodes

    records = [
        {
            "name": (n.get("metadata") or {}).get("name", ""),
            "labels": (n.get("metadata") or {}).get("labels") or {},
            "taints": (n.get("spec") or {}).get("taints") or [],
            "allocatable": (n.get("status") or {}).get("allocatable") or {},
        }
        for n in nodes
        if not (n.get("spec") or {}).get("unschedulable")
    ]
    return (base or ClusterProfile()).model_copy(update={"pools": pools_from_nodes(records)})


def _no_pools(profile: ClusterProfile | None) -> ClusterProfile | None:
    if profile is None:
        return None
    raise LaunchError("the cluster has no schedulable nodes and the profile lists no node pools")


# --------------------------------------------------------------------------- create


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
    from concurrent.futures import ThreadPoolExecutor

    from surreal_kube.launch.kube.plan import make_plan

    # The nodes (a thousand of them take the longest answer) are read beside the other checks:
    # each is a round trip to a server that may be busy, and none depends on another.
    with ThreadPoolExecutor(max_workers=1) as pool:
        nodes = pool.submit(effective_profile, kube, profile, check_fit=preflight)
        via_operator = not direct and kube.has_experiment_crd()
        if preflight:  # storage.py: data of an earlier run
            from surreal_kube.launch.kube.placement.storage import check_kept_claim

            check_kept_claim(kube, exp.metadata.name, kube.namespace)
        prof = nodes.result()
    if preflight and (profile is not None or not via_operator):  # else the operator's volume
        from surreal_kube.launch.kube.placement.storage import check_storage

        check_storage(kube, (prof or ClusterProfile()).experiment_volume, exp.metadata.name)
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
    return apply.create_objects(
        kube, plan.objects, plan.namespace, dry_run=server_dry, progress=progress
    )


# --------------------------------------------------------------------------- finding


@dataclass
class Found:
    """An experiment on the cluster, by name."""

    name: str
    namespace: str
    exp: Experiment
    root: dict[str, Any]
    """The `Experiment` object, or the spec's ConfigMap for a direct one."""
    via_operator: bool
    pods: list[dict[str, Any]] | None = None
    """Its pods when they were listed together with other experiments' (`list_found`)."""

    @property
    def created(self) -> str | None:
        return (self.root.get("metadata") or {}).get("creationTimestamp")

    @property
    def reported(self) -> dict[str, Any]:
        """The status the operator wrote (empty for a direct experiment)."""
        return dict(self.root.get("status") or {}) if self.via_operator else {}


def _config_exp(cm: Mapping[str, Any]) -> Experiment:
    from surreal_kube.launch.kube.render.objects import CONFIG_KEY

    text = (cm.get("data") or {}).get(CONFIG_KEY)
    if text is None:
        raise LaunchError(f"ConfigMap {cm['metadata']['name']} has no {CONFIG_KEY}")
    return validate_document(load_yaml_text(text, f"ConfigMap {cm['metadata']['name']}"))


def find_or_none(kube: Kube, name: str, namespace: str | None = None) -> Found | None:
    """The experiment `name` in the namespace, through its Experiment object or its ConfigMap."""
    ns = namespace or kube.namespace
    if kube.has_experiment_crd():
        cr = kube.get_or_none(EXPERIMENT, name, ns)
        if cr is not None:
            try:
                exp = resolve_object(cr)
            except SpecError:
                exp = None
            if exp is not None:
                return Found(name, ns, exp, cr, True)
            cm = kube.get_or_none(CONFIG_MAP, naming.config_name(name), ns)
            return Found(name, ns, _config_exp(cm) if cm else _stub(name), cr, True)
    cm = kube.get_or_none(CONFIG_MAP, naming.config_name(name), ns)
    if cm is None or (cm["metadata"].get("labels") or {}).get(naming.EXPERIMENT_LABEL) != name:
        return None
    return Found(name, ns, _config_exp(cm), cm, False)


def _stub(name: str) -> Experiment:
    return validate_document(default_document(name))


def find(kube: Kube, name: str, namespace: str | None = None) -> Found:
    """Like find_or_none, but LaunchError naming the namespace and context when it is missing."""
    found = find_or_none(kube, name, namespace)
    if found is None:
        ns = namespace or kube.namespace
        raise LaunchError(
            f"no experiment named {name!r} in namespace {ns!r} (context {kube.context}); "
            "see `surreal-kube list`"
        )
    return found


def list_found(
    kube: Kube, namespace: str | None = None, *, all_namespaces: bool = False
) -> list[Found]:
    """Every experiment in the namespace (or all namespaces), by name."""
    ns = None if all_namespaces else (namespace or kube.namespace)
    out: dict[tuple[str, str], Found] = {}
    if kube.has_experiment_crd():
        for cr in kube.list(EXPERIMENT, ns, all_namespaces=all_namespaces):
            meta = cr["metadata"]
            try:
                exp = resolve_object(cr)
            except SpecError:
                exp = _stub(meta["name"])
            out[(meta["namespace"], meta["name"])] = Found(
                meta["name"], meta["namespace"], exp, cr, True
            )
    selector = f"{naming.GROUP_LABEL}=experiment,app.kubernetes.io/managed-by={naming.NAME}"
    for cm in kube.list(CONFIG_MAP, ns, labels=selector, all_namespaces=all_namespaces):
        meta = cm["metadata"]
        name = (meta.get("labels") or {}).get(naming.EXPERIMENT_LABEL)
        if not name or (meta["namespace"], name) in out:
            continue
        if meta["name"] != naming.config_name(name):
            continue
        with contextlib.suppress(SpecError, LaunchError):
            out[(meta["namespace"], name)] = Found(
                name, meta["namespace"], _config_exp(cm), cm, False
            )
    if len(out) > 1:  # one list of every experiment's pods, not one list per experiment
        for found in out.values():
            found.pods = []
        managed = f"app.kubernetes.io/managed-by={naming.NAME},{naming.EXPERIMENT_LABEL}"
        for pod in list_pods(kube, ns, managed, all_namespaces=all_namespaces):
            meta = pod["metadata"]
            key = (meta.get("namespace") or "", meta["labels"][naming.EXPERIMENT_LABEL])
            if key in out:
                out[key].pods.append(pod)  # type: ignore[union-attr]
    return [out[k] for k in sorted(out)]


# --------------------------------------------------------------------------- status


def desired_groups(exp: Experiment, topo: Topology | None = None) -> dict[str, int]:
    """group -> pods wanted (topo: the plan's, when there is one)."""
    return {g.name: g.replicas for g in (topo or experiment_topology(exp)).groups}


def requested_gpus(exp: Experiment, topo: Topology | None = None) -> int:
    topo = topo or experiment_topology(exp)
    return sum(g.replicas * exp.spec.component_resources(g.component).gpu for g in topo.groups)


def agent_selector(name: str) -> str:
    from surreal_kube.launch.kube.api.client import selector

    return selector(naming.selector_labels(name, "agents"))


def observe(
    kube: Kube,
    exp: Experiment,
    namespace: str,
    *,
    replacements: Mapping[str, Any] | None = None,
    capacity: str = "free",
    pods: list[dict[str, Any]] | None = None,
) -> ExperimentStatus:
    """The experiment's status computed from its pods now (`pods`: already listed).

    capacity: "free" reads every node and every pod bound to them, so that pending reasons name
    the free space ("the largest free slot on gpu-pool has 1"); "nodes" reads nodes only (their
    whole capacity); "none" reads neither (the scheduler's own words). Falls back quietly when
    the credentials may not read them.
    """
    name = exp.metadata.name
    if pods is None:
        pods = list_pods(kube, namespace, naming.experiment_selector(name))
    nodes = all_pods = None
    if capacity in ("free", "nodes") and unscheduled(pods):
        try:
            nodes = kube.list(NODE, decode=slim.node_list)
            if capacity == "free":
                all_pods = kube.list(
                    POD,
                    all_namespaces=True,
                    fields="status.phase!=Succeeded,status.phase!=Failed",
                    decode=slim.pod_list,
                )
        except ForbiddenError:
            pass
    return summarize(
        experiment=name,
        desired=desired_groups(exp),
        pods=pods,
        agents_per_pod=exp.spec.agents.per_process,
        gpus=requested_gpus(exp),
        agent_selector=agent_selector(name),
        nodes=nodes,
        all_pods=all_pods,
        replacements=replacements,
    )


def status_of(kube: Kube, found: Found, *, capacity: str = "free") -> ExperimentStatus:
    """Status from the pods, with what only the operator knows (replacements, Failed) merged."""
    reported = found.reported
    status = observe(
        kube,
        found.exp,
        found.namespace,
        replacements=reported.get("replacements"),
        capacity=capacity,
        pods=found.pods,
    )
    if reported:
        if reported.get("phase") == "Failed":
            status.phase = "Failed"
            status.reason = reported.get("reason")
        status.conditions = ExperimentStatus.model_validate(reported).conditions
        if status.learner_iteration is None:
            status.learner_iteration = reported.get("learnerIteration")
        if status.eval_return is None:
            status.eval_return = reported.get("evalReturn")
    return status


def age(timestamp: str | None) -> str:
    """kubectl-style age: 5s, 3m, 2h, 4d."""
    if not timestamp:
        return "-"
    then = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    s = int((dt.datetime.now(dt.UTC) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{max(s, 0)}s"


# --------------------------------------------------------------------------- waiting


def wait_running(
    kube: Kube,
    found_or_plan: Found | Plan,
    *,
    timeout: float = 600.0,
    poll: float = 1.0,
    tick: Callable[[ExperimentStatus], None] | None = None,
) -> ExperimentStatus:
    """Wait until every pod is Running (returns the status) or the experiment Failed (raises).

    Applied directly, the pods are listed once and then watched (`PodWatch`), so waiting for
    10,000 pods costs one list and a stream of changes, not a list of every pod each second;
    the status is recomputed after a burst of changes (and every `poll` seconds without one),
    spaced by its own cost so that it takes at most `WAIT_CPU_SHARE` of a core.

    Through the operator the `Experiment`'s status is read every `poll` seconds instead, and
    nothing else: the operator already watches the pods and writes the same `summarize`. A
    second watch of 10,000 pods here cost the machine as much CPU as the operator's own, while
    the cluster was busiest creating them. A spec the operator refuses (its condition
    Applied=False) or an operator that never picks the object up fails fast instead of waiting
    for the timeout.
    """
    exp, namespace = found_or_plan.exp, found_or_plan.namespace
    name = exp.metadata.name
    start = time.monotonic()
    topo = found_or_plan.topology if isinstance(found_or_plan, Plan) else experiment_topology(exp)
    desired, gpus = desired_groups(exp, topo), requested_gpus(exp, topo)

    def summary(pods: list[dict[str, Any]], reported: Mapping[str, Any]) -> ExperimentStatus:
        return summarize(
            experiment=name,
            desired=desired,
            pods=pods,
            agents_per_pod=exp.spec.agents.per_process,
            gpus=gpus,
            agent_selector=agent_selector(name),
            replacements=reported.get("replacements"),
        )

    def timed_out(reported: Mapping[str, Any]) -> LaunchError:
        # now say why in the words that need the nodes (one look, not one per second)
        status = observe(
            kube, exp, namespace, replacements=reported.get("replacements"), capacity="nodes"
        )
        return LaunchError(
            f"{name} is not running after {timeout:.0f}s: {status.reason}; it was left "
            f"as it is: see `surreal-kube status {name}`, or delete it"
        )

    if found_or_plan.via_operator:
        while True:
            reported, generation = _operator_verdict(kube, name, namespace, start)
            status = _reported_status(reported, generation) or summary([], reported)
            if tick:
                tick(status)
            if status.phase == "Running":
                return status
            if time.monotonic() - start > timeout:
                raise timed_out(reported)
            time.sleep(poll)

    with PodWatch(kube, namespace, naming.experiment_selector(name)) as pods:
        while True:
            cpu = time.thread_time()
            status = summary(pods.snapshot(), {})
            if tick:
                tick(status)
            if status.phase == "Running":
                return status
            if time.monotonic() - start > timeout:
                raise timed_out({})
            # a burst of changes folded into one recomputation, spaced by its own cost
            rest = max(0.2, (time.thread_time() - cpu) / WAIT_CPU_SHARE)
            time.sleep(rest)
            pods.changed.wait(max(0.0, poll - rest))
            pods.changed.clear()


def _reported_status(
    reported: Mapping[str, Any], generation: int | None
) -> ExperimentStatus | None:
    """The operator's status when it describes the current spec (observedGeneration is the
    object's generation), else None: right after a spec edit the status still counts the
    pods of the spec before it."""
    if not reported.get("phase") or reported.get("observedGeneration") != generation:
        return None
    return ExperimentStatus.model_validate(reported)


def _operator_verdict(
    kube: Kube, name: str, namespace: str, start: float
) -> tuple[dict[str, Any], int | None]:
    """The operator's status of `name` and the object's generation; RefusedError / LaunchError
    when it gave up on it."""
    cr = kube.get_or_none(EXPERIMENT, name, namespace)
    if cr is None:
        raise LaunchError(f"Experiment {name} disappeared while starting")
    reported = dict(cr.get("status") or {})
    for cond in reported.get("conditions") or []:
        if cond.get("type") == "Applied" and cond.get("status") == "False":
            why = cond.get("message") or cond.get("reason")
            raise RefusedError(f"the operator cannot apply {name}: {why}")
    if reported.get("phase") == "Failed":
        raise LaunchError(f"{name} failed: {reported.get('reason')}")
    if not reported and time.monotonic() - start > OPERATOR_ACK_SECONDS:
        raise RefusedError(
            f"the Experiment CRD is installed but no operator picked up {name} within "
            f"{OPERATOR_ACK_SECONDS:.0f}s: is the surreal-kube operator running and "
            f"watching namespace {namespace!r}? (use --direct to apply the objects "
            "without an operator)"
        )
    return reported, cr["metadata"].get("generation")


def list_with_version(
    kube: Kube,
    res: Resource,
    namespace: str | None,
    selector: str,
    *,
    metadata_only: bool = False,
    decode: Callable[[bytes], Any] | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """Every object of a kind matching `selector` (pages of 500; namespace None: every
    namespace) and the list's resourceVersion, from which a watch continues without missing a
    change. metadata_only: the objects' metadata alone (PartialObjectMetadata). decode: parses
    each page (`slim.pod_list`: slim pods)."""
    query: dict[str, Any] = {"labelSelector": selector, "limit": 500}
    items: list[dict[str, Any]] = []
    accept = METADATA_LIST if metadata_only else None
    while True:
        page = kube.raw(
            "GET",
            res.path(namespace),
            query=query,
            what=f"list {res.plural}",
            accept=accept,
            decode=decode,
        )
        items.extend(page.get("items") or [])
        meta = page.get("metadata") or {}
        if not meta.get("continue"):
            return items, str(meta.get("resourceVersion") or "")
        query["continue"] = meta["continue"]


def list_pods(
    kube: Kube, namespace: str | None, selector: str, *, all_namespaces: bool = False
) -> list[dict[str, Any]]:
    """The pods matching `selector`, slim (`status.slim_pod`), decoded as such (`slim.py`)."""
    listed = kube.list(
        POD, namespace, labels=selector, all_namespaces=all_namespaces, decode=slim.pod_list
    )
    return [slim_pod(p) for p in listed]


class PodWatch:
    """The pods matching a selector, kept current by one list and then a watch (a thread).

    `snapshot()` gives the pods (slim copies, `status.slim_pod`); `changed` is set whenever one
    changed. A watch the server ends is resumed from the last resourceVersion; one that expired
    (410 Gone) or broke starts again with a list. Use it as a context manager.
    """

    def __init__(self, kube: Kube, namespace: str, selector: str, timeout: float = 60.0) -> None:
        self.kube = kube
        self.namespace = namespace
        self.selector = selector
        self.timeout = timeout
        self.changed = threading.Event()
        self._pods: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._version = self._list()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def __enter__(self) -> PodWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> list[dict[str, Any]]:
        """The pods now (raises what made the watch give up, if anything did)."""
        if self._error is not None:
            raise self._error
        with self._lock:
            return list(self._pods.values())

    def stop(self) -> None:
        self._stop.set()

    def _list(self) -> str:
        items, version = list_with_version(
            self.kube, POD, self.namespace, self.selector, decode=slim.pod_list
        )
        pods = {pod["metadata"]["name"]: slim_pod(pod) for pod in items}
        with self._lock:
            self._pods = pods
        self.changed.set()
        return version

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                for kind, pod in self.kube.watch(
                    POD, self.namespace, labels=self.selector, resource_version=self._version,
                    timeout=self.timeout, decode=slim.pod_event,
                ):  # fmt: skip
                    if self._stop.is_set():
                        return
                    self._version = (pod.get("metadata") or {}).get("resourceVersion") or (
                        self._version
                    )
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        with self._lock:
                            name = pod["metadata"]["name"]
                            if kind == "DELETED":
                                self._pods.pop(name, None)
                            else:
                                self._pods[name] = slim_pod(pod)
                        self.changed.set()
                failures = 0
            except KubeError as exc:
                failures += 1
                if failures > 5:
                    self._error = exc
                    self.changed.set()
                    return
                if self._stop.wait(min(0.2 * failures, 1.0)):
                    return
                try:
                    self._version = self._list()
                except KubeError:
                    continue


# --------------------------------------------------------------------------- scale


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
    from surreal_kube.experiment import progress as records
    from surreal_kube.launch.kube.status import progress as progress_channel

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
    from surreal_kube.launch.kube.render.objects import render_experiment
    from surreal_kube.launch.kube.render.ownership import root_of, set_owner

    refs = used_image_refs(exp) or {}
    prof = effective_profile(kube, profile, check_fit=True)
    objects = render_experiment(exp, namespace, images=refs or None, profile=prof)
    root = kube.apply(objects[0], namespace)
    owner = {**root_of(objects), "uid": root["metadata"]["uid"]}
    if old is None:
        owned = set_owner(objects[1:], owner)
        apply.apply_objects(kube, owned, namespace, progress=progress)
        apply.prune(kube, exp.metadata.name, objects, namespace, progress=progress)
        return
    before_refs = used_image_refs(old) or {}
    before = {
        apply.key(o): o
        for o in render_experiment(old, namespace, images=before_refs or None, profile=prof)
    }
    changed = [o for o in objects[1:] if before.get(apply.key(o)) != o]
    apply.apply_objects(kube, set_owner(changed, owner), namespace, progress=progress)
    wanted = {apply.key(o) for o in objects}
    for gone_key, obj in before.items():
        if gone_key not in wanted and obj.get("kind") in {r.kind for r in apply.PRUNABLE}:
            res = kube.resource_for(obj["apiVersion"], obj["kind"])
            kube.delete(res, obj["metadata"]["name"], namespace)
            if progress:
                progress(f"pruned {describe(obj)}")


# --------------------------------------------------------------------------- delete


def _any_left(kube: Kube, namespace: str, selector: str) -> bool:
    """Whether any object of the experiment is left (retained ones aside), cheaply.

    One small page per kind, stopping at the first kind with something left, and that kind is
    asked first the next time: waiting for a thousand pods to go costs one small request per
    poll, not a list of every object of every kind.
    """
    from surreal_kube.launch.kube.render.ownership import is_retained

    kinds = sorted(apply.CLEANUP, key=lambda r: r != _last_left.get(namespace))
    for res in kinds:
        query = {"labelSelector": selector, "limit": 20}
        page = kube.raw("GET", res.path(namespace), query=query, what=f"list {res.plural}")
        items = page.get("items") or []
        if any(not is_retained(o) for o in items) or (
            (page.get("metadata") or {}).get("continue")
            and any(not is_retained(o) for o in kube.list(res, namespace, labels=selector))
        ):
            _last_left[namespace] = res  # asked first next time: one request per poll
            return True
    return False


_last_left: dict[str, Resource] = {}


def delete(
    kube: Kube,
    found: Found,
    *,
    wait: bool = False,
    timeout: float = 180.0,
    progress: Progress | None = None,
) -> list[str]:
    """Delete the root; ownership removes the rest. With wait, until nothing is left.

    Returns the objects still there when waiting timed out (empty when all are gone).
    """
    name, ns = found.name, found.namespace
    if found.via_operator:
        kube.delete(EXPERIMENT, name, ns, propagation="Background")
    # a direct experiment's root, and stragglers whose owner is already gone
    kube.delete(CONFIG_MAP, naming.config_name(name), ns, propagation="Background")
    if progress:
        progress(f"deleted {'Experiment' if found.via_operator else 'ConfigMap'} {name}")
    if not wait:
        return []
    from surreal_kube.launch.kube.render.ownership import is_retained

    deadline = time.monotonic() + timeout
    selector = naming.experiment_selector(name)
    while _any_left(kube, ns, selector) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [
        f"{o['kind']}/{o['metadata']['name']}"
        for res in apply.CLEANUP
        for o in kube.list(res, ns, labels=selector)
        if not is_retained(o)
    ]
    if found.via_operator:
        with contextlib.suppress(KubeError):
            while kube.get_or_none(EXPERIMENT, name, ns) and time.monotonic() < deadline:
                time.sleep(0.3)
    return left
