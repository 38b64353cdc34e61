"""Choosing where a learner or an agent computes."""

from __future__ import annotations

import torch

from surreal_kube.errors import SpecError


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
            f"device {preference!r} was requested but torch sees no CUDA GPU "
            "(check CUDA_VISIBLE_DEVICES and the driver), or set the device to 'auto' or 'cpu'"
        )
    return torch.device(preference)
