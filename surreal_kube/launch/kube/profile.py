"""Cluster profiles: what a cluster offers (node pools) and how experiments use it (volume, images).

A profile is a YAML file a user keeps per cluster, or is discovered from the live cluster's nodes.
The node-pool shape is the one the test control plane uses for its simulated pools
(`tests/cluster/kwok/pools.yaml`), so that file is itself a valid profile:

    pools:
      - name: gpu-pool          # the value of the pool label (cloud.google.com/gke-nodepool)
        count: 0                # nodes there now (a fixed pool: its size)
        maxCount: 4             # autoscaled: the most nodes the autoscaler may add
        cpu: "16"               # allocatable per node: the machine shape
        memory: 64Gi
        gpus: 4                 # nvidia.com/gpu per node; GKE taints such nodes
    registry: us-docker.pkg.dev/my-project/surreal   # where built images are pushed
    experimentVolume:              # default: a 10Gi ReadWriteOnce claim on the default class
      kind: persistentVolumeClaim
      storageClassName: standard-rwx
      accessMode: ReadWriteMany    # data pods may spread over nodes (RWX classes only)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from surreal_kube.errors import SpecError
from surreal_kube.experiment.quantity import (
    CpuQuantity,
    MemoryQuantity,
    parse_memory,
    parse_quantity,
    to_millicpu,
)
from surreal_kube.experiment.spec import known_components
from surreal_kube.launch.kube.autopilot import AutopilotSettings
from surreal_kube.launch.kube.settings import check_registry
from surreal_kube.launch.kube.spot import is_spot_node
from surreal_kube.schema import SpecModel

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_POOL_LABEL = "cloud.google.com/gke-nodepool"
ACCELERATOR_LABELS = ("cloud.google.com/gke-accelerator", "nvidia.com/gpu.product")
POOL_LABELS = (
    DEFAULT_POOL_LABEL,
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "node.kubernetes.io/instance-type",
)
"""Node labels that name a node's pool, tried in this order when discovering pools."""


class Taint(SpecModel):
    """A node taint; pods placed on the pool tolerate it."""

    key: str = Field(description="taint key, e.g. nvidia.com/gpu")
    value: str | None = Field(None, description="taint value, e.g. present")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        "NoSchedule", description="taint effect"
    )

    def toleration(self) -> dict[str, str]:
        """The toleration that matches exactly this taint."""
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


class NodePool(SpecModel):
    """A set of identical nodes; capacities are what one node can give to pods (allocatable)."""

    name: str = Field(description="pool name, the value of the profile's poolLabel")
    count: int = Field(1, ge=0, description="number of nodes (now, for an autoscaled pool)")
    max_count: int | None = Field(
        None,
        ge=0,
        description="autoscaled pool: the most nodes the cluster autoscaler may run; pre-flight "
        "counts this many, also while the pool is scaled to zero",
    )
    cpu: CpuQuantity = Field("8", description="allocatable CPU per node, a Kubernetes quantity")
    memory: MemoryQuantity = Field("32Gi", description="allocatable memory per node")
    gpus: int = Field(0, ge=0, description="nvidia.com/gpu per node")
    accelerator: str | None = Field(None, description="GPU model label value, e.g. nvidia-l4")
    pods: int = Field(110, ge=1, description="maximum pods per node")
    labels: dict[str, str] = Field(default_factory=dict, description="extra node labels")
    taints: list[Taint] = Field(
        default_factory=list, description="node taints; GPU pools also get nvidia.com/gpu"
    )
    node_selector: dict[str, str] | None = Field(
        None, description="labels that select this pool's nodes; default {poolLabel: name}"
    )
    spot: bool = Field(
        False,
        description="Spot (preemptible) nodes: only agents and evals go there unless the spec "
        "names the pool; discovered from the nodes' labels (cloud.google.com/gke-spot...)",
    )

    @property
    def node_taints(self) -> list[Taint]:
        """The pool's taints; a GPU pool also has GKE's nvidia.com/gpu taint unless listed.

        GKE (and the test cluster) taint GPU nodes so that only pods asking for GPUs land there.
        """
        if self.gpus and not any(t.key == GPU_RESOURCE for t in self.taints):
            return [*self.taints, Taint(key=GPU_RESOURCE, value="present")]
        return list(self.taints)

    @property
    def capacity_count(self) -> int:
        """The nodes pre-flight may count on: the autoscaler's maximum, else the nodes there."""
        return max(self.count, self.max_count or 0)

    @property
    def autoscaled(self) -> bool:
        """Whether the autoscaler may add nodes beyond those there now."""
        return self.max_count is not None and self.max_count > self.count

    @property
    def millicpu(self) -> int:
        """Allocatable CPU per node in millicores."""
        return to_millicpu(self.cpu)

    @property
    def memory_bytes(self) -> int:
        """Allocatable memory per node in bytes."""
        return parse_memory(self.memory)


