"""Building the learning core's objects from an experiment spec.

The runtime roles and the single-process trainer both build their actor, learner and replay here,
so the same spec gives the same objects whatever runs them. `spec` is an
`surreal_kube.experiment.spec.ExperimentSpec`; only its `algorithm`, `agents`, `replay` and
`session` sections are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import torch

from surreal_kube.experiment.algorithms import DDPGConfig, PPOConfig
from surreal_kube.rl.device import learner_device_preference, resolve_device
from surreal_kube.rl.interfaces import Actor, Learner, ReplayBuffer
from surreal_kube.rl.replay import FIFOReplay, PrioritizedReplay, UniformReplay
from surreal_kube.rl.seeding import slot_seeds

if TYPE_CHECKING:
    from surreal_kube.experiment.spec import ExperimentSpec

Mode = Literal["train", "eval_deterministic", "eval_stochastic"]
MODES = ("train", "eval_deterministic", "eval_stochastic")
EVAL_SEED_OFFSET = 100_000
"""Eval actors and envs draw from seeds far from the agents', so they never replay an agent's
episode starts."""


def actor_seed(spec: ExperimentSpec, agent_id: int, mode: Mode = "train") -> int:
    """Seed of an agent (`seed + agent_id`) or of an evaluator (offset by EVAL_SEED_OFFSET)."""
    base = spec.session.seed + agent_id
    return base if mode == "train" else base + EVAL_SEED_OFFSET


def env_slot_seeds(
    spec: ExperimentSpec, agent_id: int, env_index: int = 0, restarts: int = 0, mode: Mode = "train"
) -> tuple[int, int]:
    """(environment seed, actor seed) of env `env_index` of agent (or evaluator) `agent_id`.

    Derived from the experiment seed, the index, the environment index and the restart count
    (see `surreal_kube.rl.seeding`): every environment explores with its own noise.
    """
    purpose: Literal["train", "eval"] = "train" if mode == "train" else "eval"
    return slot_seeds(spec.session.seed, agent_id, env_index, restarts, purpose)


def make_actor(
    spec: ExperimentSpec,
    agent_id: int,
    mode: Mode,
    obs_space: gym.Space[Any],
    action_space: gym.Space[Any],
    device: str | torch.device | None = None,
    seed: int | None = None,
) -> Actor:
    """The actor of agent (or evaluator) `agent_id`; device: `spec.agents.device` unless given.

    `seed` seeds the actor's generator (noise, sampling); give each environment its own (see
    `env_slot_seeds`). Without it the actor gets `actor_seed(spec, agent_id, mode)`.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    dev = resolve_device(device if device is not None else spec.agents.device)
    if seed is None:
        seed = actor_seed(spec, agent_id, mode)
    algo = spec.algorithm
    if isinstance(algo, PPOConfig):
        from surreal_kube.rl.ppo_actor import PPOActor

        return PPOActor(algo, obs_space, action_space, mode, seed, dev)
    if isinstance(algo, DDPGConfig):
        from surreal_kube.rl.ddpg import DDPGAgentActor

        return DDPGAgentActor(
            algo, obs_space, action_space, mode, agent_id, spec.agents.count, seed, dev
        )
    raise ValueError(f"unknown algorithm {algo!r}")


def make_learner(
    spec: ExperimentSpec,
    obs_space: gym.Space[Any],
    action_space: gym.Space[Any],
    device: str | torch.device | None = None,
) -> Learner:
    """The learner; device: `spec.session.learner_device` (auto: CUDA if present; CUDA, and an
    error without it, when the learner holds a GPU) unless given."""
    gpus = spec.component_resources("learner").gpu
    preference = learner_device_preference(spec.session.learner_device, gpus)
    dev = resolve_device(device if device is not None else preference)
    algo = spec.algorithm
    if isinstance(algo, PPOConfig):
        from surreal_kube.rl.ppo import PPOLearner

        return PPOLearner(algo, obs_space, action_space, dev, spec.session.seed)
    if isinstance(algo, DDPGConfig):
        from surreal_kube.rl.ddpg import DDPGLearner

        return DDPGLearner(algo, obs_space, action_space, dev, spec.session.seed)
    raise ValueError(f"unknown algorithm {algo!r}")


def make_replay(spec: ExperimentSpec, seed: int | None = None) -> ReplayBuffer:
    """One replay shard of `spec.replay.kind` with `spec.replay.capacity` items."""
    r = spec.replay
    if seed is None:
        seed = spec.session.seed
    if r.kind == "fifo":
        return FIFOReplay(r.capacity)
    if r.kind == "uniform":
        return UniformReplay(r.capacity, seed=seed)
    if r.kind == "prioritized":
        return PrioritizedReplay(r.capacity, alpha=r.alpha, beta=r.beta, seed=seed)
    raise ValueError(f"unknown replay kind {r.kind!r}")


def learner_batch_size(spec: ExperimentSpec) -> int:
    """Items per learner batch (sub-trajectories for PPO, transitions for DDPG)."""
    return spec.algorithm.batch_size


def max_policy_lag(spec: ExperimentSpec) -> int | None:
    """Iterations experience may lag behind the learner (on-policy only; None: unbounded)."""
    algo = spec.algorithm
    return algo.max_policy_lag if isinstance(algo, PPOConfig) else None


def replay_ready(spec: ExperimentSpec, held: int) -> bool:
    """Whether a replay holding `held` items may serve a batch (the start-sampling condition)."""
    return held >= max(spec.replay.start_sampling, learner_batch_size(spec))
