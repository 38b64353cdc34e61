"""Placement: which node pool each workload runs on, and the pre-flight check that it fits.

Every group of the topology becomes one workload whose pods all ask for the same thing: the
component's resources (`spec.resources`), which describe one whole pod. A component goes to the
pool the spec names (`spec.placement`), or else to a pool chosen by fit:

- a GPU pod only to a pool with enough `nvidia.com/gpu` per node; it tolerates the pool's taints;
- a CPU pod only to an untainted pool, preferring pools without GPUs (GPU nodes are for GPU work);
- agents and evals on a Spot pool first (they tolerate its Spot taint); every other component
  never on one by fit (launch/kube/spot.py: what a preemption would cost them);
- among those, the smallest node that holds one pod (least waste), then the pool name.

Then the whole experiment is packed onto the pools' nodes (first fit, every replica, CPU, memory,
GPUs and pod slots). A component that does not fit is refused before anything is created, with a
message saying which component, what it asked for and what the largest pool offers. Capacity is
what the profile says (or the nodes' allocatable when discovered), not what is free right now. An
autoscaled pool (`maxCount` in the profile) counts its maximum number of nodes, so a GPU pool
scaled to zero is a place to go, not a refusal.

The experiment folder's users (profile.DATA_COMPONENTS: learner, tensorplex, loggerplex,
tensorboard, evals) share one node when the volume is node-local (`ExperimentVolume.node_local`:
the default ReadWriteOnce claim, or hostPath): they are placed as one bundle on the learner's pool
(every pod of it on a single node, checked here) and tolerate that pool's taints (a GPU pool's
too, when the learner needs a GPU); the pod template's podAffinity (render.py) puts them on the
same node. A spec naming different pools for two of them is refused. With a ReadWriteMany claim
or NFS each is placed on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from surreal_kube.errors import CapacityError, SpecError
from surreal_kube.experiment.quantity import format_cpu, format_memory, parse_memory, to_millicpu
from surreal_kube.experiment.spec import Experiment
from surreal_kube.experiment.topology import Group, Topology
from surreal_kube.launch.kube.placement import fit
from surreal_kube.launch.kube.profile import (
    DATA_COMPONENTS,
    DEFAULT_POOL_LABEL,
    GPU_RESOURCE,
    ClusterProfile,
    NodePool,
)
from surreal_kube.launch.kube.spot import SPOT_COMPONENTS, SPOT_LABELS

GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
"""Without a profile, GPU pods tolerate the usual GPU taint (GKE adds the same automatically)."""
_GPU_TAINTS_TAKEN = ({"key": GPU_RESOURCE, "operator": "Exists"},)
"""What a GPU pod takes in stride when placed by fit: a GPU taint of any effect; every other
taint, of any effect, makes a pool one to name in the spec rather than one to pick."""
_SPOT_TAINTS_TAKEN = tuple({"key": key, "operator": "Exists"} for key, _ in SPOT_LABELS)
"""What agents and evals take in stride: a Spot pool's taint (spot.py)."""


@dataclass(frozen=True)
class PodShape:
    """What one pod asks for: millicores, bytes, GPUs."""

    millicpu: int
    memory: int
    gpus: int

    def describe(self) -> str:
        """`cpu 2, memory 4Gi, nvidia.com/gpu 1`."""
        text = f"cpu {format_cpu(self.millicpu)}, memory {format_memory(self.memory)}"
        return text + (f", {GPU_RESOURCE} {self.gpus}" if self.gpus else "")

    def requests(self) -> dict[str, float]:
        """resource -> amount, in the units of `_node_room` (millicores, bytes, GPUs)."""
        return {"cpu": self.millicpu, "memory": self.memory, GPU_RESOURCE: self.gpus}