def merge_pools(live: Iterable[NodePool], declared: Iterable[NodePool]) -> list[NodePool]:
    """The live cluster's pools with the profile's declarations on top.

    A declared pool keeps its declared shape (what a new node will offer) and maximum, and takes
    the live node count when the cluster has such a pool now; a pool scaled to zero has no node
    to discover, so only its declaration says it exists. Live pools nobody declared are kept.
    """
    now = {p.name: p for p in live}
    out: dict[str, NodePool] = dict(now)
    for pool in declared:
        there = now.get(pool.name)
        if there is not None:  # Spot if either says so: the nodes' labels are the truth
            pool = pool.model_copy(update={"count": there.count, "spot": pool.spot or there.spot})
        out[pool.name] = pool
    return [out[name] for name in sorted(out)]


DATA_COMPONENTS = ("learner", "tensorplex", "loggerplex", "tensorboard", "eval")
"""Components whose pods read or write the experiment folder, and what each keeps there: the
learner its checkpoints (and it reads the evals' status files); tensorplex the TensorBoard event
files and the end-of-run results; loggerplex the log files; tensorboard reads the event files;
evals write their videos and status files. Agents, replay and ps only write status files that
nothing reads on a cluster (progress comes from the `<exp>-progress` ConfigMap): they get an
emptyDir at the same path, so their processes are unchanged and need no shared volume."""


class ExperimentVolume(SpecModel):
    """Where the experiment folder (checkpoints, TensorBoard logs) lives; it outlives pods.

    Only the data components (DATA_COMPONENTS) mount it. The default is a ReadWriteOnce claim,
    which every cluster's default StorageClass can serve (GKE's standard-rwo, kind's local-path):
    the data pods then share one node, the learner's (`node_local`). A ReadWriteMany claim
    (Filestore, an NFS provisioner) or `kind: nfs` lets them spread over nodes.
    """

    kind: Literal["persistentVolumeClaim", "nfs", "hostPath", "emptyDir"] = Field(
        "persistentVolumeClaim",
        description="a PVC per experiment, an NFS export, a node path, or emptyDir (testing only)",
    )
    size: str = Field("10Gi", description="persistentVolumeClaim: requested size")
    storage_class_name: str | None = Field(
        None, description="persistentVolumeClaim: storage class; null: the cluster default"
    )
    access_mode: Literal["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"] = Field(
        "ReadWriteOnce",
        description="persistentVolumeClaim: ReadWriteOnce (any class; the pods that use the "
        "folder share the learner's node) or ReadWriteMany (an RWX class such as Filestore or "
        "NFS; they may spread over nodes)",
    )
    retain: bool = Field(
        True,
        description="persistentVolumeClaim: keep the claim (the data) when the experiment is "
        "deleted, unless `delete --delete-data`; false: the claim goes with the experiment",
    )
    server: str | None = Field(None, description="nfs: server address")
    path: str | None = Field(
        None, description="nfs / hostPath: root folder; each experiment uses <path>/<name>"
    )
    mount_path: str = Field("/experiment", description="where containers see the folder")

    @field_validator("size")
    @classmethod
    def _check_size(cls, value: str) -> str:
        parse_memory(value)
        return value

    @model_validator(mode="after")
    def _needs(self) -> ExperimentVolume:
        if self.kind == "nfs" and not (self.server and self.path):
            raise ValueError("experimentVolume: kind nfs needs server and path")
        if self.kind == "hostPath" and not self.path:
            raise ValueError("experimentVolume: kind hostPath needs path")
        if self.kind == "persistentVolumeClaim" and self.access_mode == "ReadWriteOncePod":
            raise ValueError(
                "experimentVolume.accessMode: ReadWriteOncePod lets one pod use the folder, but "
                "the learner, tensorplex, loggerplex, tensorboard and evals all do; use "
                "ReadWriteOnce (they share the learner's node) or ReadWriteMany"
            )
        return self

    @property
    def node_local(self) -> bool:
        """Whether the folder can be used from one node only, so its users share that node.

        A ReadWriteOnce claim attaches to one node; a hostPath is a different folder on each
        node. NFS and ReadWriteMany claims are shared by every node; emptyDir by no one (each
        pod has its own, for tests that need no data kept).
        """
        if self.kind == "persistentVolumeClaim":
            return self.access_mode != "ReadWriteMany"
        return self.kind == "hostPath"

    def mounts(self, component: str) -> bool:
        """Whether pods of `component` mount the experiment folder (else an emptyDir)."""
        return self.kind == "emptyDir" or component in DATA_COMPONENTS


