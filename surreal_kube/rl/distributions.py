"""Action distributions, described by a flat `action_info` vector per step.

The agent sends the info of the policy it acted with (mean and log std, or logits) with every step;
the learner rebuilds the behaviour distribution from it. Sampling on the agent side is numpy (one
observation at a time, seeded per agent); scoring on the learner side is torch (batches, gradients).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F

LOG_2PI = math.log(2 * math.pi)


class DiagGaussian:
    """Diagonal Gaussian over Box actions; info = concat(mean, log_std)."""

    discrete = False

    def __init__(self, action_dim: int) -> None:
        self.action_dim = action_dim
        self.info_dim = 2 * action_dim

    def split(self, info: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) halves of an info tensor."""
        return info[..., : self.action_dim], info[..., self.action_dim :]

    def log_prob(self, info: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """log pi(a), summed over action dimensions."""
        mean, log_std = self.split(info)
        z = (actions - mean) * torch.exp(-log_std)
        return (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)

    def entropy(self, info: torch.Tensor) -> torch.Tensor:
        """Differential entropy, summed over action dimensions."""
        _, log_std = self.split(info)
        return (log_std + 0.5 * (1.0 + LOG_2PI)).sum(-1)

    def kl(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """KL(p || q) in closed form."""
        mp, lp = self.split(p)
        mq, lq = self.split(q)
        return (
            lq - lp + (torch.exp(2 * lp) + (mp - mq).pow(2)) / (2 * torch.exp(2 * lq)) - 0.5
        ).sum(-1)

    def sample_np(self, info: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One draw per row of `info` (numpy, agent side)."""
        mean, log_std = info[..., : self.action_dim], info[..., self.action_dim :]
        draw: np.ndarray = mean + np.exp(log_std) * rng.standard_normal(mean.shape)
        return draw.astype(np.float32)

    def mode_np(self, info: np.ndarray) -> np.ndarray:
        """The most likely action: the mean."""
        return info[..., : self.action_dim].astype(np.float32)

    def log_prob_np(self, info: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """log pi(a) in numpy (agent side)."""
        mean, log_std = info[..., : self.action_dim], info[..., self.action_dim :]
        z = (actions - mean) * np.exp(-log_std)
        out: np.ndarray = (-0.5 * z**2 - log_std - 0.5 * LOG_2PI).sum(-1).astype(np.float32)
        return out


class Categorical:
    """Categorical over Discrete actions; info = logits."""

    discrete = True

    def __init__(self, n: int) -> None:
        self.n = n
        self.info_dim = n

    def log_prob(self, info: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """log pi(a) for integer actions."""
        logp = F.log_softmax(info, dim=-1)
        return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self, info: torch.Tensor) -> torch.Tensor:
        """Entropy of the categorical."""
        logp = F.log_softmax(info, dim=-1)
        return -(logp.exp() * logp).sum(-1)

    def kl(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """KL(p || q)."""
        lp = F.log_softmax(p, dim=-1)
        lq = F.log_softmax(q, dim=-1)
        return (lp.exp() * (lp - lq)).sum(-1)

    @staticmethod
    def _log_softmax_np(info: np.ndarray) -> np.ndarray:
        z = info - info.max(axis=-1, keepdims=True)
        out: np.ndarray = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        return out

    def sample_np(self, info: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One draw per row of logits (Gumbel-max trick: exact and vectorized)."""
        gumbel = -np.log(-np.log(rng.random(info.shape) + 1e-300) + 1e-300)
        out: np.ndarray = np.argmax(info + gumbel, axis=-1).astype(np.int64)
        return out

    def mode_np(self, info: np.ndarray) -> np.ndarray:
        """The most likely action."""
        out: np.ndarray = np.argmax(info, axis=-1).astype(np.int64)
        return out

    def log_prob_np(self, info: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """log pi(a) in numpy (agent side)."""
        logp = self._log_softmax_np(info.astype(np.float64))
        return np.take_along_axis(logp, np.asarray(actions)[..., None], -1)[..., 0].astype(
            np.float32
        )


Distribution = DiagGaussian | Categorical