@dataclass(frozen=True)
class Placement:
    """Where one group's pods go: what the pod template carries."""

    group: str
    pool: str | None
    """The chosen pool, None when rendering without a profile and without an explicit pool."""
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, str], ...] = ()
    shape: PodShape | None = None
    """What one pod asks for when placement changed the spec's figures (Autopilot's ratios);
    None: the spec's (`pod_shape`)."""
    autopilot: bool = False
    """Rendered for GKE Autopilot: every container also asks for ephemeral storage."""
    off_spot: bool = False
    """The pods also carry a required node affinity excluding Spot nodes (spot.py)."""


@dataclass(frozen=True)
class PoolGrowth:
    """An autoscaled pool the experiment fits on only once the autoscaler adds nodes to it."""

    pool: str
    now: int
    """Nodes the pool has now (the profile's or the cluster's count)."""
    needed: int
    """Nodes the packing used: at least this many before every pod of it can be scheduled."""
    most: int
    """The pool's maximum (`maxCount`)."""

    def describe(self) -> str:
        """`gpu-pool 0 -> 1`: the words of the status's reason and of `create`."""
        return f"{self.pool} {self.now} -> {self.needed}"


class Placements(dict[str, Placement]):
    """group -> Placement, and the nodes the experiment waits for (`growth`), from one packing.

    A pool scaled to zero is a place to go (its maximum counts), so an experiment that needs it
    is created; `growth` says how many nodes it waits for, so that `create` and the operator's
    status can say it rather than leave a Pending pod to explain itself.
    """

    def __init__(
        self, placements: Mapping[str, Placement], growth: tuple[PoolGrowth, ...] = ()
    ) -> None:
        super().__init__(placements)
        self.growth = growth

    def waiting_for(self) -> str | None:
        """`waiting for the autoscaler: gpu-pool 0 -> 1`, or None when every node is there."""
        if not self.growth:
            return None
        return "waiting for the autoscaler: " + ", ".join(g.describe() for g in self.growth)


def pod_shape(exp: Experiment, component: str) -> PodShape:
    """The requests of one pod of `component` (the spec's resources or the default)."""
    res = exp.spec.component_resources(component)
    return PodShape(to_millicpu(res.cpu), parse_memory(res.memory), res.gpu)


def place(exp: Experiment, topo: Topology, profile: ClusterProfile | None) -> Placements:
    """Placement of every group, checked against the profile's pools (SpecError if it cannot fit).

    Without a profile (or one listing no pools) nothing can be checked: explicit pools become node
    selectors on the pool label and GPU pods tolerate the GPU taint; the rest is the scheduler's.
    """
    data = data_groups(topo, profile)
    bundle_pool = _bundle_pool_name(exp, data)
    if profile is None or not profile.pools:
        label = profile.pool_label if profile else DEFAULT_POOL_LABEL
        out = {g.name: _unchecked(exp, g, label) for g in topo.groups}
        pool_name = bundle_pool[1] if bundle_pool else None
        selector = {label: pool_name} if pool_name else {}
        shared = (dict(GPU_TOLERATION),) if data and _bundle_shape(exp, data).gpus else ()
        for g in data:
            out[g.name] = Placement(
                g.name,
                pool_name,
                dict(selector),
                shared,
                off_spot=g.component not in SPOT_COMPONENTS,
            )
        return Placements(out)
    packer = _Packer(profile.pools)
    out = {}
    # GPU workloads first (they have the fewest places to go), singletons (learner, replay...)
    # before replicated agents and evals, then the largest.
    order = sorted(
        topo.groups,
        key=lambda g: (
            -pod_shape(exp, g.component).gpus,
            g.replicated,
            -g.replicas * pod_shape(exp, g.component).millicpu,
            g.name,
        ),
    )
    data_names = {g.name for g in data}
    if data:  # the bundle goes where its most demanding member would have gone
        first = next(i for i, g in enumerate(order) if g.name in data_names)
        order = [g for g in order if g.name not in data_names]
        order.insert(first, data[0])
    for group in order:
        if group.name in data_names:
            pool = _place_bundle(exp, profile, packer, data, bundle_pool)
            members = data
        else:
            shape = pod_shape(exp, group.component)
            pool = _place_group(exp, profile, packer, group, shape)
            members = [group]
        tolerations = tuple(t.toleration() for t in pool.node_taints)
        for g in members:
            out[g.name] = Placement(
                g.name,
                pool.name,
                profile.node_selector(pool),
                tolerations,
                off_spot=not pool.spot and g.component not in SPOT_COMPONENTS,
            )
    return Placements({g.name: out[g.name] for g in topo.groups}, packer.growth(profile.pools))


