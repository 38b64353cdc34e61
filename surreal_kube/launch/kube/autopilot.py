"""GKE Autopilot: what its admission accepts, and the profile settings that render for it.

Autopilot has no node pools a pod may name: Google provisions nodes for the pods it admits, and
its admission (GKE Warden) rejects what it cannot provision or would not run. So an experiment
for Autopilot selects hardware, never pools, and asks for what the rules below allow. They come
from Google's pages, read on 2026-12-04:

- Resource requests in Autopilot (minimums, maximums, the CPU:memory ratio of each compute class,
  ephemeral storage): https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-resource-requests
- Compute classes in Autopilot (`cloud.google.com/compute-class`):
  https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-compute-classes
- GPUs in Autopilot (`cloud.google.com/gke-accelerator`, the GPU counts each model offers):
  https://cloud.google.com/kubernetes-engine/docs/how-to/autopilot-gpus
- Spot Pods (`cloud.google.com/gke-spot`):
  https://cloud.google.com/kubernetes-engine/docs/how-to/autopilot-spot-pods
- Security and host options (hostPath only under /var/log, read only; no host namespaces, no
  privileged containers; the node selectors Autopilot allows):
  https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-security and
  https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-overview

Autopilot raises requests below a minimum and fixes an off ratio by raising the smaller side,
silently; it rejects requests above a maximum. We render what it would leave unchanged (requests
equal to limits, each container within the ratio, every container with an ephemeral-storage
request), so that what `render` prints is what runs and `status` reads the same requests the
scheduler does. The same rules, as ValidatingAdmissionPolicies, bite in the test cluster
(`tests/cluster/autopilot/admission.yaml`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import ceil

from pydantic import Field, field_validator

from surreal_kube.launch.kube.spot import SPOT_COMPONENTS
from surreal_kube.schema import SpecModel

GIB = 2**30
MIB = 2**20

AUTOPILOT_API_GROUP = "auto.gke.io"
"""Served only by Autopilot clusters (their workload allowlists): how pre-flight recognises one."""
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
SPOT_LABEL = "cloud.google.com/gke-spot"
SPOT_TOLERATION = {
    "key": SPOT_LABEL,
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}

ALLOWED_SELECTOR_KEYS = (
    COMPUTE_CLASS_LABEL,
    SPOT_LABEL,
    ACCELERATOR_LABEL,
    "cloud.google.com/gke-accelerator-count",
    "cloud.google.com/machine-family",
    "cloud.google.com/gke-ephemeral-storage-local-ssd",
    "cloud.google.com/reservation-name",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "kubernetes.io/arch",
    "kubernetes.io/os",
)
"""Node labels a pod may select on Autopilot; a pool's (`cloud.google.com/gke-nodepool`) is not."""

ACCELERATOR_GPU_COUNTS: dict[str, tuple[int, ...]] = {
    "nvidia-tesla-t4": (1, 2, 4),
    "nvidia-l4": (1, 2, 4, 8),
    "nvidia-tesla-a100": (1, 2, 4, 8, 16),
    "nvidia-a100-80gb": (1, 2, 4, 8),
    "nvidia-h100-80gb": (1, 2, 4, 8),
    "nvidia-h100-mega-80gb": (8,),
    "nvidia-h200-141gb": (8,),
}
"""GPU models Autopilot provisions, and how many of them one pod may ask for."""


@dataclass(frozen=True)
class ClassLimits:
    """What one pod of a compute class may ask for (GPU pods: the accelerator's node decides)."""

    max_millicpu: int
    max_memory: int
    min_ratio: float
    """Least GiB of memory per vCPU."""
    max_ratio: float
    """Most GiB of memory per vCPU."""


COMPUTE_CLASSES: dict[str, ClassLimits] = {
    "general-purpose": ClassLimits(30_000, 110 * GIB, 1.0, 6.5),
    "Balanced": ClassLimits(222_000, 851 * GIB, 1.0, 8.0),
    "Scale-Out": ClassLimits(54_000, 216 * GIB, 4.0, 4.0),
}
"""The compute classes we render for: the default (no selector) and two that users pick."""

