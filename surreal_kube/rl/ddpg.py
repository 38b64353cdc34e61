"""DDPG: the exploring agent-side actor and the learner (optionally TD3-style).

Actions live in [-1, 1] inside the learning core (the actor ends in tanh) and are rescaled to the
environment's bounds only at the agent: replay, targets and noise all work in one normalized space
whatever the environment's units. Options: n-step returns, Gaussian or OU noise with per-agent
sigma, hard or soft (Polyak) target updates, twin critics with the minimum as target, target policy
smoothing and delayed policy updates.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from surreal_kube.experiment.algorithms import DDPGConfig
from surreal_kube.rl import losses
from surreal_kube.rl.filters import ZFilter
from surreal_kube.rl.interfaces import ArrayDict
from surreal_kube.rl.models import DDPGActor as ActorNet
from surreal_kube.rl.models import DDPGCritic, NumpyMLP
from surreal_kube.rl.noise import agent_sigma, make_noise
from surreal_kube.rl.observations import canonical, flatten_obs, obs_shapes, unflatten_obs
from surreal_kube.rl.optim import adam
from surreal_kube.rl.params import arrays_to_state, state_to_arrays
from surreal_kube.rl.seeding import set_torch_rng_state, torch_rng_state
from surreal_kube.rl.trajectory import NStepWriter

ActorMode = Literal["train", "eval_deterministic", "eval_stochastic"]


def _check_action_space(space: gym.Space[Any]) -> gym.spaces.Box:
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise ValueError(f"DDPG needs a 1-D Box action space, got {space}")
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ValueError("DDPG needs finite action bounds to rescale its tanh output")
    return space


def _z_filter(config: DDPGConfig, obs_space: gym.Space[Any]) -> ZFilter | None:
    shapes = obs_shapes(obs_space)
    if not config.use_z_filter or "low_dim" not in shapes:
        return None
    return ZFilter(shapes["low_dim"])


class DDPGAgentActor:
    """Deterministic policy plus exploration noise; emits n-step transitions in train mode."""

    def __init__(
        self,
        config: DDPGConfig,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        mode: ActorMode = "train",
        agent_id: int = 0,
        num_agents: int = 1,
        seed: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        box = _check_action_space(action_space)
        self.config = config
        self.mode = mode
        self.device = torch.device(device)
        self.low = box.low.astype(np.float32)
        self.high = box.high.astype(np.float32)
        dim = int(box.shape[0])
        self.net = ActorNet(obs_shapes(obs_space), dim, config.hidden_sizes, config.cnn)
        self.net = self.net.to(self.device).eval()
        self.z_filter = _z_filter(config, obs_space)
        self.rng = np.random.default_rng(seed)
        self.sigma = agent_sigma(config.noise, agent_id, num_agents)
        self.noise = make_noise(config.noise, dim, self.sigma, self.rng)
        self.writer = NStepWriter(config.n_step, config.gamma)
        self.parameters_iteration = -1
        self._fast = self.device.type == "cpu" and self.net.encoder.cnn is None
        self._refresh_fast()
        self.reset()

    def _refresh_fast(self) -> None:
        if self._fast:
            self._np_net = NumpyMLP(self.net.net)

    def reset(self) -> None:
        """New episode: restart the noise process and drop partial n-step windows."""
        self.noise.reset()
        self.writer.reset()
        self._pending: np.ndarray | None = None

    def load_parameters(self, params: ArrayDict) -> None:
        """Adopt the learner's actor weights and ZFilter statistics."""
        self.net.load_state_dict(arrays_to_state(params, "actor"))
        if self.z_filter is not None:
            self.z_filter.load_arrays(params, "z_filter")
        if "meta/iteration" in params:
            self.parameters_iteration = int(params["meta/iteration"][0])
        self._refresh_fast()

    def _policy(self, parts: dict[str, np.ndarray]) -> np.ndarray:
        if self._fast:
            x = parts["low_dim"].astype(np.float32).reshape(-1)
            if self.z_filter is not None:
                x = self.z_filter.normalize(x)
            out: np.ndarray = np.tanh(self._np_net(x))
            return out
        inputs = {}
        for key, value in parts.items():
            if key == "low_dim" and self.z_filter is not None:
                value = self.z_filter.normalize(value)
            inputs[key] = torch.as_tensor(value, device=self.device)[None]
        action: np.ndarray = self.net(inputs)[0].detach().cpu().numpy()
        return action

    @torch.inference_mode()
    def act(self, obs: Any) -> np.ndarray:
        """Policy action (+ noise unless eval_deterministic), in the environment's bounds."""
        action = self._policy(canonical(obs))
        if self.mode != "eval_deterministic":
            action = np.clip(action + self.noise(), -1.0, 1.0)
        self._pending = action.astype(np.float32)
        return self.low + (action + 1.0) * 0.5 * (self.high - self.low)

    def observe(
        self,
        obs: Any,
        action: np.ndarray,
        reward: float,
        next_obs: Any,
        terminated: bool,
        truncated: bool,
    ) -> list[ArrayDict]:
        """Record a step; returns completed n-step transitions (train mode only)."""
        done = terminated or truncated
        if self.mode != "train":
            if done:
                self.reset()
            return []
        normalized = self._pending
        if normalized is None:
            span = np.where(self.high > self.low, self.high - self.low, 1.0)
            normalized = (2.0 * (np.asarray(action) - self.low) / span - 1.0).astype(np.float32)
        self._pending = None
        items = self.writer.add(
            flatten_obs("obs", obs),
            normalized,
            reward,
            flatten_obs("next_obs", next_obs),
            terminated,
            truncated,
        )
        if done:
            self.reset()
        return items