def data_groups(topo: Topology, profile: ClusterProfile | None) -> list[Group]:
    """The groups that must share the learner's node (empty when the volume is shared).

    The learner first; see the module docstring.
    """
    from surreal_kube.launch.kube.profile import ExperimentVolume

    volume = profile.experiment_volume if profile is not None else ExperimentVolume()
    if not volume.node_local:
        return []
    groups = [g for g in topo.groups if g.component in DATA_COMPONENTS]
    return sorted(groups, key=lambda g: g.component != "learner")


def _bundle_pool_name(exp: Experiment, data: list[Group]) -> tuple[str, str] | None:
    """(component, pool) the spec names for the bundle, if any (all that name one must agree)."""
    named = {
        g.component: exp.spec.placement[g.component]
        for g in data
        if exp.spec.placement.get(g.component) is not None
    }
    pools = sorted(set(named.values()))
    if len(pools) > 1:
        which = ", ".join(f"spec.placement.{c}={p!r}" for c, p in sorted(named.items()))
        raise SpecError(
            f"{which}: with a ReadWriteOnce experiment volume the learner, tensorplex, "
            "loggerplex, tensorboard and evals share the learner's node (one pool): name the "
            "same pool for all of them, or give the profile a ReadWriteMany volume "
            "(experimentVolume.accessMode: ReadWriteMany on an RWX class, or kind: nfs)"
        )
    return next(iter(sorted(named.items(), key=lambda kv: kv[0] != "learner")), None)


def _bundle_shape(exp: Experiment, data: list[Group]) -> PodShape:
    shapes = [(pod_shape(exp, g.component), g.replicas) for g in data]
    return PodShape(
        sum(s.millicpu * n for s, n in shapes),
        sum(s.memory * n for s, n in shapes),
        sum(s.gpus * n for s, n in shapes),
    )


_SPREAD_HINT = (
    "; give them less (spec.resources), fewer evals, or use a ReadWriteMany volume "
    "(experimentVolume.accessMode: ReadWriteMany on an RWX class, or kind: nfs) so that they "
    "may spread over nodes"
)


def _place_bundle(
    exp: Experiment,
    profile: ClusterProfile,
    packer: _Packer,
    data: list[Group],
    named: tuple[str, str] | None,
) -> NodePool:
    """One node of one pool for every pod of the data groups (see the module docstring)."""
    for g in data:  # one pod too large for any node alone: the usual words, about it alone
        alone = pod_shape(exp, g.component)
        if not any(_fits_node(p, alone) for p in profile.pools):
            _place_group(exp, profile, _Packer(profile.pools), g, alone)
    shape = _bundle_shape(exp, data)
    pods = sum(g.replicas for g in data)
    members = ", ".join(_taken(g, pod_shape(exp, g.component)) for g in data)
    who = (
        f"learner with the pods that share its node (the experiment volume is ReadWriteOnce: "
        f"{members}; together {shape.describe()})"
    )
    if named is not None:
        component, name = named
        pool = profile.pool(name)
        if pool is None:
            known = ", ".join(p.name for p in profile.pools)
            raise SpecError(
                f"spec.placement.{component}: no node pool {name!r} in the cluster profile; "
                f"pools: {known}"
            )
        if not packer.pack(pool, 1, shape, members, slots=pods):
            raise CapacityError(
                f"cannot place {who} on node pool {pool.name!r}: a node of {pool.name} offers "
                f"{_offer(pool)}{_left_note(packer, pool)}{_SPREAD_HINT}"
            )
        return pool
    candidates = _candidates(profile, shape, "learner")
    for pool in candidates:
        if packer.pack(pool, 1, shape, members, slots=pods):
            return pool
    if not candidates:
        error = _refuse_unplaced(profile, shape, "learner", who)
        if not any(_fits_node(p, shape) for p in profile.pools):
            error = SpecError(f"{error}{_SPREAD_HINT}")
        raise error
    best = _largest(candidates, shape)
    raise CapacityError(
        f"cannot place {who}: no node has that much left; the largest pool for them, "
        f"{best.name}, offers {_offer(best)} per node{_left_note(packer, best)}{_SPREAD_HINT}"
    )


