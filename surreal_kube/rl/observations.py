"""Observation plumbing between environments, replay items and models.

Environments return either a flat array (the state) or a dict with `low_dim` and/or `pixel`.
Inside the learning core an observation is always the dict form, and in a replay item each part
becomes its own array under a prefix (`obs/low_dim`, `obs/pixel`, `next_obs/...`), because the wire
format carries flat dicts of arrays only.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from surreal_kube.rl.interfaces import ArrayDict

OBS_KEYS = ("low_dim", "pixel")


def obs_shapes(space: gym.Space[Any]) -> dict[str, tuple[int, ...]]:
    """Shapes of the dict form of observations from `space` (Box or Dict of low_dim / pixel)."""
    if isinstance(space, gym.spaces.Box):
        return {"low_dim": tuple(space.shape)}
    if isinstance(space, gym.spaces.Dict):
        unknown = set(space.spaces) - set(OBS_KEYS)
        if unknown:
            raise ValueError(
                f"observation dict keys must be low_dim / pixel, got {sorted(unknown)}"
            )
        shapes = {k: s.shape for k, s in space.spaces.items()}
        if shapeless := sorted(k for k, shape in shapes.items() if shape is None):
            raise ValueError(f"observation dict entries without a shape: {shapeless}")
        return {k: tuple(shape) for k, shape in shapes.items() if shape is not None}
    raise ValueError(f"unsupported observation space {space}: use a Box or a Dict(low_dim, pixel)")


def canonical(obs: Any) -> dict[str, np.ndarray]:
    """The dict form of one observation (a bare array is the `low_dim` part)."""
    if isinstance(obs, dict):
        return {k: np.asarray(v) for k, v in obs.items()}
    return {"low_dim": np.asarray(obs, dtype=np.float32)}


def flatten_obs(prefix: str, obs: Any) -> ArrayDict:
    """`{prefix}/{key}` arrays of one observation, for a replay item."""
    return {f"{prefix}/{k}": v for k, v in canonical(obs).items()}


def unflatten_obs(prefix: str, arrays: dict[str, Any]) -> dict[str, Any]:
    """The observation parts stored under `prefix` in an item or batch."""
    head = prefix + "/"
    return {k[len(head) :]: v for k, v in arrays.items() if k.startswith(head)}