class DDPGLearner:
    """Critic and actor updates on batches of n-step transitions."""

    def __init__(
        self,
        config: DDPGConfig,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        device: torch.device | str = "cpu",
        seed: int | None = None,
    ) -> None:
        if seed is not None:
            torch.manual_seed(seed)
        box = _check_action_space(action_space)
        self.config = config
        self.device = torch.device(device)
        dim = int(box.shape[0])
        shapes = obs_shapes(obs_space)
        self.actor = ActorNet(shapes, dim, config.hidden_sizes, config.cnn).to(self.device)
        n_critics = 2 if config.twin_critic else 1
        self.critics = torch.nn.ModuleList(
            DDPGCritic(shapes, dim, config.hidden_sizes, config.cnn) for _ in range(n_critics)
        ).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critics_target = copy.deepcopy(self.critics).requires_grad_(False)
        self.opt_actor = adam(self.actor.parameters(), config.lr_actor)
        self.opt_critic = adam(self.critics.parameters(), config.lr_critic, config.critic_l2)
        self.z_filter = _z_filter(config, obs_space)
        self.iteration = 0
        self.last_priorities: np.ndarray | None = None
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(0 if seed is None else seed)

    def parameters(self) -> ArrayDict:
        """Actor weights (`actor/...`), ZFilter statistics, `meta/iteration`."""
        params = state_to_arrays(self.actor.state_dict(), "actor")
        if self.z_filter is not None:
            params.update(self.z_filter.to_arrays("z_filter"))
        params["meta/iteration"] = np.array([self.iteration], dtype=np.int64)
        return params

    def state_dict(self) -> dict[str, Any]:
        """Weights, targets, optimizers, filter and iteration."""
        state: dict[str, Any] = {
            "actor": self.actor.state_dict(),
            "critics": self.critics.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critics_target": self.critics_target.state_dict(),
            "opt_actor": self.opt_actor.state_dict(),
            "opt_critic": self.opt_critic.state_dict(),
            "iteration": self.iteration,
            "rng": {**torch_rng_state(self.device), "smoothing": self._generator.get_state()},
        }
        if self.z_filter is not None:
            arrays = self.z_filter.to_arrays("z_filter")
            state["z_filter"] = {k: torch.from_numpy(v) for k, v in arrays.items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from `state_dict` output."""
        self.actor.load_state_dict(state["actor"])
        self.critics.load_state_dict(state["critics"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.critics_target.load_state_dict(state["critics_target"])
        self.opt_actor.load_state_dict(state["opt_actor"])
        self.opt_critic.load_state_dict(state["opt_critic"])
        self.iteration = int(state["iteration"])
        rng = state.get("rng")
        set_torch_rng_state(rng, self.device)
        if rng and "smoothing" in rng:
            self._generator.set_state(rng["smoothing"].cpu())
        if self.z_filter is not None and "z_filter" in state:
            self.z_filter.load_arrays(state["z_filter"], "z_filter")

    def _obs(self, batch: ArrayDict, prefix: str) -> dict[str, torch.Tensor]:
        out = {}
        for key, value in unflatten_obs(prefix, batch).items():
            if key == "low_dim" and self.z_filter is not None:
                mean, std = self.z_filter.mean_std_f32()
                value = np.clip((value - mean) / std, -self.z_filter.clip, self.z_filter.clip)
            out[key] = torch.as_tensor(value, device=self.device)
        return out

    def learn(self, batch: ArrayDict) -> dict[str, float]:
        """One critic update, and an actor and target update every `policy_delay` iterations."""
        cfg = self.config
        if self.z_filter is not None:
            # Fed replayed samples, not the stream of new experience (the learner never sees that
            # stream). Kept, deliberately: the critic trains on the replay distribution, so that
            # is the distribution worth whitening; the filter is off by default; and its count
            # grows `samples_per_insert` times faster than the stream, so it settles early rather
            # than chasing the newest data. Its statistics are published with the actor weights,
            # so agents and learner always whiten alike.
            self.z_filter.update(batch["obs/low_dim"])
        obs = self._obs(batch, "obs")
        next_obs = self._obs(batch, "next_obs")
        dev = self.device
        actions = torch.as_tensor(batch["actions"], device=dev, dtype=torch.float32)
        rewards = torch.as_tensor(batch["rewards"], device=dev, dtype=torch.float32)
        discounts = torch.as_tensor(batch["discounts"], device=dev, dtype=torch.float32)
        terminals = torch.as_tensor(batch["terminals"], device=dev, dtype=torch.float32)
        weights = None
        if "weights" in batch:
            weights = torch.as_tensor(batch["weights"], device=dev, dtype=torch.float32)

        with torch.no_grad():
            next_actions = self.actor_target(next_obs)
            if cfg.target_policy_smoothing:
                noise = (
                    torch.randn(next_actions.shape, generator=self._generator, device=dev)
                    * cfg.target_noise
                )
                noise = noise.clamp(-cfg.target_noise_clip, cfg.target_noise_clip)
                next_actions = (next_actions + noise).clamp(-1.0, 1.0)
            next_q = (
                torch.stack([c(next_obs, next_actions) for c in self.critics_target]).min(0).values
            )
            target = losses.td_targets(rewards, discounts, terminals, next_q)

        qs = [critic(obs, actions) for critic in self.critics]
        critic_losses = [losses.critic_loss(q, target, weights) for q in qs]
        critic_loss = sum(critic_losses[1:], critic_losses[0])  # twin critics: the sum
        self.opt_critic.zero_grad(set_to_none=True)
        critic_loss.backward()
        if cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.critics.parameters(), cfg.max_grad_norm)
        self.opt_critic.step()
        self.last_priorities = (qs[0] - target).abs().detach().cpu().numpy()

        stats = {
            "losses/critic_loss": float(critic_loss.detach()),
            "ddpg/q_mean": float(qs[0].detach().mean()),
            "ddpg/target_mean": float(target.mean()),
        }
        self.iteration += 1
        if self.iteration % cfg.policy_delay == 0:
            actor_loss = -self.critics[0](obs, self.actor(obs)).mean()
            self.opt_actor.zero_grad(set_to_none=True)
            actor_loss.backward()
            if cfg.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.max_grad_norm)
            self.opt_actor.step()
            stats["losses/actor_loss"] = float(actor_loss.detach())
            if cfg.target_update == "soft":
                self._soft_update()
        if cfg.target_update == "hard" and self.iteration % cfg.target_update_interval == 0:
            self.actor_target.load_state_dict(self.actor.state_dict())
            self.critics_target.load_state_dict(self.critics.state_dict())
        stats["learner/iteration"] = float(self.iteration)
        return stats

    @torch.no_grad()
    def _soft_update(self) -> None:
        tau = self.config.tau
        for net, target in ((self.actor, self.actor_target), (self.critics, self.critics_target)):
            for p, tp in zip(net.parameters(), target.parameters(), strict=True):
                tp.lerp_(p, tau)
