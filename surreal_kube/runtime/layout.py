"""The layout of a replay item, from the experiment's spec and its environment's spaces.

A replay shard used to allocate its storage from the first message it received: an old-schema or
odd-shaped first item (a stranger's, or a stale agent's) made every real batch fail until a
restart, and a huge shape was a `MemoryError`. The shard now knows at start what an item is:
each key's dtype and per-item shape, computed here from what the agents will produce, so a
message that does not match is one counted drop and the real batches keep flowing.

What the agents produce is decided by the actors (`rl/ppo.py`, `rl/ddpg.py`) and the item writers
(`rl/trajectory.py`); this module restates it without importing torch, since a shard must not.
`tests/runtime/test_layout.py` steps real actors on real environments and checks that every item
they emit matches this layout exactly: change one, change both.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from surreal_kube.experiment.algorithms import flush_iteration
from surreal_kube.experiment.spec import ExperimentSpec
from surreal_kube.runtime.context import RoleContext

PARAM_VERSION = "param_version"
"""Stamped on every item by the agent (comm.experience, schema 2)."""

_F32 = np.dtype(np.float32)


class LayoutError(ValueError):
    """A batch whose keys, dtypes or item shapes differ from the layout of the store."""


@dataclass(frozen=True)
class ItemLayout:
    """Per key: the dtype and the shape of one item (without the leading batch axis)."""

    fields: Mapping[str, tuple[np.dtype, tuple[int, ...]]]

    @property
    def item_bytes(self) -> int:
        """Bytes of one item: what a message of n items carries, and a store holds per slot."""
        return sum(dtype.itemsize * math.prod(shape) for dtype, shape in self.fields.values())

    def check(self, arrays: Mapping[str, np.ndarray], count: int) -> None:
        """Raise LayoutError unless `arrays` are `count` items of exactly this layout."""
        if arrays.keys() != self.fields.keys():
            missing = sorted(self.fields.keys() - arrays.keys())[:5]
            extra = sorted(arrays.keys() - self.fields.keys())[:5]
            raise LayoutError(f"item keys differ: missing {missing}, unexpected {extra}")
        for key, value in arrays.items():
            dtype, shape = self.fields[key]
            if value.dtype != dtype or value.shape[1:] != shape or value.shape[:1] != (count,):
                raise LayoutError(
                    f"{key!r}: got {value.dtype}{list(value.shape)} for {count} items, "
                    f"expected {dtype}{list(shape)} per item"
                )

    def example(self, count: int, fill: float = 0) -> dict[str, np.ndarray]:
        """`count` stacked items of this layout, every number `fill` (tests, benchmarks)."""
        return {
            k: np.full((count, *shape), fill, dtype) for k, (dtype, shape) in self.fields.items()
        }

    def allocate(self, capacity: int) -> dict[str, np.ndarray]:
        """Storage for `capacity` items (pages are touched, so memory is taken, as they fill)."""
        return {k: np.empty((capacity, *shape), dtype) for k, (dtype, shape) in self.fields.items()}


def _obs_fields(prefix: str, space: gym.Space, steps: int | None) -> dict:
    """`{prefix}/{part}` fields of one observation (see rl.observations.canonical)."""
    lead = () if steps is None else (steps,)
    if isinstance(space, gym.spaces.Box):  # a bare array: the `low_dim` part, as float32
        return {f"{prefix}/low_dim": (_F32, (*lead, *space.shape))}
    if isinstance(space, gym.spaces.Dict):
        return {
            f"{prefix}/{k}": (np.dtype(s.dtype), (*lead, *(s.shape or ())))
            for k, s in space.spaces.items()
        }
    raise LayoutError(f"unsupported observation space {space}")


def _action_fields(space: gym.Space, steps: int) -> dict:
    """PPO: the sampled action and the distribution's parameters (rl.distributions)."""
    if isinstance(space, gym.spaces.Discrete):
        return {
            "actions": (np.dtype(np.int64), (steps,)),
            "action_info": (_F32, (steps, int(space.n))),
        }
    if isinstance(space, gym.spaces.Box):
        dim = int(math.prod(space.shape))
        return {
            "actions": (_F32, (steps, *space.shape)),
            "action_info": (_F32, (steps, 2 * dim)),
        }
    raise LayoutError(f"unsupported action space {space}")


