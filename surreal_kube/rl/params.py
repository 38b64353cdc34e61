"""Conversions between torch state dicts and the flat numpy dicts that cross processes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from surreal_kube.rl.interfaces import ArrayDict


def state_to_arrays(state: Mapping[str, torch.Tensor], prefix: str) -> ArrayDict:
    """`{prefix}/{name}` -> numpy copy of each tensor (on the CPU)."""
    return {f"{prefix}/{k}": v.detach().cpu().numpy().copy() for k, v in state.items()}


def arrays_to_state(arrays: Mapping[str, Any], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors stored under `prefix` by `state_to_arrays`."""
    head = prefix + "/"
    return {
        k[len(head) :]: torch.as_tensor(np.asarray(v))
        for k, v in arrays.items()
        if k.startswith(head)
    }


def arrays_to_tensors(arrays: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """numpy -> torch (for checkpoints: `weights_only` loading accepts tensors, not arrays)."""
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}


def tensors_to_arrays(tensors: Mapping[str, Any]) -> ArrayDict:
    """torch (or numpy) -> numpy."""
    return {
        k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
        for k, v in tensors.items()
    }
