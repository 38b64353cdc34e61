"""The actors of one agent process: one per environment, sharing what the algorithm can share.

An agent process steps `agents.batch x agents.envsPerAgent` environments. Each needs an actor of
its own (windows or n-step queues, a sampling generator, recurrent state), but they all act
with the same parameters. PPO's share one `PPOPolicy`: parameters are loaded once per fetch, and
a plain MLP policy on the CPU acts on all the process's observations in one forward pass, each
actor then sampling with its own generator (the same actions as one `act` each; the
`tests/rl/test_actor_group.py` check). DDPG's actors keep a network each and act one by one:
its agents differ in their noise scale, and its per-step cost is the same few microseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from surreal_kube.experiment.algorithms import PPOConfig
from surreal_kube.rl.interfaces import Actor, ArrayDict

if TYPE_CHECKING:
    from surreal_kube.experiment.spec import ExperimentSpec
    from surreal_kube.rl.ppo import PPOActor


class ActorGroup:
    """The actors of one process's environments (see module docstring)."""

    def __init__(self, actors: Sequence[Actor], shared: PPOActor | None = None) -> None:
        self.actors = list(actors)
        self._shared = shared
        """The actor whose policy all share (PPO), else None: each loads its own."""

    def __len__(self) -> int:
        return len(self.actors)

    def __getitem__(self, index: int) -> Actor:
        return self.actors[index]

    def load_parameters(self, params: ArrayDict) -> None:
        """Adopt the learner's parameters: once for a shared policy, else in every actor."""
        if self._shared is not None:
            self._shared.load_parameters(params)
            return
        for actor in self.actors:
            actor.load_parameters(params)

    def act(self, indices: Sequence[int], observations: Sequence[Any]) -> list[np.ndarray]:
        """The actions of actors `indices` on their observations (in that order)."""
        chosen = [self.actors[i] for i in indices]
        if self._shared is not None:
            return type(self._shared).act_batch(chosen, observations)  # type: ignore[arg-type]
        return [a.act(o) for a, o in zip(chosen, observations, strict=True)]


def make_actor_group(
    spec: ExperimentSpec,
    slots: Sequence[tuple[int, int]],
    obs_space: gym.Space[Any],
    action_space: gym.Space[Any],
    device: str | torch.device | None = None,
) -> ActorGroup:
    """Train-mode actors for `slots`, (agent id, actor seed) pairs, one per environment."""
    from surreal_kube.rl.factory import make_actor

    actors: list[Actor] = []
    shared: PPOActor | None = None
    for agent_id, seed in slots:
        if shared is not None:  # the first one's policy for all: one model, one filter, one load
            from surreal_kube.rl.ppo import PPOActor

            algo = spec.algorithm
            assert isinstance(algo, PPOConfig)
            actors.append(
                PPOActor(algo, obs_space, action_space, "train", seed, policy=shared.policy)
            )
            continue
        actor = make_actor(spec, agent_id, "train", obs_space, action_space, device, seed)
        if isinstance(spec.algorithm, PPOConfig):
            from surreal_kube.rl.ppo import PPOActor

            assert isinstance(actor, PPOActor)
            shared = actor
        actors.append(actor)
    return ActorGroup(actors, shared)