VOLUME_KEYS = (
    "kind",
    "size",
    "storageClassName",
    "accessMode",
    "retain",
    "server",
    "path",
    "mountPath",
)
"""The keys of `experimentVolume`; an admin allows them one by one as `experimentVolume.<key>`."""
POLICY_KEYS = ("experimentMayOverride", "allowHostPath", "allowNfs")
"""The admin's rules for Experiments: never an Experiment's to set, never written into one."""
OVERRIDABLE_KEYS = (
    "pools",
    "poolLabel",
    "clusterDomain",
    "registry",
    "imagePullSecrets",
    "experimentVolume",
    *(f"experimentVolume.{k}" for k in VOLUME_KEYS),
    "runAsUser",
    "progressReporter",
    "autopilot",
    "priorityClasses",
)
"""What `experimentMayOverride` may list: every profile key but the admin's rules."""
DEFAULT_OVERRIDABLE = (
    "clusterDomain",
    "registry",
    "experimentVolume.size",
    "experimentVolume.storageClassName",
    "experimentVolume.accessMode",
    "experimentVolume.retain",
    "experimentVolume.mountPath",
)
"""What an Experiment may override unless the admin says otherwise: what a user allowed to
create the experiment's objects could choose anyway (a claim's size and StorageClass, which
quotas still bound; the registry and DNS domain its own images and Services use). Left to the
admin, because the operator would act with its own rights rather than the author's:

- `experimentVolume.kind`, `.path`, `.server`: a hostPath mounts any folder of the node (the
  kubelet's, another tenant's); an NFS export any server the nodes reach; an emptyDir loses data;
- `runAsUser`: the uid every container runs as (another service's files on a shared volume);
- `pools`, `poolLabel`: placement, and the pools' taints become tolerations (control-plane or
  reserved nodes); an empty list means pools discovered from every node;
- `imagePullSecrets`: pulling with credentials of the namespace the author may not read;
- `progressReporter`: the operator creates a Role and RoleBinding for it;
- `autopilot`: its GPU model, compute class and Spot Pods are placement too;
- `priorityClasses`: a priority preempts other tenants' pods (system-cluster-critical, say).
"""


