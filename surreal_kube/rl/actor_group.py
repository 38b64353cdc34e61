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

from surreal_kube.rl.factory import make_actor
from surreal_kube.rl.interfaces import Actor, ArrayDict
from surreal_kube.rl.ppo_actor import PPOActor

if TYPE_CHECKING:
    from surreal_kube.experiment.spec import ExperimentSpec


class ActorGroup:
    """The actors of one process's environments (see module docstring)."""

    def __init__(self, actors: Sequence[Actor], shared: PPOActor | None = None) -> None:
        self.actors = list(actors)
        self._shared = shared
        """The actor whose policy all share (PPO), else None: each loads its own."""

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
            return PPOActor.act_batch(chosen, observations)  # type: ignore[arg-type]
        return [a.act(o) for a, o in zip(chosen, observations, strict=True)]


def make_actor_group(
    spec: ExperimentSpec,
    slots: Sequence[tuple[int, int]],
    obs_space: gym.Space[Any],
    action_space: gym.Space[Any],
    device: str | torch.device | None = None,
) -> ActorGroup:
    """Train-mode actors for `slots`, (agent id, actor seed) pairs, one per environment."""
    if not slots:
        raise ValueError("an agent process needs at least one environment slot")
    (first_id, first_seed), rest = slots[0], slots[1:]
    first = make_actor(spec, first_id, "train", obs_space, action_space, device, first_seed)
    if isinstance(first, PPOActor):  # its policy for all: one model, one filter, one load
        algo = first.config
        siblings: list[Actor] = [
            PPOActor(algo, obs_space, action_space, "train", seed, policy=first.policy)
            for _, seed in rest
        ]
        return ActorGroup([first, *siblings], first)
    others = [make_actor(spec, aid, "train", obs_space, action_space, device, s) for aid, s in rest]
    return ActorGroup([first, *others])