POD_MIN_MILLICPU = 50
POD_MIN_MEMORY = 52 * MIB
MAX_POD_EPHEMERAL = 10 * GIB
CONTAINER_EPHEMERAL = 256 * MIB
"""Each container's own writable storage (its log files; the root filesystem is read-only)."""
TMP_EPHEMERAL = GIB
"""The pod's /tmp emptyDir (its sizeLimit), asked by the first container."""


class AutopilotSettings(SpecModel):
    """The profile's `autopilot` section: this cluster is GKE Autopilot (no node pools)."""

    accelerator: str = Field(
        "nvidia-l4",
        description="GPU model of pods that ask for GPUs (the cloud.google.com/gke-accelerator "
        "value), one of " + ", ".join(ACCELERATOR_GPU_COUNTS),
    )
    compute_class: str | None = Field(
        None,
        description="compute class of CPU pods: Balanced or Scale-Out; null: Autopilot's "
        "general-purpose default",
    )
    spot: list[str] = Field(
        default_factory=list,
        description="components whose pods run as Spot Pods (cheaper, preemptible): agent "
        "and eval may; the learner, replay and ps keep the run's state and may not",
    )

    @field_validator("accelerator")
    @classmethod
    def _known_accelerator(cls, value: str) -> str:
        if value not in ACCELERATOR_GPU_COUNTS:
            raise ValueError(
                f"Autopilot has no GPU model {value!r}; one of " + ", ".join(ACCELERATOR_GPU_COUNTS)
            )
        return value

    @field_validator("compute_class")
    @classmethod
    def _known_class(cls, value: str | None) -> str | None:
        named = [c for c in COMPUTE_CLASSES if c != "general-purpose"]
        if value is not None and value not in named:
            raise ValueError(
                f"compute class {value!r} is not one we render for; one of {', '.join(named)} "
                "(or null for Autopilot's general-purpose default)"
            )
        return value

    @field_validator("spot")
    @classmethod
    def _preemptible_only(cls, value: list[str]) -> list[str]:
        refused = [c for c in value if c not in SPOT_COMPONENTS]
        if refused:
            raise ValueError(
                f"{refused[0]!r} may not run on Spot Pods; only {', '.join(SPOT_COMPONENTS)} "
                "may (the others keep the run's state)"
            )
        return value


def within_ratio(millicpu: int, memory: int, limits: ClassLimits) -> tuple[int, int]:
    """`millicpu` and `memory` (bytes, a whole number of MiB back) raised, as Autopilot would
    raise them, until the memory per vCPU is within the class's ratio: too little memory raises
    the memory, too much raises the CPU. A fixed ratio (Scale-Out) holds exactly only at CPU in
    steps of 125m (a whole number of MiB per step), so there the CPU is rounded up to one."""
    lo, hi = Fraction(limits.min_ratio).limit_denominator(), Fraction(limits.max_ratio)
    hi = hi.limit_denominator()
    mib = ceil_to(memory, MIB) // MIB
    if mib * 1000 > hi * 1024 * millicpu:  # MiB per millicore above the most
        millicpu = ceil(Fraction(mib * 1000) / (hi * 1024))
    if lo == hi:
        millicpu = ceil_to(millicpu, 125)
    mib = max(mib, ceil(lo * 1024 * millicpu / 1000))
    return millicpu, mib * MIB


def ceil_to(value: int, unit: int) -> int:
    """`value` rounded up to a multiple of `unit`."""
    return -(-value // unit) * unit


def container_ephemeral(index: int) -> int:
    """The ephemeral-storage request of the pod's `index`-th container: its own logs, and for the
    first also the pod's /tmp."""
    return CONTAINER_EPHEMERAL + (TMP_EPHEMERAL if index == 0 else 0)
