"""Placement on GKE Autopilot: hardware is selected, never a pool, and every pod is sized to
what Autopilot admits unchanged (`launch/kube/autopilot.py` has the rules and their sources).

- a GPU pod selects the profile's GPU model (`autopilot.accelerator`) and asks for a GPU count
  that model offers per pod; Autopilot adds the node and its taint, the pod tolerates it;
- a CPU pod selects the profile's compute class, if any, and is raised into its CPU:memory ratio
  (as Autopilot would raise it, so that what is rendered is what runs); a pod above the class's
  maximum is refused here, before anything is created;
- agents and evals named in `autopilot.spot` run as Spot Pods;
- the experiment folder's users share the learner's node when the volume is node-local (the
  default standard-rwo claim): they follow it by podAffinity and tolerate its GPU taint, but
  select no hardware of their own, which could only contradict the learner's node.

`spec.placement` names pools, which Autopilot does not have: it is refused in one line.
"""

from __future__ import annotations

from surreal_kube.errors import SpecError
from surreal_kube.experiment.quantity import format_cpu, format_memory
from surreal_kube.experiment.spec import Experiment
from surreal_kube.experiment.topology import Topology
from surreal_kube.launch.kube.autopilot import (
    ACCELERATOR_GPU_COUNTS,
    ACCELERATOR_LABEL,
    COMPUTE_CLASS_LABEL,
    COMPUTE_CLASSES,
    MAX_POD_EPHEMERAL,
    POD_MIN_MEMORY,
    POD_MIN_MILLICPU,
    SPOT_LABEL,
    SPOT_TOLERATION,
    AutopilotSettings,
    container_ephemeral,
    within_ratio,
)
from surreal_kube.launch.kube.placement.place import (
    GPU_TOLERATION,
    Placement,
    Placements,
    PodShape,
    data_groups,
    place,
    pod_shape,
)
from surreal_kube.launch.kube.profile import ClusterProfile


def place_for(exp: Experiment, topo: Topology, profile: ClusterProfile | None) -> Placements:
    """Placement of every group: Autopilot's for an Autopilot profile, else by pools (`place`)."""
    if profile is not None and profile.autopilot is not None:
        return place_autopilot(exp, topo, profile, profile.autopilot)
    return place(exp, topo, profile)


def place_autopilot(
    exp: Experiment, topo: Topology, profile: ClusterProfile, settings: AutopilotSettings
) -> Placements:
    """Placement of every group on Autopilot (SpecError naming what to change if it cannot)."""
    if exp.spec.placement:
        component, pool = min(exp.spec.placement.items())
        raise SpecError(
            f"spec.placement.{component}: {pool!r} names a node pool, but Autopilot has none to "
            f"select; leave spec.placement out (GPU pods select the profile's "
            f"autopilot.accelerator, {settings.accelerator}; CPU pods autopilot.computeClass)"
        )
    followers = {g.name for g in data_groups(topo, profile)[1:]}
    learner_gpu = pod_shape(exp, "learner").gpus > 0
    out: dict[str, Placement] = {}
    for group in topo.groups:
        follows_gpu = group.name in followers and learner_gpu
        # the learner's followers share its node: its compute class, or none on a GPU node
        compute_class = None if follows_gpu else settings.compute_class
        shape = autopilot_shape(exp, group.component, settings, compute_class)
        containers = 1 if group.replicated else len(group.processes)
        ephemeral = sum(container_ephemeral(i) for i in range(containers))
        if ephemeral > MAX_POD_EPHEMERAL:
            raise SpecError(
                f"{group.name}: {containers} containers in one pod ask for "
                f"{format_memory(ephemeral)} of ephemeral storage (their logs and /tmp), above "
                f"the {format_memory(MAX_POD_EPHEMERAL)} Autopilot admits per pod; ask for "
                "fewer shards (replay.shards, ps.shards)"
            )
        selector: dict[str, str] = {}
        tolerations: list[dict[str, str]] = []
        if shape.gpus:
            selector[ACCELERATOR_LABEL] = settings.accelerator
            tolerations.append(dict(GPU_TOLERATION))
        elif follows_gpu:  # on the learner's GPU node, selecting no hardware of their own
            tolerations.append(dict(GPU_TOLERATION))
        elif compute_class:
            selector[COMPUTE_CLASS_LABEL] = compute_class
        if group.component in settings.spot and group.name not in followers:
            selector[SPOT_LABEL] = "true"
            tolerations.append(dict(SPOT_TOLERATION))
        out[group.name] = Placement(
            group.name, None, selector, tuple(tolerations), shape=shape, autopilot=True
        )
    return Placements(out)  # Autopilot adds the nodes for what it admits: none to wait for


def autopilot_shape(
    exp: Experiment, component: str, settings: AutopilotSettings, compute_class: str | None
) -> PodShape:
    """One pod of `component` as Autopilot admits it unchanged in `compute_class` (None: the
    general-purpose default): raised to the minimum and into the ratio, as Autopilot would
    raise it; SpecError above the class's maximum."""
    shape = pod_shape(exp, component)
    where = f"spec.resources.{component}"
    if shape.gpus:
        counts = ACCELERATOR_GPU_COUNTS[settings.accelerator]
        if shape.gpus not in counts:
            raise SpecError(
                f"{where}.gpu: {shape.gpus} GPUs per pod, but Autopilot's {settings.accelerator} "
                f"pods take {', '.join(map(str, counts))} (profile autopilot.accelerator)"
            )
        return shape  # the GPU model's machine bounds it; no ratio is enforced
    name = compute_class or "general-purpose"
    limits = COMPUTE_CLASSES[name]
    millicpu, memory = within_ratio(
        max(shape.millicpu, POD_MIN_MILLICPU), max(shape.memory, POD_MIN_MEMORY), limits
    )
    if millicpu > limits.max_millicpu or memory > limits.max_memory:
        raise SpecError(
            f"{where}: cpu {format_cpu(millicpu)}, memory {format_memory(memory)} per pod (in "
            f"Autopilot's CPU:memory ratio) is above what its {name} compute class admits, cpu "
            f"{format_cpu(limits.max_millicpu)} and memory {format_memory(limits.max_memory)}; "
            "ask for less, or a larger class (profile autopilot.computeClass: Balanced)"
        )
    return PodShape(millicpu, memory, 0)
