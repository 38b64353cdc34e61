"""Environment wrappers: action repeat, observation dicts with pixels, frame stacking.

Observations follow one convention across the learning core: a flat state array, or a dict with
`low_dim` (state) and/or `pixel` (uint8, channels first). Pixels stay uint8 until they reach the
model on the learner's device (see `surreal_kube.rl.models.scale_uint8`).
"""

from __future__ import annotations

from collections import deque
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np


class ActionRepeat(gym.Wrapper):
    """Repeat each action `repeat` times, summing rewards; stops early at episode end."""

    def __init__(self, env: gym.Env, repeat: int) -> None:
        if repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {repeat}")
        super().__init__(env)
        self.repeat = repeat

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        total = 0.0
        for _ in range(self.repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


class ObservationDict(gym.ObservationWrapper):
    """Observations as a dict: `low_dim` (the state, optional) and `pixel` (rendered frame).

    The frame comes from `env.render()` (the env must be made with render_mode="rgb_array") and is
    returned channels first (C, H, W), the layout torch convolutions expect.
    """

    def __init__(self, env: gym.Env, pixel: bool = True, low_dim: bool = False) -> None:
        super().__init__(env)
        if not (pixel or low_dim):
            raise ValueError("an observation dict needs low_dim, pixel or both")
        if pixel and env.render_mode != "rgb_array":
            raise ValueError("pixel observations need the env made with render_mode='rgb_array'")
        self.pixel = pixel
        self.low_dim = low_dim
        spaces: dict[str, gym.Space] = {}
        if low_dim:
            spaces["low_dim"] = env.observation_space
        if pixel:
            env.reset(seed=0)
            frame = np.asarray(env.render())
            c_h_w = (frame.shape[2], frame.shape[0], frame.shape[1])
            spaces["pixel"] = gym.spaces.Box(0, 255, c_h_w, dtype=np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)

    def observation(self, observation: Any) -> dict[str, np.ndarray]:
        out = {}
        if self.low_dim:
            out["low_dim"] = np.asarray(observation, dtype=np.float32)
        if self.pixel:
            frame = np.asarray(self.env.render(), dtype=np.uint8)
            out["pixel"] = np.ascontiguousarray(frame.transpose(2, 0, 1))
        return out


def _stack_space(space: gym.spaces.Box, k: int) -> gym.spaces.Box:
    low = np.concatenate([space.low] * k, axis=0)
    high = np.concatenate([space.high] * k, axis=0)
    return gym.spaces.Box(low, high, dtype=space.dtype)


class FrameStack(gym.Wrapper):
    """Concatenate the last `k` observations along the channel (first) axis.

    For pixels (C, H, W) this gives (k*C, H, W); for a state vector (D,) it gives (k*D,). At reset
    the first observation is repeated k times, so shapes never change within an episode.
    """

    def __init__(self, env: gym.Env, k: int) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        super().__init__(env)
        self.k = k
        space = env.observation_space
        if isinstance(space, gym.spaces.Dict):
            self.observation_space = gym.spaces.Dict(
                {key: _stack_space(s, k) for key, s in space.spaces.items()}  # type: ignore[arg-type]
            )
        elif isinstance(space, gym.spaces.Box):
            self.observation_space = _stack_space(space, k)
        else:
            raise ValueError(f"frame stacking needs Box or Dict observations, got {space}")
        self._frames: deque[Any] = deque(maxlen=k)

    def _stacked(self) -> Any:
        first = self._frames[0]
        if isinstance(first, dict):
            return {key: np.concatenate([f[key] for f in self._frames], axis=0) for key in first}
        return np.concatenate(list(self._frames), axis=0)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        for _ in range(self.k):
            self._frames.append(obs)
        return self._stacked(), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._frames.append(obs)
        return self._stacked(), reward, terminated, truncated, info
