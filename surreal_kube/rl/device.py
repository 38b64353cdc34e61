"""Choosing where a learner or an agent computes."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch

from surreal_kube.errors import SpecError

NVIDIA_DRIVER_VERSION = Path("/proc/driver/nvidia/version")
"""What the NVIDIA kernel module says it is; absent where no driver is loaded (or not mounted)."""

CUDA_MIN_DRIVER = {12: "525.60.13", 13: "580.65.06"}
"""The oldest Linux driver each CUDA major runs on (NVIDIA's CUDA release notes, "minor version
compatibility"): torch's wheels bring the CUDA runtime, the node brings the driver."""


def resolve_device(preference: str | torch.device | None = "auto") -> torch.device:
    """ "auto" (or None): CUDA when present, else CPU; "cuda" without a GPU is a clear error.

    Asking for CUDA explicitly and silently getting a CPU would make a run ten times slower with no
    explanation, so that is refused instead.
    """
    if isinstance(preference, torch.device):
        return preference
    if preference in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if preference.startswith("cuda") and not torch.cuda.is_available():
        raise SpecError(
            f"device {preference!r} was requested but torch sees no CUDA GPU {cuda_diagnosis()}; "
            "or set the device to 'auto' or 'cpu'"
        )
    return torch.device(preference)


def learner_device_preference(learner_device: str, learner_gpus: int) -> str:
    """The learner's device: a learner whose pod holds a GPU computes on it.

    "auto" beside a GPU request would fall back to the CPU wherever CUDA is broken, a run ten
    times slower on a GPU node with no word said; with a GPU requested the learner asks for
    "cuda", so a missing driver is a start-up error naming the node and the driver. The spec
    refuses "cpu" beside a GPU request (`ExperimentSpec`)."""
    return "cuda" if learner_gpus and learner_device == "auto" else learner_device


def cuda_diagnosis() -> str:
    """Where and why CUDA is missing, in one parenthesis: the node, its driver (or none), the
    CUDA runtime torch was built with and the driver that runtime needs."""
    node = os.environ.get("SURREAL_NODE_NAME") or socket.gethostname()
    runtime = torch.version.cuda
    try:
        first = NVIDIA_DRIVER_VERSION.read_text(errors="replace").splitlines()[0]
        driver = f"driver: {' '.join(first.split())}"
    except (OSError, IndexError):
        driver = f"no NVIDIA driver loaded ({NVIDIA_DRIVER_VERSION} is missing)"
    if runtime is None:
        needs = f"torch {torch.__version__} is a CPU-only build"
    else:
        major = int(runtime.split(".")[0])
        floor = CUDA_MIN_DRIVER.get(major, "a newer one")
        needs = f"torch {torch.__version__} runs CUDA {runtime}, which needs driver >= {floor}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hidden = f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    return f"(node {node}: {driver}; {needs}{hidden})"