class ClusterProfile(SpecModel):
    """Everything cluster-specific the renderer needs; the experiment spec stays portable."""

    pools: list[NodePool] = Field(default_factory=list, description="node pools")
    pool_label: str = Field(DEFAULT_POOL_LABEL, description="node label naming a node's pool")
    cluster_domain: str = Field("cluster.local", description="cluster DNS domain")
    registry: str | None = Field(
        None, description="registry built images are tagged for and pushed to; null: local only"
    )
    image_pull_secrets: list[str] = Field(
        default_factory=list, description="Secrets pods use to pull images"
    )
    experiment_volume: ExperimentVolume = Field(default_factory=ExperimentVolume)
    run_as_user: int = Field(10001, ge=1, description="non-root uid (and gid) of every container")
    progress_reporter: bool = Field(
        True,
        description="give tensorplex the ServiceAccount <exp>-reporter (a Role on its one "
        "progress ConfigMap) so that progress reaches status and list; creating a Role needs "
        "more than the 'edit' ClusterRole: false leaves every pod without a token, and no progress",
    )
    experiment_may_override: list[str] = Field(
        default_factory=lambda: list(DEFAULT_OVERRIDABLE),
        description="operator only: the keys an Experiment's spec.profile may set to a value "
        "other than this profile's (top-level keys, or experimentVolume.<field>); the default "
        "lets it choose the claim's size, class, access mode, retention and mount path, the "
        "registry and the cluster domain, and nothing that places pods on other nodes, runs "
        "them as another user, lends them pull secrets or mounts another folder",
    )
    allow_host_path: bool = Field(
        False,
        description="operator only: whether an experiment may use a hostPath volume (a folder "
        "of the node, outside any quota), from this profile or an Experiment's",
    )
    allow_nfs: bool = Field(
        False,
        description="operator only: whether an experiment may mount an NFS export, from this "
        "profile or an Experiment's (the operator's pods reach any server the node can)",
    )
    priority_classes: dict[str, str] = Field(
        default_factory=dict,
        description="PriorityClass per component (learner, replay, ps above agent and eval, "
        "say): who waits and who is preempted when the cluster is full; unset: the cluster's "
        "default class. Pre-flight refuses a class the cluster does not have",
    )
    autopilot: AutopilotSettings | None = Field(
        None,
        description="GKE Autopilot: no node pools; GPU pods select a GPU model, CPU pods a "
        "compute class, and requests follow Autopilot's rules (launch/kube/autopilot.py); "
        "found by pre-flight on a cluster that serves auto.gke.io, else set here",
    )

    @model_validator(mode="after")
    def _unique(self) -> ClusterProfile:
        names = [p.name for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pools: pool {dupes[0]!r} is listed twice")
        if self.autopilot is not None and self.pools:
            raise ValueError(
                f"pools: Autopilot has no node pools to select (pool {self.pools[0].name!r}); "
                "leave pools out: GPU pods select autopilot.accelerator, CPU pods "
                "autopilot.computeClass"
            )
        if self.autopilot is not None and self.experiment_volume.kind == "hostPath":
            raise ValueError(
                "experimentVolume.kind: Autopilot refuses hostPath volumes (only /var/log, read "
                "only); use persistentVolumeClaim (standard-rwo, or standard-rwx on Filestore)"
            )
        return self

    @field_validator("priority_classes")
    @classmethod
    def _known_components(cls, value: dict[str, str]) -> dict[str, str]:
        return known_components(value)

    @field_validator("registry")
    @classmethod
    def _a_registry(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return check_registry(value, "registry")
        except SpecError as exc:
            raise ValueError(str(exc).removeprefix("registry: ")) from None

    @field_validator("experiment_may_override")
    @classmethod
    def _known_keys(cls, value: list[str]) -> list[str]:
        unknown = [k for k in value if k not in OVERRIDABLE_KEYS]
        if unknown:
            raise ValueError(
                f"{unknown[0]!r} is not a key an Experiment may override; one of "
                + ", ".join(OVERRIDABLE_KEYS)
            )
        return value

    def pool(self, name: str) -> NodePool | None:
        """The pool called `name`, if any."""
        return next((p for p in self.pools if p.name == name), None)

    def node_selector(self, pool: NodePool) -> dict[str, str]:
        """The nodeSelector that lands a pod on `pool`."""
        return dict(pool.node_selector or {self.pool_label: pool.name})


def load_profile(path: str | Path) -> ClusterProfile:
    """Read a profile file; errors name the file and the field (SpecError, exit 2)."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SpecError(f"cluster profile {str(p)!r} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cluster profile {str(p)!r} cannot be read: {exc}") from exc
    except yaml.YAMLError as exc:
        raise SpecError(f"cluster profile {str(p)!r}: invalid YAML: {exc}") from exc
    return profile_from_dict(data or {}, str(p))


def profile_from_dict(data: Mapping[str, Any], source: str = "cluster profile") -> ClusterProfile:
    """Validate a profile document (SpecError names the field that is wrong)."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{source}: must be a mapping with a 'pools' list")
    try:
        return ClusterProfile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or 'profile'}: {e['msg']}" for e in exc.errors()
        )
        raise SpecError(f"{source}: {problems}") from None


