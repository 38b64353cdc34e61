"""Exploration noise for deterministic policies (DDPG): Gaussian or Ornstein-Uhlenbeck.

Each agent may explore with its own sigma (spread linearly from `sigma` to `sigma_max` over the
agents), so that a population of agents covers both careful and bold exploration.
"""

from __future__ import annotations

import numpy as np

from surreal_kube.experiment.algorithms import NoiseConfig


def agent_sigma(config: NoiseConfig, agent_id: int, num_agents: int) -> float:
    """Sigma of one agent: `sigma` for all, or spread linearly up to `sigma_max`."""
    if config.sigma_max is None or num_agents <= 1:
        return config.sigma
    frac = agent_id / (num_agents - 1)
    return config.sigma + frac * (config.sigma_max - config.sigma)


class GaussianNoise:
    """Independent N(0, sigma^2) per step and dimension."""

    def __init__(self, size: int, sigma: float, rng: np.random.Generator) -> None:
        self.size, self.sigma, self.rng = size, sigma, rng

    def __call__(self) -> np.ndarray:
        return (self.sigma * self.rng.standard_normal(self.size)).astype(np.float32)

    def reset(self) -> None:
        """Nothing to reset: Gaussian noise has no state."""


class OUNoise:
    """Ornstein-Uhlenbeck process: temporally correlated noise that mean-reverts to zero.

    x <- x + theta * (0 - x) * dt + sigma * sqrt(dt) * N(0, 1)
    """

    def __init__(
        self,
        size: int,
        sigma: float,
        rng: np.random.Generator,
        theta: float = 0.15,
        dt: float = 1e-2,
    ) -> None:
        self.size, self.sigma, self.rng, self.theta, self.dt = size, sigma, rng, theta, dt
        self.x = np.zeros(size)

    def __call__(self) -> np.ndarray:
        self.x = (
            self.x
            - self.theta * self.x * self.dt
            + self.sigma * np.sqrt(self.dt) * self.rng.standard_normal(self.size)
        )
        return self.x.astype(np.float32)

    def reset(self) -> None:
        """Back to zero at the start of an episode."""
        self.x = np.zeros(self.size)


def make_noise(
    config: NoiseConfig, size: int, sigma: float, rng: np.random.Generator
) -> GaussianNoise | OUNoise:
    """The noise process a `NoiseConfig` describes, with the given (per-agent) sigma."""
    if config.kind == "ou":
        return OUNoise(size, sigma, rng, config.theta, config.dt)
    return GaussianNoise(size, sigma, rng)
