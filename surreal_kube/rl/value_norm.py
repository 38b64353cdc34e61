"""The critic's targets on a scale it can follow (PopArt, van Hasselt et al. 2016).

Why: Adam moves each weight by about the learning rate per step, so a critic whose output must
reach returns in the hundreds (Ant-v5 at gamma 0.99: a few a step for 100 effective steps)
climbs only a fixed amount per update. On Ant-v5 without this (PPO, `bench/learning.py --figure
ppo-ant`) the critic explained none of the returns while its targets crept up, so GAE's
advantages were sub-trajectory reward sums with a useless bootstrap.

The critic's head predicts returns in normalized units; `mean` and `std` (exponential moving
statistics of the targets, debiased) map them back. When the statistics move, the head's last
linear layer is rescaled so that its outputs in return units stay exactly what they were
("preserving outputs precisely"), so values, advantages and the bootstrap do not jump.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn


class ValueNormalizer:
    """Running scale of the critic's targets, with its head kept consistent (PopArt)."""

    def __init__(self, head: nn.Linear, decay: float = 0.99, min_std: float = 1e-3) -> None:
        if head.out_features != 1:
            raise ValueError(f"the critic head must have one output, has {head.out_features}")
        if not 0 < decay < 1:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.head = head
        self.decay = decay
        self.min_std = min_std
        # moving first and second moments, and the weight they carry (for debiasing)
        self._m1 = 0.0
        self._m2 = 0.0
        self._weight = 0.0

    @property
    def mean(self) -> float:
        """Mean of the targets (0 before any update: the head's raw output is the value)."""
        return self._m1 / self._weight if self._weight else 0.0

    @property
    def std(self) -> float:
        """Standard deviation of the targets (1 before any update), at least `min_std`."""
        if not self._weight:
            return 1.0
        var = self._m2 / self._weight - self.mean**2
        return max(float(np.sqrt(max(var, 0.0))), self.min_std)

    def denormalize(self, normalized: torch.Tensor) -> torch.Tensor:
        """Head outputs to values in return units."""
        return normalized * self.std + self.mean

    def normalize(self, returns: np.ndarray) -> np.ndarray:
        """Targets in return units to the head's units."""
        return ((returns - self.mean) / self.std).astype(np.float32)

    @torch.no_grad()
    def update(self, targets: np.ndarray) -> None:
        """Fold one batch's targets into the statistics and rescale the head to match."""
        targets = np.asarray(targets, dtype=np.float64).reshape(-1)
        if targets.size == 0 or not np.all(np.isfinite(targets)):
            return
        old_mean, old_std = self.mean, self.std
        self._m1 = self.decay * self._m1 + (1 - self.decay) * float(targets.mean())
        self._m2 = self.decay * self._m2 + (1 - self.decay) * float((targets**2).mean())
        self._weight = self.decay * self._weight + (1 - self.decay)
        new_mean, new_std = self.mean, self.std
        # value = std * (w.x + b) + mean must not change: w' = w std/std', b' likewise
        self.head.weight.mul_(old_std / new_std)
        self.head.bias.mul_(old_std / new_std).add_((old_mean - new_mean) / new_std)

    def state_dict(self) -> dict[str, Any]:
        """The statistics (the head's weights travel with the model)."""
        return {"m1": self._m1, "m2": self._m2, "weight": self._weight}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict` output."""
        self._m1, self._m2 = float(state["m1"]), float(state["m2"])
        self._weight = float(state["weight"])