# ------------------------------------------------------------------------------------ discovery


CONDITION_TAINT_PREFIX = "node.kubernetes.io/"
"""Taints the node lifecycle controller sets and lifts with a node's condition (disk-pressure,
not-ready, unschedulable, ...): how a node is now, not what its pool is for."""
AUTOSCALER_TAINTS = frozenset(
    {"ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler"}
)
"""The cluster-autoscaler's marks on a node it is about to remove: passing too."""


def _pool_taint(key: str | None) -> bool:
    if not key:
        return False
    return not (key.startswith(CONDITION_TAINT_PREFIX) or key in AUTOSCALER_TAINTS)


def pools_from_nodes(nodes: Iterable[Mapping[str, Any]]) -> list[NodePool]:
    """Group node records ({name, labels, taints, allocatable}) into pools.

    Nodes are grouped by the first pool label they carry (GKE, EKS, Karpenter, AKS, then instance
    type); a node with none is a pool of its own. A pool offers the smallest allocatable of its
    nodes and the taints all of them share, less those of a passing condition (a node short of
    disk is still of its pool: the pods wait, as anyone's would); the caller leaves cordoned
    nodes out (`cluster.discover_pools`). This is capacity, not free space: what other
    workloads use now is not subtracted.
    """
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for node in nodes:
        labels = node.get("labels") or {}
        key = next(((k, labels[k]) for k in POOL_LABELS if k in labels), None)
        if key is None:
            key = ("kubernetes.io/hostname", labels.get("kubernetes.io/hostname", node["name"]))
        grouped.setdefault(key, []).append(node)
    pools = []
    for (label, value), members in sorted(grouped.items(), key=lambda kv: kv[0][1]):
        alloc = [m.get("allocatable") or {} for m in members]
        cpu = min(to_millicpu(str(a.get("cpu", "0") or "0")) or 0 for a in alloc)
        memory = min(parse_memory(str(a.get("memory", "1") or "1")) for a in alloc)
        gpus = min(int(parse_quantity(str(a.get(GPU_RESOURCE, "0")))) for a in alloc)
        pods = min(int(parse_quantity(str(a.get("pods", "110")))) for a in alloc)
        taint_sets = [
            {
                (t.get("key"), t.get("value"), t.get("effect"))
                for t in m.get("taints") or []
                if _pool_taint(t.get("key"))
            }
            for m in members
        ]
        common = set.intersection(*taint_sets) if taint_sets else set()
        accelerator = next(
            (
                (m.get("labels") or {}).get(k)
                for k in ACCELERATOR_LABELS
                for m in members[:1]
                if (m.get("labels") or {}).get(k)
            ),
            None,
        )
        if cpu <= 0:
            continue
        pools.append(
            NodePool(
                name=value,
                count=len(members),
                cpu=f"{cpu}m",
                memory=str(memory),
                gpus=gpus,
                accelerator=accelerator,
                pods=max(pods, 1),
                taints=[
                    Taint(key=k, value=v, effect=e) for k, v, e in sorted(common, key=str) if k
                ],
                node_selector={label: value},
                spot=all(is_spot_node(m.get("labels") or {}) for m in members),
            )
        )
    return pools


PROFILE_KEY = "profile"
"""Where an `Experiment` object carries its cluster profile: `spec.profile`."""


def profile_document(profile: ClusterProfile) -> dict[str, Any]:
    """A profile as the `spec.profile` of an `Experiment`: every key, nulls left out.

    Every key is written, so the operator renders with exactly this profile and none of its
    own settings (a null would mean "the operator's", which is not what was planned). The
    admin's rules (`POLICY_KEYS`) are left out: they are the operator's alone, and a CLI's
    defaults there would read as an attempt to change them.
    """
    doc = profile.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {k: v for k, v in doc.items() if k not in POLICY_KEYS}  # the admin's, not ours


