"""PPO's acting side: the policy an agent process loads once per fetch, and the actors on it.

An agent process steps several environments, each with a `PPOActor` of its own (episode state,
sub-trajectory windows, sampling generator, recurrent state), all sharing one `PPOPolicy` (the
model, the ZFilter and, for a plain MLP Gaussian on the CPU, their numpy copies): the
parameters are loaded once per fetch and `PPOActor.act_batch` acts for all of them in one
forward pass. Each step keeps the parameter version it acted with, and an item's version is its
oldest step's (`stamp_version`), which is what the learner's policy-lag bound and its per-version
filters read (`ppo.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from surreal_kube.experiment.algorithms import PPOConfig
from surreal_kube.rl.distributions import LOG_2PI, Categorical, DiagGaussian, Distribution
from surreal_kube.rl.filters import ZFilter
from surreal_kube.rl.interfaces import ArrayDict
from surreal_kube.rl.models import NumpyMLP, PPOModel
from surreal_kube.rl.observations import canonical, flatten_obs, obs_shapes
from surreal_kube.rl.params import arrays_to_state
from surreal_kube.rl.trajectory import SubTrajectoryWriter

ActorMode = Literal["train", "eval_deterministic", "eval_stochastic"]


def make_distribution(action_space: gym.Space[Any]) -> Distribution:
    """Diagonal Gaussian for Box actions, categorical for Discrete."""
    if isinstance(action_space, gym.spaces.Discrete):
        return Categorical(int(action_space.n))
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        return DiagGaussian(int(action_space.shape[0]))
    raise ValueError(f"PPO supports Discrete and 1-D Box action spaces, got {action_space}")


def build_model(
    config: PPOConfig, obs_space: gym.Space[Any], action_space: gym.Space[Any]
) -> PPOModel:
    """The actor-critic a config describes, for these spaces."""
    dist = make_distribution(action_space)
    action_dim = 1 if dist.discrete else dist.info_dim // 2
    return PPOModel(
        obs_shapes(obs_space),
        dist.info_dim,
        action_dim,
        dist.discrete,
        config.hidden_sizes,
        config.init_log_sig,
        config.rnn,
        config.cnn,
    )


def z_filter_for(config: PPOConfig, obs_space: gym.Space[Any]) -> ZFilter | None:
    shapes = obs_shapes(obs_space)
    if not config.use_z_filter or "low_dim" not in shapes:
        return None
    return ZFilter(shapes["low_dim"], clip=config.z_filter_clip)


class PPOPolicy:
    """What the actors of one agent process share: the model, the filter, their numpy copies.

    An agent process steps several environments, each with an actor of its own (episode state:
    windows, sampling generator, recurrent state), all acting with the same parameters: loaded
    once per fetch here, and, for a plain MLP Gaussian on the CPU, applied to all their
    observations in one forward pass (`PPOActor.act_batch`).
    """

    def __init__(
        self,
        config: PPOConfig,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        device: torch.device | str = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.dist = make_distribution(action_space)
        self.model = build_model(config, obs_space, action_space).to(self.device).eval()
        self.z_filter = z_filter_for(config, obs_space)
        self.iteration = -1
        """The learner iteration of the parameters loaded (-1: initial weights)."""
        # Plain MLP policies on the CPU act through a numpy copy (see NumpyMLP): same numbers,
        # several times faster per observation.
        self.fast = (
            self.device.type == "cpu" and self.model.rnn is None and self.model.encoder.cnn is None
        )
        self._refresh()

    def _refresh(self) -> None:
        if not self.fast:
            return
        self.np_actor = NumpyMLP(self.model.actor)
        log_std = self.model.log_std
        self.np_log_std = None if log_std is None else log_std.detach().numpy().copy()
        if self.np_log_std is not None:
            # a state-free log std: what sampling and scoring need of it, once per load
            ls = self.np_log_std.astype(np.float32)
            self.std = np.exp(ls)
            self.inv_std = np.exp(-ls)
            self.logp_base = np.float32(-(ls + np.float32(0.5 * LOG_2PI)).sum())
        self.whiten: tuple[np.ndarray, np.ndarray, float] | None = None
        if self.z_filter is not None and self.z_filter.count > 0:
            mean, scale = self.z_filter.mean_std_f32()
            self.whiten = (mean, (1.0 / scale).astype(np.float32), self.z_filter.clip)

    @property
    def gaussian_mlp(self) -> bool:
        """A plain MLP Gaussian on the CPU: acting is numpy alone (`forward`, then sampling
        with the log std's terms taken at load)."""
        return self.fast and self.np_log_std is not None

    def load(self, params: ArrayDict) -> None:
        """Adopt the learner's policy weights and ZFilter statistics."""
        state = arrays_to_state(params, "model")
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or any(not k.startswith("critic.") for k in missing):
            raise ValueError(
                f"parameters do not fit this model: missing {missing}, extra {unexpected}"
            )
        if self.z_filter is not None:
            self.z_filter.load_arrays(params, "z_filter")
        if "meta/iteration" in params:
            self.iteration = int(params["meta/iteration"][0])
        self._refresh()

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The numpy MLP's output (action means, or logits) for raw low-dim observations (any
        leading shape; `fast` only): ZFilter.normalize in float32, its terms taken at load."""
        x = np.asarray(x, dtype=np.float32)
        if self.whiten is not None:
            centre, inv_scale, clip = self.whiten
            x = clip_between((x - centre) * inv_scale, -clip, clip)
        out: np.ndarray = self.np_actor(x)
        return out


class PPOActor:
    """Acts with the newest published policy and emits sub-trajectories (train mode only).

    `policy`: share another actor's (`actor.policy`): the actors of one agent process load
    parameters once and act in one forward pass (`act_batch`).
    """

    def __init__(
        self,
        config: PPOConfig,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        mode: ActorMode = "train",
        seed: int | None = None,
        device: torch.device | str = "cpu",
        policy: PPOPolicy | None = None,
    ) -> None:
        self.config = config
        self.mode = mode
        self.policy = policy or PPOPolicy(config, obs_space, action_space, device)
        self.rng = np.random.default_rng(seed)
        self.writer = SubTrajectoryWriter(config.horizon, config.stride)
        self._low = self._high = None
        if isinstance(action_space, gym.spaces.Box):
            self._low, self._high = action_space.low, action_space.high
        self._fast = self.policy.fast
        self.reset()

    @property
    def model(self) -> PPOModel:
        """The (shared) actor-critic acting."""
        return self.policy.model

    @property
    def z_filter(self) -> ZFilter | None:
        """The (shared) observation filter."""
        return self.policy.z_filter

    @property
    def dist(self) -> Distribution:
        """The action distribution."""
        return self.policy.dist

    @property
    def device(self) -> torch.device:
        """Where the model runs."""
        return self.policy.device

    @property
    def parameters_iteration(self) -> int:
        """The learner iteration of the parameters acting (-1: initial weights)."""
        return self.policy.iteration

    def reset(self) -> None:
        """New episode: zero LSTM state, drop partial windows."""
        self._state = self.model.initial_state(1, self.device)
        self._pending: dict[str, Any] | None = None
        self.writer.reset()

    def load_parameters(self, params: ArrayDict) -> None:
        """Adopt the learner's policy weights and ZFilter statistics (for every actor sharing
        this one's policy)."""
        self.policy.load(params)

    def _policy_info(self, parts: dict[str, np.ndarray]) -> np.ndarray:
        if self._fast:
            out = self.policy.forward(parts["low_dim"].reshape(-1))
            if self.policy.np_log_std is None:
                return out
            return np.concatenate([out, self.policy.np_log_std])
        features, self._state = self.model.features(self._model_input(parts), self._state)
        return self.model.policy_info(features)[0, 0].detach().cpu().numpy()

    def _model_input(self, obs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        out = {}
        for key, value in obs.items():
            if key == "low_dim" and self.z_filter is not None:
                value = self.z_filter.normalize(value)
            out[key] = torch.as_tensor(value, device=self.device)[None, None]
        return out

    def act(self, obs: Any) -> np.ndarray:
        """Sample (train, eval_stochastic) or take the mode (eval_deterministic) of the policy."""
        if self._fast and self.policy.gaussian_mlp and not isinstance(obs, dict):
            return self._act_on_mean(self.policy.forward(np.reshape(obs, -1)))
        return self._act_model(obs)

    @staticmethod
    def act_batch(actors: Sequence[PPOActor], observations: Sequence[Any]) -> list[np.ndarray]:
        """`act` of each actor on its observation. Actors that share a plain MLP Gaussian
        policy on the CPU (an agent process's) act in one forward pass over all observations,
        then each samples with its own generator: the same actions as one `act` each."""
        if not actors:
            return []
        policy = actors[0].policy
        batched = (
            policy.gaussian_mlp
            and all(a.policy is policy and a._fast for a in actors)
            and not any(isinstance(o, dict) for o in observations)
        )
        if not batched:
            return [a.act(o) for a, o in zip(actors, observations, strict=True)]
        if len(observations) == 1:  # one environment per process: no stacking
            return [actors[0]._act_on_mean(policy.forward(np.reshape(observations[0], -1)))]
        means = policy.forward(np.stack([np.reshape(o, -1) for o in observations]))
        return [a._act_on_mean(m) for a, m in zip(actors, means, strict=True)]

    def _act_on_mean(self, mean: np.ndarray) -> np.ndarray:
        """Sample around the mean the policy gave (a plain MLP Gaussian), in numpy alone: the
        agents' hot path (about 20 us of a 300 us MuJoCo step, from 60 through the model's:
        bench/local.py prints the agents' time split)."""
        policy = self.policy
        if self.mode == "eval_deterministic":
            action = mean.astype(np.float32)
        else:  # the same draw as DiagGaussian.sample_np
            action = (mean + policy.std * self.rng.standard_normal(mean.shape)).astype(np.float32)
        if self.mode == "train":
            z = (action - mean) * policy.inv_std
            self._pending = {
                "action": action,
                "logp": np.float32(policy.logp_base - np.float32(0.5) * np.dot(z, z)),
                "info": np.concatenate([mean, policy.np_log_std]).astype(np.float32),
                "extras": {},
            }
        if self._low is not None:
            return clip_between(action, self._low, self._high).astype(np.float32, copy=False)
        return action

    @torch.inference_mode()
    def _act_model(self, obs: Any) -> np.ndarray:
        parts = canonical(obs)
        state_before = self._state
        info = self._policy_info(parts)
        if self.mode == "eval_deterministic":
            action = self.dist.mode_np(info)
        else:
            action = self.dist.sample_np(info, self.rng)
        if self.mode == "train":
            extras = {}
            if state_before is not None and self.writer.opens_window:
                extras = {
                    "rnn_h": state_before[0][:, 0].cpu().numpy(),
                    "rnn_c": state_before[1][:, 0].cpu().numpy(),
                }
            self._pending = {
                "action": action,
                "logp": self.dist.log_prob_np(info, action),
                "info": info.astype(np.float32),
                "extras": extras,
            }
        if self._low is not None:
            # The raw sample is what the policy scores; the env gets it clipped to its bounds.
            out: np.ndarray = np.clip(action, self._low, self._high).astype(np.float32)
            return out
        return action

    def observe(
        self,
        obs: Any,
        action: np.ndarray,
        reward: float,
        next_obs: Any,
        terminated: bool,
        truncated: bool,
    ) -> list[ArrayDict]:
        """Record the step that followed the last `act`; returns finished sub-trajectories."""
        done = terminated or truncated
        if self.mode != "train":
            if done:
                self.reset()
            return []
        pending = self._pending
        if pending is None:
            raise RuntimeError("observe() must follow act(): the actor records what it sampled")
        self._pending = None
        step = flatten_obs("obs", obs)
        step["actions"] = np.asarray(pending["action"])
        step["rewards"] = np.array(reward, dtype=np.float32)
        step["terminals"] = np.array(float(terminated), dtype=np.float32)
        step["behaviour_logp"] = np.asarray(pending["logp"], dtype=np.float32)
        step["action_info"] = pending["info"]
        step["step_version"] = np.array(self.parameters_iteration, dtype=np.int64)
        items = self.writer.add(step, flatten_obs("bootstrap", next_obs), done, pending["extras"])
        for item in items:
            stamp_version(item)
        if done:
            self.reset()
        return items


def clip_between(x: np.ndarray, low: Any, high: Any) -> np.ndarray:
    """`np.clip(x, low, high)`, the same numbers (NaN stays NaN) without its Python wrapper:
    two ufuncs take 1.5 us where np.clip takes 3 to 4 (numpy 2), twice per step of every agent."""
    out: np.ndarray = np.minimum(np.maximum(x, low), high)
    return out


def stamp_version(item: ArrayDict) -> None:
    """An item's `param_version` is its oldest step's: a window can span a fetch.

    Stamping the version at send time would under-count the lag of the steps acted before the
    fetch (and let the policy-lag bound pass them). Padding steps take the item's version, so
    that every entry of `step_version` names a filter the learner may have kept.
    """
    versions = item["step_version"]
    valid = item["mask"] > 0
    oldest = versions[valid].min()
    versions[~valid] = oldest
    item["param_version"] = np.array(oldest, dtype=np.int64)
