"""A shard's item layout comes from the spec and the spaces: it matches what real actors emit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from surreal_kube.comm.experience import stack_items
from surreal_kube.envs import env_spaces, make_env
from surreal_kube.experiment.spec import ExperimentSpec
from surreal_kube.rl.factory import make_actor
from surreal_kube.runtime.layout import (
    PARAM_VERSION,
    LayoutError,
    item_layout,
    parameter_bytes_bound,
)

CASES: dict[str, dict[str, Any]] = {
    "ppo-discrete": {"env": {"id": "gym:CartPole-v1"}},
    "ppo-continuous": {"env": {"id": "gym:Pendulum-v1"}},
    "ppo-lstm": {
        "env": {"id": "gym:Pendulum-v1"},
        "algorithm": {"name": "ppo", "horizon": 6, "stride": 4, "rnn": {"enabled": True}},
    },
    "ddpg": {"env": {"id": "gym:Pendulum-v1"}, "algorithm": {"name": "ddpg"}},
}


def _items(spec: ExperimentSpec, steps: int = 120) -> list[dict[str, np.ndarray]]:
    """Items of a real actor stepping a real environment, stamped as the agent stamps them."""
    obs_space, action_space = env_spaces(spec.env)
    env = make_env(spec.env)
    actor = make_actor(spec, 0, "train", obs_space, action_space, seed=0)
    obs, _ = env.reset(seed=0)
    actor.reset()
    items = []
    for _ in range(steps):
        action = actor.act(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for item in actor.observe(obs, action, float(reward), next_obs, terminated, truncated):
            item[PARAM_VERSION] = np.array(-1, dtype=np.int64)
            items.append(item)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
            actor.reset()
    env.close()
    return items


@pytest.mark.parametrize("case", sorted(CASES))
def test_layout_matches_the_items_real_actors_send(case):
    spec = ExperimentSpec.model_validate(CASES[case])
    layout = item_layout(spec, *env_spaces(spec.env))
    items = _items(spec)
    assert items
    for arrays, count in stack_items(items):
        layout.check(arrays, count)  # raises on any difference
    assert layout.item_bytes == sum(a.nbytes for a in items[0].values())


def test_an_item_of_another_shape_dtype_or_keys_is_refused():
    spec = ExperimentSpec.model_validate(CASES["ddpg"])
    layout = item_layout(spec, *env_spaces(spec.env))
    good = {k: np.zeros((2, *shape), dtype) for k, (dtype, shape) in layout.fields.items()}
    layout.check(good, 2)
    for bad in (
        {**good, "obs/low_dim": np.zeros((2, 4), np.float32)},
        {**good, "obs/low_dim": np.zeros((2, 3), np.float64)},
        {k: v for k, v in good.items() if k != PARAM_VERSION},
        {**good, "extra": np.zeros(2, np.float32)},
    ):
        with pytest.raises(LayoutError):
            layout.check(bad, 2)
    with pytest.raises(LayoutError):
        layout.check(good, 3)


@pytest.mark.parametrize("case", sorted(CASES))
def test_parameter_bound_holds_for_real_learners(case):
    from surreal_kube.rl.factory import make_learner

    spec = ExperimentSpec.model_validate(CASES[case])
    spaces = env_spaces(spec.env)
    published = make_learner(spec, *spaces, "cpu").parameters()
    actual = sum(a.nbytes for a in published.values())
    bound = parameter_bytes_bound(spec, *spaces)
    assert actual <= bound <= 64 * actual + (1 << 20) + 8 * actual