def object_profile(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `spec.profile` section of an `Experiment` object (a mapping), or None without one."""
    spec = obj.get("spec") or {}
    section = spec.get(PROFILE_KEY) if isinstance(spec, Mapping) else None
    if section is None:
        return None
    if not isinstance(section, Mapping):
        raise SpecError(
            f"spec.{PROFILE_KEY}: must be a mapping of cluster-profile keys "
            "(pools, experimentVolume, imagePullSecrets, ...), got "
            f"{type(section).__name__}"
        )
    return dict(section)


def merge_profiles(
    base: ClusterProfile | None, section: Mapping[str, Any] | None
) -> ClusterProfile | None:
    """The operator's profile with an `Experiment`'s `spec.profile` over it, key by key, within
    what the operator's profile lets an Experiment choose.

    Each top-level key the object gives replaces the operator's value of that key whole (its
    `experimentVolume`, its `imagePullSecrets` list, its `pools`); keys it leaves out keep the
    operator's. The operator applies with its own rights, not the author's, so a key may differ
    from the operator's value only where `experimentMayOverride` allows it: a key the object
    sets to the operator's own value is no override (`create --profile FILE` writes every key of
    FILE, and most equal the operator's). hostPath and NFS volumes need `allowHostPath` /
    `allowNfs`, also in the operator's own profile. SpecError names the keys and what is allowed.
    """
    rules = base or ClusterProfile()
    merged = base
    if section is not None:
        doc = base.model_dump(by_alias=True, mode="json", exclude_none=True) if base else {}
        doc.update(section)
        merged = profile_from_dict(doc, f"spec.{PROFILE_KEY}")
        check_overrides(rules, merged)
    if merged is not None:
        check_volume_allowed(rules, merged, "spec.profile" if section else "the operator's profile")
    return merged


def overridden(base: ClusterProfile, merged: ClusterProfile) -> list[str]:
    """The keys whose value differs between the two profiles; `experimentVolume` field by field
    (`experimentVolume.kind`), since an admin may allow some of its fields and not others."""
    before = base.model_dump(by_alias=True, mode="json")
    after = merged.model_dump(by_alias=True, mode="json")
    out = []
    for key, value in after.items():
        if key == "experimentVolume":
            old = before.get(key) or {}
            out += [f"{key}.{k}" for k, v in value.items() if old.get(k) != v]
        elif before.get(key) != value:
            out.append(key)
    return out


def check_overrides(rules: ClusterProfile, merged: ClusterProfile) -> None:
    """SpecError unless every key `merged` changes is one `rules` lets an Experiment change."""
    allowed = set(rules.experiment_may_override)
    refused = [
        k
        for k in overridden(rules, merged)
        if k not in allowed and k.split(".", 1)[0] not in allowed
    ]
    if refused:
        may = ", ".join(rules.experiment_may_override) or "nothing"
        raise SpecError(
            f"spec.{PROFILE_KEY}: the operator's profile does not let an Experiment override "
            f"{', '.join(refused)}; it may override: {may} (the admin allows more with "
            "experimentMayOverride in the operator's profile, Helm value profile)"
        )


def check_volume_allowed(rules: ClusterProfile, merged: ClusterProfile, source: str) -> None:
    """SpecError for a hostPath or NFS volume the admin's rules do not enable."""
    kind = merged.experiment_volume.kind
    if kind == "hostPath" and not rules.allow_host_path:
        raise SpecError(
            f"{source}: experimentVolume.kind hostPath is not enabled by the operator's "
            "profile (allowHostPath: true there lets experiments mount a node's folder)"
        )
    if kind == "nfs" and not rules.allow_nfs:
        raise SpecError(
            f"{source}: experimentVolume.kind nfs is not enabled by the operator's profile "
            "(allowNfs: true there lets experiments mount an NFS export)"
        )