def _unchecked(exp: Experiment, group: Group, pool_label: str) -> Placement:
    pool = exp.spec.placement.get(group.component)
    selector = {pool_label: pool} if pool else {}
    gpus = pod_shape(exp, group.component).gpus
    return Placement(
        group.name,
        pool,
        selector,
        (dict(GPU_TOLERATION),) if gpus else (),
        # a pool named without a profile may be Spot: the spec's word goes
        off_spot=pool is None and group.component not in SPOT_COMPONENTS,
    )


def _left_note(packer: _Packer, pool: NodePool) -> str:
    used = packer.used_by(pool)
    return f" (already placed there: {', '.join(used)})" if used else ""


def _node_room(pool: NodePool) -> dict[str, float]:
    """What one node of the pool offers, in the units of `PodShape.requests`."""
    return {"cpu": pool.millicpu, "memory": pool.memory_bytes, GPU_RESOURCE: pool.gpus}


def _fits_node(pool: NodePool, shape: PodShape) -> bool:
    return pool.capacity_count > 0 and fit.fits(shape.requests(), _node_room(pool))


def _candidates(profile: ClusterProfile, shape: PodShape, component: str) -> list[NodePool]:
    """Pools a component may go to by fit, best first (see the module docstring)."""
    spot_ok = component in SPOT_COMPONENTS
    out = []
    for pool in profile.pools:
        if not _fits_node(pool, shape) or (pool.spot and not spot_ok):
            continue
        taken = (_GPU_TAINTS_TAKEN if shape.gpus else ()) + (_SPOT_TAINTS_TAKEN if spot_ok else ())
        taints = [t.model_dump() for t in pool.node_taints]
        if not fit.tolerates(taken, taints, effects=None):
            continue  # a tainted pool is only used when the spec names it
        out.append(pool)
    return sorted(
        out,
        key=lambda p: (
            p.gpus > 0 and not shape.gpus,
            spot_ok and not p.spot,
            p.gpus,
            p.millicpu,
            p.memory_bytes,
            p.name,
        ),
    )


def _refuse_unplaced(
    profile: ClusterProfile, shape: PodShape, component: str, who: str, asks: str = ""
) -> SpecError:
    """Why no pool is a candidate: only Spot pools, only tainted pools, or none that large.

    asks: what each pod asks for, said before the reason (empty for the learner's bundle)."""
    fits = [p for p in profile.pools if _fits_node(p, shape)]
    spot = [p.name for p in fits if p.spot]
    if fits and len(spot) == len(fits) and component not in SPOT_COMPONENTS:
        return SpecError(
            f"cannot place {who}: {asks + '; ' if asks else ''}only Spot node pools have nodes "
            f"that large ({', '.join(spot)}), and a preemption would lose the state of the "
            f"{component}: name one in spec.placement.{component} to use it anyway, or add an "
            "on-demand pool"
        )
    if fits:
        return SpecError(
            f"cannot place {who}: {asks + '; ' if asks else ''}only tainted node pools have "
            f"nodes that large ({', '.join(p.name for p in fits)}): name one in "
            f"spec.placement.{component} to use it"
        )
    largest = _largest(profile.pools, shape)
    return SpecError(
        f"cannot place {who}: {asks + ', but ' if asks else ''}no node pool has a node that "
        f"large; the largest, {largest.name}, offers {_offer(largest)} per node"
    )


