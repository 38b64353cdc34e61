"""Optimizer construction shared by the learners."""

from __future__ import annotations

from collections.abc import Iterable

import torch


def adam(
    params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.0
) -> torch.optim.Adam:
    """Adam, fused into one kernel per step where torch supports it (CPU and CUDA).

    Our networks are small, so an optimizer step is dominated by per-tensor overhead; the fused
    implementation removes most of it (about 1.5-2x faster steps for a 64-64 MLP on one CPU thread)
    and computes the same update.
    """
    params = list(params)
    device = params[0].device.type if params else "cpu"
    fused = device in ("cpu", "cuda")
    return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=fused)
