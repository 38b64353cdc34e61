"""Rendering: an experiment's topology -> Kubernetes objects, through Jinja templates.

One template per kind (package data under `templates/`); this module computes every value the
templates print and nothing else decides a name, a port or an address. That is why it is one
module of about 650 lines: split, the values of one pod (its env, ports, probes, volumes,
affinity) would be decided in several places; what is not a value of an object lives beside it
(gpus.py, ownership.py, workload.py, crd.py, custom_resource.py).

- a ConfigMap `<exp>-config` with the resolved spec, mounted read-only (SURREAL_CONFIG);
- the experiment volume (a PersistentVolumeClaim `<exp>-data`, or what the profile configures).
  Who writes what there: the learner its checkpoints (and it reads the evals' status files),
  tensorplex the TensorBoard event files and the end-of-run results, loggerplex the logs,
  tensorboard reads the events, evals write videos and status files. Only those pods mount it
  (profile.DATA_COMPONENTS); agents, replay and ps get an emptyDir at the same path for their
  status files, which nothing reads on a cluster. So the default claim is ReadWriteOnce, which
  any default StorageClass serves. The learner, the largest of those pods, anchors it (label
  `surreal.ai/data: anchor`) and the others (`follower`) have a required podAffinity to it
  (topologyKey kubernetes.io/hostname): the learner goes where placement says (the claim binds
  to its node), the others wait for it and join it; a rescheduled learner prefers the node where
  its followers run, which holds the volume. With a ReadWriteMany claim or NFS there is no
  affinity and they may spread. The claim is not owned unless the profile says `retain: false`,
  so the data outlives `delete` (which says so) unless `delete --delete-data`;
- the progress channel: a ConfigMap `<exp>-progress` (no data until tensorplex writes its record)
  and the ServiceAccount, Role and RoleBinding `<exp>-reporter` that allow `get`/`patch` on that
  one object; only the tensorplex container mounts that account's token (a projected volume).
  At the run's end tensorplex also patches `<exp>-results` (rendered empty too) and scales the
  experiment's workloads to 0 (`release_order`): the Role grants `patch` on exactly those, by
  name, and on their `scale` subresource only;
- per group: a Deployment (single replica) or a StatefulSet (agents, evals: the pod ordinal is
  SURREAL_INDEX, read from the `apps.kubernetes.io/pod-index` label through the downward API), one
  container per process of the group;
- per group that binds cluster endpoints: a Service `<exp>-<group>` whose DNS name is exactly what
  `Topology.addresses_kube` hands the connecting roles; per StatefulSet: its headless Service.

Rendering is deterministic: the same experiment, namespace, owner, images and profile give
byte-identical YAML (`dump_objects`). Templates use StrictUndefined, so a missing value is an error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import yaml

from surreal_kube.errors import LaunchError
from surreal_kube.experiment.quantity import parse_memory, to_millicpu
from surreal_kube.experiment.reads import config_digest
from surreal_kube.experiment.resolve import dump_yaml
from surreal_kube.experiment.spec import Experiment
from surreal_kube.experiment.topology import ENV_PREFIX, Group, Process, Topology
from surreal_kube.experiment.topology import endpoint as endpoint_spec
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.autopilot import (
    COMPUTE_CLASS_LABEL,
    COMPUTE_CLASSES,
    ClassLimits,
    container_ephemeral,
    within_ratio,
)
from surreal_kube.launch.kube.naming import RETAIN_ANNOTATION
from surreal_kube.launch.kube.placement.autopilot import place_for
from surreal_kube.launch.kube.placement.place import (
    Placement,
    data_groups,
    format_cpu,
    format_memory,
    pod_shape,
)
from surreal_kube.launch.kube.profile import ClusterProfile
from surreal_kube.launch.kube.render.gpus import ContainerGPUs, container_gpus
from surreal_kube.launch.kube.render.ownership import owner_reference
from surreal_kube.launch.kube.spot import off_spot_expressions

CONFIG_DIR = "/etc/surreal"
CONFIG_KEY = "experiment.yaml"
ROLE_COMMAND = "surreal-kube-role"
CONFIG_DIGEST_ANNOTATION = "surreal.ai/config-digest"
"""On each pod template: the digest of the spec sections its component reads (reads.py), so a
spec edit rolls exactly the workloads whose processes must see it."""
REPORTER_DIR = "/var/run/secrets/surreal.ai/reporter"
"""Where the tensorplex container finds its token, the cluster CA and its namespace."""
REPORTER_VERBS = ["get", "patch"]
"""What the reporter may do to its own progress ConfigMap: a JSON merge patch needs no more."""
REPORTER_ROLE = "tensorplex"
"""The role that writes the progress record (it receives every role's metrics)."""
TOKEN_SECONDS = 3600
DATA_LABEL = "surreal.ai/data"
"""On the pods that mount a node-local experiment volume: "anchor" (the learner) or "follower";
the followers' required podAffinity selects the anchor."""
DATA_ANCHOR = "learner"
"""The data pod that picks the node: the largest (its CPUs, maybe a GPU). When every data pod
carried the label, the first scheduled picked the node (a pod matching its own required term
may go anywhere) and the learner could stay Pending for good beside a small tensorplex."""
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DISRUPTION_GUARDED = ("learner", "replay", "ps", "replay-shard", "ps-shard")
"""Groups with a PodDisruptionBudget: the learner (its optimizer state since the last
checkpoint), the replay (its whole buffer) and the parameter server (every agent's source),
and their shards where those are pods of their own.
Their `safe-to-evict: false` stops only the cluster autoscaler, not a drain; a budget stops
both. Agents and evals are many and stateless: a drain may take them."""
PINNED_COMPONENTS = ("learner", "replay", "replay-shard")
"""Pods the cluster autoscaler must not evict to shrink a node: the learner loses every
update since its last checkpoint, a replay shard the experience it holds; agent pods move freely."""
SHARD_SERVICES = {"replay-shard": "replay", "ps-shard": "ps"}
"""The service each shard pod serves (`layout: pods`): what it inherits unless set for it."""
SPREAD_COMPONENTS = tuple(SHARD_SERVICES)
"""Shards laid out as pods: spread over nodes (a topology spread constraint, soft), since
capacity beyond one node's is why they are pods."""
HEARTBEAT_ENV = "SURREAL_HEARTBEAT_FILE"
"""Where a role with a liveness probe touches its heartbeat (runtime.lifecycle.Heartbeat)."""
LIVENESS_ROLES = ("learner", "agents", "eval")
"""Roles with a liveness probe: the learner, whose loop can hang inside an update (a deadlocked
BLAS pool, a stuck device, a checkpoint write on a dead share) while its process and sockets look
fine; agents and evals, whose loop can hang inside an environment's step (a simulator's
deadlock, a user's env waiting on a dead service) while the pod looks Running and the run slowly
loses its experience or its curve. Brokers and shards only poll sockets."""
HEARTBEAT_FLOOR_SECONDS = 300
"""The least bound on a heartbeat's age: a checkpoint write to slow network storage, the first
update's allocations, a node thrashing, all inside one turn of the loop."""
HEARTBEAT_MARGIN = 10
SLOW_SECONDS_PER_ITEM = {"ppo": 80e-6, "ddpg": 1e-3}
"""Seconds per learner pass over one item (PPO: one step of a sub-trajectory per epoch; DDPG: one
transition per update), sized from bench/learning.py's synthetic batches on one thread of a
heavily loaded 2-core machine: a pessimistic bound, so a slow node never fails the probe of a
learner that is only slow."""
STARTUP_PROBE_SECONDS = 600
"""How long a learner may take to its first heartbeat: torch's import and the model, a checkpoint
restore from the volume, on a busy node (the startup probe; liveness counts only after it)."""
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""Set from each container's CPU limit: torch and BLAS otherwise size their pools to the node's
cores, and a 1-CPU container running 32 threads is throttled into a crawl."""
_MAX_PORT_NAME = 15

ROLE_SHARES: dict[str, tuple[int, int]] = {
    "replay": (1, 1),
    "replay-shard": (3, 3),
    "ps": (1, 1),
    "ps-shard": (2, 2),
}
"""(cpu, memory) weights of the roles that share a pod: a replay shard stores and samples the
data while the broker only routes requests; a parameter shard answers the fetches the proxy
forwards. Roles not listed weigh (1, 1)."""


# ------------------------------------------------------------------------------------- jinja


def _quote(value: Any) -> str:
    """JSON is valid YAML: a quoted scalar (or flow list) that no value can break out of."""
    return json.dumps(value)


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("surreal_kube.launch.kube.render", "templates"),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters["q"] = _quote
    return env


def compile_templates() -> None:
    """Compile every template now (jinja keeps them in the process): a long-running operator
    calls this at its start, so its first create does not wait for the compiler while the
    cluster has nothing to do yet."""
    env = _environment()
    for name in env.list_templates():
        env.get_template(name)


def _load_all(text: str) -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # same safe semantics, in C
    return [doc for doc in yaml.load_all(text, Loader=loader) if doc]


# ------------------------------------------------------------------------------------ public


def render_experiment(
    exp: Experiment,
    namespace: str,
    *,
    owner: Mapping[str, Any] | None = None,
    images: Mapping[str, str] | None = None,
    profile: ClusterProfile | None = None,
    placements: Mapping[str, Placement] | None = None,
) -> list[dict[str, Any]]:
    """Every object of the experiment as plain dicts, the root first (see ownership.py).

    Args:
        exp: the resolved experiment.
        namespace: where the objects go; Service DNS names include it.
        owner: the root object ({apiVersion, kind, name, uid}), e.g. the `Experiment` custom
            resource. None: the ConfigMap is the root. Without a uid no ownerReferences are
            written: the applier sets them with `ownership.set_owner` once the root exists.
        images: key of `spec.images` ("cpu", "gpu") -> exact reference. Keys left out: prebuilt
            images as the spec names them, builds at their content-hash tag computed from the
            files (`images.planned_references`, which needs the build context on disk).
        profile: the cluster profile: node pools (placement is checked, SpecError if it cannot
            fit), experiment volume, registry, pull secrets. None: nothing is checked and the
            defaults apply (a ReadWriteOnce PVC whose users share the learner's node, GPU pods
            tolerate the GPU taint).
        placements: already computed from this experiment and profile (`plan.py` computes
            them once per create, dry-run or reconcile); None: computed here. The topology is
            the experiment's own (`Experiment.topology`).
    """
    text = render_text(
        exp,
        namespace,
        owner=owner,
        images=images,
        profile=profile,
        placements=placements,
    )
    return _load_all(text)


def render_text(
    exp: Experiment,
    namespace: str,
    *,
    owner: Mapping[str, Any] | None = None,
    images: Mapping[str, str] | None = None,
    profile: ClusterProfile | None = None,
    placements: Mapping[str, Placement] | None = None,
) -> str:
    """The templates' raw output (a multi-document YAML stream); see render_experiment."""
    from surreal_kube.experiment.names import label_problem

    problem = label_problem(namespace)
    if problem:
        raise LaunchError(f"invalid namespace {namespace!r}: a DNS label {problem}")
    profile = profile or ClusterProfile()
    topo = exp.topology
    if placements is None:
        placements = place_for(exp, topo, profile)
    refs = dict(images or {})
    missing = sorted(set(used_image_keys(exp)) - set(refs))
    if missing:
        refs.update(_planned(exp, profile, missing))
    ctx = _Context(exp, topo, namespace, owner, refs, profile, placements)
    env = _environment()
    docs = [env.get_template("configmap.yaml.j2").render(namespace=namespace, config=ctx.config())]
    claim = ctx.claim()
    if claim is not None:
        docs.append(
            env.get_template("persistentvolumeclaim.yaml.j2").render(
                namespace=namespace, claim=claim
            )
        )
    docs.append(
        env.get_template("reporter.yaml.j2").render(
            namespace=namespace, reporter=ctx.reporter(), identity=profile.progress_reporter
        )
    )
    for group in topo.groups:
        for service in ctx.services(group):
            docs.append(
                env.get_template("service.yaml.j2").render(namespace=namespace, service=service)
            )
    for group in topo.groups:
        docs.append(
            env.get_template("networkpolicy.yaml.j2").render(
                namespace=namespace, policy=ctx.network_policy(group)
            )
        )
        if group.component in DISRUPTION_GUARDED:
            docs.append(
                env.get_template("poddisruptionbudget.yaml.j2").render(
                    namespace=namespace, budget=ctx.disruption_budget(group)
                )
            )
    for group in topo.groups:
        kind = "statefulset" if group.replicated else "deployment"
        docs.append(
            env.get_template(f"{kind}.yaml.j2").render(
                namespace=namespace, workload=ctx.workload(group)
            )
        )
    return "".join(d if d.startswith("---") else "---\n" + d for d in docs)


def dump_objects(objects: Sequence[Mapping[str, Any]], output: str = "yaml") -> str:
    """Objects as a YAML stream (multi-line strings as blocks) or a JSON List, deterministic."""
    if output == "json":
        doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
        return json.dumps(doc, indent=2) + "\n"
    if output != "yaml":
        raise LaunchError(f"unknown output format {output!r}: yaml or json")
    return yaml.dump_all(
        list(objects), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100
    )


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Safe dumper (libyaml's when present) printing multi-line strings as `|` blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and all(c.isprintable() or c == "\n" for c in value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def image_key(exp: Experiment, component: str) -> str:
    """Which of `spec.images` a component runs: "gpu" when its pods hold GPUs, else "cpu"."""
    return "gpu" if exp.spec.component_resources(component).gpu else "cpu"


def used_image_keys(exp: Experiment) -> list[str]:
    """The keys of `spec.images` this experiment actually runs (no GPU: no CUDA image)."""
    return sorted({image_key(exp, g.component) for g in exp.topology.groups})


def _planned(exp: Experiment, profile: ClusterProfile, keys: list[str]) -> dict[str, str]:
    from surreal_kube.launch.kube.images.planner import planned_references

    return planned_references(exp, keys=keys, registry=profile.registry)


# ------------------------------------------------------------------------------------ values


def port_name(endpoint: str, taken: set[str]) -> str:
    """A Service/container port name for an endpoint: IANA service names have <= 15 characters.

    The endpoint's own name when it fits (`tensorplex`, `ps-serve`), else without its leading
    word (`replay-collector-0` -> `collector-0`, `parameter-publish` -> `publish`), else
    `<proto>-<port>`.
    """
    ep = endpoint_spec(endpoint)
    for candidate in (endpoint, endpoint.split("-", 1)[-1]):
        if len(candidate) <= _MAX_PORT_NAME and candidate not in taken:
            return candidate
    return f"{ep.protocol}-{ep.port}"


def split_weighted(total: int, weights: list[int], unit: int = 1) -> list[int]:
    """`total` in parts proportional to `weights`, whole multiples of `unit` where possible.

    Largest remainders get the leftover units (ties: earlier parts), so the parts always add
    up to `total` exactly and equal weights reproduce an even split.
    """
    if total % unit or total // unit < len(weights):
        unit = 1
    units, whole = total // unit, sum(weights)
    shares = [units * w // whole for w in weights]
    left = units - sum(shares)
    order = sorted(range(len(weights)), key=lambda i: (-(units * weights[i] % whole), i))
    for i in order[:left]:
        shares[i] += 1
    return [share * unit for share in shares]


def autopilot_containers(containers: list[dict[str, Any]], limits: ClassLimits | None) -> None:
    """Each container as GKE Autopilot admits it unchanged (`launch/kube/autopilot.py`): within
    its pod's compute class's CPU:memory ratio (`limits`; None: a GPU pod, where none is
    enforced) and with an ephemeral-storage request. Placement sized the pod; this evens out
    the rounding of its split among containers."""
    for i, c in enumerate(containers):
        if limits is not None:
            millicpu, memory = within_ratio(
                to_millicpu(c["cpu"]), parse_memory(c["memory"]), limits
            )
            c["cpu"], c["memory"] = format_cpu(millicpu), format_memory(memory)
        c["ephemeral"] = format_memory(container_ephemeral(i))


def threads_for(millicpu: int) -> int:
    """Compute threads for a CPU limit: whole cores, at least one."""
    return max(1, millicpu // 1000)


def heartbeat_max_age(exp: Experiment, role: str = "learner") -> int:
    """Seconds without a heartbeat after which a role's loop is taken as hung.

    The learner's is derived from the slowest update the spec can ask for: its items times the
    slow per-item time measured (SLOW_SECONDS_PER_ITEM), times HEARTBEAT_MARGIN, never under
    HEARTBEAT_FLOOR_SECONDS. Agents and evals beat at every environment step and in every wait
    (for parameters, for replay, between evaluations), so theirs is the floor. Waiting for data
    is not hung: the loop beats between its polls.
    """
    if role != "learner":
        return HEARTBEAT_FLOOR_SECONDS
    alg = exp.spec.algorithm
    if alg.name == "ppo":
        items = alg.batch_size * alg.horizon * (alg.epochs_policy + alg.epochs_baseline)
    else:
        items = alg.batch_size
    slow = items * SLOW_SECONDS_PER_ITEM.get(alg.name, max(SLOW_SECONDS_PER_ITEM.values()))
    return max(HEARTBEAT_FLOOR_SECONDS, math.ceil(HEARTBEAT_MARGIN * slow))


def liveness_probe(exp: Experiment, process: str, role: str = "learner") -> dict[str, Any]:
    """The exec command and timings of a role's startup and liveness probes (see the template).

    process: the container's process, or its group for a replicated one (one template for every
    pod; /tmp is each pod's own)."""
    path = f"/tmp/{process}.heartbeat"  # /tmp is the pod's emptyDir
    max_age = heartbeat_max_age(exp, role)
    command = ["python", "-m", "surreal_kube.runtime.lifecycle", "heartbeat", path]
    return {
        "file": path,
        "command": [*command, "--max-age", str(max_age)],
        "timeout": 10,  # an interpreter's start on a loaded node; the default 1 s is too short
        "period": 30,
        "failures": 2,  # restarted between max_age + 30 and max_age + 60 s after the last beat
        "startup_period": 10,
        "startup_failures": STARTUP_PROBE_SECONDS // 10,
    }


RELEASE_ORDER = (
    "agents",
    "evals",
    "learner",
    "replay",
    "replay-shard",
    "ps",
    "ps-shard",
    "tensorboard",
    "loggerplex",
    "tensorplex",
)
"""The order tensorplex scales the workloads to 0 when the run ends (runtime/conductor.py):
producers first, as the local supervisor stops them, and itself last, after everything else."""


def release_order(experiment: str, topo: Topology) -> list[str]:
    """`deployments/<exp>-learner`, `statefulsets/<exp>-agents` ...: every workload, in
    RELEASE_ORDER; also exactly what the reporter's Role may scale (its resourceNames)."""
    rank = {group: i for i, group in enumerate(RELEASE_ORDER)}
    groups = sorted(topo.groups, key=lambda g: (rank.get(g.name, len(rank) - 1.5), g.name))
    kind = {True: "statefulsets", False: "deployments"}
    return [f"{kind[g.replicated]}/{naming.object_name(experiment, g.name)}" for g in groups]


class _Context:
    """Computes the values of every template from the topology (one place, no duplicates)."""

    def __init__(
        self,
        exp: Experiment,
        topo: Topology,
        namespace: str,
        owner: Mapping[str, Any] | None,
        images: Mapping[str, str],
        profile: ClusterProfile,
        placements: Mapping[str, Placement],
    ) -> None:
        self.exp = exp
        self.name = exp.metadata.name
        self.topo = topo
        self.namespace = namespace
        self.owner = owner_reference(owner) if owner and owner.get("uid") else None
        self.images = images
        self.profile = profile
        self.placements = placements
        self.volume = profile.experiment_volume
        self.addresses = topo.addresses_kube(namespace, profile.cluster_domain)
        self.together = {g.name for g in data_groups(topo, profile)}
        """Groups that share the node of a node-local volume (empty when it is shared)."""

    def _labels(self, group: str | None = None) -> dict[str, str]:
        return naming.labels(self.name, group, self.exp.metadata.labels)

    def config(self) -> dict[str, Any]:
        return {
            "name": naming.config_name(self.name),
            "labels": self._labels(),
            "owner": self.owner,
            "key": CONFIG_KEY,
            "text": dump_yaml(self.exp),
        }

    def claim(self) -> dict[str, Any] | None:
        if self.volume.kind != "persistentVolumeClaim":
            return None
        return {
            "name": naming.data_name(self.name),
            "labels": self._labels(),
            "owner": None if self.volume.retain else self.owner,
            "annotations": {RETAIN_ANNOTATION: "true"} if self.volume.retain else None,
            "access_mode": self.volume.access_mode,
            "storage_class": self.volume.storage_class_name,
            "size": self.volume.size,
        }

    def reporter(self) -> dict[str, Any]:
        workloads = release_order(self.name, self.topo)
        return {
            "name": naming.reporter_name(self.name),
            "configmap": naming.progress_name(self.name),
            "results": naming.results_name(self.name),
            "labels": self._labels(),
            "owner": self.owner,
            "verbs": REPORTER_VERBS,
            "scale": {
                plural: [w.partition("/")[2] for w in workloads if w.startswith(plural + "/")]
                for plural in ("deployments", "statefulsets")
            },
        }

    def _of_group(self, group: Group) -> dict[str, Any]:
        """What every per-group object carries: its name, labels, owner and pod selector."""
        return {
            "name": naming.object_name(self.name, group.name),
            "labels": self._labels(group.name),
            "owner": self.owner,
            "selector": naming.selector_labels(self.name, group.name),
        }

    def services(self, group: Group) -> list[dict[str, Any]]:
        base = self._of_group(group)
        exposed = self.topo.exposed(group)
        if not (group.replicated or exposed):
            return []
        # a replicated group's is headless: its pods (shards) are dialled at their own names
        return [{**base, "headless": group.replicated, "ports": self._ports(exposed)}]

    def disruption_budget(self, group: Group) -> dict[str, Any]:
        """Every pod of a stateful group stays through voluntary disruptions."""
        return {**self._of_group(group), "min_available": group.replicas}

    def network_policy(self, group: Group) -> dict[str, Any]:
        """One group's ingress boundary: from the experiment's own pods only, on the ports it
        binds for others (its Service's); a group that binds none takes no ingress at all."""
        return {
            **self._of_group(group),
            "peers": {naming.EXPERIMENT_LABEL: self.name},
            "ports": sorted({self.addresses[e].port for e in self.topo.exposed(group)}),
        }

    def _ports(self, endpoints: tuple[str, ...]) -> list[dict[str, Any]]:
        """One port per number: every replica of a shard group binds its endpoint on the same
        port of its own pod, so the group's template and Service list it once."""
        taken: set[str] = set()
        ports: set[int] = set()
        out = []
        for endpoint in endpoints:
            port = self.addresses[endpoint].port
            if port in ports:
                continue
            name = port_name(endpoint, taken)
            taken.add(name)
            ports.add(port)
            out.append({"name": name, "port": port, "endpoint": endpoint})
        return out

    def workload(self, group: Group) -> dict[str, Any]:
        return {
            **self._of_group(group),
            "replicas": group.replicas,
            "pod": self._pod(group),
        }

    def _pod(self, group: Group) -> dict[str, Any]:
        placement = self.placements[group.name]
        shape = placement.shape or pod_shape(self.exp, group.component)
        processes = list(group.processes[:1]) if group.replicated else list(group.processes)
        gpus = container_gpus(group, shape.gpus)
        weights = [ROLE_SHARES.get(p.role, (1, 1)) for p in processes]
        cpus = split_weighted(shape.millicpu, [w[0] for w in weights])
        memory = split_weighted(shape.memory, [w[1] for w in weights], unit=2**20)
        containers = [
            self._container(group, p, cpus[i], memory[i], gpus[p.name])
            for i, p in enumerate(processes)
        ]
        if placement.autopilot:
            class_name = placement.node_selector.get(COMPUTE_CLASS_LABEL, "general-purpose")
            autopilot_containers(containers, None if shape.gpus else COMPUTE_CLASSES[class_name])
        volume = self.volume
        sub_path = self.name if volume.kind == "nfs" else None
        path = volume.path
        if volume.kind == "hostPath" and path:
            path = f"{path.rstrip('/')}/{self.name}"
        kind = volume.kind if volume.mounts(group.component) else "emptyDir"
        labels = self._labels(group.name)
        affinity = None
        if group.name in self.together:
            anchor = group.component == DATA_ANCHOR
            labels[DATA_LABEL] = "anchor" if anchor else "follower"
            affinity = {
                # the anchor prefers where its followers already run (a learner rescheduled
                # while they live: a ReadWriteOnce disk attaches to one node); on the first
                # start they are Pending, so it is placed on its own merits
                "required": not anchor,
                "labels": {
                    naming.EXPERIMENT_LABEL: self.name,
                    DATA_LABEL: "follower" if anchor else "anchor",
                },
                "topology_key": HOSTNAME_TOPOLOGY,
            }
        reports = self.profile.progress_reporter and any(p.role == REPORTER_ROLE for p in processes)
        return {
            "labels": labels,
            "annotations": self._pod_annotations(group),
            "containers": containers,
            "image": self.images[image_key(self.exp, group.component)],
            "uid": self.profile.run_as_user,
            "grace_seconds": 60 if group.component == "learner" else 30,
            "priority_class": self._priority_class(group.component),
            "node_selector": placement.node_selector,
            "tolerations": list(placement.tolerations),
            "affinity": affinity,
            "off_spot": off_spot_expressions() if placement.off_spot else None,
            "spread": (
                naming.selector_labels(self.name, group.name)
                if group.component in SPREAD_COMPONENTS
                else None
            ),
            "pull_secrets": list(self.profile.image_pull_secrets),
            "config_dir": CONFIG_DIR,
            "config_map": naming.config_name(self.name),
            "service_account": naming.reporter_name(self.name) if reports else None,
            "reporter": {"dir": REPORTER_DIR, "seconds": TOKEN_SECONDS} if reports else None,
            "volume": {
                "kind": kind,
                "mount_path": volume.mount_path,
                "sub_path": sub_path if kind == "nfs" else None,
                "claim": naming.data_name(self.name),
                "server": volume.server,
                "path": path,
            },
        }

    def _priority_class(self, component: str) -> str | None:
        """The profile's class for the component; a shard pod's defaults to its service's."""
        classes = self.profile.priority_classes
        return classes.get(component) or classes.get(SHARD_SERVICES.get(component, ""))

    def _pod_annotations(self, group: Group) -> dict[str, str]:
        annotations = {CONFIG_DIGEST_ANNOTATION: config_digest(self.exp, group.component)}
        if group.component in PINNED_COMPONENTS:
            annotations[SAFE_TO_EVICT_ANNOTATION] = "false"
        return annotations

    def _environment(self, group: Group, process: Process) -> dict[str, str]:
        """The process's environment; a replicated group's template holds what every replica
        binds (a shard binds its own endpoint, each on the same address of its own pod)."""
        env = self.topo.environment(
            process,
            self.addresses,
            config_path=f"{CONFIG_DIR}/{CONFIG_KEY}",
            experiment_dir=self.volume.mount_path,
        )
        if group.replicated and process.binds:
            for other in group.processes[1:]:
                env.update({endpoint_spec(e).bind_var: self.addresses[e].bind for e in other.binds})
        return env

    def _container(
        self, group: Group, process: Process, millicpu: int, memory: int, gpus: ContainerGPUs
    ) -> dict[str, Any]:
        env = self._environment(group, process)
        entries: list[dict[str, str]] = []
        if group.replicated:
            # One template for every replica: the index is the pod's ordinal, the process name
            # follows from it ($(VAR) expands variables defined earlier in the list).
            index_var, process_var = f"{ENV_PREFIX}INDEX", f"{ENV_PREFIX}PROCESS"
            entries.append(
                {"name": index_var, "field": f"metadata.labels['{naming.POD_INDEX_LABEL}']"}
            )
            env[process_var] = f"{group.name}-$({index_var})"
            env.pop(index_var)
        entries.extend({"name": k, "value": v} for k, v in env.items())
        entries.append({"name": "HOME", "value": "/tmp"})  # the root filesystem is read-only
        threads = str(threads_for(millicpu))
        entries.extend({"name": name, "value": threads} for name in THREAD_VARIABLES)
        if gpus.visible is not None:
            entries.append({"name": "CUDA_VISIBLE_DEVICES", "value": gpus.visible})
        if gpus.limit:  # a GPU role without CUDA names its node (rl/device.py cuda_diagnosis)
            entries.append({"name": "SURREAL_NODE_NAME", "field": "spec.nodeName"})
        reports = self.profile.progress_reporter and process.role == REPORTER_ROLE
        if reports:
            entries.append(
                {"name": "SURREAL_PROGRESS_CONFIGMAP", "value": naming.progress_name(self.name)}
            )
            entries.append({"name": "SURREAL_REPORTER_DIR", "value": REPORTER_DIR})
            entries.append(
                {"name": "SURREAL_RESULTS_CONFIGMAP", "value": naming.results_name(self.name)}
            )
            entries.append(
                {
                    "name": "SURREAL_RELEASE_WORKLOADS",
                    "value": ",".join(release_order(self.name, self.topo)),
                }
            )
        liveness = (
            liveness_probe(self.exp, group.name if group.replicated else process.name, process.role)
            if process.role in LIVENESS_ROLES
            else None
        )
        if liveness:
            entries.append({"name": HEARTBEAT_ENV, "value": liveness["file"]})
        exposed = [e for e in process.binds if self.topo.scope(e) == "cluster"]
        ports = self._ports(tuple(exposed))
        probe = None
        if ports:
            first = endpoint_spec(ports[0]["endpoint"])
            probe = {"port": first.port, "http": first.protocol == "http"}
        return {
            "name": group.name if group.replicated else process.name,
            "command": [ROLE_COMMAND, process.role],
            "env": entries,
            "ports": ports,
            "probe": probe,
            "liveness": liveness,
            "cpu": format_cpu(millicpu),
            "memory": format_memory(memory),
            "gpus": gpus.limit,
            "reporter": reports,
            "ephemeral": None,
        }