def _place_group(
    exp: Experiment, profile: ClusterProfile, packer: _Packer, group: Group, shape: PodShape
) -> NodePool:
    named = exp.spec.placement.get(group.component)
    who = _who(group)
    if named is not None:
        pool = profile.pool(named)
        if pool is None:
            known = ", ".join(p.name for p in profile.pools)
            raise SpecError(
                f"spec.placement.{group.component}: no node pool {named!r} in the cluster "
                f"profile; pools: {known}"
            )
        if not _fits_node(pool, shape):
            raise SpecError(
                f"cannot place {who} on node pool {pool.name!r}: each pod asks for "
                f"{shape.describe()}, a node of {pool.name} offers {_offer(pool)}"
            )
        if not packer.pack(pool, group.replicas, shape, _taken(group, shape)):
            raise CapacityError(_too_many(exp, who, group, shape, pool, packer))
        return pool
    candidates = _candidates(profile, shape, group.component)
    if not candidates:
        raise _refuse_unplaced(
            profile, shape, group.component, who, f"each pod asks for {shape.describe()}"
        )
    for pool in candidates:
        if packer.pack(pool, group.replicas, shape, _taken(group, shape)):
            return pool
    best = _largest(candidates, shape)
    raise CapacityError(_too_many(exp, who, group, shape, best, packer))


def _who(group: Group) -> str:
    return group.name if group.name == group.component else f"{group.name} ({group.component})"


def _taken(group: Group, shape: PodShape) -> str:
    n = group.replicas
    each = shape.describe()
    return f"{group.name} ({n} x {each})" if n != 1 else f"{group.name} ({each})"


def _offer(pool: NodePool) -> str:
    text = f"cpu {format_cpu(pool.millicpu)}, memory {format_memory(pool.memory_bytes)}"
    return text + f", {GPU_RESOURCE} {pool.gpus}"


def _largest(pools: list[NodePool], shape: PodShape) -> NodePool:
    """The pool with the most of what the pod needs most: GPUs for GPU pods, else CPU."""
    if shape.gpus:
        return max(
            pools, key=lambda p: (p.gpus * p.capacity_count, p.millicpu * p.capacity_count, p.name)
        )
    return max(
        pools,
        key=lambda p: (p.millicpu * p.capacity_count, p.memory_bytes * p.capacity_count, p.name),
    )


def _too_many(
    exp: Experiment, who: str, group: Group, shape: PodShape, pool: NodePool, packer: _Packer
) -> str:
    n = group.replicas
    total = PodShape(shape.millicpu * n, shape.memory * n, shape.gpus * n)
    pods = f"{n} pods of {shape.describe()} ({total.describe()} in total) do not fit"
    if n == 1:
        pods = f"1 pod of {shape.describe()} does not fit"
    used = packer.used_by(pool)
    taken = f"; already placed there: {', '.join(used)}" if used else ""
    return (
        f"cannot place {who}: {pods} "
        f"the node pools: the largest pool for it, {pool.name}, has {_nodes(pool)} of "
        f"{_offer(pool)}, {pool.pods} pods each ({_pool_total(pool)} in total){taken}"
        f"; {_what_fits(exp, group, shape, pool, packer)}"
    )


def _what_fits(
    exp: Experiment, group: Group, shape: PodShape, pool: NodePool, packer: _Packer
) -> str:
    """`what fits there: 792 agents (792 pods of 1 agent), nvidia.com/gpu 792 of the 799 left`.

    The numbers a user needs to shrink the experiment until it fits, rather than the totals to
    divide by hand.
    """
    room = packer.room(pool, shape)
    if group.component == "agent":
        batch = exp.spec.agents.per_process
        each = "agent" if batch == 1 else "agents"
        text = f"what fits there: {room * batch:,} agents ({room:,} pods of {batch} {each})"
    elif group.component == "eval":
        text = f"what fits there: {room:,} evals"
    else:
        text = f"what fits there: {room:,} pods"
    if shape.gpus:
        left = packer.left(pool, 2)
        text += f", {GPU_RESOURCE} {room * shape.gpus:,} of the {left:,} left"
    return text


