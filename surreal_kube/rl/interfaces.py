"""The seam between the learning core and the distributed runtime.

The runtime roles (agent, eval, learner, replay) only use these interfaces, and the single-process
trainer wires the very same objects without sockets. Everything that crosses a process boundary is
a flat `dict[str, np.ndarray]` (an `ArrayDict`): the wire format sends those without pickle.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

ArrayDict = dict[str, np.ndarray]
"""Flat mapping of names to numpy arrays: experience items, batches, parameters."""


class Actor(Protocol):
    """Acts in one environment for one agent id, and cuts experience into replay items.

    Built by `surreal_kube.rl.factory.make_actor(spec, agent_id, mode, obs_space, action_space)`.
    """

    def load_parameters(self, params: ArrayDict) -> None:
        """Adopt parameters published by the learner (weights and filter statistics)."""

    def act(self, obs: Any) -> np.ndarray:
        """Action for one observation (train mode explores; eval modes don't)."""

    def observe(
        self,
        obs: Any,
        action: np.ndarray,
        reward: float,
        next_obs: Any,
        terminated: bool,
        truncated: bool,
    ) -> list[ArrayDict]:
        """Record one step; return the replay items (sub-trajectories, transitions) completed."""

    def reset(self) -> None:
        """Start of a new episode (clears recurrent state and partial sequences)."""


class Learner(Protocol):
    """Optimizes on batches from replay and exposes its parameters for publishing.

    Built by `surreal_kube.rl.factory.make_learner(spec, obs_space, action_space, device)`.
    """

    iteration: int

    def learn(self, batch: ArrayDict) -> dict[str, float]:
        """One learner iteration on a batch of stacked replay items; returns namespaced stats."""

    def parameters(self) -> ArrayDict:
        """What agents need to act: weights and filter statistics, as numpy arrays."""

    def state_dict(self) -> dict[str, Any]:
        """Everything to resume (tensors and plain data only) for checkpoints."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from `state_dict` output."""


class ReplayBuffer(Protocol):
    """Holds replay items; FIFO, uniform and prioritized share this interface."""

    def add(self, item: ArrayDict) -> object:
        """Insert one item (dropping the oldest when full); what it returns (a slot, or
        nothing) is the implementation's."""

    def __len__(self) -> int:
        """Items currently held."""

    def sample(self, batch_size: int) -> ArrayDict:
        """A batch: each key stacked along a new leading axis (plus `weights`/`indices` when
        prioritized). FIFO removes what it returns."""


class PrioritizedLearner(Learner, Protocol):
    """A learner whose last `learn` left per-item priorities (|TD error|) for prioritized replay."""

    last_priorities: np.ndarray | None


class PrioritizedReplayBuffer(ReplayBuffer, Protocol):
    """A replay whose batches carry `indices` and `weights`, and whose priorities can be updated."""

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set new priorities for the items at `indices` (from a batch's `indices`)."""