def item_layout(spec: ExperimentSpec, obs_space: gym.Space, action_space: gym.Space) -> ItemLayout:
    """The layout of the items the agents of `spec` send for an environment of these spaces."""
    algorithm = spec.algorithm
    fields: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
    if algorithm.name == "ppo":
        h = int(algorithm.horizon)
        fields.update(_obs_fields("obs", obs_space, h))
        fields.update(_action_fields(action_space, h))
        for key in ("rewards", "terminals", "behaviour_logp", "mask", "train_mask"):
            fields[key] = (_F32, (h,))
        fields["step_version"] = (np.dtype(np.int64), (h,))  # each step's acting parameters
        fields.update(_obs_fields("bootstrap", obs_space, None))
        rnn = algorithm.rnn
        if rnn.enabled:
            fields["rnn_h"] = fields["rnn_c"] = (_F32, (int(rnn.layers), int(rnn.hidden_size)))
    elif algorithm.name == "ddpg":
        if not isinstance(action_space, gym.spaces.Box):
            raise LayoutError(f"DDPG needs a Box action space, got {action_space}")
        fields.update(_obs_fields("obs", obs_space, None))
        fields.update(_obs_fields("next_obs", obs_space, None))
        fields["actions"] = (_F32, tuple(action_space.shape))
        for key in ("rewards", "terminals", "discounts"):
            fields[key] = (_F32, ())
    else:
        raise LayoutError(f"no item layout for algorithm {algorithm.name!r}")
    fields[PARAM_VERSION] = (np.dtype(np.int64), ())
    return ItemLayout(fields)


def _mlp(inputs: int, hidden: list[int], out: int) -> int:
    sizes = [inputs, *hidden, out]
    return sum((a + 1) * b for a, b in itertools.pairwise(sizes))


def parameter_bytes_bound(
    spec: ExperimentSpec, obs_space: gym.Space, action_space: gym.Space
) -> int:
    """An upper bound on the bytes of one parameter publication (rl.models, rl.params).

    Counts both heads of every network (actor and critic, though only the policy travels), the
    largest linear layer a CNN could need (its input as large as the frame) and 8 bytes per
    number, then doubles that and adds a mebibyte for names and filters: receivers of parameters
    (parameter-server shards, agents, evals) refuse larger messages, so the bound must hold for
    every model the spec can describe; a bound that is loose by a few times costs nothing.
    """
    algorithm = spec.algorithm
    parts = _obs_fields("obs", obs_space, None)
    features = 0
    numbers = 0
    cnn = algorithm.cnn
    for key, (_, shape) in parts.items():
        size = math.prod(shape)
        if key.endswith("/pixel") and cnn.enabled:
            channels = [int(shape[0]), *map(int, cnn.channels)]
            numbers += sum((a * 64 + 1) * b for a, b in itertools.pairwise(channels))
            numbers += (channels[-1] * size + 1) * int(cnn.features)
            features += int(cnn.features)
        else:
            features += size
    if isinstance(action_space, gym.spaces.Discrete):
        actions = int(action_space.n)
    else:
        actions = int(math.prod(action_space.shape or (1,)))
    hidden = list(map(int, algorithm.hidden_sizes))
    rnn = getattr(algorithm, "rnn", None)
    if rnn is not None and rnn.enabled:
        width = max(features, int(rnn.hidden_size))
        numbers += 4 * int(rnn.hidden_size) * (width + int(rnn.hidden_size) + 2) * int(rnn.layers)
        features = int(rnn.hidden_size)
    numbers += _mlp(features, hidden, 2 * actions) + _mlp(features + actions, hidden, 1)
    numbers += 2 * actions + 4 * features
    return 2 * 8 * numbers + (1 << 20)


ITEMS_PER_MESSAGE_SLACK = 256
"""Items an agent's message may carry beyond `2 * flushIteration`: a flush happens once that many
are waiting, after a step that may add several at once (an episode's end closes every open
window), so a message holds at most flushIteration - 1 + the items of one step."""


def experience_bytes(spec: ExperimentSpec, layout: ItemLayout) -> int:
    """The largest experience message a shard accepts (the bound of its collector socket)."""
    from surreal_kube.experiment.algorithms import flush_iteration

    items = 2 * flush_iteration(spec.algorithm, spec.agents.flush_iteration)
    return (items + ITEMS_PER_MESSAGE_SLACK) * layout.item_bytes + (64 << 10)


def message_bytes(spec: ExperimentSpec, layout: ItemLayout) -> int:
    """The arrays of one usual experience message: `flush_iteration` items (the depth of an
    on-policy pipe is counted in these, `comm.experience.on_policy_pipe`)."""
    return flush_iteration(spec.algorithm, spec.agents.flush_iteration) * layout.item_bytes


def batch_bytes(spec: ExperimentSpec, layout: ItemLayout) -> int:
    """The largest batch a learner accepts: its batch of items plus what prioritized replay
    adds per item (indices and weights)."""
    return spec.algorithm.batch_size * (layout.item_bytes + 64) + (64 << 10)


def request_bytes(spec: ExperimentSpec) -> int:
    """The largest message a learner sends towards replay: a request, or a batch's priorities
    (an int64 index and a float64 priority per item)."""
    return spec.algorithm.batch_size * 16 * 2 + (64 << 10)


def parameter_bytes(ctx: RoleContext) -> int:
    """`parameter_bytes_bound` for a role's experiment: what its sockets take of parameters."""
    from surreal_kube.envs import env_spaces

    return parameter_bytes_bound(ctx.spec, *env_spaces(ctx.spec.env))