def _nodes(pool: NodePool) -> str:
    """`4 nodes`, or `at most 4 nodes (autoscaled, 0 now)`."""
    n = pool.capacity_count
    if pool.autoscaled:
        return f"at most {n} nodes (autoscaled, {pool.count} now)"
    return f"{n} nodes"


def _pool_total(pool: NodePool) -> str:
    n = pool.capacity_count
    text = f"cpu {format_cpu(pool.millicpu * n)}, memory {format_memory(pool.memory_bytes * n)}"
    return text + f", {GPU_RESOURCE} {pool.gpus * n}"


class _Packer:
    """First-fit of identical pods onto the nodes of each pool, remembering who took what."""

    def __init__(self, pools: list[NodePool]) -> None:
        self.free: dict[str, list[list[int]]] = {
            p.name: [[p.millicpu, p.memory_bytes, p.gpus, p.pods] for _ in range(p.capacity_count)]
            for p in pools
        }
        self.placed: dict[str, list[str]] = {p.name: [] for p in pools}

    def pack(
        self, pool: NodePool, replicas: int, shape: PodShape, who: str = "", slots: int = 1
    ) -> bool:
        """Put `replicas` pods on `pool` if they all fit; leave the pool untouched if not.

        slots: pod slots each takes (a bundle of pods that must share a node is one unit).
        """
        nodes = [list(n) for n in self.free[pool.name]]
        left = replicas
        for node in nodes:
            if left == 0:
                break
            fit = min(
                node[0] // shape.millicpu if shape.millicpu else left,
                node[1] // shape.memory if shape.memory else left,
                node[2] // shape.gpus if shape.gpus else left,
                node[3] // slots,
                left,
            )
            node[0] -= fit * shape.millicpu
            node[1] -= fit * shape.memory
            node[2] -= fit * shape.gpus
            node[3] -= fit * slots
            left -= fit
        if left:
            return False
        self.free[pool.name] = nodes
        if who:
            self.placed[pool.name].append(who)
        return True

    def room(self, pool: NodePool, shape: PodShape) -> int:
        """How many more pods of `shape` fit on the pool's nodes (what is left of them)."""
        return sum(
            min(
                node[0] // shape.millicpu if shape.millicpu else node[3],
                node[1] // shape.memory if shape.memory else node[3],
                node[2] // shape.gpus if shape.gpus else node[3],
                node[3],
            )
            for node in self.free[pool.name]
        )

    def left(self, pool: NodePool, index: int) -> int:
        """What is left on the pool of one resource (0 cpu, 1 memory, 2 GPUs, 3 pod slots)."""
        return sum(node[index] for node in self.free[pool.name])

    def used_by(self, pool: NodePool) -> list[str]:
        return list(self.placed[pool.name])

    def nodes_used(self, pool: NodePool) -> int:
        """Nodes of the pool that hold at least one pod of the experiment."""
        full = [pool.millicpu, pool.memory_bytes, pool.gpus, pool.pods]
        return sum(node != full for node in self.free[pool.name])

    def growth(self, pools: list[NodePool]) -> tuple[PoolGrowth, ...]:
        """The autoscaled pools this packing needs more nodes of than they have now."""
        out = []
        for pool in pools:
            used = self.nodes_used(pool)
            if pool.autoscaled and used > pool.count:
                out.append(PoolGrowth(pool.name, pool.count, used, pool.capacity_count))
        return tuple(out)


def placement_summary(placements: Mapping[str, Placement]) -> dict[str, str | None]:
    """group -> pool, for messages and `status`."""
    return {g: p.pool for g, p in placements.items()}
